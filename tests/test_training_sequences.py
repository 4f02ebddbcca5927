"""``SplitToSequence`` read by constant ``SequenceAt`` becomes ``Split``, computing the same."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _training_models import exported
from onnx import TensorProto, helper, numpy_helper

import graphpass

ort = pytest.importorskip("onnxruntime")


def _model(split: np.ndarray, keepdims: int, positions: list[int]) -> onnx.ModelProto:
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["seq"], axis=1,
                              keepdims=keepdims)]
    outputs = []
    for k, position in enumerate(positions):
        nodes.append(helper.make_node("Constant", [], [f"p{k}"],
                                      value=numpy_helper.from_array(np.array(position))))
        nodes.append(helper.make_node("SequenceAt", ["seq", f"p{k}"], [f"y{k}"]))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 6, 3])], outputs,
        [numpy_helper.from_array(split, "split")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.mark.parametrize(("split", "keepdims", "positions"), [
    (np.array([1, 2, 3]), 1, [0, 2, -2]),
    (np.array(2), 1, [0, 1, 2]),  # one chunk size
    (np.array(4), 1, [1, 0]),  # the last chunk is shorter
    (np.array([1, 1, 1, 1, 1, 1]), 1, [5, 0]),
])
def test_the_rewrite_computes_the_same(split: np.ndarray, keepdims: int,
                                       positions: list[int]) -> None:
    proto = _model(split, keepdims, positions)
    x = np.random.default_rng(0).standard_normal((2, 6, 3)).astype(np.float32)
    expected = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})
    result = graphpass.PassManager(["fix-training-ops"]).run(graphpass.Model.from_proto(proto))
    rewritten = result.model.to_proto()
    assert "SplitToSequence" not in {n.op_type for n in rewritten.graph.node}
    assert [f.code for f in result.findings] == ["GP532"]
    got = ort.InferenceSession(rewritten.SerializeToString()).run(None, {"x": x})
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_keepdims_0_with_a_split_is_left_alone() -> None:
    # The standard ignores keepdims when split is given; onnxruntime does not.
    proto = _model(np.array([3, 3]), 0, [0])
    result = graphpass.PassManager(["fix-training-ops"]).run(graphpass.Model.from_proto(proto))
    assert result.findings == []


def test_torch_chunk_exports_lose_their_sequences() -> None:
    pytest.importorskip("torch")
    model = graphpass.load(exported("tinylm"))
    assert any(n.op_type == "SplitToSequence" for n in model.graph)
    result = graphpass.PassManager(["fix-training-ops"]).run(model)
    assert not any(n.op_type == "SplitToSequence" for n in result.model.graph)
