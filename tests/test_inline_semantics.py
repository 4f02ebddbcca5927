"""inline-functions: every point of the ONNX function semantics, checked by running models.

Each test builds a small model with local functions, inlines it, and compares the
outputs before and after (onnxruntime, or onnx's reference evaluator where
onnxruntime cannot run the original) or against numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
import pytest
from _inline_support import (
    FLOAT,
    all_nodes,
    assert_close,
    calls_left,
    check,
    function,
    inline,
    model,
    neg_then_fused,
    node,
    provenance,
    ref,
    run_ort,
    run_reference,
    tensor,
)
from onnx import helper

import graphpass
from graphpass.errors import GraphpassError, PipelineError
from graphpass.framework import PassContext, default_registry
from graphpass.passes.inline_functions import InlineFunctions

AFLOAT = onnx.AttributeProto.FLOAT
AGRAPH = onnx.AttributeProto.GRAPH
X = np.array([-2.0, -0.5, 3.0], dtype=np.float32)


def leaky(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x >= 0, x, alpha * x).astype(np.float32)


def _leaky_function(defaults: bool = True) -> onnx.FunctionProto:
    return function(
        "Leaky", ["x"], ["y"],
        [node("LeakyRelu", ["x"], ["y"], name="act", attributes=[ref("alpha", "a", AFLOAT)])],
        attributes=[] if defaults else ["a"],
        defaults=[helper.make_attribute("a", 0.5)] if defaults else [])


def _call_model(fn: onnx.FunctionProto, **attributes: object) -> onnx.ModelProto:
    call = node(fn.name, ["x"], ["y"], name="call", domain=fn.domain, **attributes)
    return model([call], [tensor("x")], [tensor("y")], [fn])


# ========================================================== attribute references
def test_default_applies_when_the_call_omits_the_attribute() -> None:
    original = _call_model(_leaky_function())
    inlined, result = inline(original)
    check(inlined)
    assert calls_left(inlined, original.functions) == []
    assert len(inlined.functions) == 0
    assert result.stats["calls inlined"] == 1
    (act,) = inlined.graph.node
    assert helper.get_attribute_value(act.attribute[0]) == pytest.approx(0.5)
    assert_close(run_ort(inlined, {"x": X}), [leaky(X, 0.5)])
    assert_close(run_ort(original, {"x": X}), [leaky(X, 0.5)])


def test_onnx_inliner_drops_the_default_where_we_keep_it() -> None:
    """The C++ onnx.inliner loses FunctionProto.attribute_proto defaults: results change."""
    original = _call_model(_leaky_function())
    theirs = onnx.inliner.inline_local_functions(original)
    ours, _ = inline(original)
    expected = leaky(X, 0.5)
    assert_close(run_ort(ours, {"x": X}), [expected])
    (their_output,) = run_ort(theirs, {"x": X})
    assert not np.allclose(their_output, expected), "onnx.inliner got the default right now?"
    np.testing.assert_allclose(their_output, leaky(X, 0.01), rtol=1e-6)  # LeakyRelu's own


def test_call_value_beats_the_default() -> None:
    original = _call_model(_leaky_function(), a=0.25)
    inlined, _ = inline(original)
    check(inlined)
    assert_close(run_ort(inlined, {"x": X}), [leaky(X, 0.25)])
    assert_close(run_ort(original, {"x": X}), [leaky(X, 0.25)])


def test_unbound_reference_without_default_is_left_out() -> None:
    original = _call_model(_leaky_function(defaults=False))
    inlined, _ = inline(original)
    check(inlined)
    (act,) = inlined.graph.node
    assert [a.name for a in act.attribute] == []  # LeakyRelu's own default (0.01) applies
    assert_close(run_ort(inlined, {"x": X}), [leaky(X, 0.01)])
    assert_close(run_ort(original, {"x": X}), [leaky(X, 0.01)])


def test_reference_renamed_to_the_node_attribute() -> None:
    """A node attribute ``alpha`` bound to function attribute ``slope`` keeps its own name."""
    fn = function("F", ["x"], ["y"],
                  [node("LeakyRelu", ["x"], ["y"], attributes=[ref("alpha", "slope", AFLOAT)])],
                  attributes=["slope"])
    original = _call_model(fn, slope=0.125)
    inlined, _ = inline(original)
    check(inlined)
    (act,) = inlined.graph.node
    assert [a.name for a in act.attribute] == ["alpha"]
    assert_close(run_ort(inlined, {"x": X}), [leaky(X, 0.125)])


def _branch(name: str, op: str, output: str, attributes: list[onnx.AttributeProto]
            ) -> onnx.GraphProto:
    return helper.make_graph([node(op, ["x"], [output], attributes=attributes)], name, [],
                             [helper.make_tensor_value_info(output, FLOAT, None)])


def _if_function(default: float | None) -> onnx.FunctionProto:
    """F(c, x) = c ? LeakyRelu(x, alpha=@a) : Neg(x); the reference sits in a subgraph."""
    then_branch = _branch("then", "LeakyRelu", "t", [ref("alpha", "a", AFLOAT)])
    else_branch = _branch("else", "Neg", "e", [])
    body = [node("If", ["c"], ["y"], name="choose", then_branch=then_branch,
                 else_branch=else_branch)]
    defaults = [helper.make_attribute("a", default)] if default is not None else []
    return function("F", ["c", "x"], ["y"], body, attributes=[] if defaults else ["a"],
                    defaults=defaults)


@pytest.mark.parametrize(("default", "given", "expected_alpha"),
                         [(0.5, None, 0.5), (0.5, 0.2, 0.2), (None, None, 0.01)])
def test_references_inside_subgraphs(default: float | None, given: float | None,
                                     expected_alpha: float) -> None:
    fn = _if_function(default)
    attributes = {} if given is None else {"a": given}
    calls = [node("F", ["c", "x"], ["y"], name="call", domain="local", **attributes)]
    original = model(calls, [tensor("c", [], onnx.TensorProto.BOOL), tensor("x")],
                     [tensor("y")], [fn])
    inlined, _ = inline(original)
    check(inlined)
    assert calls_left(inlined, original.functions) == []
    then_node = next(a.g for a in inlined.graph.node[0].attribute
                     if a.name == "then_branch").node[0]
    assert then_node.op_type == "LeakyRelu"
    assert not any(a.ref_attr_name for a in then_node.attribute)
    assert [a.name for a in then_node.attribute] == ([] if expected_alpha == 0.01 else ["alpha"])
    for flag in (True, False):
        feeds = {"c": np.array(flag), "x": X}
        expected = leaky(X, expected_alpha) if flag else -X
        assert_close(run_ort(inlined, feeds), [expected])
        assert_close(run_ort(original, feeds), [expected])


def test_graph_typed_attribute_bound_from_the_call() -> None:
    """F(c, x) = If(c, then=@body, else=Neg): the call passes the branch as a graph."""
    body = [node("If", ["c"], ["y"], name="choose",
                 attributes=[ref("then_branch", "body", AGRAPH)],
                 else_branch=_branch("else", "Neg", "e", []))]
    fn = function("F", ["c", "x"], ["y"], body, attributes=["body"])
    # The branch given at the call uses the caller's value ``x`` and a value of its own.
    branch = helper.make_graph(
        [node("Abs", ["x"], ["inner"]), node("Add", ["inner", "x"], ["out"])], "given", [],
        [helper.make_tensor_value_info("out", FLOAT, None)])
    calls = [node("F", ["c", "x"], ["y1"], name="first", domain="local", body=branch),
             node("F", ["c", "y1"], ["y2"], name="second", domain="local", body=branch)]
    original = model(calls, [tensor("c", [], onnx.TensorProto.BOOL), tensor("x")],
                     [tensor("y2")], [fn])
    inlined, _ = inline(original)
    check(inlined)
    assert calls_left(inlined, original.functions) == []
    inner_names = [g.node[0].output[0] for n in inlined.graph.node for g in
                   (a.g for a in n.attribute if a.name == "then_branch")]
    assert len(set(inner_names)) == 2  # each copy of the branch defines its own names
    # The given graph is read in the function's scope, as onnxruntime and onnx's own
    # inliner read it: its ``x`` is the function's input ``x`` at each call.
    for flag in (True, False):
        feeds = {"c": np.array(flag), "x": X}
        first = np.abs(X) + X if flag else -X
        expected = np.abs(first) + first if flag else -first
        assert_close(run_ort(inlined, feeds), [expected])
        assert_close(run_ort(original, feeds), [expected])


def test_default_carried_through_a_reference_chain() -> None:
    """G passes its attribute to F by reference; when G's call omits it, F's default holds."""
    inner = function("F", ["x"], ["y"],
                     [node("LeakyRelu", ["x"], ["y"], attributes=[ref("alpha", "a", AFLOAT)])],
                     defaults=[helper.make_attribute("a", 0.5)])
    outer = function("G", ["x"], ["y"],
                     [node("F", ["x"], ["y"], name="inner", domain="local",
                           attributes=[ref("a", "b", AFLOAT)])],
                     attributes=["b"])
    for attributes, alpha in (({}, 0.5), ({"b": 0.25}, 0.25)):
        calls = [node("G", ["x"], ["y"], name="outer", domain="local", **attributes)]
        original = model(calls, [tensor("x")], [tensor("y")], [inner, outer])
        inlined, _ = inline(original)
        check(inlined)
        assert_close(run_ort(inlined, {"x": X}), [leaky(X, alpha)])
        assert_close(run_ort(original, {"x": X}), [leaky(X, alpha)])
        # Kept G: F's default becomes G's declared default, so G's callers see no change.
        kept, result = inline(original, exclude=["local::G"])
        check(kept)
        (g,) = kept.functions
        assert [a.name for a in g.attribute_proto] == ["b"]
        assert_close(run_ort(kept, {"x": X}), [leaky(X, alpha)])
        assert any(f.code == "GP104" for f in result.findings)


# ==================================================================== overloads
def test_overload_selects_the_function() -> None:
    double = function("Scale", ["x"], ["y"], [node("Add", ["x", "x"], ["y"])], overload="two")
    square = function("Scale", ["x"], ["y"], [node("Mul", ["x", "x"], ["y"])], overload="sq")
    calls = [node("Scale", ["x"], ["a"], name="c1", domain="local", overload="two"),
             node("Scale", ["a"], ["b"], name="c2", domain="local", overload="sq")]
    original = model(calls, [tensor("x")], [tensor("b")], [double, square])
    inlined, result = inline(original)
    check(inlined)
    assert [n.op_type for n in inlined.graph.node] == ["Add", "Mul"]
    assert_close(run_ort(inlined, {"x": X}), [(2 * X) ** 2])
    assert_close(run_ort(original, {"x": X}), [(2 * X) ** 2])
    only_one, _ = inline(original, exclude=["local::Scale:sq"])
    assert [n.op_type for n in only_one.graph.node] == ["Add", "Scale"]
    assert [f.overload for f in only_one.functions] == ["sq"]
    assert_close(run_reference(only_one, {"x": X}), [(2 * X) ** 2])
    assert result.stats["functions removed"] == 2


# ===================================================== optional inputs and outputs
def _clip_function(outputs: int = 2) -> onnx.FunctionProto:
    return function("Clamp", ["x", "low", "high"], ["y", "doubled"][:outputs],
                    [node("Clip", ["x", "low", "high"], ["y"]),
                     node("Add", ["y", "y"], ["doubled"])][:outputs])


@pytest.mark.parametrize(("inputs", "low", "high"), [
    (["x"], None, None),
    (["x", "", "m"], None, 1.0),
    (["x", "m"], 1.0, None),
    (["x", "", ""], None, None),
])
def test_omitted_optional_inputs(inputs: list[str], low: float | None,
                                 high: float | None) -> None:
    calls = [node("Clamp", inputs, ["y"], name="call", domain="local")]
    original = model(calls, [tensor("x"), tensor("m", [])], [tensor("y")], [_clip_function(1)])
    inlined, _ = inline(original)
    check(inlined)
    (clip,) = inlined.graph.node
    assert list(clip.input) == [*inputs, "", ""][:3]
    feeds = {"x": X, "m": np.array(1.0, dtype=np.float32)}
    expected = np.clip(X, -np.inf if low is None else low, np.inf if high is None else high)
    assert_close(run_ort(inlined, feeds), [expected])
    assert_close(run_ort(original, feeds), [expected])


@pytest.mark.parametrize("outputs", [["y"], ["y", ""], ["", "d"]])
def test_unused_and_omitted_outputs(outputs: list[str]) -> None:
    calls = [node("Clamp", ["x"], outputs, name="call", domain="local")]
    wanted = [o for o in outputs if o]
    original = model(calls, [tensor("x")], [tensor(o) for o in wanted], [_clip_function()])
    inlined, _ = inline(original)
    check(inlined)
    produced = {o for n in inlined.graph.node for o in n.output}
    assert set(wanted) <= produced
    expected = {"y": X, "d": 2 * X}
    assert_close(run_ort(inlined, {"x": X}), [expected[o] for o in wanted])


# ================================================= outputs that are inputs
def _passthrough_function() -> onnx.FunctionProto:
    """Pass(x, s) = (x, x * s): the first output is the input itself."""
    return function("Pass", ["x", "s"], ["x", "scaled"], [node("Mul", ["x", "s"], ["scaled"])])


def test_output_that_is_an_input_feeding_another_node() -> None:
    calls = [node("Pass", ["x", "s"], ["same", "scaled"], name="call", domain="local"),
             node("Add", ["same", "scaled"], ["y"], name="after")]
    original = model(calls, [tensor("x"), tensor("s")], [tensor("y")],
                     [_passthrough_function()])
    inlined, _ = inline(original)
    check(inlined)
    assert [n.op_type for n in inlined.graph.node] == ["Mul", "Add"]  # rewired, no Identity
    s = np.array([2.0, 3.0, 4.0], dtype=np.float32)
    assert_close(run_ort(inlined, {"x": X, "s": s}), [X + X * s])


def test_output_that_is_an_input_and_a_graph_output() -> None:
    calls = [node("Pass", ["x", "s"], ["same", "scaled"], name="call", domain="local")]
    original = model(calls, [tensor("x"), tensor("s")], [tensor("same"), tensor("scaled")],
                     [_passthrough_function()])
    inlined, _ = inline(original)
    check(inlined)
    identity = [n for n in inlined.graph.node if n.op_type == "Identity"]
    assert len(identity) == 1 and list(identity[0].output) == ["same"]
    s = np.array([2.0, 3.0, 4.0], dtype=np.float32)
    assert_close(run_ort(inlined, {"x": X, "s": s}), [X, X * s])
    # The C++ inliner leaves the graph output "same" unproduced: the checker refuses it.
    theirs = onnx.inliner.inline_local_functions(original)
    assert "same" not in {o for n in theirs.graph.node for o in n.output}
    with pytest.raises(onnx.checker.ValidationError):
        check(theirs)


# ============================================================ value_info, names
def test_value_info_carried_over_renamed() -> None:
    fn = function("F", ["x"], ["y"],
                  [node("Abs", ["x"], ["mid"]), node("Neg", ["mid"], ["y"])],
                  value_info=[tensor("mid", [3])])
    calls = [node("F", ["x"], ["a"], name="one", domain="local"),
             node("F", ["a"], ["y"], name="two", domain="local")]
    original = model(calls, [tensor("x")], [tensor("y")], [fn])
    inlined, _ = inline(original)
    check(inlined)
    declared = {v.name: v for v in inlined.graph.value_info}
    assert set(declared) == {"one/mid", "two/mid"}
    assert declared["one/mid"].type == tensor("mid", [3]).type
    assert_close(run_ort(inlined, {"x": X}), [-np.abs(-np.abs(X))])


def test_names_never_collide() -> None:
    """Body names equal to caller names, two calls with one name, a name like ``call/t``."""
    fn = function("F", ["x"], ["y"],
                  [node("Abs", ["x"], ["t"], name="n"), node("Neg", ["t"], ["y"], name="n")])
    calls = [node("Neg", ["x"], ["t"], name="n"),
             node("Abs", ["t"], ["call/t"], name="call/n"),
             node("F", ["call/t"], ["u"], name="call", domain="local"),
             node("F", ["u"], ["v"], name="call", domain="local"),
             node("Add", ["v", "t"], ["y"], name="add")]
    original = model(calls, [tensor("x")], [tensor("y")], [fn])
    inlined, _ = inline(original)
    check(inlined)
    outputs = [o for n in inlined.graph.node for o in n.output]
    assert len(outputs) == len(set(outputs))
    names = [n.name for n in inlined.graph.node]
    assert len(names) == len(set(names))
    assert "call_1/t" in outputs  # the second call site got its own readable prefix
    t = np.abs(-X)
    assert_close(run_ort(inlined, {"x": X}), [-np.abs(-np.abs(t)) + -X])


def test_body_names_do_not_shadow_names_of_enclosing_graphs() -> None:
    """A call inside an If branch whose body's subgraph defines a name the outer graph has."""
    fn = _if_function(0.5)
    inner_call = node("F", ["c", "x"], ["t"], name="call", domain="local")
    then_branch = helper.make_graph([inner_call], "then", [],
                                    [helper.make_tensor_value_info("t", FLOAT, None)])
    else_branch = _branch("else2", "Abs", "e2", [])
    calls = [node("Neg", ["x"], ["e"], name="outer_e"),  # "e" also defined in F's subgraph
             node("If", ["c"], ["z"], name="outer_if", then_branch=then_branch,
                  else_branch=else_branch),
             node("Add", ["z", "e"], ["y"])]
    original = model(calls, [tensor("c", [], onnx.TensorProto.BOOL), tensor("x")],
                     [tensor("y")], [fn])
    inlined, _ = inline(original)
    check(inlined)
    assert calls_left(inlined, original.functions) == []
    for flag in (True, False):
        feeds = {"c": np.array(flag), "x": X}
        expected = (leaky(X, 0.5) if flag else np.abs(X)) - X
        assert_close(run_ort(inlined, feeds), [expected])


