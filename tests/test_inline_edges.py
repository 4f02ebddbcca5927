"""inline-functions: corners of the semantics, what is kept, and the pass in a pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _inline_support import (
    FLOAT,
    assert_close,
    calls_left,
    check,
    function,
    inline,
    model,
    neg_then_fused,
    node,
    run_ort,
    tensor,
)
from onnx import helper, numpy_helper

import graphpass
from graphpass.framework import PassContext, default_registry
from graphpass.passes.inline_functions import InlineFunctions

X = np.array([-2.0, -0.5, 3.0], dtype=np.float32)
BOOL = onnx.TensorProto.BOOL


def _out(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, FLOAT, None)


def _branch(if_node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in if_node.attribute if a.name == name)


def test_omitted_input_read_inside_a_subgraph() -> None:
    """F(c, x, low): If c then Clip(x, low) else x; the call omits ``low``."""
    then_branch = helper.make_graph([node("Clip", ["x", "low"], ["t"])], "then", [], [_out("t")])
    else_branch = helper.make_graph([node("Identity", ["x"], ["e"])], "else", [], [_out("e")])
    fn = function("F", ["c", "x", "low"], ["y"],
                  [node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)])
    calls = [node("F", ["c", "x"], ["y"], name="call", domain="local")]
    original = model(calls, [tensor("c", [], BOOL), tensor("x")], [tensor("y")], [fn])
    inlined, _ = inline(original)
    check(inlined)
    clip = _branch(inlined.graph.node[0], "then_branch").node[0]
    assert [name for name in clip.input if name] == ["x"]  # ``low`` is omitted
    for flag in (True, False):
        assert_close(run_ort(inlined, {"c": np.array(flag), "x": X}), [X])


def test_initializers_inside_body_subgraphs_get_fresh_names() -> None:
    bias = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "bias")
    then_branch = helper.make_graph([node("Add", ["x", "bias"], ["t"])], "then", [], [_out("t")],
                                    initializer=[bias])
    else_branch = helper.make_graph([node("Neg", ["x"], ["e"])], "else", [], [_out("e")])
    fn = function("F", ["c", "x"], ["y"],
                  [node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)])
    calls = [node("F", ["c", "x"], ["a"], name="first", domain="local"),
             node("F", ["c", "a"], ["y"], name="second", domain="local")]
    outer_bias = numpy_helper.from_array(np.zeros(3, np.float32), "bias")  # same name outside
    original = model(calls, [tensor("c", [], BOOL), tensor("x")], [tensor("y")], [fn],
                     initializers=[outer_bias])
    inlined, _ = inline(original)
    check(inlined)
    names = [_branch(n, "then_branch").initializer[0].name for n in inlined.graph.node]
    assert names == ["first/bias", "second/bias"]
    expected = X + 2 * np.array([1.0, 2.0, 3.0], np.float32)
    assert_close(run_ort(inlined, {"c": np.array(True), "x": X}), [expected])
    assert_close(run_ort(inlined, {"c": np.array(False), "x": X}), [X])


def test_output_listed_twice() -> None:
    fn = function("Twice", ["x"], ["y", "y"], [node("Neg", ["x"], ["y"])])
    calls = [node("Twice", ["x"], ["a", "b"], name="call", domain="local"),
             node("Add", ["a", "b"], ["s"])]
    original = model(calls, [tensor("x")], [tensor("s"), tensor("b")], [fn])
    inlined, _ = inline(original)
    check(inlined)
    assert [n.op_type for n in inlined.graph.node] == ["Neg", "Identity", "Add"]
    assert_close(run_ort(inlined, {"x": X}), [-2 * X, -X])


def test_call_in_a_subgraph_of_a_kept_function() -> None:
    leaf = function("Leaf", ["x"], ["y"], [node("Neg", ["x"], ["y"])])
    branch = helper.make_graph([node("Leaf", ["x"], ["t"], name="deep", domain="local")],
                               "then", [], [_out("t")])
    other = helper.make_graph([node("Identity", ["x"], ["e"])], "else", [], [_out("e")])
    kept = function("Kept", ["c", "x"], ["y"],
                    [node("If", ["c"], ["y"], then_branch=branch, else_branch=other)])
    calls = [node("Kept", ["c", "x"], ["y"], name="k", domain="local")]
    original = model(calls, [tensor("c", [], BOOL), tensor("x")], [tensor("y")], [leaf, kept])
    inlined, result = inline(original, exclude=["local::Kept"])
    check(inlined)
    assert [f.name for f in inlined.functions] == ["Kept"]
    assert calls_left(inlined, [leaf]) == []
    assert_close(run_ort(inlined, {"c": np.array(True), "x": X}), [-X])
    assert result.stats["calls inlined"] == 1


def test_default_domain_spelled_ai_onnx() -> None:
    fn = function("F", ["x"], ["y"], [node("Neg", ["x"], ["y"])])
    fn.opset_import[0].domain = "ai.onnx"
    original = model([node("F", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                     [tensor("y")], [fn])
    inlined, result = inline(original)
    check(inlined)
    assert result.stats["bodies converted"] == 0
    assert_close(run_ort(inlined, {"x": X}), [-X])


def test_model_without_default_domain_gets_the_function_version() -> None:
    fn = function("F", ["x"], ["y"], [node("Neg", ["x"], ["y"])], opset=17)
    original = model([node("F", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                     [tensor("y")], [fn])
    del original.opset_import[0]  # the model imports only the function's domain
    inlined, _ = inline(original)
    check(inlined)
    assert {o.domain: o.version for o in inlined.opset_import}[""] == 17
    assert_close(run_ort(inlined, {"x": X}), [-X])


def test_everything_else_is_kept(tmp_path: Path) -> None:
    """Doc strings, metadata, other value_info, initializers (external data stays external)."""
    fn = function("F", ["x", "w"], ["y"], [node("Mul", ["x", "w"], ["y"])])
    weight = numpy_helper.from_array(np.array([1.0, 2.0, 4.0], np.float32), "w")
    original = model([node("F", ["x", "w"], ["m"], name="call", domain="local"),
                      node("Neg", ["m"], ["y"], name="neg")],
                     [tensor("x")], [tensor("y")], [fn], initializers=[weight],
                     value_info=[tensor("m", [3])])
    original.doc_string = "a model"
    original.graph.doc_string = "its graph"
    original.producer_name = "tests"
    original.metadata_props.add(key="k", value="v")
    source = tmp_path / "in.onnx"
    onnx.save(original, source, save_as_external_data=True, size_threshold=0,
              location="in.data")
    loaded = graphpass.load(source)
    InlineFunctions().run(loaded, PassContext(registry=default_registry()))
    target = tmp_path / "out" / "inlined.onnx"
    target.parent.mkdir()
    graphpass.save(loaded, target)
    inlined = onnx.load(target, load_external_data=False)
    assert inlined.doc_string == "a model" and inlined.graph.doc_string == "its graph"
    assert inlined.producer_name == "tests"
    assert [(e.key, e.value) for e in inlined.metadata_props] == [("k", "v")]
    assert [v.name for v in inlined.graph.value_info] == ["m"]
    assert [i.name for i in inlined.graph.initializer] == ["w"]
    assert inlined.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    assert {o.domain: o.version for o in inlined.opset_import} == {"": 18, "local": 1}
    full = onnx.load(target)
    check(full)
    assert_close(run_ort(full, {"x": X}), [-X * np.array([1.0, 2.0, 4.0], np.float32)])


def test_second_run_changes_nothing() -> None:
    fn = function("F", ["x"], ["y"], [node("Neg", ["x"], ["y"])])
    original = model([node("F", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                     [tensor("y")], [fn])
    once, first = inline(original)
    twice, second = inline(once)
    assert first.changed and not second.changed
    assert twice == once


def test_runs_in_a_pipeline_with_options() -> None:
    original = graphpass.Model.from_proto(neg_then_fused())
    manager = graphpass.PassManager(
        ["inline-functions"],
        options={"inline-functions": {"exclude": ["kernels::Fused"], "max-depth": 4}})
    result = manager.run(original)
    assert len(original.functions) == 2  # the manager works on a copy
    assert [n.op_type for n in result.model.graph] == ["Neg", "Fused"]
    assert [f.code for f in result.findings] == ["GP101"]
    with pytest.raises(graphpass.PipelineError, match="does not name a function"):
        graphpass.PassManager(["inline-functions"],
                              options={"inline-functions": {"only": ["Fused"]}})


def test_references_on_calls_of_kept_functions_are_bound() -> None:
    """An inlined body calls a kept function, passing its own attribute on by reference."""
    kept = function("Act", ["x"], ["y"],
                    [node("LeakyRelu", ["x"], ["y"],
                          attributes=[onnx.AttributeProto(name="alpha", ref_attr_name="slope",
                                                          type=onnx.AttributeProto.FLOAT)])],
                    attributes=["slope"])
    outer = function("Outer", ["x"], ["y"],
                     [node("Act", ["x"], ["y"], name="act", domain="local",
                           attributes=[onnx.AttributeProto(name="slope", ref_attr_name="s",
                                                           type=onnx.AttributeProto.FLOAT)])],
                     defaults=[helper.make_attribute("s", 0.25)])
    original = model([node("Outer", ["x"], ["y"], name="call", domain="local")],
                     [tensor("x")], [tensor("y")], [kept, outer])
    inlined, _ = inline(original, exclude=["local::Act"])
    check(inlined)
    (call,) = inlined.graph.node
    assert call.op_type == "Act"
    assert [(a.name, a.f, a.ref_attr_name) for a in call.attribute] == [("slope", 0.25, "")]
    expected = np.where(X >= 0, X, 0.25 * X)
    assert_close(run_ort(inlined, {"x": X}), [expected])
    assert_close(run_ort(original, {"x": X}), [expected])


def test_unused_function_is_removed_with_a_note() -> None:
    used = function("Used", ["x"], ["y"], [node("Neg", ["x"], ["y"])])
    dead = function("Dead", ["x"], ["y"], [node("Abs", ["x"], ["y"])])
    original = model([node("Used", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                     [tensor("y")], [used, dead])
    inlined, result = inline(original)
    assert not inlined.functions
    assert [(f.code, f.function) for f in result.findings] == [
        ("GP102", "local::Dead"), ("GP101", "local::Used")]


def test_kept_function_with_conflicting_inner_defaults_is_an_error() -> None:
    """Kept G forwards ``b`` to two inlined functions whose defaults for it differ."""
    def leaky(name: str, default: float) -> onnx.FunctionProto:
        return function(name, ["x"], ["y"],
                        [node("LeakyRelu", ["x"], ["y"], attributes=[onnx.AttributeProto(
                            name="alpha", ref_attr_name="a", type=onnx.AttributeProto.FLOAT)])],
                        defaults=[helper.make_attribute("a", default)])
    forward = onnx.AttributeProto(name="a", ref_attr_name="b", type=onnx.AttributeProto.FLOAT)
    kept = function("G", ["x"], ["y"],
                    [node("F1", ["x"], ["t"], name="one", domain="local", attributes=[forward]),
                     node("F2", ["t"], ["y"], name="two", domain="local", attributes=[forward])],
                    attributes=["b"])
    original = model([node("G", ["x"], ["y"], name="call", domain="local")], [tensor("x")],
                     [tensor("y")], [leaky("F1", 0.5), leaky("F2", 0.25), kept])
    with pytest.raises(graphpass.GraphpassError, match="GP125 function local::G passes its "
                                                       "attribute 'b'"):
        inline(original, exclude=["local::G"])
    inlined, _ = inline(original)  # inlining G too is fine
    check(inlined)
    expected = np.where(X >= 0, X, 0.25 * 0.5 * X)
    assert_close(run_ort(inlined, {"x": X}), [expected])
    assert_close(run_ort(original, {"x": X}), [expected])
