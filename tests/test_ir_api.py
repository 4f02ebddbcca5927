"""The IR's walking and mutation helpers, as a pass author uses them.

Every mutation is followed by ``assert_consistent``, which recomputes edges, uses,
free names and subgraph captures from scratch and compares them with the IR's
incremental bookkeeping.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _ir_consistency import assert_consistent
from onnx import TensorProto, helper

import graphpass
from graphpass import Attribute, Graph, InvalidModelError, Model, Node, Tensor
from graphpass.ir import CAPTURE


def _vi(name: str, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2])


def _branch(name: str, op: str, source: str, out: str) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, [source], [out], name=f"{name}_{op}")],
                             name, [], [_vi(out)])


def _if_model() -> Model:
    """x -> Relu(a) -> If(c){then: Neg(a), else: Abs(x)} -> y."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("If", ["c"], ["y"], name="if",
                          then_branch=_branch("then", "Neg", "a", "t"),
                          else_branch=_branch("else", "Abs", "x", "e"))],
        "main", [_vi("x"), _vi("c", TensorProto.BOOL)], [_vi("y")])
    return Model.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def _chain() -> Model:
    """x -> Relu(a) -> Neg(b) -> Add(b, w)=y, with initializer w."""
    graph = Graph("g", inputs=[_vi("x")], outputs=[_vi("y")],
                  initializers=[Tensor.from_array("w", np.ones(2, np.float32))],
                  nodes=[Node("Relu", ["x"], ["a"], name="relu"),
                         Node("Neg", ["a"], ["b"], name="neg"),
                         Node("Add", ["b", "w"], ["y"], name="add")])
    return Model(graph, opset_imports={"": 18})


# ================================================================ reading
def test_producer_consumers_uses() -> None:
    model = _chain()
    graph = model.graph
    relu, neg, add = graph.nodes
    assert graph.producer("a") is relu and graph.producer("x") is None
    assert graph.producer("w") is None and graph.is_defined("w")
    assert graph.consumers("a") == [neg] and graph.consumers("w") == [add]
    assert graph.uses("y") == (graphpass.Use(None, 0),)
    assert graph.value("y").is_graph_output and graph.value("x").is_graph_input
    assert graph.value("w").is_initializer and not graph.value("a").is_initializer
    assert graph.is_used("b") and graph.consumers("missing") == []
    assert graph.value("a").consumers() == [neg]
    assert graph.value("y").type is not None and graph.value("y").elem_type == TensorProto.FLOAT
    assert graph.value("y").shape == (2,)


def test_nodes_by_op_and_domains() -> None:
    graph = Graph("g", nodes=[Node("Relu", ["x"], ["a"]),
                              Node("Relu", ["a"], ["b"], domain="ai.onnx"),
                              Node("Relu", ["b"], ["c"], domain="custom")])
    first, second, third = graph.nodes
    assert graph.nodes_by_op("Relu") == [first, second, third]
    assert graph.nodes_by_op("Relu", "") == [first, second]
    assert graph.nodes_by_op("Relu", "ai.onnx") == [first, second]
    assert graph.nodes_by_op("Relu", "custom") == [third]
    assert graph.nodes_by_op("Neg") == []


def test_networkx_view_answers_reachability() -> None:
    import networkx as nx

    model = _if_model()
    relu, if_node = model.graph.nodes
    assert nx.has_path(model.graph.nx, relu, if_node)  # through the capture edge
    assert list(model.graph.nx.successors(relu)) == [if_node]
    assert (relu, if_node, ("a", CAPTURE)) in set(model.graph.nx.edges(keys=True))
    assert list(nx.topological_sort(model.graph.nx)) == [relu, if_node]


