"""The page docs/training.md runs as written: export, train-ready, graphpass train, Trainer,
a dataset with evaluation, the metrics and the plot, resuming."""

from __future__ import annotations

from pathlib import Path

import pytest
from _docs_runner import run_page

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "training.md"


def test_the_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ran = run_page(PAGE, timeout=300)
    assert (ran.python, ran.console, ran.commands) == (9, 7, 7)
    for name in ("trained.onnx", "trained.safetensors", "trained-python.onnx",
                 "trained-python.safetensors", "metrics.jsonl", "state/pointer.json", "pool.onnx"):
        assert (tmp_path / name).is_file(), name
    assert not (tmp_path / "pool-ready.onnx").exists()  # the lint refused it
    # the picture on the page is the one its example draws
    drawn, shown = tmp_path / "loss.png", PAGE.parent / "images" / "training-loss.png"
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn.read_bytes()[16:24] == shown.read_bytes()[16:24]  # width and height
