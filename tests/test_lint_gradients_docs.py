"""The worked plugin example of docs/passes/lint-gradients.md runs as written."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from _docs_runner import block_after
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass import PassContext
from graphpass.framework import Registry, default_registry
from graphpass.passes.lint_gradients import LintGradients
from graphpass.training.rules import onnxruntime_training_rules

DOC = Path(__file__).resolve().parent.parent / "docs" / "passes" / "lint-gradients.md"


@pytest.fixture
def plugin_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    text = DOC.read_text()
    package = tmp_path / "mytrainer_rules"
    package.mkdir()
    (package / "mytrainer.toml").write_text(
        block_after(text, "`mytrainer_rules/mytrainer.toml`", "toml"))
    (package / "__init__.py").write_text(
        block_after(text, "`mytrainer_rules/__init__.py`", "python"))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("mytrainer_rules")
    yield module.graphpass_gradient_rules()
    sys.modules.pop("mytrainer_rules", None)


def _model(nodes, initializers, x_shape) -> graphpass.Model:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("custom", 1)])
    return graphpass.Model.from_proto(model)


def test_the_documented_plugin_rules_load_and_judge(plugin_rules):
    (rules,) = plugin_rules
    assert (rules.name, rules.version, rules.lookup) == ("mytrainer", "2.0", "domain")
    registry = Registry()
    registry.add("gradient_rules", "onnxruntime-training", onnxruntime_training_rules(),
                 "builtin")
    registry.add("gradient_rules", rules.name, rules, "mytrainer")
    context = PassContext(registry=registry)
    pads = numpy_helper.from_array(np.zeros(8, np.int64), "pads")
    weight = numpy_helper.from_array(np.ones((1, 2, 3, 3), np.float32), "W")

    def padded(mode: str, shape: list[int]) -> graphpass.Model:
        return _model([helper.make_node("Mul", ["x", "W"], ["a"], name="mul"),
                       helper.make_node("Pad", ["a", "pads"], ["p"], name="pad", mode=mode),
                       helper.make_node("ReduceSum", ["p"], ["y"], keepdims=0, name="loss")],
                      [weight, pads], shape)

    found = LintGradients({"rules": "mytrainer"}).run(padded("reflect", [1, 2, 3, 3]), context)
    assert [(f.code, f.node) for f in found.findings] == [("GP403", "pad")]
    assert "up to rank 3" in found.findings[0].message
    assert LintGradients({"rules": "mytrainer"}).run(
        padded("constant", [1, 2, 3, 3]), context).findings == []
    # lookup by domain: a custom-domain Relu has no builder here (ORT would borrow Relu's)
    custom = _model([helper.make_node("Mul", ["x", "W"], ["a"], name="mul"),
                     helper.make_node("Relu", ["a"], ["r"], domain="custom", name="relu"),
                     helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0, name="loss")],
                    [weight], [1, 2, 3, 3])
    assert [f.code for f in LintGradients({"rules": "mytrainer"}).run(custom, context).findings
            ] == ["GP401"]
    assert [f.code for f in LintGradients().run(custom, context).findings] == ["GP420"]


def test_the_documented_pipeline_snippet_is_valid(tmp_path: Path):
    text = DOC.read_text()
    snippet = block_after(text, "So freezing is also how you tell the lint", "toml")
    config = tmp_path / "pipeline.toml"
    config.write_text('[pipeline]\npasses = ["lint-gradients"]\n\n' + snippet)
    from graphpass.framework import load_pipeline_file

    pipeline = load_pipeline_file(config)
    pipeline.check(default_registry())  # the options exist and have the right types
