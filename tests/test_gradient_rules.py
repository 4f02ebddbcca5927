"""Gradient rules as data: the built-in onnxruntime-training rules, TOML rule sets, plugins."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest

import graphpass
from graphpass.framework import Registry, default_registry
from graphpass.training.rules import (
    AttributeIn,
    AttributeMissing,
    AttributeNotIn,
    Check,
    GradientRules,
    InputNeedsGradient,
    InputRankIn,
    InputTypeNotIn,
    NodeSite,
    OutputsFewerThan,
    builtin_rule_sets,
    normalize_domain,
    onnxruntime_training_rules,
)

ORT = onnxruntime_training_rules()


def node(op_type: str, inputs=("x",), outputs=("y",), domain: str = "", **attributes):
    return graphpass.Node(op_type, inputs, outputs, domain=domain, attributes=attributes)


# ------------------------------------------------------------------ built-in rules
def test_builtin_rules_describe_onnxruntime_training_1_19_2():
    assert builtin_rule_sets() == [ORT]
    assert (ORT.name, ORT.trainer, ORT.version, ORT.default) == (
        "onnxruntime-training", "onnxruntime-training", "1.19.2", True)
    assert ORT.lookup == "op_type"
    # the registry of gradient_builder_registry.cc: 61 ONNX + 23 com.microsoft entries
    assert len(ORT.builders) == 84
    assert ("", "MatMul") in ORT.builders and ("com.microsoft", "BiasGelu") in ORT.builders
    assert ("", "Sum") not in ORT.builders and ("", "ReduceMax") not in ORT.builders
    assert ORT.loss_types == frozenset({onnx.TensorProto.FLOAT})


def test_default_registry_picks_the_ort_rules_by_default_and_by_name():
    registry = default_registry()
    assert registry.gradient_rule_set() is ORT
    assert registry.gradient_rule_set("onnxruntime-training") is ORT
    assert registry.plugin_of("gradient_rules", "onnxruntime-training") == "builtin"
    with pytest.raises(graphpass.PipelineError, match="unknown gradient rule set"):
        registry.gradient_rule_set("onnxruntime-trainin")


def test_ort_looks_builders_up_by_op_type_alone():
    assert ORT.builder_for("ai.onnx", "Relu") == ("", "Relu")
    assert ORT.builder_for("custom", "Relu") == ("", "Relu")  # borrowed
    assert ORT.builder_for("custom", "QuickGelu") == ("com.microsoft", "QuickGelu")
    assert ORT.builder_for("", "Sum") is None
    strict = dataclasses.replace(ORT, name="strict", lookup="domain")
    assert strict.builder_for("custom", "Relu") is None
    assert strict.builder_for("ai.onnx", "Relu") == ("", "Relu")


def test_rewrites_give_ops_the_builder_of_their_replacement():
    assert ORT.builder_for("", "BatchNormalization") == ("com.microsoft", "BatchNormInternal")
    assert ORT.builder_for("", "LSTM") == ("com.microsoft", "LSTMTraining")


def test_stop_edges_and_the_conditional_cast_stop():
    assert ORT.stop_inputs(NodeSite(node("Gather", ("w", "i")))) == {1}
    assert ORT.stop_inputs(NodeSite(node("Slice", ("x", "s", "e", "a")))) == {1, 2, 3, 4}
    assert ORT.stop_inputs(NodeSite(node("Relu"))) == frozenset()
    to_int = node("Cast", to=onnx.TensorProto.INT64)
    to_half = node("Cast", to=onnx.TensorProto.FLOAT16)
    assert ORT.stop_inputs(NodeSite(to_int)) == {0}
    assert ORT.stop_inputs(NodeSite(to_half)) == frozenset()


def test_resize_inputs_get_no_gradient_but_are_not_stop_edges():
    site = NodeSite(node("Resize", ("x", "roi", "scales")))
    assert ORT.stop_inputs(site) == frozenset()
    assert ORT.inputs_given_gradient(site) == {0}


@pytest.mark.parametrize(("built", "needing", "expected"), [
    (node("LayerNormalization", ("x", "s", "b"), ("y",)), set(), ["LayerNormalization"]),
    (node("LayerNormalization", ("x", "s", "b"), ("y", "m", "v")), set(), []),
    (node("Pad", ("x", "p"), mode="reflect"), set(), ["Pad"]),
    (node("Pad", ("x", "p")), set(), []),
    (node("Gemm", ("a", "b", "c"), alpha=0.0), set(), ["Gemm"]),
    (node("Gemm", ("a", "b", "c"), beta=0.0), {0}, []),
    (node("Gemm", ("a", "b", "c"), beta=0.0), {2}, ["Gemm"]),
    (node("Pow", ("x", "e")), {0}, []),
    (node("Pow", ("x", "e")), {0, 1}, ["Pow"]),
    (node("LSTM", ("x", "w", "r")), set(), ["LSTM"]),
    (node("LSTM", ("x", "w", "r", "", "")), set(), []),
])
def test_known_builder_failures(built, needing, expected):
    site = NodeSite(built, frozenset(needing))
    assert [f.op_type for f in ORT.failures_for(site)] == expected


def test_transpose_without_perm_fails_anywhere_not_only_on_the_path():
    site = NodeSite(node("Transpose"))
    assert [f.op_type for f in ORT.failures_for(site, scope="graph")] == ["Transpose"]
    assert ORT.failures_for(site) == []
    assert ORT.failures_for(NodeSite(node("Transpose", perm=[1, 0])), scope="graph") == []


def test_predicates_on_types_and_ranks():
    site = NodeSite(node("MatMul", ("a", "b")), frozenset({1}), input_types=(1, 7),
                    input_ranks=(1, 3))
    assert InputRankIn(0, frozenset({1})).matches(site)
    assert not InputRankIn(1, frozenset({1})).matches(site)
    assert InputTypeNotIn(1, frozenset({1})).matches(site)
    assert not InputTypeNotIn(5, frozenset({1})).matches(site)  # absent: unknown
    assert [f.op_type for f in ORT.failures_for(site)] == ["MatMul"]


def test_attribute_predicates_use_defaults_and_ignore_references():
    pad = node("Pad")
    assert not AttributeNotIn("mode", ("constant",), default="constant").matches(NodeSite(pad))
    assert AttributeIn("alpha", (1.0,), default=1.0).matches(NodeSite(node("Gemm")))
    assert not AttributeIn("alpha", (1.0,)).matches(NodeSite(node("Gemm")))
    referring = node("Pad")
    referring.set_attribute(graphpass.Attribute.reference("mode", "m",
                                                          onnx.AttributeProto.STRING))
    assert not AttributeNotIn("mode", ("constant",), "constant").matches(NodeSite(referring))
    assert AttributeMissing("perm").describe() == "attribute perm is not given"
    assert OutputsFewerThan(3).describe() == "fewer than 3 outputs are produced"


def test_domains_are_normalized():
    assert normalize_domain("ai.onnx") == normalize_domain("") == ""
    rules = GradientRules("r", "t", "1", frozenset({("ai.onnx", "Relu")}))
    assert rules.builders == {("", "Relu")}


# ------------------------------------------------------------------- TOML rule sets
TOML = """
name = "tiny-trainer"
trainer = "tiny"
version = "2.0"
lookup = "domain"
loss_types = ["FLOAT", "DOUBLE"]