# ============================================================ nesting, recursion
def _chain(depth: int) -> list[onnx.FunctionProto]:
    functions = [function("F0", ["x"], ["y"], [node("Neg", ["x"], ["y"], name="leaf")])]
    for level in range(1, depth):
        functions.append(function(
            f"F{level}", ["x"], ["y"],
            [node(f"F{level - 1}", ["x"], ["t"], name=f"c{level}", domain="local"),
             node("Abs", ["t"], ["y"], name="abs")]))
    return functions


def test_deep_nesting_has_no_recursion_limit() -> None:
    depth = 300  # well past the 100 levels where recursive inliners give up
    functions = _chain(depth)
    calls = [node(f"F{depth - 1}", ["x"], ["y"], name="top", domain="local")]
    original = model(calls, [tensor("x")], [tensor("y")], functions)
    inlined, result = inline(original)
    check(inlined)
    assert len(inlined.graph.node) == depth
    assert result.stats == {"calls inlined": depth, "functions removed": depth,
                            "bodies converted": 0}
    assert_close(run_ort(inlined, {"x": X}), [np.abs(-X)])
    leaf = provenance(inlined)[inlined.graph.node[0].name]
    assert leaf.startswith(f"local::F{depth - 1}@top > local::F{depth - 2}@c{depth - 1} > ")
    assert leaf.endswith("> local::F0@c1")
    with pytest.raises(GraphpassError, match=r"GP124 .*300 levels deep, more than max_depth=50"):
        inline(original, max_depth=50)


