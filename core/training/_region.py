"""Where gradients flow: the nodes reverse-mode differentiation visits.

The same steps as ``lint-gradients`` takes (so that its ``graphpass`` rule set says
exactly what the engine does), on the graph's networkx view:

1. *forward*: nodes reachable from the values to differentiate (``wrt``), not
   entering a node through a stop-gradient input;
2. the *loss nodes*: producers of the seeded outputs that are forward-reachable and
   of a differentiable element type;
3. *backward*: nodes the loss nodes reach backwards through edges that are neither
   stop inputs nor of a non-differentiable element type;
4. each ``wrt`` value's *entry nodes*: its consumers in the backward set;
5. *visited*: the entry nodes and what they reach forwards inside the backward set
   through differentiable edges. These nodes need a builder; the values on the
   edges between them (and ``wrt`` and the seeds) get gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from graphpass.ir import CAPTURE, Graph, Node

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Region", "gradient_region"]


@dataclass
class Region:
    """The result of :func:`gradient_region` (see the module docstring).

    Attributes:
        graph: The graph.
        loss_nodes: Producers of the seeded outputs gradients start from.
        entries: For each ``wrt`` value, its consumers on the gradient path.
        visited: Nodes whose builder is needed.
        gradient_values: Values that get a gradient.
        stops: Stop-gradient input positions of each node.
    """

    graph: Graph
    loss_nodes: set[Node] = field(default_factory=set)
    entries: dict[str, set[Node]] = field(default_factory=dict)
    visited: set[Node] = field(default_factory=set)
    gradient_values: set[str] = field(default_factory=set)
    stops: Mapping[Node, frozenset[int]] = field(default_factory=dict)

    def ordered(self) -> list[Node]:
        """The visited nodes in the graph's order (topological)."""
        return [node for node in self.graph if node in self.visited]


def _reach(view: nx.MultiDiGraph, sources: Iterable[Node]) -> set[Node]:
    import networkx as nx

    sources = list(dict.fromkeys(sources))
    if not sources:
        return set()
    return {node for layer in nx.bfs_layers(view, sources) for node in layer}


def _consumers(graph: Graph, name: str) -> Iterator[tuple[Node, int]]:
    for node in graph.consumers(name):
        yield node, node.inputs.index(name) if name in node.inputs else CAPTURE


def gradient_region(graph: Graph, wrt: Iterable[str], losses: Iterable[str],
                    stop_inputs: Callable[[Node], frozenset[int]],
                    is_differentiable: Callable[[str], bool]) -> Region:
    """Compute the region of ``graph`` gradients flow through.

    Args:
        graph: The graph (sorted).
        wrt: The values whose gradient is wanted.
        losses: The values whose gradient is given.
        stop_inputs: The stop-gradient input positions of a node.
        is_differentiable: Whether a value's element type carries gradients.
    """
    import networkx as nx  # imported on first use, as the IR's view is

    wrt = list(dict.fromkeys(wrt))
    stops = {node: stop_inputs(node) for node in graph}
    known: dict[str, bool] = {}

    def differentiable(name: str) -> bool:
        found = known.get(name)
        if found is None:
            found = known[name] = is_differentiable(name)
        return found

    def not_stopped(u: Node, v: Node, key: tuple[str, int]) -> bool:
        return key[1] not in stops[v]

    def flows(u: Node, v: Node, key: tuple[str, int]) -> bool:
        return key[1] not in stops[v] and differentiable(key[0])

    region = Region(graph, stops=stops)
    starts = [node for name in wrt for node, slot in _consumers(graph, name)
              if slot not in stops[node]]
    forward = _reach(nx.subgraph_view(graph.nx, filter_edge=not_stopped), starts)
    losses = list(losses)
    for name in losses:
        producer = graph.producer(name)
        if producer is not None and producer in forward and differentiable(name):
            region.loss_nodes.add(producer)
    flow_view = nx.subgraph_view(graph.nx, filter_edge=flows)
    backward = _reach(nx.reverse_view(flow_view), region.loss_nodes)
    for name in wrt:
        region.entries[name] = {node for node, _ in _consumers(graph, name) if node in backward}
    inside = nx.subgraph_view(graph.nx, filter_node=backward.__contains__, filter_edge=flows)
    region.visited = _reach(inside, (n for nodes in region.entries.values() for n in nodes))
    values = set(wrt)
    values.update(name for name in losses if graph.producer(name) in region.loss_nodes)
    for node in region.visited:
        for _, target, key in inside.out_edges(node, keys=True):
            if target in region.visited:
                values.add(key[0])
    region.gradient_values = values
    return region
