"""The code in docs/quickstart.md and docs/ir.md runs as written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from _docs_runner import section_blocks

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def _python_blocks(page: str, section: str) -> list[str]:
    return section_blocks((DOCS / page).read_text(), section, "python")


@pytest.fixture
def in_repo_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run with the examples at their documented paths, writing only into tmp_path."""
    shutil.copytree(REPO / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("stories", "__pycache__"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("section", ["The Python API", "Walking and changing a model"])
def test_quickstart_code_runs(in_repo_copy: Path, section: str) -> None:
    for block in _python_blocks("quickstart.md", section):
        exec(compile(block.replace("/tmp/", f"{in_repo_copy}{os.sep}"), section, "exec"), {})


def test_ir_guide_example_pass_runs_and_preserves_outputs(in_repo_copy: Path) -> None:
    source = REPO / "examples" / "tiny_classifier.onnx"
    proto = onnx.load(source)
    # an Identity to remove in the main graph; the else-branch's Identity names that
    # branch's output, so the pass keeps it
    import graphpass
    from graphpass import Node

    model = graphpass.load(source)
    graph = model.graph
    graph.replace_uses("hidden", "hidden_copy")
    graph.insert_after(graph.producer("hidden"), Node("Identity", ["hidden"], ["hidden_copy"]))
    graph.sort()
    graphpass.save(model, in_repo_copy / "model.onnx")
    (block,) = _python_blocks("ir.md", "Writing a small pass")
    namespace: dict[str, object] = {}
    exec(compile(block, "ir.md", "exec"), namespace)
    result = namespace["result"]
    assert result.records[0].stats == {"removed": 1}  # type: ignore[attr-defined]
    written = onnx.load(in_repo_copy / "out.onnx")
    assert not [n for n in written.graph.node if n.op_type == "Identity"]
    kept = graphpass.load(in_repo_copy / "out.onnx")
    assert [n.op_type for g in kept.graph.subgraphs() for n in g] == ["Identity", "Softmax"]
    features = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"features": features})
    got = onnxruntime.InferenceSession(str(in_repo_copy / "out.onnx")).run(
        None, {"features": features})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