def test_calls_inside_function_bodies_are_expanded_once() -> None:
    """Every body is expanded once: a function called from many places stays linear."""
    functions = _chain(3)
    calls = [node("F2", [src], [dst], name=f"site{i}", domain="local")
             for i, (src, dst) in enumerate([("x", "a"), ("a", "b"), ("b", "y")])]
    original = model(calls, [tensor("x")], [tensor("y")], functions)
    inlined, result = inline(original)
    check(inlined)
    assert result.stats["calls inlined"] == 3 + 1 + 1  # three sites, F1 and F0 inside once
    assert_close(run_ort(inlined, {"x": X}), [np.abs(np.abs(np.abs(X)))])
    assert provenance(inlined)["site1/c2/c1/leaf"] == \
        "local::F2@site1 > local::F1@c2 > local::F0@c1"


@pytest.mark.parametrize(("edges", "cycle"), [
    ({"f": ["f"]}, "local::f -> local::f"),
    ({"f": ["g"], "g": ["f"]}, "local::f -> local::g -> local::f"),
    ({"f": ["g"], "g": ["h"], "h": ["g"]}, "local::g -> local::h -> local::g"),
])
def test_recursion_is_an_error_naming_the_cycle(edges: dict[str, list[str]], cycle: str) -> None:
    functions = [function(name, ["x"], ["y"],
                          [node(callee, ["x"], ["y"], domain="local") for callee in callees])
                 for name, callees in edges.items()]
    original = model([node("f", ["x"], ["y"], name="top", domain="local")], [tensor("x")],
                     [tensor("y")], functions)
    graph_model = graphpass.Model.from_proto(original)
    before = graph_model.to_proto()
    with pytest.raises(GraphpassError) as error:
        InlineFunctions().run(graph_model, PassContext(registry=default_registry()))
    assert error.value.message.startswith("GP120 ")
    assert cycle in str(error.value)
    assert graph_model.to_proto() == before  # nothing changed
    # Excluding the cycle leaves it alone, with a warning.
    kept = [f"local::{name}" for name in edges]
    inlined, result = inline(original, exclude=kept)
    assert [f.code for f in result.findings] == ["GP112"]
    assert inlined == original


