"""The page docs/training-graph.md runs as written, and its builder table is complete."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from _docs_runner import block_after, run_page
from _gradcheck import TABLE, check_gradients
from onnx import TensorProto, helper

from graphpass.training import BuilderTable, builtin_builders

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "training-graph.md"


def test_the_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ran = run_page(PAGE, timeout=300)
    assert (ran.python, ran.console, ran.commands) == (7, 3, 3)
    assert (tmp_path / "train" / "step.onnx").is_file()
    assert (tmp_path / "recomputed" / "gradient.onnx").is_file()


def test_the_table_lists_every_builtin_builder() -> None:
    text = PAGE.read_text()
    table = text[text.index("## Built-in builders"):]
    listed = set(re.findall(r"`([A-Za-z0-9]+)`", table.split("**Refused")[0]))
    assert {b.op_type for b in TABLE} <= listed


def test_the_documented_plugin_builder_matches_finite_differences() -> None:
    namespace: dict[str, object] = {}
    exec(block_after(PAGE.read_text(), "## Adding a builder in a plugin", "python"), namespace)
    builder = namespace["SCALED_TANH"]
    table = BuilderTable([*builtin_builders(), builder])  # type: ignore[list-item]
    node = helper.make_node("ScaledTanh", ["x"], ["y"], domain="example.graphpass", alpha=2.0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.DOUBLE, [3, 2])], [helper.make_tensor_value_info(
        "y", TensorProto.DOUBLE, [3, 2])])
    body = [helper.make_node("Tanh", ["X"], ["T"]),
            helper.make_node("Constant", [], ["A"], value=helper.make_tensor(
                "a", TensorProto.DOUBLE, [], [2.0])),
            helper.make_node("Mul", ["T", "A"], ["Y"])]
    function = helper.make_function("example.graphpass", "ScaledTanh", ["X"], ["Y"], body,
                                    [helper.make_opsetid("", 21)], attributes=["alpha"])
    model = helper.make_model(graph, functions=[function], ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("example.graphpass", 1)])
    x = np.random.default_rng(3).standard_normal((3, 2))
    outcome = check_gradients(model, {"x": x}, ["x"], builders=table)
    assert outcome.ok, outcome.failures


def test_the_page_documents_opset_ranges_and_its_example_picks_by_version() -> None:
    text = PAGE.read_text()
    assert "since_version" in text and "until_version" in text
    namespace: dict[str, object] = {}
    exec(block_after(text, "### Opset versions", "python"), namespace)
    table = namespace["table"]
    assert isinstance(table, BuilderTable)
    old, new = namespace["OLD_CUBE"], namespace["NEW_CUBE"]
    assert table.find("example.graphpass", "Cube", 1) is old
    assert table.find("example.graphpass", "Cube", 2) is old
    assert table.find("example.graphpass", "Cube", 3) is new
    assert table.find("example.graphpass", "Cube", 9) is new
    assert (old.name, new.name) == ("example.graphpass::Cube@1-2", "example.graphpass::Cube@3+")
