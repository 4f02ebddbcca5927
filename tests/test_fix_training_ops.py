"""fix-training-ops: same values, and operators onnxruntime-training can differentiate."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from _position_embeddings import position_embeddings
from onnx import TensorProto, helper, numpy_helper
from ort_training import gradient_corpus as corpus

import graphpass
from graphpass.framework import compare_outputs, make_inputs, run_model


def _norm_model() -> onnx.ModelProto:
    """x -> MatMul(W) -> LayerNormalization (Y only) -> Where(mask, CastLike(c, y), y)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
        helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"], name="norm",
                         axis=-1),
        helper.make_node("CastLike", ["fill", "y"], ["fill_like"], name="cast_like"),
        helper.make_node("Where", ["mask", "fill_like", "y"], ["out"], name="where"),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
         numpy_helper.from_array(np.ones(4, np.float32), "gamma"),
         numpy_helper.from_array(np.zeros(4, np.float32), "beta"),
         numpy_helper.from_array(np.array(-1e4, np.float64), "fill")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_layer_norm_gets_statistics_and_cast_like_becomes_cast_with_the_same_values() -> None:
    model = graphpass.Model.from_proto(_norm_model())
    result = graphpass.PassManager(["fix-training-ops"]).run(model)
    graph = result.model.graph
    [norm] = graph.nodes_by_op("LayerNormalization")
    assert norm.outputs == ("y", "y__mean", "y__inv_std_dev")
    assert not graph.nodes_by_op("CastLike")
    [cast] = graph.nodes_by_op("Cast")
    assert cast.name == "cast_like" and cast.attribute("to") == TensorProto.FLOAT
    assert {f.code for f in result.findings} == {"GP530", "GP531"}
    onnx.checker.check_model(result.model.to_proto(), full_check=True)
    inputs = make_inputs(model)
    before, after = run_model(model, inputs), run_model(result.model, inputs)
    assert before.outputs is not None and after.outputs is not None
    assert compare_outputs(before.outputs, after.outputs, rtol=0, atol=0) == []
    # A second run has nothing left to do.
    again = graphpass.PassManager(["fix-training-ops"]).run(result.model)
    assert not again.changed and again.findings == []


def test_cast_like_with_an_unknown_type_is_left_alone() -> None:
    body = helper.make_function(
        "local", "Fill", ["v", "like"], ["o"],
        [helper.make_node("CastLike", ["v", "like"], ["o"])], [helper.make_opsetid("", 18)])
    graph = helper.make_graph(
        [helper.make_node("Fill", ["c", "x"], ["y"], domain="local")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1.0, np.float64), "c")])
    proto = helper.make_model(graph, functions=[body], opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])
    result = graphpass.PassManager(["fix-training-ops"]).run(graphpass.Model.from_proto(proto))
    assert not result.changed  # inside a function the type depends on the call
    inlined = graphpass.PassManager(["inline-functions", "fix-training-ops"]).run(
        graphpass.Model.from_proto(proto))
    assert [n.op_type for n in inlined.model.graph] == ["Cast"]


def test_the_rewrites_let_onnxruntime_training_differentiate_a_torch_export(
        tmp_path: Path, ort_training_python: str) -> None:
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(self.fc(x))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Block().eval(), (torch.randn(2, 8),), tmp_path / "model.onnx",
                          dynamo=True, opset_version=18, optimize=False)

    def oracle(path: Path) -> dict[str, object]:
        return corpus.ask_oracle(ort_training_python, path, "--loss", "mse")

    before = oracle(tmp_path / "model.onnx")
    # ORT's own message does not even name the operator.
    assert not before["ok"] and "OutputDefs().size()" in str(before["error"])
    linted = graphpass.PassManager(["lint-gradients"]).run(graphpass.load(tmp_path / "model.onnx"))
    assert [f.code for f in linted.errors] == ["GP403"]

    fixed = graphpass.PassManager(["fix-training-ops", "lint-gradients"]).run(
        graphpass.load(tmp_path / "model.onnx"))
    assert fixed.ok
    graphpass.save(fixed.model, tmp_path / "fixed.onnx")
    assert oracle(tmp_path / "fixed.onnx")["ok"]