# ============================================================ only / exclude
def test_only_and_exclude() -> None:
    original = neg_then_fused()
    expected = [np.abs(-X)]

    excluded, result = inline(original, exclude=["kernels::Fused", "kernels::Missing"])
    assert [n.op_type for n in excluded.graph.node] == ["Neg", "Fused"]
    assert [f.name for f in excluded.functions] == ["Fused"]
    assert [(f.code, f.severity.value) for f in result.findings] == [
        ("GP110", "warning"), ("GP101", "info")]
    assert "kernels::Missing" in result.findings[0].message
    assert_close(run_reference(excluded, {"x": X}), expected)

    only, _ = inline(original, only=["kernels::Fused"])
    assert [n.op_type for n in only.graph.node] == ["Neg2", "Abs"]
    assert [f.name for f in only.functions] == ["Neg2"]
    assert_close(run_reference(only, {"x": X}), expected)

    for bad in ("Fused", "kernels:Fused", "a::b::c", "::"):
        with pytest.raises(PipelineError, match="does not name a function"):
            InlineFunctions({"exclude": [bad]})
    with pytest.raises(PipelineError, match="max-depth"):
        InlineFunctions({"max_depth": 0})


def test_kept_function_gets_its_callees_inlined() -> None:
    leaf = function("Leaf", ["x"], ["y"], [node("Neg", ["x"], ["y"], name="neg")])
    kept = function("Kept", ["x"], ["y"],
                    [node("Leaf", ["x"], ["t"], name="inner", domain="local"),
                     node("Abs", ["t"], ["y"])])
    calls = [node("Kept", ["x"], ["a"], name="k", domain="local"),
             node("Leaf", ["a"], ["y"], name="l", domain="local")]
    original = model(calls, [tensor("x")], [tensor("y")], [leaf, kept])
    inlined, _ = inline(original, exclude=["local::Kept"])
    check(inlined)
    assert [f.name for f in inlined.functions] == ["Kept"]
    assert [n.op_type for n in inlined.functions[0].node] == ["Neg", "Abs"]
    assert [n.op_type for n in inlined.graph.node] == ["Kept", "Neg"]
    assert_close(run_ort(inlined, {"x": X}), [-np.abs(-X)])


