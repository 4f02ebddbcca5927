"""Recompute a graph's bookkeeping from scratch and compare (not a test module).

The IR updates edges, uses, free names and captures incrementally on every
mutation. ``assert_consistent`` derives all of it again from the nodes' inputs and
outputs alone and checks that the two agree, in the graph and every subgraph.
"""

from __future__ import annotations

from collections import Counter

from graphpass.ir import CAPTURE, Graph, Node


def _defined(graph: Graph) -> set[str]:
    names = set(graph.input_names) | set(graph.initializers) | set(graph.sparse_initializers)
    for node in graph:
        names.update(name for name in node.outputs if name)
    return names


def free_names(graph: Graph) -> Counter[str]:
    """Names ``graph`` uses and does not define, with their number of uses."""
    defined = _defined(graph)
    used: Counter[str] = Counter()
    for node in graph:
        used.update(name for name in node.inputs if name)
        used.update(set(captured_names(node)))  # one CAPTURE use per node
    used.update(name for name in graph.output_names)
    return Counter({name: count for name, count in used.items() if name not in defined})


def captured_names(node: Node) -> Counter[str]:
    """For each outer name, the number of ``node``'s subgraphs that use it."""
    captured: Counter[str] = Counter()
    for subgraph in node.subgraphs():
        captured.update(set(free_names(subgraph)))
    return captured


def assert_consistent(graph: Graph) -> None:
    """Check every derived structure of ``graph`` (and of its subgraphs)."""
    nodes = list(graph)
    assert len(graph) == len(nodes) == len(set(map(id, nodes)))
    assert list(reversed(graph)) == nodes[::-1]
    assert all(node.graph is graph for node in nodes)

    producers: dict[str, tuple[Node, int]] = {}
    for node in nodes:
        for index, name in enumerate(node.outputs):
            if name:
                assert name not in producers, f"{name!r} produced twice"
                producers[name] = (node, index)
    for name, (node, index) in producers.items():
        assert graph.producer(name) is node and graph.value(name).output_index == index
    for name, value in graph.values.items():
        if name not in producers:
            assert value.producer is None, name

    expected_uses: dict[str, Counter[tuple[int, int]]] = {}
    for node in nodes:
        for slot, name in enumerate(node.inputs):
            if name:
                expected_uses.setdefault(name, Counter())[(id(node), slot)] += 1
        assert Counter(node.captured_names) == Counter(set(captured_names(node)))
        for name in captured_names(node):
            expected_uses.setdefault(name, Counter())[(id(node), CAPTURE)] += 1
        for subgraph in node.subgraphs():
            assert subgraph.parent is node and subgraph.parent_graph is graph
    for slot, name in enumerate(graph.output_names):
        expected_uses.setdefault(name, Counter())[(0, slot)] += 1
    for name, value in graph.values.items():
        actual = Counter((id(u.node) if u.node is not None else 0, u.slot) for u in value.uses)
        assert actual == expected_uses.get(name, Counter()), name
    assert set(expected_uses) <= set(graph.values)

    expected_edges = Counter()
    for name, uses in expected_uses.items():
        if name in producers:
            producer = producers[name][0]
            for (consumer_id, slot), count in uses.items():
                if consumer_id:
                    expected_edges[(id(producer), consumer_id, (name, slot))] += count
    actual_edges = Counter((id(u), id(v), key) for u, v, key in graph.nx.edges(keys=True))
    assert actual_edges == expected_edges
    assert set(map(id, graph.nx.nodes)) == set(map(id, nodes))

    assert Counter(graph._free) == free_names(graph)
    assert set(graph.free_names) == set(free_names(graph))
    for node in nodes:
        for subgraph in node.subgraphs():
            assert_consistent(subgraph)
