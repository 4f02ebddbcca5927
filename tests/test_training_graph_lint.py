"""``lint-gradients`` with the ``graphpass`` rules says what ``build-training-graph`` does.

The rule set is derived from the registered builders. On random models (chains of
ONNX operators, local functions, ``If``/``Loop`` reading weights) and on handmade
ones (an operator without a builder, a builder's declared refusal, an opset outside
a builder's range, a custom-domain operator, a gradient through a sequence, control
flow), the lint reports an error exactly when the pass refuses the model, and the
node the pass names is one the lint names; the weights the lint says no gradient
reaches are those the pass leaves frozen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _model_strategies import models
from hypothesis import HealthCheck, given, settings
from onnx import TensorProto, helper, numpy_helper

import graphpass

NODE_ERRORS = {"GP401", "GP403", "GP406", "GP410"}
UNREACHED = {"GP402", "GP404"}


def _verdicts(proto: onnx.ModelProto, directory: Path) -> tuple[set[str], set[str], str | None,
                                                                 set[str]]:
    """(lint's error nodes, lint's unreached weights, the node the pass refuses, its frozen)."""
    model = graphpass.Model.from_proto(proto)
    first = model.graph.output_names[0]
    lint = graphpass.PassManager(["inline-functions", "lint-gradients"], options={
        "lint-gradients": {"rules": "graphpass", "loss": [first]}}).run(model)
    errors = {f.node or f.value or "" for f in lint.findings
              if f.code in NODE_ERRORS and f.severity.name == "ERROR"}
    unreached = {f.value or "" for f in lint.findings if f.code in UNREACHED}
    build = graphpass.PassManager(["build-training-graph"], options={
        "build-training-graph": {"directory": str(directory), "loss": "mse"}},
        stop_on_error=False).run(model)
    refused = next((f for f in build.findings if f.code == "GP851"), None)
    # Left frozen beside others that train (GP853), or all of them, so nothing is (GP852).
    frozen = next((set(f.data["weights"]) for f in build.findings
                   if f.code in ("GP853", "GP852") and "weights" in f.data), set())
    return errors, unreached, (refused.node if refused else None), frozen


def _agree(proto: onnx.ModelProto, directory: Path) -> None:
    errors, unreached, refused, frozen = _verdicts(proto, directory)
    assert bool(errors) == (refused is not None), (errors, refused)
    if refused is not None:
        assert refused in errors, (errors, refused)
    else:
        assert unreached == frozen, (unreached, frozen)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(models(functions=True, control_flow=True))
def test_lint_agrees_with_the_pass_on_random_models(tmp_path_factory: pytest.TempPathFactory,
                                                   proto: onnx.ModelProto) -> None:
    directory = tmp_path_factory.mktemp("agree") / "train"
    _agree(proto, directory)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           output: onnx.ValueInfoProto, weights: dict[str, np.ndarray], opset: int = 21,
           extra_opsets: tuple[tuple[str, int], ...] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, [output],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v)
                                                for d, v in extra_opsets)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _x(shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)


def _y(shape: list[int] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)


W = {"w": np.full((4, 4), 0.5, np.float32)}

CASES = {
    "no builder on the path": _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("CumSum", ["h", "axis"], ["y"], name="cumsum")],
        [_x([2, 4])], _y([2, 4]), {**W, "axis": np.array(1, np.int64)}),
    "no builder off the path": _model(
        [helper.make_node("CumSum", ["x", "axis"], ["c"], name="cumsum"),
         helper.make_node("MatMul", ["c", "w"], ["y"])],
        [_x([2, 4])], _y([2, 4]), {**W, "axis": np.array(1, np.int64)}),
    "a declared refusal": _model(
        [helper.make_node("Reshape", ["x", "shape"], ["x4"]),
         helper.make_node("Mul", ["x4", "scale"], ["h"]),
         helper.make_node("Resize", ["h", "roi", "scales"], ["y"], name="crop",
                          coordinate_transformation_mode="tf_crop_and_resize")],
        [_x([1, 9])], _y([1, 1, 6, 6]), {"shape": np.array([1, 1, 3, 3], np.int64),
                             "scale": np.full((1, 1, 3, 3), 2.0, np.float32),
                             "roi": np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32),
                             "scales": np.array([1, 1, 2, 2], np.float32)}),
    "an opset outside the builder's range": _model(
        [helper.make_node("Gather", ["w", "i"], ["y"], name="gather")],
        [helper.make_tensor_value_info("i", TensorProto.INT64, [3])], _y([3, 4]), W,
        opset=14),
    "a custom-domain operator": _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Fancy", ["h"], ["y"], name="fancy", domain="custom.ops")],
        [_x([2, 4])], _y([2, 4]), W, extra_opsets=(("custom.ops", 1),)),
    "a sequence on the path": _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("SequenceConstruct", ["h", "h"], ["s"], name="construct"),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], name="concat", axis=0)],
        [_x([2, 4])], _y([4, 4]), W),
    "a weight used twice by one node": _model(
        [helper.make_node("MatMul", ["w", "w"], ["h"]),
         helper.make_node("MatMul", ["x", "h"], ["y"])],
        [_x([2, 4])], _y([2, 4]), W),
    "a weight no gradient reaches": _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Shape", ["v"], ["unused"])],
        [_x([2, 4])], _y([2, 4]), {**W, "v": np.ones(3, np.float32)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_agrees_with_the_pass_on_handmade_models(case: str, tmp_path: Path) -> None:
    proto = CASES[case]
    onnx.checker.check_model(proto, full_check=True)
    _agree(proto, tmp_path / "train")


def test_handmade_verdicts(tmp_path: Path) -> None:
    expectations = {
        "no builder on the path": "cumsum", "no builder off the path": None,
        "a declared refusal": "crop", "an opset outside the builder's range": "gather",
        "a custom-domain operator": "fancy", "a sequence on the path": "construct",
        "a weight used twice by one node": None, "a weight no gradient reaches": None,
    }
    for case, node in expectations.items():
        _, _, refused, _ = _verdicts(CASES[case], tmp_path / case.replace(" ", "-"))
        assert refused == node, case


def test_a_selection_problem_is_one_finding_in_a_run_of_both_passes(tmp_path: Path) -> None:
    """lint-gradients and build-training-graph pick the weights one way; a pattern that
    matches nothing or an integer weight asked for is reported once, by the lint (and
    by the pass when it runs alone)."""
    proto = _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("Reshape", ["h", "step"], ["y"])],
                   [_x([2, 4])], _y([2, 4]), {**W, "step": np.array([2, 4], np.int64)})
    selection = {"trainable": ["w", "step", "nope*"], "frozen": ["gone"]}
    options = {"lint-gradients": {"rules": "graphpass", **selection},
               "build-training-graph": {"directory": str(tmp_path / "both"), "loss": "mse",
                                        **selection}}
    both = graphpass.PassManager(["lint-gradients", "build-training-graph"],
                                 options=options).run(graphpass.Model.from_proto(proto))
    facts = sorted((f.value, f.pass_name) for f in both.findings
                   if f.code in ("GP421", "GP422", "GP854"))
    assert facts == [("gone", "lint-gradients"), ("nope*", "lint-gradients"),
                     ("step", "lint-gradients")]
    alone = graphpass.PassManager(["build-training-graph"], options={
        "build-training-graph": {**options["build-training-graph"],
                                 "directory": str(tmp_path / "alone")}}).run(
        graphpass.Model.from_proto(proto))
    assert sorted(f.value for f in alone.findings if f.code == "GP854") == [
        "gone", "nope*", "step"]
    assert next(f for f in alone.findings if f.code == "GP850").data["trainable"] == ["w"]
