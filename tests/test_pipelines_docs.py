"""The Python code of docs/pipelines.md runs as written."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest
from _docs_runner import section_blocks

REPO = Path(__file__).resolve().parent.parent


def test_the_python_section_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(REPO / "examples" / "tiny_classifier.onnx", tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    before = (tmp_path / "model.onnx").read_bytes()
    blocks = section_blocks((REPO / "docs" / "pipelines.md").read_text(),
                            "The same from Python", "python")
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "pipelines.md", "exec"), namespace)
    assert onnx.load(tmp_path / "out.onnx").graph.node  # the first block wrote its result
    assert (tmp_path / "model.onnx").read_bytes() == before  # copy=False changes no file
