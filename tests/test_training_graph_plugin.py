"""A third-party plugin adds the gradient builders of its own domain's operators.

``tests/plugins/graphpass-gradient-plugin`` registers builders for
``example.graphpass::ScaledTanh`` and ``example.graphpass::GradientReversal``
(operators the model defines as local functions, so that any runtime runs the
forward). With the plugin installed the ``graphpass`` rule set knows the operators,
``build-training-graph`` differentiates them, stock onnxruntime runs the result, and the
gradients agree with finite differences; without the plugin both refuse the call.

A builder wins over inlining: when the plan builds a training graph, ``inline-functions``
keeps the calls of functions a builder differentiates. ``GradientReversal``'s gradient is
not its body's (the body is an ``Identity``, the builder reverses the gradient), so the
trained gradient shows which one was used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from _gradcheck import check_gradients
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.framework import build_registry
from graphpass.training import BuilderTable, builtin_builders, registered_builders
from graphpass.training.rules import rules_from_builders

DOMAIN = "example.graphpass"
OP = f"{DOMAIN}::ScaledTanh"
REVERSAL = f"{DOMAIN}::GradientReversal"


@pytest.fixture(scope="module")
def site(install_plugin: Callable[[str], Path]) -> Path:
    return install_plugin("gradient")


@pytest.fixture
def with_plugin(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAPHPASS_DISABLE_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(site))


def _model(elem_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    alpha = helper.make_node("Constant", [], ["Alpha"])  # reads the call's alpha
    alpha.attribute.add(name="value_float", ref_attr_name="alpha",
                        type=onnx.AttributeProto.FLOAT)
    body = [helper.make_node("Tanh", ["X"], ["T"]), alpha,
            helper.make_node("CastLike", ["Alpha", "X"], ["AlphaX"]),
            helper.make_node("Mul", ["T", "AlphaX"], ["Y"])]
    function = helper.make_function(DOMAIN, "ScaledTanh", ["X"], ["Y"], body,
                                    [helper.make_opsetid("", 21)], attributes=["alpha"])
    dtype = np.float32 if elem_type == TensorProto.FLOAT else np.float64
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("ScaledTanh", ["h"], ["y"], domain=DOMAIN, name="scaled",
                          alpha=2.5)],
        "m", [helper.make_tensor_value_info("x", elem_type, [4, 3])],
        [helper.make_tensor_value_info("y", elem_type, [4, 2])],
        [numpy_helper.from_array((np.arange(6).reshape(3, 2) / 7).astype(dtype), "w")])
    return helper.make_model(graph, functions=[function], ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])


OPTIONS = {"inline-functions": {"exclude": [OP]}}


def test_the_builder_is_registered_and_credited(with_plugin: None) -> None:
    registry = build_registry()
    assert registry.plugin_of("gradient_builders", OP) == "scaled-tanh"
    assert registry.plugin("scaled-tanh").provides == {"gradient_builders": [OP, REVERSAL]}
    assert registry.plugin_of("gradient_rules", "graphpass") == "builtin"
    derived = rules_from_builders(registered_builders(registry))  # what lint-gradients judges by
    assert (DOMAIN, "ScaledTanh") in derived.builders


def _lint_and_build(registry: object, directory: Path) -> tuple[list[str], list[str]]:
    model = graphpass.Model.from_proto(_model())
    lint = graphpass.PassManager(["inline-functions", "lint-gradients"], registry=registry,
                                 options={**OPTIONS, "lint-gradients": {"rules": "graphpass"}}
                                 ).run(model)
    build = graphpass.PassManager(["build-training-graph"], registry=registry, options={
        **OPTIONS, "build-training-graph": {"directory": str(directory)}},
        stop_on_error=False).run(model)
    return ([f.code for f in lint.findings if f.severity.name == "ERROR"],
            [f.code for f in build.findings])


def test_without_the_plugin_both_refuse_the_call(tmp_path: Path) -> None:
    lint, build = _lint_and_build(build_registry(disable=["scaled-tanh"]), tmp_path / "t")
    assert lint == ["GP410"] and build == ["GP851"]


def test_with_the_plugin_the_graph_trains_on_stock_onnxruntime(with_plugin: None,
                                                                tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    lint, build = _lint_and_build(build_registry(), tmp_path / "train")
    assert lint == [] and build == ["GP850"]
    train = tmp_path / "train"
    onnx.checker.check_model(str(train / "gradient.onnx"), full_check=True)
    manifest = json.loads((train / "manifest.json").read_text())
    session = ort.InferenceSession(str(train / "gradient.onnx"))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    target = np.zeros((4, 2), np.float32)
    w = (np.arange(6).reshape(3, 2) / 7).astype(np.float32)
    loss, grad = session.run(None, {"x": x, "target": target, "w": w})
    assert manifest["trainable"] == ["w"]
    y = 2.5 * np.tanh(x @ w)
    expected = x.T @ ((2 * y / y.size) * (2.5 - y * y / 2.5))
    np.testing.assert_allclose(loss, np.mean(y**2), rtol=1e-5)
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


def test_the_plugin_builder_matches_finite_differences(with_plugin: None) -> None:
    from graphpass_gradient_plugin.plugin import SCALED_TANH

    table = BuilderTable([*builtin_builders(), SCALED_TANH])
    model = _model(TensorProto.DOUBLE)
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 3)),
             "w": numpy_helper.to_array(model.graph.initializer[0])}
    del model.graph.initializer[:]
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.DOUBLE, [3, 2]))
    outcome = check_gradients(model, feeds, ["x", "w"], builders=table)
    assert outcome.ok, outcome.failures


# ============================================ a builder wins over inlining its function
def _reversal_model(scale: float = 0.5) -> onnx.ModelProto:
    """``y = GradientReversal(x @ w; scale)``, the operator a model-local function."""
    body = [helper.make_node("Identity", ["X"], ["Y"])]
    function = helper.make_function(DOMAIN, "GradientReversal", ["X"], ["Y"], body,
                                    [helper.make_opsetid("", 21)], attributes=["scale"])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="project"),
         helper.make_node("GradientReversal", ["h"], ["y"], domain=DOMAIN, name="reverse",
                          scale=scale)],
        "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])],
        [numpy_helper.from_array((np.arange(6).reshape(3, 2) / 7).astype(np.float32), "w")])
    return helper.make_model(graph, functions=[function], ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])


def _loss(x: np.ndarray, w: np.ndarray) -> float:
    """The forward's loss (the mean squared error against a zero target), in float64."""
    return float(np.mean((x @ w) ** 2))