# ============================================================ calls in subgraphs
def test_calls_in_loop_bodies_and_nested_ifs() -> None:
    fn = _leaky_function()
    call = node("Leaky", ["v"], ["w"], name="in_loop", domain="local")
    inner_if = node("If", ["c"], ["v"], name="inner_if",
                    then_branch=helper.make_graph(
                        [node("Leaky", ["state"], ["p"], name="in_if", domain="local")],
                        "then", [], [helper.make_tensor_value_info("p", FLOAT, None)]),
                    else_branch=helper.make_graph(
                        [node("Neg", ["state"], ["q"])], "else", [],
                        [helper.make_tensor_value_info("q", FLOAT, None)]))
    loop_body = helper.make_graph(
        [inner_if, call, node("Identity", ["cond_in"], ["cond_out"])], "body",
        [tensor("i", [], onnx.TensorProto.INT64), tensor("cond_in", [], onnx.TensorProto.BOOL),
         tensor("state", None)],
        [tensor("cond_out", [], onnx.TensorProto.BOOL), tensor("w", None)])
    loop = node("Loop", ["n", "", "x"], ["y"], name="loop", body=loop_body)
    original = model([loop], [tensor("n", [], onnx.TensorProto.INT64),
                              tensor("c", [], onnx.TensorProto.BOOL), tensor("x")],
                     [tensor("y")], [fn])
    inlined, result = inline(original)
    check(inlined)
    assert calls_left(inlined, original.functions) == []
    assert result.stats["calls inlined"] == 2
    for flag in (True, False):
        feeds = {"n": np.array(3, dtype=np.int64), "c": np.array(flag), "x": X}
        state = X
        for _ in range(3):
            state = leaky(leaky(state, 0.5) if flag else -state, 0.5)
        assert_close(run_ort(inlined, feeds), [state])
        assert_close(run_ort(original, feeds), [state])