# ------------------------------------------ a 1 that ONNX's shape inference hides
def test_a_broadcast_input_whose_one_inference_hides_is_reshaped_to_show_it() -> None:
    """Optimum's position embeddings: the rows are [1, T, H], inferred [unk__0, unk__1, H]."""
    proto, feeds = position_embeddings()
    inferred = onnx.shape_inference.infer_shapes(proto)
    [rows] = [v for v in inferred.graph.value_info if v.name == "rows"]
    assert rows.type.tensor_type.shape.dim[0].dim_param  # a symbol, not the number 1
    model = graphpass.Model.from_proto(proto)
    result = graphpass.PassManager(["fix-training-ops"]).run(model)
    [finding] = result.findings
    assert finding.code == "GP533"
    assert finding.data["inputs"] == [{"node": "combine", "input": 1, "shape": [1, 0, 0]}]
    graph = result.model.graph
    [reshape] = graph.nodes_by_op("Reshape")
    [combine] = [n for n in graph if n.name == "combine"]
    assert reshape.inputs[0] == "rows" and combine.inputs == ("x", reshape.outputs[0])
    fixed = onnx.shape_inference.infer_shapes(result.model.to_proto())
    [shown] = [v for v in fixed.graph.value_info if v.name == reshape.outputs[0]]
    assert shown.type.tensor_type.shape.dim[0].dim_value == 1
    onnx.checker.check_model(result.model.to_proto(), full_check=True)
    before, after = run_model(model, feeds), run_model(result.model, feeds)
    assert before.outputs is not None and after.outputs is not None
    assert compare_outputs(before.outputs, after.outputs, rtol=0, atol=0) == []
    again = graphpass.PassManager(["fix-training-ops"]).run(result.model)
    assert not again.changed and again.findings == []


@pytest.mark.parametrize("variant", [{"rank": 1}, {"seq": 5}, {"batch": 1}, {"op": "Div"}])
def test_broadcasts_whose_shapes_onnx_and_ort_know_are_left_alone(variant: dict) -> None:
    proto, _ = position_embeddings(**variant)
    result = graphpass.PassManager(["fix-training-ops"]).run(graphpass.Model.from_proto(proto))
    assert not result.changed and result.findings == []


def test_the_broadcast_reshape_can_be_turned_off() -> None:
    proto, _ = position_embeddings()
    result = graphpass.PassManager(["fix-training-ops"], options={
        "fix-training-ops": {"broadcast-dims": False}}).run(graphpass.Model.from_proto(proto))
    assert not result.changed and not result.model.graph.nodes_by_op("Reshape")


def test_what_the_graph_proves_of_a_shape_stops_at_invalid_nodes() -> None:
    from graphpass.training.rules._broadcast_dims import proven_dims

    ids = numpy_helper.from_array(np.zeros((1, 8), np.int64), "ids")
    nodes = [helper.make_node("Constant", [], ["twice"],
                              value=numpy_helper.from_array(np.array([0, 0], np.int64))),
             helper.make_node("Unsqueeze", ["ids", "twice"], ["bad"]),
             helper.make_node("Constant", [], ["far"],
                              value=numpy_helper.from_array(np.array([5], np.int64))),
             helper.make_node("Slice", ["ids", "far", "far", "far"], ["sliced"]),
             helper.make_node("Constant", [], ["one"],
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Slice", ["ids", "one", "one", "one"], ["good"])]
    graph_proto = helper.make_graph(nodes, "g", [], [
        helper.make_tensor_value_info(name, TensorProto.INT64, None)
        for name in ("bad", "sliced", "good")], [ids])
    graph = graphpass.Model.from_proto(helper.make_model(graph_proto)).graph
    assert proven_dims(graph, "bad", lambda name: None) is None
    assert proven_dims(graph, "sliced", lambda name: None) is None
    assert proven_dims(graph, "good", lambda name: None) == (1, None)