def _finite_differences(x: np.ndarray, w: np.ndarray, step: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(w)
    for index in np.ndindex(w.shape):
        up, down = w.copy(), w.copy()
        up[index] += step
        down[index] -= step
        grad[index] = (_loss(x, up) - _loss(x, down)) / (2 * step)
    return grad


def test_a_registered_builder_wins_over_inlining_its_function(with_plugin: None,
                                                              tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = graphpass.Model.from_proto(_reversal_model(scale=0.5))
    result = graphpass.PassManager(
        ["inline-functions", "lint-gradients", "build-training-graph"],
        registry=build_registry(), options={
            "lint-gradients": {"rules": "graphpass"},
            "build-training-graph": {"directory": str(tmp_path / "train")}}).run(model)
    assert result.ok, [f.message for f in result.findings]
    [kept] = [f for f in result.findings if f.code == "GP105"]
    assert REVERSAL in kept.message and "scaled-tanh" in kept.message
    assert [n.op_type for n in result.model.graph] == ["MatMul", "GradientReversal"]
    session = ort.InferenceSession(str(tmp_path / "train" / "gradient.onnx"))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    w = (np.arange(6).reshape(3, 2) / 7).astype(np.float32)
    loss, grad = session.run(None, {"x": x, "target": np.zeros((4, 2), np.float32), "w": w})
    np.testing.assert_allclose(loss, _loss(x, w), rtol=1e-5)
    body_gradient = _finite_differences(x.astype(np.float64), w.astype(np.float64))
    # The builder's formula, dX = -scale dY: the body's gradient reversed and halved.
    np.testing.assert_allclose(grad, -0.5 * body_gradient, rtol=1e-4, atol=1e-6)
    assert not np.allclose(grad, body_gradient, rtol=1e-2)


def test_without_a_training_graph_the_function_is_inlined_as_before(with_plugin: None) -> None:
    model = graphpass.Model.from_proto(_reversal_model())
    result = graphpass.PassManager(["inline-functions"], registry=build_registry()).run(model)
    assert [n.op_type for n in result.model.graph] == ["MatMul", "Identity"]
    assert not result.model.functions


def test_without_the_plugin_the_function_is_inlined_and_its_body_differentiated(
        tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = graphpass.Model.from_proto(_reversal_model())
    registry = build_registry(disable=["scaled-tanh"])
    result = graphpass.PassManager(["inline-functions", "build-training-graph"],
                                   registry=registry, options={"build-training-graph": {
                                       "directory": str(tmp_path / "train")}}).run(model)
    assert result.ok
    assert not [f for f in result.findings if f.code == "GP105"]
    session = ort.InferenceSession(str(tmp_path / "train" / "gradient.onnx"))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    w = (np.arange(6).reshape(3, 2) / 7).astype(np.float32)
    _, grad = session.run(None, {"x": x, "target": np.zeros((4, 2), np.float32), "w": w})
    np.testing.assert_allclose(grad, _finite_differences(x.astype(np.float64),
                                                         w.astype(np.float64)),
                               rtol=1e-4, atol=1e-6)


def test_the_command_line_trains_through_the_builder(site: Path, tmp_path: Path,
                                                     graphpass_process) -> None:
    pytest.importorskip("onnxruntime")
    onnx.save(_reversal_model(), tmp_path / "model.onnx")
    done = graphpass_process("run", "model.onnx", "-o", "ready.onnx", "-p", "train-ready",
                             "--emit-training-graph", "train", "--format", "json",
                             cwd=tmp_path, sites=[site])
    assert done.returncode == 0, done.stdout + done.stderr
    codes = [f["code"] for f in json.loads(done.stdout)["findings"]]
    assert "GP105" in codes and "GP850" in codes
    ready = onnx.load(tmp_path / "ready.onnx")
    assert [n.op_type for n in ready.graph.node] == ["MatMul", "GradientReversal"]


# ================================= a builder needs a gradient that does not reach it
def test_a_builder_needing_an_output_gradient_that_does_not_come_names_the_node() -> None:
    """``required_output_gradient(0)`` when the loss reads only output 1 of a two-output op."""
    from graphpass.training import GradientBuilder, GradientContext, GradientError, differentiate

    def halves(ctx: GradientContext) -> list[str | None]:
        dy = ctx.required_output_gradient(0)
        return [ctx.emit.op("Mul", dy, ctx.emit.scalar(0.5, like=dy))]

    table = BuilderTable([*builtin_builders(), GradientBuilder(
        "Halves", halves, domain=DOMAIN, differentiable=frozenset({0}))])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Halves", ["h"], ["a", "b"], domain=DOMAIN, name="split_in_two"),
         helper.make_node("ReduceSum", ["b"], ["loss"], keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.ones((3, 2), np.float32), "w")])
    model = graphpass.Model.from_proto(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)]))
    with pytest.raises(GradientError, match="no gradient reaches output 0") as caught:
        differentiate(model, ["w"], {"loss": None}, builders=table)
    assert caught.value.node == "split_in_two"
    assert "compute the loss from output 0" in str(caught.value.hint)
