"""The gradient of ``Slice`` over dimensions known only at run time is a ``Pad``.

A dynamo export with dynamic batch and sequence sizes slices tensors whose sizes the graph
does not know (``logits[:, :-1, :]`` in every causal language model's loss). The gradient
pads ``dY`` back with zeros, with pads computed from the shape by ``Slice``'s own rules,
rather than scattering ``dY`` at flat indices (an index tensor of the input's size). Each
case is checked against finite differences in float64.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _gradcheck import check_gradients, vjp_model
from onnx import TensorProto, helper

INT64_MAX = 2**63 - 1


def _slice_model(starts: list[int], ends: list[int], axes: list[int] | None,
                 steps: list[int] | None, *, runtime_bounds: bool = False) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", "S", 5])]
    initializers = []
    names = ["x"]
    for name, values in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)):
        if values is None:
            names.append("")
            continue
        names.append(name)
        if runtime_bounds and name in ("starts", "ends"):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, [len(values)]))
        else:
            initializers.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
    while names[-1] == "":
        names.pop()
    graph = helper.make_graph(
        [helper.make_node("Slice", names, ["y"])], "slice", inputs,
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


CASES = {
    "drop the last position": ([0], [-1], [1], None),
    "from the second to the end (INT64_MAX)": ([1], [INT64_MAX], [1], [1]),
    "two axes, negative start": ([-2, 1], [INT64_MAX, 4], [1, 2], None),
    "bounds past the ends are clamped": ([-100, 0], [100, 3], [0, 2], None),
    "empty range (end before start)": ([3], [1], [1], None),
    "axes implied": ([0, 1], [1, -1], None, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_dynamic_slice_gradient_is_a_pad_and_matches_finite_differences(name: str) -> None:
    starts, ends, axes, steps = CASES[name]
    model = _slice_model(starts, ends, axes, steps)
    vjp = vjp_model(model, ["x"])
    ops = {node.op_type for node in vjp.model.graph.node}
    assert "Pad" in ops and "ScatterElements" not in ops, sorted(ops)
    x = np.random.default_rng(0).standard_normal((3, 4, 5))
    outcome = check_gradients(model, {"x": x}, ["x"])
    assert not outcome.failures and outcome.passed, outcome.failures


def test_bounds_given_at_run_time_pad_too() -> None:
    model = _slice_model([1, -3], [INT64_MAX, -1], [1, 2], None, runtime_bounds=True)
    vjp = vjp_model(model, ["x"])
    assert "ScatterElements" not in {node.op_type for node in vjp.model.graph.node}
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 6, 5)),
             "starts": np.array([1, -3]), "ends": np.array([INT64_MAX, -1])}
    outcome = check_gradients(model, feeds, ["x"])
    assert not outcome.failures and outcome.passed, outcome.failures


def test_a_step_other_than_one_still_scatters() -> None:
    model = _slice_model([0], [INT64_MAX], [1], [2])
    assert "ScatterElements" in {node.op_type for node in vjp_model(model, ["x"]).model.graph.node}
    outcome = check_gradients(model, {"x": np.random.default_rng(2).standard_normal((2, 5, 5))},
                              ["x"])
    assert not outcome.failures and outcome.passed, outcome.failures


def test_axes_written_as_a_reshaped_constant_are_constants() -> None:
    """An unoptimized dynamo export gives ``Slice`` its bounds as ``Reshape(Constant)``."""
    model = _slice_model([0], [-1], [1], None)
    graph = model.graph
    for name in ("starts", "ends", "axes"):
        old = next(i for i in graph.initializer if i.name == name)
        graph.initializer.remove(old)
        graph.node.insert(0, helper.make_node("Constant", [], [f"{name}_scalar"],
                                              value=helper.make_tensor(
                                                  f"{name}_value", TensorProto.INT64, [],
                                                  [int(old.int64_data[0])])))
        graph.node.insert(1, helper.make_node("Reshape", [f"{name}_scalar", "minus_one"],
                                              [name]))
    graph.initializer.append(helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]))
    vjp = vjp_model(model, ["x"])
    assert "ScatterElements" not in {node.op_type for node in vjp.model.graph.node}
    outcome = check_gradients(model, {"x": np.random.default_rng(3).standard_normal((2, 4, 5))},
                              ["x"])
    assert not outcome.failures and outcome.passed, outcome.failures