# ============================================================ opsets
def test_function_opset_imports_are_merged() -> None:
    fn = function("F", ["x"], ["y"], [node("Gelu", ["x"], ["y"], domain="com.microsoft")],
                  extra_opsets={"com.microsoft": 1})
    original = model([node("F", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                     [tensor("y")], [fn])
    inlined, _ = inline(original)
    assert {o.domain: o.version for o in inlined.opset_import}["com.microsoft"] == 1
    check(inlined)
    assert_close(run_ort(inlined, {"x": X}), run_ort(original, {"x": X}))
    conflicting = model([node("F", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                        [tensor("y")], [fn], extra_opsets={"com.microsoft": 2})
    with pytest.raises(GraphpassError, match=r"GP123 .*'com.microsoft' at version 1.* 2"):
        inline(conflicting)


def test_body_converted_to_the_model_opset() -> None:
    """A body written for opset 11 (ReduceSum axes attribute) in an opset-18 model."""
    fn = function("Sum", ["x"], ["y"],
                  [node("ReduceSum", ["x"], ["y"], name="sum", axes=[1], keepdims=0),
                   ], opset=11)
    fn.node[0].metadata_props.add(key="origin", value="kept")
    calls = [node("Sum", ["x"], ["y"], name="call", domain="local")]
    original = model(calls, [tensor("x", [2, 3])], [tensor("y", [2])], [fn], opset=18)
    inlined, result = inline(original)
    check(inlined)
    (reduce,) = [n for n in inlined.graph.node if n.op_type == "ReduceSum"]
    assert len(reduce.input) == 2  # axes became an input at opset 13
    assert {e.key: e.value for e in reduce.metadata_props} == {
        "origin": "kept", "graphpass.inlined_from": "local::Sum@call"}
    assert any(f.code == "GP103" for f in result.findings)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_close(run_ort(inlined, {"x": x}), [x.sum(axis=1)])


def test_body_conversion_with_bound_attributes() -> None:
    """Opset 11 body whose ReduceSum axes come from the call: converted per binding."""
    fn = function("Sum", ["x"], ["y"],
                  [node("ReduceSum", ["x"], ["y"], name="sum", keepdims=0,
                        attributes=[ref("axes", "dims", onnx.AttributeProto.INTS)])],
                  opset=11, attributes=["dims"])
    calls = [node("Sum", ["x"], ["a"], name="c0", domain="local", dims=[1]),
             node("Sum", ["x"], ["b"], name="c1", domain="local", dims=[0])]
    original = model(calls, [tensor("x", [2, 3])], [tensor("a", [2]), tensor("b", [3])], [fn])
    inlined, _ = inline(original)
    check(inlined)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_close(run_ort(inlined, {"x": x}), [x.sum(axis=1), x.sum(axis=0)])


def test_unconvertible_body_is_a_clear_error() -> None:
    """Opset 13 ReduceSum with a computed axes input cannot go down to opset 11."""
    fn = function("Sum", ["x", "axes"], ["y"],
                  [node("ReduceSum", ["x", "axes"], ["y"], name="sum")], opset=13)
    original = model([node("Sum", ["x", "axes"], ["y"], name="call", domain="local")],
                     [tensor("x", [2, 3]), tensor("axes", [1], onnx.TensorProto.INT64)],
                     [tensor("y")], [fn], opset=11)
    graph_model = graphpass.Model.from_proto(original)
    with pytest.raises(GraphpassError) as error:
        InlineFunctions().run(graph_model, PassContext(registry=default_registry()))
    assert "GP123 cannot convert function local::Sum from opset 13 to 11" in str(error.value)
    assert graph_model.to_proto() == original


# ============================================================ provenance
def test_provenance_records_the_call_stack_and_keeps_node_metadata() -> None:
    inner = function("N", ["x"], ["y"], [node("Neg", ["x"], ["y"], name="neg")])
    inner.node[0].metadata_props.add(key="pkg.torch.onnx.stack_trace", value="model.py:12")
    outer = function("M", ["x"], ["y"],
                     [node("N", ["x"], ["t"], name="N_3", domain="local"),
                      node("Abs", ["t"], ["y"], name="abs")])
    calls = [node("M", ["x"], ["y"], name="M_1", domain="local")]
    original = model(calls, [tensor("x")], [tensor("y")], [inner, outer])
    inlined, _ = inline(original)
    check(inlined)
    entries = {n.name: {e.key: e.value for e in n.metadata_props} for n in inlined.graph.node}
    assert entries == {
        "M_1/N_3/neg": {"pkg.torch.onnx.stack_trace": "model.py:12",
                        "graphpass.inlined_from": "local::M@M_1 > local::N@N_3"},
        "M_1/abs": {"graphpass.inlined_from": "local::M@M_1"},
    }


def test_model_without_functions_is_untouched() -> None:
    original = model([node("Neg", ["x"], ["y"])], [tensor("x")], [tensor("y")])
    inlined, result = inline(original)
    assert inlined == original
    assert not result.changed
    assert result.stats["calls inlined"] == 0


def test_bad_calls_are_errors_before_anything_changes() -> None:
    fn = _leaky_function()
    too_many = model([node("Leaky", ["x", "x"], ["y"], name="call", domain="local")],
                     [tensor("x")], [tensor("y")], [fn])
    with pytest.raises(GraphpassError, match="GP121 the call has 2 inputs"):
        inline(too_many)
    wrong_type = model([node("Leaky", ["x"], ["y"], name="call", domain="local", a=3)],
                       [tensor("x")], [tensor("y")], [fn])
    with pytest.raises(GraphpassError, match="GP121 attribute 'a' is INT"):
        inline(wrong_type)
    undefined = function("U", ["x"], ["y"], [node("Add", ["x", "ghost"], ["y"])])
    bad_body = model([node("U", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                     [tensor("y")], [undefined])
    with pytest.raises(GraphpassError, match="GP122 function local::U uses 'ghost'"):
        inline(bad_body)


def test_undeclared_call_attribute_is_a_warning() -> None:
    original = _call_model(_leaky_function(), a=0.25, bogus=1)
    inlined, result = inline(original)
    check(inlined)
    assert [f.code for f in result.findings][:1] == ["GP111"]
    assert_close(run_ort(inlined, {"x": X}), [leaky(X, 0.25)])


def test_every_node_kind_is_covered_by_all_nodes() -> None:
    """Sanity check of the helper the other tests rely on."""
    original = _call_model(_leaky_function())
    assert [n.op_type for n in all_nodes(original)] == ["Leaky", "LeakyRelu"]
