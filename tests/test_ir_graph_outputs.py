"""A model's output names are its interface: the IR keeps them unless asked.

``replace_uses(..., include_outputs=True)`` used to move a model output to the
replacement's name without a word; ``rename_value`` raised bare ``ValueError`` and
``KeyError``. The IR guide's recipe for removing a node whose output is a graph
output runs here on a real model, checked with onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from _docs_runner import section_blocks
from _ir_consistency import assert_consistent
from onnx import TensorProto, helper

import graphpass
from graphpass import Graph, GraphpassError, InvalidModelError, Model, Node

REPO = Path(__file__).resolve().parent.parent
IR_GUIDE = REPO / "docs" / "ir.md"


def _vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])


def _model() -> Model:
    """x -> Relu(h) -> Identity(y), y the model's output; also Neg(h) -> z (an output)."""
    graph = Graph("g", inputs=[_vi("x")], outputs=[_vi("y"), _vi("z")],
                  nodes=[Node("Relu", ["x"], ["h"], name="relu"),
                         Node("Identity", ["h"], ["y"], name="identity"),
                         Node("Neg", ["h"], ["z"], name="neg")])
    return Model(graph, opset_imports={"": 18})


def test_replace_uses_keeps_a_model_output_name_unless_asked() -> None:
    model = _model()
    graph = model.graph
    before = model.to_proto()
    with pytest.raises(InvalidModelError) as caught:
        graph.replace_uses("y", "h", include_outputs=True)
    assert "model output 'y'" in caught.value.message
    assert caught.value.hint is not None and "rename_outputs=True" in caught.value.hint
    assert model.to_proto() == before  # refused: nothing changed
    assert graph.replace_uses("y", "h", include_outputs=True, rename_outputs=True) == 1
    assert graph.output_names == ("h", "z")  # asked for: renamed
    assert_consistent(graph)


def test_subgraph_outputs_still_move_with_include_outputs() -> None:
    """An If branch's outputs are positional: moving one changes no interface."""
    branch = helper.make_graph([helper.make_node("Identity", ["a"], ["t"])], "then", [],
                               [_vi("t")])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [], [_vi("e")])
    proto = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)], "main",
        [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_vi("y")])
    model = Model.from_proto(helper.make_model(proto))
    then = model.graph.nodes[1].attributes["then_branch"].graphs[0]
    assert then.replace_uses("t", "a", include_outputs=True) == 1
    assert then.output_names == ("a",)
    assert_consistent(model.graph)


def test_rename_value_raises_graphpass_errors() -> None:
    graph = _model().graph
    with pytest.raises(GraphpassError, match="no value 'nope'"):
        graph.rename_value("nope", "fresh")
    with pytest.raises(InvalidModelError, match="'z' already exists"):
        graph.rename_value("h", "z")


def test_rename_value_can_take_over_a_name_nothing_defines() -> None:
    """After removing the Identity, ``y`` is named by the output only: ``h`` becomes it."""
    model = _model()
    graph = model.graph
    graph.remove(graph.producer("y"), safe=False)
    graph.rename_value("h", "y")
    assert graph.output_names == ("y", "z")
    assert [n.op_type for n in graph] == ["Relu", "Neg"]
    assert graph.nodes[1].inputs == ("y",)
    assert graph.value("y").shape == (2,)
    assert_consistent(graph)
    graphpass.validate(model)


def test_rename_value_does_not_capture_an_outer_name() -> None:
    """In a subgraph an undefined name is an outer value: taking it over would hide it."""
    branch = helper.make_graph([helper.make_node("Neg", ["a"], ["t"]),
                                helper.make_node("Add", ["t", "x"], ["t2"])], "then", [],
                               [_vi("t2")])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [], [_vi("e")])
    proto = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)], "main",
        [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_vi("y")])
    model = Model.from_proto(helper.make_model(proto))
    then = model.graph.nodes[1].attributes["then_branch"].graphs[0]
    with pytest.raises(InvalidModelError, match="already exists"):
        then.rename_value("t", "x")  # x is the main graph's input, used in the branch
    assert_consistent(model.graph)


def test_the_ir_guide_lists_is_graph_output() -> None:
    text = IR_GUIDE.read_text()
    table = text[text.index("## The objects"):text.index("## The networkx view")]
    assert "is_graph_output" in table and "is_graph_input" in table


def test_the_ir_guide_recipe_removes_an_output_identity_keeping_the_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
         helper.make_node("Identity", ["h"], ["logits"], name="to_output"),
         helper.make_node("Identity", ["x"], ["x_copy"], name="input_copy"),
         helper.make_node("Identity", ["logits"], ["inner"], name="inner"),
         helper.make_node("Relu", ["inner"], ["scores"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 2]),
         helper.make_tensor_value_info("x_copy", TensorProto.FLOAT, ["n", 3]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 2])],
        [onnx.numpy_helper.from_array(
            np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(proto, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    (block,) = section_blocks(IR_GUIDE.read_text(), "Removing a node whose output is a graph "
                              "output", "python")
    exec(compile(block, "ir.md", "exec"), namespace)
    written = onnx.load(tmp_path / "out.onnx")
    assert [o.name for o in written.graph.output] == ["logits", "x_copy", "scores"]
    # The output fed by an input keeps its Identity; the other two are gone.
    assert [n.name for n in written.graph.node if n.op_type == "Identity"] == ["input_copy"]
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"x": x})
    got = onnxruntime.InferenceSession(str(tmp_path / "out.onnx")).run(None, {"x": x})
    for expected, actual in zip(want, got, strict=True):
        np.testing.assert_array_equal(actual, expected)
