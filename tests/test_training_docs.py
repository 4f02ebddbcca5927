"""The page docs/training.md runs as written: export, train-ready, graphpass train, Trainer."""

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
    assert (ran.python, ran.console, ran.commands) == (3, 2, 2)
    for name in ("trained.onnx", "trained.safetensors", "trained-python.onnx",
                 "trained-python.safetensors"):
        assert (tmp_path / name).is_file(), name