def test_walk_subgraphs_and_graphs_are_in_model_order() -> None:
    inner = helper.make_graph(
        [helper.make_node("If", ["c"], ["o"], name="inner_if",
                          then_branch=_branch("deep_then", "Neg", "x", "d"),
                          else_branch=_branch("deep_else", "Abs", "x", "f"))],
        "outer_then", [], [_vi("o")])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="outer_if", then_branch=inner,
                          else_branch=_branch("outer_else", "Abs", "x", "e")),
         helper.make_node("If", ["c"], ["z"], name="second_if",
                          then_branch=_branch("second_then", "Neg", "x", "s"),
                          else_branch=_branch("second_else", "Abs", "x", "u"))],
        "main", [_vi("x"), _vi("c", TensorProto.BOOL)], [_vi("y"), _vi("z")])
    function = helper.make_function("local", "F", ["a"], ["b"],
                                    [helper.make_node("Relu", ["a"], ["b"], name="in_f")],
                                    [helper.make_opsetid("", 18)])
    model = Model.from_proto(helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]))
    # onnx.helper.make_node sorts attributes by name: else_branch comes first
    assert [g.name for g in model.graph.subgraphs()] == [
        "outer_else", "outer_then", "deep_else", "deep_then", "second_else", "second_then"]
    assert [g.name for g in model.graphs()] == [
        "main", "outer_else", "outer_then", "deep_else", "deep_then", "second_else",
        "second_then", "F"]
    assert [n.name for n in model.walk()] == [
        "outer_if", "outer_else_Abs", "inner_if", "deep_else_Abs", "deep_then_Neg",
        "second_if", "second_else_Abs", "second_then_Neg", "in_f"]
    deep = next(g for g in model.graphs() if g.name == "deep_then")
    assert deep.root is model.graph and deep.model is model and deep.function is None
    assert model.functions["local", "F", ""].graph.function is not None


def test_topological_order_is_stable_and_sort_restores_order() -> None:
    graph = Graph("g", inputs=["x"], outputs=["y", "z"], nodes=[
        Node("Neg", ["b"], ["y"], name="late"),
        Node("Relu", ["x"], ["a"], name="first"),
        Node("Abs", ["x"], ["z"], name="independent"),
        Node("Neg", ["a"], ["b"], name="middle")])
    late, first, independent, middle = graph.nodes
    assert not graph.is_sorted()
    assert graph.topological_order() == [first, independent, middle, late]
    assert graph.nodes == [late, first, independent, middle]  # unchanged
    assert graph.sort() is True and graph.nodes == [first, independent, middle, late]
    assert graph.is_sorted() and graph.sort() is False
    assert_consistent(graph)


# =============================================================== inserting
def test_append_insert_before_and_after() -> None:
    model = _chain()
    graph = model.graph
    relu, neg, _add = graph.nodes
    square = Node("Mul", ["a", "a"], ["sq"], name="square")
    graph.insert_after(relu, square)
    neg.set_input(0, "sq")
    first = Node("Identity", ["x"], ["x2"], name="first")
    second = Node("Identity", ["x2"], ["x3"], name="second")
    graph.insert_before(relu, [first, second])
    relu.set_inputs(["x3"])
    graph.append(Node("Identity", ["y"], ["y2"], name="tail"))
    assert [n.name for n in graph] == ["first", "second", "relu", "square", "neg", "add", "tail"]
    assert graph.consumers("a") == [square] and graph.producer("sq") is square
    assert graph.is_sorted()
    assert_consistent(graph)
    graphpass.validate(model)


def test_failed_insertion_changes_nothing() -> None:
    model = _chain()
    graph = model.graph
    relu, neg, _add = graph.nodes
    before = model.to_proto()
    fine = Node("Identity", ["x"], ["fresh"], name="fine")
    clash = Node("Identity", ["x"], ["b"], name="clash")  # 'b' is neg's output
    with pytest.raises(InvalidModelError, match="'b' is defined twice"):
        graph.insert_after(relu, [fine, clash])
    assert graph.nodes == [relu, neg, _add] and fine.graph is None and clash.graph is None
    assert "fresh" not in graph.values or graph.producer("fresh") is None
    assert model.to_proto() == before
    assert_consistent(graph)
    with pytest.raises(ValueError, match="already belongs"):
        graph.append(relu)
    with pytest.raises(ValueError, match="listed twice"):
        graph.insert_before(neg, [fine, fine])
    assert fine.graph is None


def test_add_input_refuses_a_produced_name() -> None:
    graph = _chain().graph
    with pytest.raises(InvalidModelError, match="already produces"):
        graph.add_input("a")
    with pytest.raises(InvalidModelError, match="already produces"):
        graph.set_initializer(Tensor.from_array("b", np.ones(1, np.float32)))


