"""The example on docs/folding.md runs as written, in order."""

from __future__ import annotations

from pathlib import Path

import pytest
from _docs_runner import run_page

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

PAGE = Path(__file__).resolve().parent.parent / "docs" / "folding.md"


def test_the_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    ran = run_page(PAGE, timeout=300)
    assert {"python": ran.python, "console": ran.console} == {"python": 8, "console": 6}
    assert (tmp_path / "ready.onnx").is_file() and not (tmp_path / "refused.onnx").exists()
    assert (tmp_path / "block-ready.onnx").is_file()
    assert (tmp_path / "relative-ready.onnx").is_file()
    assert not (tmp_path / "block-refused.onnx").exists()
