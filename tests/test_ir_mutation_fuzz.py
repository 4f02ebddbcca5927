"""Random sequences of IR mutations keep the bookkeeping exact (hypothesis).

Names come from a small pool so that mutations collide on purpose: defining a name
a subgraph captured, redefining a name, removing a producer, renaming into a
subgraph that defines the target. Whatever the sequence (including operations that
are refused with an error), the IR's edges, uses, free names and captures must match
a from-scratch recomputation, and the model must convert to a proto and back.
"""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
from _ir_consistency import assert_consistent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphpass import Attribute, Graph, InvalidModelError, Model, Node, Tensor

POOL = ["x", "c", "a", "b", "t", "u", "v", "w"]
_fresh = itertools.count()


def _start() -> Model:
    then = Graph("then", outputs=["t"], nodes=[Node("Neg", ["a"], ["t"], name="then_neg")])
    other = Graph("else", outputs=["u"], nodes=[Node("Abs", ["x"], ["u"], name="else_abs")])
    graph = Graph("main", inputs=["x", "c"], outputs=["y"], nodes=[
        Node("Relu", ["x"], ["a"], name="relu"),
        Node("If", ["c"], ["y"], name="if", attributes={"then_branch": then,
                                                       "else_branch": other})])
    return Model(graph, opset_imports={"": 18})


def _graphs(model: Model) -> list[Graph]:
    return [model.graph, *model.graph.subgraphs()]


def _names(data: st.DataObject, count: int) -> list[str]:
    return [data.draw(st.sampled_from([*POOL, ""])) for _ in range(count)]


def _new_node(data: st.DataObject) -> Node:
    inputs = _names(data, data.draw(st.integers(0, 3)))
    output = data.draw(st.sampled_from([*POOL, f"fresh{next(_fresh)}"]))
    return Node("Op", inputs, [output], name=f"n{next(_fresh)}")


def _mutate(model: Model, data: st.DataObject) -> None:
    graph = data.draw(st.sampled_from(_graphs(model)))
    nodes = graph.nodes
    action = data.draw(st.sampled_from([
        "append", "insert", "remove", "set_input", "set_outputs", "replace_uses", "rename",
        "attach", "detach", "initializer", "input", "sort", "outputs"]))
    node = data.draw(st.sampled_from(nodes)) if nodes else None
    if action == "append":
        graph.append(_new_node(data))
    elif action == "insert" and node is not None:
        batch = [_new_node(data) for _ in range(data.draw(st.integers(1, 2)))]
        if data.draw(st.booleans()):
            graph.insert_before(node, batch)
        else:
            graph.insert_after(node, batch)
    elif action == "remove" and node is not None:
        graph.remove(node, safe=data.draw(st.booleans()))
    elif action == "set_input" and node is not None:
        slot = data.draw(st.integers(0, len(node.inputs)))
        node.set_input(slot, data.draw(st.sampled_from([*POOL, ""])))
    elif action == "set_outputs" and node is not None:
        node.set_outputs([data.draw(st.sampled_from([*POOL, f"fresh{next(_fresh)}"]))])
    elif action == "replace_uses":
        old, new = data.draw(st.sampled_from(POOL)), data.draw(st.sampled_from(POOL))
        graph.replace_uses(old, new, include_outputs=data.draw(st.booleans()))
    elif action == "rename":
        old = data.draw(st.sampled_from(POOL))
        graph.rename_value(old, data.draw(st.sampled_from([*POOL, f"fresh{next(_fresh)}"])))
    elif action == "attach" and node is not None:
        body = Graph(f"g{next(_fresh)}", outputs=_names(data, 1) or ["x"],
                     nodes=[_new_node(data) for _ in range(data.draw(st.integers(0, 2)))])
        node.set_attribute(Attribute.from_value(data.draw(st.sampled_from(["body", "other"])),
                                                body))
    elif action == "detach" and node is not None:
        node.remove_attribute(data.draw(st.sampled_from(["body", "other", "then_branch"])))
    elif action == "initializer":
        name = data.draw(st.sampled_from(POOL))
        if name in graph.initializers:
            graph.remove_initializer(name)
        else:
            graph.set_initializer(Tensor.from_array(name, np.zeros(1, np.float32)))
    elif action == "input":
        name = data.draw(st.sampled_from(POOL))
        if name in graph.input_names:
            graph.remove_input(name)
        else:
            graph.add_input(name)
    elif action == "sort":
        graph.sort()
    elif action == "outputs":
        graph.set_outputs([n for n in _names(data, data.draw(st.integers(0, 2))) if n])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_mutations_keep_the_ir_consistent(data: st.DataObject) -> None:
    model = _start()
    for _ in range(data.draw(st.integers(1, 25))):
        with contextlib.suppress(ValueError, KeyError, InvalidModelError):
            _mutate(model, data)  # if refused, the IR must be unchanged and consistent
        assert_consistent(model.graph)
    proto = model.to_proto()
    reloaded = Model.from_proto(proto)
    assert_consistent(reloaded.graph)
    assert reloaded.to_proto() == proto
    copy = model.copy()
    assert_consistent(copy.graph)
    assert copy.to_proto() == proto