# ================================================================ removing
def test_remove_refuses_used_outputs_unless_told() -> None:
    model = _chain()
    graph = model.graph
    relu, _neg, add = graph.nodes
    with pytest.raises(ValueError, match="still used by 'neg' \\(Neg\\)"):
        graph.remove(relu)
    with pytest.raises(ValueError, match="graph output"):
        graph.remove(add)
    graph.remove(relu, safe=False)
    assert graph.free_names == ("a",) and relu.graph is None
    assert_consistent(graph)
    graph.append(relu)  # a removed node can go back in
    assert graph.free_names == () and not graph.is_sorted()
    graph.sort()
    assert_consistent(graph)


def test_iteration_survives_removing_the_current_node() -> None:
    graph = _chain().graph
    for node in graph:
        graph.remove(node, safe=False)
    assert len(graph) == 0 and graph.nx.number_of_nodes() == 0
    assert set(graph.free_names) == {"y"}
    assert_consistent(graph)


# =============================================================== replacing
def test_replace_with_same_output_names() -> None:
    model = _chain()
    graph = model.graph
    relu, neg, add = graph.nodes
    sub = Node("Sub", ["x", "x"], ["a"], name="sub")
    graph.replace(relu, [sub])
    assert graph.nodes == [sub, neg, add] and graph.producer("a") is sub
    assert (sub, neg, ("a", 0)) in set(graph.nx.edges(keys=True))
    assert_consistent(graph)


def test_replace_with_an_output_map() -> None:
    model = _chain()
    graph = model.graph
    relu, neg, add = graph.nodes
    clip = Node("Clip", ["x"], ["clipped"], name="clip")
    graph.replace(relu, [clip], output_map={"a": "clipped"})
    assert graph.nodes == [clip, neg, add] and neg.inputs == ("clipped",)
    assert relu.graph is None
    assert_consistent(graph)
    with pytest.raises(ValueError, match="give its replacement"):
        graph.replace(neg, [Node("Abs", ["clipped"], ["other"])], output_map={})
    assert graph.nodes == [clip, neg, add]
    assert_consistent(graph)


def test_failed_replace_restores_the_old_node() -> None:
    model = _chain()
    graph = model.graph
    relu, neg, add = graph.nodes
    before = model.to_proto()
    with pytest.raises(InvalidModelError):
        graph.replace(neg, [Node("Abs", ["a"], ["b"]), Node("Abs", ["a"], ["y"])])
    assert graph.nodes == [relu, neg, add]
    assert model.to_proto() == before
    assert_consistent(graph)


def test_replace_uses_keeps_the_output_declaration() -> None:
    graph = Graph("g", inputs=[_vi("x")], outputs=[_vi("y")],
                  nodes=[Node("Relu", ["x"], ["h"]), Node("Identity", ["h"], ["y"])])
    _relu, identity = graph.nodes
    assert graph.replace_uses("y", "h") == 0  # only the graph output uses y
    assert graph.replace_uses("y", "h", include_outputs=True, rename_outputs=True) == 1
    graph.remove(identity)
    assert graph.output_names == ("h",)
    assert graph.value("h").shape == (2,)  # the output kept its declared type
    assert_consistent(graph)


# ================================================================ renaming
def test_rename_value_moves_everything() -> None:
    graph = Graph("g", inputs=[_vi("x")], outputs=[_vi("y")],
                  initializers=[Tensor.from_array("w", np.ones(2, np.float32))],
                  nodes=[Node("Add", ["x", "w"], ["h"]), Node("Mul", ["h", "h"], ["y"])])
    graph.add_value_info(_vi("h"))
    model = Model(graph, opset_imports={"": 18})
    add, mul = graph.nodes
    graph.rename_value("h", "hidden")
    graph.rename_value("w", "weight")
    graph.rename_value("x", "features")
    graph.rename_value("y", "scores")
    assert add.inputs == ("features", "weight") and add.outputs == ("hidden",)
    assert mul.inputs == ("hidden", "hidden") and graph.output_names == ("scores",)
    assert graph.input_names == ("features",) and list(graph.initializers) == ["weight"]
    assert graph.initializers["weight"].name == "weight"
    assert [v.name for v in graph.value_info] == ["hidden"]
    assert graph.value("scores").shape == (2,) and graph.value("features").shape == (2,)
    assert "h" not in graph.values and "w" not in graph.values
    assert_consistent(graph)
    graphpass.validate(model)
    proto = model.to_proto()
    onnx.checker.check_model(proto)
    assert proto.graph.initializer[0].name == "weight"


def test_rename_refuses_an_existing_name() -> None:
    graph = _chain().graph
    with pytest.raises(InvalidModelError, match="already exists"):
        graph.rename_value("a", "b")
    with pytest.raises(InvalidModelError, match="has no value 'nope'"):
        graph.rename_value("nope", "fresh")


