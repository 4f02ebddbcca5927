"""lint-gradients on hand-built models: every finding, what stays silent, options, errors.

Each behaviour asserted here was measured with onnxruntime-training 1.19.2 (the
agreement corpus and tests/test_gradient_agreement.py check the lint against the
runtime itself); these tests pin the lint's side without the runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass import Finding, PassContext, Severity
from graphpass.framework import Registry, default_registry
from graphpass.passes.lint_gradients import CODES, LintGradients
from graphpass.training.rules import Check, GradientRules, onnxruntime_training_rules

F = TensorProto.FLOAT


def weight(name: str, shape=(3, 3), dtype=np.float32, value=1.0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, value, dtype=dtype), name)


def tensor(name: str, shape=(3, 3), elem_type=F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def build(nodes, initializers=(), inputs=("x",), outputs=("y",), *, opset=17, functions=(),
          value_info=()) -> graphpass.Model:
    inputs = [tensor(i) if isinstance(i, str) else i for i in inputs]
    outputs = [tensor(o, []) if isinstance(o, str) else o for o in outputs]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers),
                              value_info=list(value_info))
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("custom", 1)]
    model = helper.make_model(graph, opset_imports=imports, functions=list(functions))
    model.ir_version = 8
    onnx.checker.check_model(model)
    return graphpass.Model.from_proto(model)


def lint(model: graphpass.Model, **options) -> list[Finding]:
    result = LintGradients(options).run(model, PassContext(registry=default_registry()))
    assert not result.changed
    return result.findings


def summary(findings: list[Finding]) -> list[tuple[str, str | None]]:
    return [(f.code, f.node or f.value) for f in findings]


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def mul(a: str, b: str, out: str, name: str | None = None) -> onnx.NodeProto:
    return helper.make_node("Mul", [a, b], [out], name=name or f"mul_{out}")


def loss(source: str, out: str = "y") -> onnx.NodeProto:
    return helper.make_node("ReduceSum", [source], [out], keepdims=0, name="loss")


# ------------------------------------------------------------------- no builder
def test_an_op_without_gradient_on_the_path_is_named_with_its_weights():
    model = build([mul("x", "W", "a"), helper.make_node("Sum", ["a", "x"], ["s"], name="sum1"),
                   loss("s")], [weight("W")])
    (finding,) = lint(model)
    assert (finding.code, finding.severity, finding.node) == ("GP401", Severity.ERROR, "sum1")
    assert "onnxruntime-training 1.19.2 has no gradient builder for Sum" in finding.message
    assert finding.data["blocks"] == ["W"] and finding.data["op_type"] == "Sum"
    assert "frozen" in (finding.hint or "")
    assert finding.pass_name == "lint-gradients"


def test_blocks_lists_exactly_the_weights_upstream_of_the_node():
    model = build([mul("x", "A", "a"), mul("x", "B", "b"),
                   helper.make_node("Sum", ["a", "x"], ["sa"], name="only_a"),
                   helper.make_node("Mean", ["sa", "b"], ["m"], name="both"), loss("m")],
                  [weight("A"), weight("B")])
    found = {f.node: f.data["blocks"] for f in lint(model)}
    assert found == {"only_a": ["A"], "both": ["A", "B"]}


def test_the_first_error_is_the_one_the_trainer_reports():
    # ORT builds LayerNormalization gradients last, so the Sum after it fails first.
    model = build([helper.make_node("LayerNormalization", ["x", "S", "B"], ["n"], name="ln"),
                   helper.make_node("Sum", ["n", "x"], ["s"], name="sum"), loss("s")],
                  [weight("S", (3,)), weight("B", (3,))])
    assert summary(lint(model)) == [("GP401", "sum"), ("GP403", "ln")]


# --------------------------------------------------------------- off the path
def test_ops_on_data_inputs_are_never_flagged():
    model = build([helper.make_node("Sum", ["x", "x"], ["d"], name="data_sum"),
                   helper.make_node("CumSum", ["d", "axis"], ["c"], name="data_cumsum"),
                   mul("c", "W", "a"), loss("a")],
                  [weight("W"), numpy_helper.from_array(np.array(0, np.int64), "axis")])
    assert lint(model) == []


def test_ops_on_frozen_weights_are_never_flagged():
    model = build([helper.make_node("Sum", ["F", "F"], ["f"], name="frozen_sum"),
                   mul("x", "f", "a"), mul("a", "W", "b"), loss("b")],
                  [weight("W"), weight("F")])
    assert lint(model, frozen=["F"]) == []
    assert summary(lint(model)) == [("GP401", "frozen_sum")]  # default: every float weight


def test_branches_that_reach_no_loss_are_never_flagged():
    model = build([mul("x", "W", "a"), loss("a"),
                   helper.make_node("Sum", ["a", "W"], ["side"], name="side_sum")],
                  [weight("W")], outputs=["y", "side"])
    assert lint(model, loss=["y"]) == []
    assert summary(lint(model)) == [("GP401", "side_sum")]  # default: every output


def test_integer_edges_stop_gradients_even_without_declared_types():
    # W -> Cast(int64) -> Cast(float) -> loss: the int64 value ends the path; its type
    # comes from shape inference (nothing declares it).
    model = build([helper.make_node("Cast", ["W"], ["i"], to=TensorProto.INT64, name="to_int"),
                   helper.make_node("Cast", ["i"], ["f"], to=F, name="to_float"),
                   helper.make_node("Sum", ["f", "x"], ["s"], name="sum"), loss("s")],
                  [weight("W")])
    (finding,) = lint(model)
    assert (finding.code, finding.value) == ("GP402", "W")


# ----------------------------------------------------------------- broken builders
def test_layer_normalization_with_one_output_is_a_known_failure():
    model = build([helper.make_node("LayerNormalization", ["x", "S", "B"], ["n"], name="ln"),
                   loss("n")], [weight("S", (3,)), weight("B", (3,))])
    (finding,) = lint(model)
    assert (finding.code, finding.node, finding.data["rule_op"]) == ("GP403", "ln",
                                                                     "LayerNormalization")
    assert "Mean and InvStdDev" in finding.message and "fix-training-ops" in (finding.hint or "")
    assert finding.data["trainer_message"].startswith("i < node_")
    three = build([helper.make_node("LayerNormalization", ["x", "S", "B"], ["n", "m", "v"],
                                    name="ln"), loss("n")],
                  [weight("S", (3,)), weight("B", (3,))])
    assert lint(three) == []


@pytest.mark.parametrize(("attributes", "expected"), [
    ({"mode": "reflect"}, [("GP403", "pad")]),
    ({"mode": "edge"}, [("GP403", "pad")]),
    ({"mode": "constant"}, []),
    ({}, []),
])
def test_pad_modes(attributes, expected):
    model = build([helper.make_node("Pad", ["W", "pads"], ["p"], name="pad", **attributes),
                   loss("p")],
                  [weight("W"), numpy_helper.from_array(np.zeros(4, np.int64), "pads")])
    assert summary(lint(model)) == expected


def test_gemm_beta_zero_fails_only_when_c_needs_a_gradient():
    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["g"], name="gemm", beta=0.0), loss("g")]
    model = build(nodes, [weight("W"), weight("C", (3,))])
    assert summary(lint(model)) == [("GP403", "gemm")]
    assert lint(model, frozen=["C"]) == []


def test_transpose_without_perm_fails_even_off_the_path():
    model = build([helper.make_node("Transpose", ["x"], ["t"], name="tr"), mul("x", "W", "a"),
                   loss("a")], [weight("W")], outputs=["y", tensor("t")])
    (finding,) = lint(model, loss=["y"])
    assert (finding.code, finding.node, finding.data["scope"]) == ("GP403", "tr", "graph")
    assert "wherever it is" in finding.message


# ------------------------------------------------------------ weight-level problems
def test_a_weight_that_reaches_no_loss_gets_ort_s_unreachable_diagnosis():
    model = build([helper.make_node("Relu", ["x"], ["r"], name="relu"), loss("r"),
                   mul("x", "W", "side")], [weight("W"), weight("unused")],
                  outputs=["y", tensor("side")])
    found = {f.value: f for f in lint(model, loss=["y"])}
    assert set(found) == {"W", "unused"}
    assert all(f.code == "GP402" and f.severity is Severity.ERROR for f in found.values())
    assert "nothing uses it" in found["unused"].message
    assert "unreachable" in found["W"].message or "no differentiable path" in \
        found["W"].message
    assert found["W"].hint and "freeze" in found["W"].hint


def test_running_statistics_marked_trainable_get_no_gradient():
    model = build([helper.make_node("BatchNormalization", ["x", "S", "B", "M", "V"], ["n"],
                                    name="bn"), loss("n")],
                  [weight(n, (3,)) for n in "SBMV"], inputs=[tensor("x", (4, 3, 8))])
    trained = ["S", "B", "M", "V"]
    assert sorted(summary(lint(model, trainable=trained))) == [("GP404", "M"), ("GP404", "V")]
    assert lint(model, trainable=trained, frozen=["M", "V"]) == []
    # By default they are left out: read only as BatchNormalization's statistics, buffers.
    [left_out] = lint(model)
    assert left_out.code == "GP423" and left_out.data["left_out"] == {"M": "buffer",
                                                                       "V": "buffer"}


def test_a_node_reading_a_weight_twice_defines_its_gradient_twice():
    model = build([mul("W", "W", "sq", "square"), loss("sq")], [weight("W")])
    (finding,) = lint(model)
    assert (finding.code, finding.node, finding.value) == ("GP405", "square", "W")
    assert finding.data["inputs"] == [0, 1]
    assert "Identity" in (finding.hint or "")


def test_a_weight_read_inside_a_subgraph_is_refused_first():
    branch = helper.make_graph([mul("W", "x", "t")], "then", [], [tensor("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [tensor("e")])
    model = build([helper.make_node("If", ["c"], ["o"], name="if", then_branch=branch,
                                    else_branch=other), loss("o")],
                  [weight("W")], inputs=["x", tensor("c", [], TensorProto.BOOL)])
    found = summary(lint(model))
    assert found[0] == ("GP406", "if")
    assert ("GP401", "if") in found  # and If itself has no gradient builder


def test_an_if_with_a_constant_condition_is_judged_by_the_branch_it_takes():
    def model(take: bool) -> graphpass.Model:
        then = helper.make_graph([mul("W", "x", "t")], "then", [], [tensor("t")])
        other = helper.make_graph([helper.make_node("Sum", ["W", "x"], ["e"], name="else_sum")],
                                  "else", [], [tensor("e")])
        return build([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                          np.array(take)), name="cond"),
                      helper.make_node("If", ["c"], ["o"], name="if", then_branch=then,
                                       else_branch=other), loss("o")], [weight("W")])

    assert lint(model(True)) == []
    assert summary(lint(model(False))) == [("GP401", "else_sum")]


def test_a_half_precision_loss_is_refused():
    model = build([mul("x", "W", "a"), loss("a")],
                  [weight("W", dtype=np.float16)], inputs=[tensor("x", (3, 3), 10)],
                  outputs=[tensor("y", [], 10)])
    (finding,) = lint(model)
    assert (finding.code, finding.value) == ("GP407", "y")
    assert "FLOAT16" in finding.message and "Cast" in (finding.hint or "")


# ------------------------------------------------------------------------ functions
def _block(name: str, op: str = "Relu") -> onnx.FunctionProto:
    return helper.make_function("custom", name, ["a", "w"], ["b"],
                                [helper.make_node("Mul", ["a", "w"], ["m"]),
                                 helper.make_node(op, ["m"], ["b"])],
                                [helper.make_opsetid("", 17)])


def test_a_function_call_on_the_path_asks_for_inline_functions():
    model = build([helper.make_node("Block", ["x", "W"], ["b"], domain="custom", name="call"),
                   loss("b")], [weight("W")], functions=[_block("Block")])
    (finding,) = lint(model)
    assert (finding.code, finding.node, finding.data["op_type"]) == ("GP410", "call", "Block")
    assert "custom::Block" in finding.message and "inline-functions" in (finding.hint or "")


def test_a_function_body_is_judged_as_if_inlined_after_the_main_graph():
    model = build([helper.make_node("Block", ["x", "W"], ["b"], domain="custom", name="call"),
                   helper.make_node("Sum", ["b", "x"], ["s"], name="outer_sum"), loss("s")],
                  [weight("W")], functions=[_block("Block", op="Softplus")])
    found = lint(model)
    assert [(f.code, f.node, f.function) for f in found] == [
        ("GP410", "call", None), ("GP401", "outer_sum", None),
        ("GP401", "Softplus", "custom::Block")]
    assert "reached once it is inlined" in found[-1].message
    assert found[-1].data["blocks"] == ["W"]


def test_after_inlining_the_body_ops_are_what_is_judged():
    model = build([helper.make_node("Block", ["x", "W"], ["b"], domain="custom", name="call"),
                   loss("b")], [weight("W")], functions=[_block("Block", op="Softplus")])
    result = graphpass.PassManager(["inline-functions", "lint-gradients"]).run(model)
    assert [(f.code, f.data["op_type"], f.function) for f in result.findings
            if f.pass_name == "lint-gradients"] == [("GP401", "Softplus", None)]


def test_a_function_named_like_a_registered_op_borrows_its_gradient():
    model = build([helper.make_node("Relu", ["x", "W"], ["b"], domain="custom", name="call"),
                   loss("b")], [weight("W")], functions=[_block("Relu", op="Neg")])
    (finding,) = lint(model)
    assert (finding.code, finding.severity, finding.node) == ("GP420", Severity.WARNING, "call")
    assert finding.data["builder"] == "Relu"
    assert "by op_type alone" in finding.message


def test_a_custom_domain_op_named_like_a_registered_op_borrows_its_gradient():
    model = build([mul("x", "W", "a"),
                   helper.make_node("QuickGelu", ["a"], ["q"], domain="custom", name="qg"),
                   loss("q")], [weight("W")])
    (finding,) = lint(model)
    assert (finding.code, finding.data["builder"]) == ("GP420", "com.microsoft::QuickGelu")


# -------------------------------------------------------------------------- options
def test_trainable_and_frozen_take_names_and_globs():
    model = build([mul("x", "enc.w", "a"), mul("a", "dec.w", "b"),
                   helper.make_node("Sum", ["x", "enc.w"], ["s"], name="enc_sum"),
                   mul("b", "s", "c"), loss("c")],
                  [weight("enc.w"), weight("dec.w")])
    assert summary(lint(model, trainable=["dec.*"])) == []
    assert summary(lint(model, frozen=["enc.*"])) == []
    assert summary(lint(model, trainable=["enc.w"])) == [("GP401", "enc_sum")]


def test_patterns_that_match_nothing_and_integer_weights_are_warned_about():
    model = build([mul("x", "W", "a"), loss("a")],
                  [weight("W"), numpy_helper.from_array(np.array([1], np.int64), "steps")])
    found = lint(model, trainable=["W", "steps", "nope*"], frozen=["gone"])
    assert sorted(summary(found)) == [("GP421", "gone"), ("GP421", "nope*"),
                                      ("GP422", "steps")]
    assert all(f.severity is Severity.WARNING for f in found)


def test_an_unknown_loss_is_a_clear_error():
    model = build([mul("x", "W", "a"), loss("a")], [weight("W")])
    with pytest.raises(graphpass.PassError, match="loss 'nope' is not a value") as caught:
        lint(model, loss=["nope"])
    assert "graph outputs: y" in str(caught.value)


def test_bad_option_types_are_pipeline_errors():
    with pytest.raises(graphpass.PipelineError, match="trainable"):
        LintGradients({"trainable": 3})
    with pytest.raises(graphpass.PipelineError, match="did you mean 'frozen'"):
        LintGradients({"frozn": ["a"]})


def test_rules_option_picks_another_trainers_rules_from_the_registry():
    ort = onnxruntime_training_rules()
    lenient = GradientRules("lenient", "lenient-trainer", "0.1", ort.builders | {("", "Sum")},
                            lookup="domain", stop_edges=ort.stop_edges)
    registry = Registry()
    registry.add("gradient_rules", ort.name, ort, "builtin")
    registry.add("gradient_rules", lenient.name, lenient, "a-plugin")
    model = build([mul("x", "W", "a"), helper.make_node("Sum", ["a", "x"], ["s"], name="sum"),
                   loss("s")], [weight("W")])
    context = PassContext(registry=registry)
    assert LintGradients({"rules": "lenient"}).run(model, context).findings == []
    assert [f.code for f in LintGradients().run(model, context).findings] == ["GP401"]
    with pytest.raises(graphpass.PipelineError, match="unknown gradient rule set"):
        LintGradients({"rules": "nope"}).run(model, context)


def test_a_trainer_that_differentiates_control_flow_gets_its_bodies_judged():
    ort = onnxruntime_training_rules()
    with_if = GradientRules("with-if", "t", "1", ort.builders | {("", "If")},
                            stop_edges=ort.stop_edges)
    registry = Registry()
    registry.add("gradient_rules", with_if.name, with_if, "p")
    then = helper.make_graph([helper.make_node("Sum", ["a", "x"], ["t"], name="inner_sum")],
                             "then", [], [tensor("t")])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"], name="inner_neg")],
                              "else", [], [tensor("e")])
    model = build([mul("x", "W", "a"),
                   helper.make_node("If", ["c"], ["o"], name="if", then_branch=then,
                                    else_branch=other), loss("o")],
                  [weight("W")], inputs=["x", tensor("c", [], TensorProto.BOOL)])
    found = LintGradients({"rules": "with-if"}).run(model, PassContext(registry=registry))
    (finding,) = found.findings
    assert (finding.code, finding.node) == ("GP401", "inner_sum")
    assert finding.graph == "main > If 'if' > then_branch"


def test_checks_in_plugin_rules_see_the_node_and_its_gradient_needs():
    seen = []

    def wide(site):
        seen.append((site.node.op_type, sorted(site.inputs_needing_gradient),
                     site.input_ranks))
        return True

    ort = onnxruntime_training_rules()
    rules = GradientRules.from_toml_text(
        'name = "picky"\n[builders]\n"ai.onnx" = ["Mul", "ReduceSum"]\n'
        '[[op_failures]]\nop_type = "Mul"\nwhen = [{ check = "wide" }]\nreason = "r"\n'
        'hint = "h"\n', checks={"wide": Check("wide", "always", wide)},
        stop_edges=ort.stop_edges)
    registry = Registry()
    registry.add("gradient_rules", rules.name, rules, "p")
    model = build([mul("x", "W", "a"), loss("a")], [weight("W")])
    found = LintGradients({"rules": "picky"}).run(model, PassContext(registry=registry))
    assert [f.code for f in found.findings] == ["GP403"]
    assert seen == [("Mul", [1], (2, 2))]


# ------------------------------------------------------------------------ the model
def test_the_model_is_not_changed_and_external_weights_are_never_read(tmp_path: Path):
    proto = helper.make_model(helper.make_graph(
        [mul("x", "W", "a"), helper.make_node("Sum", ["a", "x"], ["s"], name="sum"), loss("s")],
        "g", [tensor("x")], [tensor("y", [])], [weight("W", (64, 3, 3))]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model.onnx"
    onnx.save(proto, path, save_as_external_data=True, location="model.data",
              size_threshold=0)
    model = graphpass.load(path)
    (tmp_path / "model.data").write_bytes(b"")  # any read of the weights would fail now
    fingerprint = model.fingerprint()
    assert summary(lint(model)) == [("GP401", "sum")]
    assert model.fingerprint() == fingerprint


def test_codes_are_stable():
    assert CODES == {"missing": "GP401", "unreachable": "GP402", "broken": "GP403",
                     "no-gradient": "GP404", "duplicate": "GP405", "captured": "GP406",
                     "loss-type": "GP407", "function": "GP410", "borrowed": "GP420",
                     "no-match": "GP421", "not-float": "GP422", "not-parameters": "GP423",
                     "few-values": "GP424", "wrong-gradient": "GP425",
                     "parameter-left-out": "GP426", "frozen-in-torch": "GP427"}


def test_a_long_chain_is_linted(tmp_path: Path):
    nodes = [mul("x", "W", "v0")]
    nodes += [helper.make_node("Relu" if i % 2 else "Neg", [f"v{i}"], [f"v{i + 1}"],
                               name=f"n{i}") for i in range(4000)]
    nodes += [helper.make_node("Sum", ["v4000", "x"], ["s"], name="end_sum"), loss("s")]
    model = build(nodes, [weight("W")])
    result = LintGradients().run(model, PassContext(registry=default_registry()))
    assert summary(result.findings) == [("GP401", "end_sum")]
    assert result.stats["nodes on the gradient path"] == 4003
