"""A third-party plugin adds the gradient builder of its own domain's operator.

``tests/plugins/graphpass-gradient-plugin`` registers a builder for
``example.graphpass::ScaledTanh`` (an operator the model defines as a local
function, kept as a call: ``inline-functions`` excludes it). With the plugin
installed the ``graphpass`` rule set knows the operator, ``build-training-graph``
differentiates it, stock onnxruntime runs the result, and the gradients agree
with finite differences; without the plugin both refuse the call.
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
from graphpass.framework.plugin_loading import build_registry
from graphpass.training.builders import builtin_builders
from graphpass.training.rules import rules_from_builders
from graphpass.training.table import BuilderTable, registered_builders

DOMAIN = "example.graphpass"
OP = f"{DOMAIN}::ScaledTanh"


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
    assert registry.plugin("scaled-tanh").provides == {"gradient_builders": [OP]}
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