# ===================================================== captures under mutation
def test_rename_reaches_into_subgraphs() -> None:
    model = _if_model()
    relu, if_node = model.graph.nodes
    then = if_node.attributes["then_branch"].graphs[0]
    model.graph.rename_value("a", "activated")
    assert then.nodes[0].inputs == ("activated",)
    assert set(if_node.captured_names) == {"activated", "x"}
    assert (relu, if_node, ("activated", CAPTURE)) in set(model.graph.nx.edges(keys=True))
    assert_consistent(model.graph)
    graphpass.validate(model)


def test_rename_refuses_to_hide_an_outer_name_behind_a_local_one() -> None:
    model = _if_model()
    then = model.graph.nodes[1].attributes["then_branch"].graphs[0]
    then.append(Node("Identity", ["a"], ["local"], name="defines_local"))
    with pytest.raises(InvalidModelError, match="would hide it"):
        model.graph.rename_value("a", "local")
    assert model.graph.producer("a") is model.graph.nodes[0]
    assert_consistent(model.graph)


def test_adding_and_removing_nodes_in_a_subgraph_updates_captures() -> None:
    model = _if_model()
    _relu, if_node = model.graph.nodes
    else_branch = if_node.attributes["else_branch"].graphs[0]
    assert set(if_node.captured_names) == {"a", "x"}
    user = Node("Add", ["e", "a"], ["e2"], name="uses_a_too")
    else_branch.append(user)
    assert set(if_node.captured_names) == {"a", "x"}  # two subgraphs, still one capture edge
    assert [u for u in model.graph.uses("a") if u.slot == CAPTURE] == [(if_node, CAPTURE)]
    outer_only = Node("Neg", ["x"], ["fresh_outer"], name="outer")
    model.graph.insert_before(if_node, outer_only)
    else_branch.append(Node("Identity", ["fresh_outer"], ["e3"], name="reads_outer"))
    assert set(if_node.captured_names) == {"a", "x", "fresh_outer"}
    assert model.graph.consumers("fresh_outer") == [if_node]
    assert_consistent(model.graph)
    then = if_node.attributes["then_branch"].graphs[0]
    then.remove(then.nodes[0], safe=False)  # the then-branch no longer reads 'a'
    # then's output now dangles: the If captures it, and the main graph does not define it
    assert set(if_node.captured_names) == {"a", "x", "fresh_outer", "t"}
    assert model.graph.free_names == ("t",)
    then.append(Node("Neg", ["x"], ["t"], name="redefined"))  # defining the free name
    assert "t" not in if_node.captured_names and model.graph.free_names == ()
    else_branch.remove(user)
    else_branch.remove(else_branch.nodes[-1])
    assert set(if_node.captured_names) == {"x"}
    assert model.graph.consumers("a") == []
    assert_consistent(model.graph)


def test_a_subgraph_defining_a_previously_free_name_releases_the_capture() -> None:
    model = _if_model()
    relu, if_node = model.graph.nodes
    then = if_node.attributes["then_branch"].graphs[0]
    assert set(if_node.captured_names) == {"a", "x"}
    then.add_input("a")  # now the then-branch defines 'a' itself
    assert if_node.captured_names == ("x",)
    assert model.graph.consumers("a") == [] and relu not in model.graph.nx.pred[if_node]
    assert_consistent(model.graph)
    then.remove_input("a")
    assert set(if_node.captured_names) == {"a", "x"}
    assert model.graph.consumers("a") == [if_node]
    assert_consistent(model.graph)


def test_captures_two_levels_deep_follow_mutation() -> None:
    deep = Graph("deep", outputs=["d"], nodes=[Node("Neg", ["a"], ["d"], name="deep_neg")])
    middle = Graph("middle", outputs=["m"],
                   nodes=[Node("If", ["c"], ["m"], name="inner_if", attributes={
                       "then_branch": deep,
                       "else_branch": Graph("e", outputs=["c"])})])
    outer_if = Node("If", ["c"], ["y"], name="outer_if", attributes={
        "then_branch": middle, "else_branch": Graph("e2", outputs=["c"])})
    graph = Graph("main", inputs=["x", "c"], outputs=["y"], nodes=[outer_if])
    assert set(outer_if.captured_names) == {"a", "c"} and graph.free_names == ("a",)
    relu = Node("Relu", ["x"], ["a"], name="relu")
    graph.insert_before(outer_if, relu)
    assert graph.free_names == ()
    assert (relu, outer_if, ("a", CAPTURE)) in set(graph.nx.edges(keys=True))
    assert_consistent(graph)
    graph.rename_value("a", "b")
    assert deep.nodes[0].inputs == ("b",)
    assert_consistent(graph)
    deep.remove(deep.nodes[0], safe=False)
    assert "b" not in outer_if.captured_names and graph.consumers("b") == []
    assert_consistent(graph)


