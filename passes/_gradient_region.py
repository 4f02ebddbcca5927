"""The differentiable region of one graph: the nodes whose gradient a trainer builds.

The computation follows ONNX Runtime's gradient graph builder step by step, on the
graph's networkx view (:attr:`graphpass.Graph.nx`, edges keyed ``(value, slot)``):

1. *forward*: nodes reachable from the trainable weights, not entering a node
   through one of its stop edges (a weight's consumer counts when the weight's first
   use in it is not a stop edge);
2. the *loss nodes*: producers of the loss outputs that are forward-reachable and
   have a differentiable element type;
3. *backward*: nodes the loss nodes reach backwards through edges that are neither
   stop edges nor of a non-differentiable element type;
4. each weight's *entry nodes*: its consumers in the backward set (none: the weight
   is unreachable);
5. *visited*: the entry nodes and everything they reach forwards inside the backward
   set through differentiable, non-stop edges. The trainer asks for a gradient
   builder for exactly these nodes, and for the gradients of the values on the
   traversed edges (plus the weights and the losses).

Uses inside subgraphs (edge slot ``CAPTURE``) are edges like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import networkx as nx

from graphpass.ir import CAPTURE, Graph, Node
from graphpass.training.gradient_rules import GradientRules, NodeSite
from graphpass.training.value_types import TypeInfo

__all__ = ["Region", "differentiable_region", "names_of", "weight_bits"]

TypeOf = Callable[[str], TypeInfo]


@dataclass
class Region:
    """Where gradients flow in one graph (see the module docstring).

    Attributes:
        graph: The graph.
        forward: Nodes reachable from the seeds (step 1).
        loss_nodes: Producers of the differentiable losses (step 2).
        backward: Nodes the losses reach backwards (step 3).
        entries: For each seed, its consumers in ``backward`` (step 4).
        visited: Nodes whose gradient builder the trainer asks for (step 5).
        gradient_values: Values whose gradient the trainer builds.
        stops: Stop-edge input positions of each node.
    """

    graph: Graph
    forward: set[Node] = field(default_factory=set)
    loss_nodes: set[Node] = field(default_factory=set)
    backward: set[Node] = field(default_factory=set)
    entries: dict[str, set[Node]] = field(default_factory=dict)
    visited: set[Node] = field(default_factory=set)
    gradient_values: set[str] = field(default_factory=set)
    stops: Mapping[Node, frozenset[int]] = field(default_factory=dict)
    type_of: TypeOf = field(default=lambda name: TypeInfo(None))

    def site(self, node: Node, trainable: frozenset[str] = frozenset()) -> NodeSite:
        """The node as a condition sees it: which inputs and outputs need gradients."""
        needed = self.gradient_values
        types = [self.type_of(name) if name else TypeInfo(None) for name in node.inputs]
        outputs = [self.type_of(name) if name else TypeInfo(None) for name in node.outputs]
        return NodeSite(
            node,
            frozenset(i for i, name in enumerate(node.inputs) if name and name in needed),
            frozenset(i for i, name in enumerate(node.outputs) if name and name in needed),
            trainable,
            tuple(t.elem_type for t in types),
            tuple(t.rank for t in types),
            tuple(t.shape for t in types),
            tuple(t.shape for t in outputs),
        )

    def ordered(self) -> list[Node]:
        """The visited nodes in the graph's topological order."""
        return [node for node in self.graph.topological_order() if node in self.visited]


def _reach(view: nx.MultiDiGraph, sources: Iterable[Node]) -> set[Node]:
    sources = list(dict.fromkeys(sources))
    if not sources:
        return set()
    return {node for layer in nx.bfs_layers(view, sources) for node in layer}


def _consumers(graph: Graph, name: str) -> Iterator[tuple[Node, int]]:
    """``(node, first slot)`` for each node using ``name``; ``CAPTURE`` for subgraph use."""
    for node in graph.consumers(name):
        yield node, node.inputs.index(name) if name in node.inputs else CAPTURE


def differentiable_region(graph: Graph, seeds: Iterable[str], losses: Iterable[str],
                          rules: GradientRules, type_of: TypeOf) -> Region:
    """Compute the region of ``graph`` that gradients flow through.

    Args:
        graph: The graph.
        seeds: Values whose gradient is wanted (trainable weights, or a function's
            inputs that need a gradient).
        losses: Values whose gradient is given (the loss outputs).
        rules: The trainer's rules (stop edges, differentiable element types).
        type_of: The element type and rank of a value of this graph.
    """
    seeds = list(dict.fromkeys(seeds))
    stops = {node: rules.stop_inputs(NodeSite(node)) for node in graph}
    differentiable: dict[str, bool] = {}

    def is_differentiable(name: str) -> bool:
        known = differentiable.get(name)
        if known is None:
            known = differentiable[name] = rules.is_differentiable_type(type_of(name).elem_type)
        return known

    def not_stopped(u: Node, v: Node, key: tuple[str, int]) -> bool:
        return key[1] not in stops[v]

    def flows(u: Node, v: Node, key: tuple[str, int]) -> bool:
        return key[1] not in stops[v] and is_differentiable(key[0])

    region = Region(graph, stops=stops, type_of=type_of)
    starts = [node for name in seeds for node, slot in _consumers(graph, name)
              if slot not in stops[node]]
    region.forward = _reach(nx.subgraph_view(graph.nx, filter_edge=not_stopped), starts)

    for name in losses:
        producer = graph.producer(name)
        if producer is not None and producer in region.forward and is_differentiable(name):
            region.loss_nodes.add(producer)
    flow_view = nx.subgraph_view(graph.nx, filter_edge=flows)
    region.backward = _reach(nx.reverse_view(flow_view), region.loss_nodes)

    backward = region.backward
    for name in seeds:
        region.entries[name] = {node for node, _ in _consumers(graph, name) if node in backward}
    inside = nx.subgraph_view(graph.nx, filter_node=backward.__contains__, filter_edge=flows)
    region.visited = _reach(inside, (n for nodes in region.entries.values() for n in nodes))

    values = set(seeds)
    values.update(name for name in losses if graph.producer(name) in region.loss_nodes)
    visited = region.visited
    for node in visited:
        for _, target, key in inside.out_edges(node, keys=True):
            if target in visited:
                values.add(key[0])
    region.gradient_values = values
    return region


def weight_bits(region: Region, weights: list[str]) -> dict[Node, int]:
    """For each visited node, a bit set of the weights whose gradient passes through it.

    Bit ``i`` stands for ``weights[i]``; one pass in topological order.
    """
    index = {name: position for position, name in enumerate(weights)}
    bits: dict[Node, int] = {}
    for name, nodes in region.entries.items():
        if name in index:
            for node in nodes:
                bits[node] = bits.get(node, 0) | (1 << index[name])
    visited, stops, carried = region.visited, region.stops, region.gradient_values
    pred = region.graph.nx.pred
    for node in region.ordered():
        value = bits.get(node, 0)
        for source, keys in pred[node].items():
            if source in visited and any(key[1] not in stops[node] and key[0] in carried
                                         for key in keys):
                value |= bits.get(source, 0)
        bits[node] = value
    return bits


def names_of(bits: int, weights: list[str]) -> list[str]:
    """The weight names in a bit set (in the order of ``weights``)."""
    digits = bin(bits)[:1:-1]  # bit i at index i
    names = []
    position = digits.find("1")
    while position >= 0:
        names.append(weights[position])
        position = digits.find("1", position + 1)
    return names
