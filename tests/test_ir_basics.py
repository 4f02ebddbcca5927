"""Basic behaviour of the IR: edges, walking helpers, mutation keeps edges right."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass.ir import CAPTURE, Graph, Node


def _chain_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Mul", ["b", "w"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_edges_follow_uses() -> None:
    model = graphpass.Model.from_proto(_chain_model())
    graph = model.graph
    add, relu, mul = graph.nodes
    assert graph.producer("a") is add
    assert graph.consumers("a") == [relu]
    assert graph.consumers("x") == [add]
    assert len(graph.uses("x")) == 2
    assert set(graph.nx.edges(keys=True)) == {(add, relu, ("a", 0)), (relu, mul, ("b", 0))}
    assert graph.nodes_by_op("Relu") == [relu]


def test_replace_uses_and_remove_keep_edges_right() -> None:
    model = graphpass.Model.from_proto(_chain_model())
    graph = model.graph
    add, relu, mul = graph.nodes
    graph.replace_uses("b", "a")
    graph.remove(relu)
    assert graph.consumers("a") == [mul]
    assert set(graph.nx.edges(keys=True)) == {(add, mul, ("a", 0))}
    assert graph.topological_order() == [add, mul]


def test_insert_before_keeps_order_and_edges() -> None:
    model = graphpass.Model.from_proto(_chain_model())
    graph = model.graph
    add, relu, mul = graph.nodes
    neg = Node("Neg", ["a"], ["n"], name="neg")
    graph.insert_before(relu, neg)
    relu.set_input(0, "n")
    assert graph.nodes == [add, neg, relu, mul]
    assert graph.consumers("n") == [relu]
    assert graph.consumers("a") == [neg]


def test_cycle_is_reported_with_node_names() -> None:
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second")]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("b", 1, [1])])
    model = graphpass.Model.from_proto(helper.make_model(graph))
    with pytest.raises(graphpass.CycleError, match=r"first.*second|second.*first"):
        model.graph.topological_order()


def test_subgraph_capture_creates_edge_in_outer_graph() -> None:
    then_graph = helper.make_graph([helper.make_node("Relu", ["a"], ["t"])], "then", [],
                                   [helper.make_tensor_value_info("t", 1, [2])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                                   [helper.make_tensor_value_info("e", 1, [2])])
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_graph,
                         else_branch=else_graph),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", 1, [2]),
                     helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", 1, [2])])
    model = graphpass.Model.from_proto(helper.make_model(graph))
    add, if_node = model.graph.nodes
    assert if_node.captured_names == ("a",)
    assert (add, if_node, ("a", CAPTURE)) in set(model.graph.nx.edges(keys=True))
    # Rewriting the use inside the subgraph moves the capture.
    model.graph.replace_uses("a", "x")
    assert if_node.captured_names == ("x",)
    assert model.graph.consumers("a") == []


def test_copy_is_independent() -> None:
    model = graphpass.Model.from_proto(_chain_model())
    copy = model.copy()
    copy.graph.remove(copy.graph.nodes[-1], safe=False)
    assert len(model.graph) == 3
    assert model.to_proto() == _chain_model()


def test_build_graph_from_scratch_round_trips() -> None:
    graph = Graph("g", inputs=[helper.make_tensor_value_info("x", 1, [2])],
                  outputs=[helper.make_tensor_value_info("y", 1, [2])],
                  nodes=[Node("Relu", ["x"], ["y"])])
    model = graphpass.Model(graph, opset_imports={"": 18})
    proto = model.to_proto()
    onnx.checker.check_model(proto)
    assert graphpass.Model.from_proto(proto).to_proto() == proto