def test_attaching_and_detaching_subgraphs_updates_captures() -> None:
    graph = Graph("main", inputs=["x", "c"], outputs=["y"], nodes=[
        Node("Relu", ["x"], ["a"], name="relu"), Node("Identity", ["c"], ["y"], name="holder")])
    relu, holder = graph.nodes
    body = Graph("body", outputs=["o"], nodes=[Node("Neg", ["a"], ["o"])])
    holder.set_attribute(Attribute.from_value("body", body))
    assert holder.captured_names == ("a",) and body.parent is holder
    assert graph.consumers("a") == [holder]
    assert_consistent(graph)
    with pytest.raises(ValueError, match="already belongs"):
        relu.set_attribute(Attribute.from_value("body", body))
    holder.remove_attribute("body")
    assert holder.captured_names == () and body.parent is None and graph.consumers("a") == []
    assert_consistent(graph)


def test_copy_is_deep_and_round_trips() -> None:
    model = _if_model()
    proto = model.to_proto()
    copy = model.copy()
    assert copy.to_proto() == proto
    then = copy.graph.nodes[1].attributes["then_branch"].graphs[0]
    then.nodes[0].set_input(0, "x")
    copy.graph.rename_value("a", "renamed")
    assert model.to_proto() == proto
    assert_consistent(copy.graph)
    assert_consistent(model.graph)


def test_version_counts_changes() -> None:
    model = _chain()
    start = model.version
    fingerprint = model.fingerprint()
    model.graph.nodes[0].set_attribute(Attribute.from_value("unused", 1))
    assert model.version > start and model.fingerprint() != fingerprint
    later = model.version
    list(model.graph.topological_order())
    graphpass.validate(model)
    assert model.version == later


def test_node_and_graph_metadata_read_change_copy_and_write_back() -> None:
    graph_proto = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                                    "g", [_vi("x")], [_vi("y")])
    helper.set_metadata_props(graph_proto, {"g1": "a", "g2": "b"})
    helper.set_metadata_props(graph_proto.node[0], {"n1": "c"})
    proto = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 18)])
    model = Model.from_proto(proto)
    graph, (relu,) = model.graph, model.graph.nodes
    assert dict(graph.metadata) == {"g1": "a", "g2": "b"} and dict(relu.metadata) == {"n1": "c"}
    assert model.to_proto() == proto  # read, unchanged: written as loaded
    copy = model.copy()
    start = model.version
    graph.set_metadata("g1", None)
    relu.set_metadata("n2", "d")
    assert model.version == start + 2
    written = model.to_proto()
    assert {e.key: e.value for e in written.graph.metadata_props} == {"g2": "b"}
    assert {e.key: e.value for e in written.graph.node[0].metadata_props} == {"n1": "c",
                                                                             "n2": "d"}
    assert copy.to_proto() == proto  # the copy kept its own metadata


def test_function_graph_mutation_round_trips() -> None:
    function = helper.make_function("local", "F", ["a"], ["b"],
                                    [helper.make_node("Relu", ["a"], ["b"], name="in_f")],
                                    [helper.make_opsetid("", 18)])
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "main",
                              [_vi("x")], [_vi("y")])
    model = Model.from_proto(helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]))
    body = model.functions["local", "F", ""].graph
    relu = body.nodes[0]
    body.insert_after(relu, Node("Neg", ["b"], ["negated"], name="neg"))
    body.set_outputs(["negated"])
    assert_consistent(body)
    graphpass.validate(model)
    proto = model.to_proto()
    assert [n.op_type for n in proto.functions[0].node] == ["Relu", "Neg"]
    assert list(proto.functions[0].output) == ["negated"]
    import onnxruntime

    session = onnxruntime.InferenceSession(proto.SerializeToString())
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], -np.maximum(x, 0))