[builders]
"ai.onnx" = ["Add", "MatMul", "Relu", "Pad"]
"my.domain" = ["Fused"]

[[stop_edges]]
op_type = "Gather"
inputs = [1]

[[op_failures]]
op_type = "Pad"
when = [{ attribute = "mode", not_in = ["constant"], default = "constant" }, { check = "wide" }]
reason = "no reflect padding of wide inputs"
hint = "pad narrower"
trainer_message = "reflect"

[[trainer_failures]]
kind = "unreachable"
reason = "tiny refuses weights without gradient"
hint = "freeze them"
"""


def _wide(site: NodeSite) -> bool:
    return (site.input_rank(0) or 0) > 3


def test_rules_from_toml(tmp_path: Path):
    path = tmp_path / "tiny.toml"
    path.write_text(TOML)
    rules = GradientRules.from_toml(path, checks={"wide": Check("wide", "rank > 3", _wide)})
    assert rules.name == "tiny-trainer" and rules.version == "2.0" and not rules.default
    assert rules.builders == {("", "Add"), ("", "MatMul"), ("", "Relu"), ("", "Pad"),
                              ("my.domain", "Fused")}
    assert rules.builder_for("other", "Relu") is None
    assert rules.loss_types == {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE}
    pad = node("Pad", ("x", "p"), mode="reflect")
    assert rules.failures_for(NodeSite(pad, input_ranks=(4, 1)))[0].reason.startswith("no ")
    assert rules.failures_for(NodeSite(pad, input_ranks=(2, 1))) == []
    assert rules.trainer_failure("unreachable").hint == "freeze them"
    assert rules.trainer_failure("duplicate") is None
    assert GradientRules.from_toml(path, checks={"wide": Check("w", "", _wide)},
                                   default=True).default


@pytest.mark.parametrize(("text", "message"), [
    ("name = ", "cannot read gradient rules"),
    ("trainer = 'x'", "malformed: 'name'"),
    ("name = 'x'\n[[op_failures]]\nop_type='Pad'\nwhen=[{check='nope'}]\nreason='r'\nhint='h'",
     "unknown check 'nope'"),
    ("name = 'x'\n[[op_failures]]\nop_type='Pad'\nwhen=[{attribute='mode'}]\nreason='r'\n"
     "hint='h'", "needs 'in', 'not_in' or 'missing'"),
    ("name = 'x'\nlookup = 'fuzzy'", "lookup must be"),
])
def test_malformed_rules_are_plugin_errors(text: str, message: str):
    with pytest.raises(graphpass.PluginError, match=message):
        GradientRules.from_toml_text(text)


def test_missing_rules_file_is_a_plugin_error(tmp_path: Path):
    with pytest.raises(graphpass.PluginError, match="cannot read gradient rules"):
        GradientRules.from_toml(tmp_path / "absent.toml")


def test_a_plugin_rule_set_is_picked_by_name():
    registry = Registry()
    registry.add("gradient_rules", ORT.name, ORT, "builtin")
    tiny = GradientRules.from_toml_text(TOML, checks={"wide": Check("wide", "", _wide)})
    registry.add("gradient_rules", tiny.name, tiny, "tiny-plugin")
    assert registry.gradient_rule_set() is ORT
    assert registry.gradient_rule_set("tiny-trainer") is tiny
    assert registry.plugin_of("gradient_rules", "tiny-trainer") == "tiny-plugin"
    with pytest.raises(graphpass.PluginError, match="two plugins give"):
        registry.add("gradient_rules", tiny.name, dataclasses.replace(tiny), "other-plugin")


def test_summary_is_json_ready():
    summary = ORT.summary()
    assert summary["builders"] == 84 and summary["lookup"] == "op_type"
    assert InputNeedsGradient(1).describe() == "input 1 needs a gradient"


# ------------------------------------------------------------------ constants
def _dropout_model(ratio: onnx.NodeProto) -> onnx.ModelProto:
    """x * W -> Dropout (no mask output; ``ratio`` from a Constant) -> ReduceSum."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Mul", ["x", "W"], ["a"], name="mul"), ratio,
         onnx.helper.make_node("Dropout", ["a", "ratio"], ["d"], name="dropout"),
         onnx.helper.make_node("ReduceSum", ["d"], ["y"], keepdims=0, name="loss")],
        "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [])],
        [onnx.numpy_helper.from_array(np.ones(3, np.float32), "W")])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("ratio", "kept"), [
    (onnx.helper.make_node("Constant", [], ["ratio"], value=onnx.numpy_helper.from_array(
        np.array(0.0, np.float32))), False),
    (onnx.helper.make_node("Constant", [], ["ratio"], value_float=0.0), False),
    (onnx.helper.make_node("Constant", [], ["ratio"], value_float=0.5), True),
])
def test_a_dropout_of_constant_ratio_0_is_removed_whatever_the_constant_s_form(ratio, kept):
    """ORT's optimizer removes a Dropout whose ratio is a constant 0 (it turns every
    Constant into an initializer first, ``value_float`` as well as ``value``); a kept
    Dropout without its mask output has no gradient (GP403)."""
    model = graphpass.Model.from_proto(_dropout_model(ratio))
    result = graphpass.PassManager(["lint-gradients"]).run(model)
    assert ("GP403" in [finding.code for finding in result.findings]) is kept


def test_graphpass_s_own_set_is_registered_once_and_derived_when_used():
    """The built-in plugin registers graphpass's set underived (no plugin's hook sees
    the other plugins' builders); the lint derives it from the registry it is handed."""
    from graphpass.training import registered_builders
    from graphpass.training.rules import DerivedRules, rules_from_builders

    registry = default_registry()
    own = registry.gradient_rule_set("graphpass")
    assert isinstance(own, DerivedRules) and registry.plugin_of("gradient_rules",
                                                                "graphpass") == "builtin"
    builders = registered_builders(registry)
    assert own.resolve(builders).builders == rules_from_builders(builders).builders
    assert ("", "MatMul") in own.resolve(builders).builders
