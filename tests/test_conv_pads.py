"""A zero ``Pad`` read only by ``Conv`` nodes folds into their pads, computing the same.

The oracle is onnxruntime on the graph before and after the fold, and the training
graph's gradients against finite differences of the unfolded model.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.training import AdamW, build_training_graphs
from graphpass.training._conv_pads import fold_conv_pads

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)


def _model(pads: list[int], *, mode: str = "constant", fill: float = 0.0,
           conv_pads: list[int] | None = None, also_relu: bool = False,
           group: int = 1) -> onnx.ModelProto:
    w = RNG.standard_normal((6 if group == 1 else 3, 3 // group, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Pad", ["x", "pads", "fill"], ["padded"], mode=mode),
             helper.make_node("Conv", ["padded", "w"], ["y"], group=group,
                              **({"pads": conv_pads} if conv_pads else {}))]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if also_relu:
        nodes.append(helper.make_node("Relu", ["padded"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 6])],
        outputs, [numpy_helper.from_array(np.array(pads, dtype=np.int64), "pads"),
                  numpy_helper.from_array(np.array(fill, dtype=np.float32), "fill"),
                  numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _run(proto: onnx.ModelProto) -> list[np.ndarray]:
    return ort.InferenceSession(proto.SerializeToString()).run(None, {"x": X})


@pytest.mark.parametrize(("pads", "conv_pads", "group"), [
    ([0, 0, 0, 0, 0, 0, 0, 0], None, 1),  # the exporter's zero pad before a 1 x 1 conv
    ([0, 0, 1, 2, 0, 0, 2, 1], None, 1),  # asymmetric, as TensorFlow's SAME
    ([0, 0, 1, 0, 0, 0, 1, 1], [1, 1, 0, 1], 1),  # added to the conv's own pads
    ([0, 0, 1, 1, 0, 0, 1, 1], None, 3),  # depthwise
])
def test_a_zero_pad_folds_and_computes_the_same(pads: list[int], conv_pads: list[int] | None,
                                                 group: int) -> None:
    proto = _model(pads, conv_pads=conv_pads, group=group)
    model = graphpass.Model.from_proto(proto)
    assert fold_conv_pads(model.graph) == 1
    folded = model.to_proto()
    assert "Pad" not in {n.op_type for n in folded.graph.node}
    np.testing.assert_allclose(_run(folded)[0], _run(proto)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [
    {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "mode": "reflect"},
    {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "fill": 1.0},
    {"pads": [0, 1, 1, 1, 0, 0, 1, 1]},  # pads a channel
    {"pads": [0, 0, -1, 0, 0, 0, 0, 0]},  # a cut
    {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "also_relu": True},  # the padded value is read twice
])
def test_other_pads_are_left_alone(case: dict[str, object]) -> None:
    model = graphpass.Model.from_proto(_model(**case))  # type: ignore[arg-type]
    assert fold_conv_pads(model.graph) == 0
    assert "Pad" in {n.op_type for n in model.to_proto().graph.node}


def test_the_forward_trains_without_its_pad_with_the_padded_models_gradients() -> None:
    proto = _model([0, 0, 1, 2, 0, 0, 2, 1])
    model = graphpass.Model.from_proto(proto)
    graphs = build_training_graphs(model, trainable=["w"], loss="mse", loss_inputs=["y"],
                                   optimizer=AdamW())
    assert "Pad" not in {n.op_type for n in graphs.eval.to_proto().graph.node}
    gradient = graphs.gradient.to_proto()
    assert "padded" not in {name for n in gradient.graph.node for name in n.output}
    session = ort.InferenceSession(gradient.SerializeToString())
    w = numpy_helper.to_array(next(i for i in proto.graph.initializer if i.name == "w"))
    target = RNG.standard_normal(_run(proto)[0].shape).astype(np.float32)
    feeds = {"x": X, "w": w, graphs.manifest["target"]: target}
    _, grad = session.run(None, feeds)[:2]

    def loss(weights: np.ndarray) -> float:
        changed = onnx.ModelProto()
        changed.CopyFrom(proto)
        for init in changed.graph.initializer:
            if init.name == "w":
                init.CopyFrom(numpy_helper.from_array(weights, "w"))
        y = _run(changed)[0].astype(np.float64)
        return float(np.mean((y - target) ** 2))

    w64 = w.astype(np.float64)
    for index in [(0, 0, 0, 0), (3, 1, 2, 1), (5, 2, 1, 2)]:
        step = np.zeros_like(w64)
        step[index] = 1e-2
        numeric = (loss((w64 + step).astype(np.float32)) -
                   loss((w64 - step).astype(np.float32))) / 2e-2
        assert grad[index] == pytest.approx(numeric, rel=2e-2, abs=1e-4)
