"""The differentiable region of one graph: the nodes whose gradient a trainer builds.

One walk for both users: ``lint-gradients`` judges the region a trainer's rules give
(:func:`differentiable_region`), and graphpass's own reverse-mode differentiation
(:mod:`graphpass.training._autodiff`) builds gradients for the region its builders give
(:func:`gradient_region`), so that the ``graphpass`` rule set says exactly what the
engine does.

The computation follows ONNX Runtime's gradient graph builder step by step, on the
graph's edges (those of :attr:`graphpass.Graph.nx`: one per use of a value, keyed
``(value, slot)``; they are listed once per region, straight from the IR, which costs
less than building and filtering networkx views):

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

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from graphpass.ir import CAPTURE, Graph, Node
from graphpass.training._value_types import TypeInfo
from graphpass.training.rules import GradientRules, NodeSite

__all__ = ["Region", "differentiable_region", "gradient_region", "input_bits", "names_of",
           "weight_bits"]

TypeOf = Callable[[str], TypeInfo]
_ABSENT = TypeInfo(None)
Edge = tuple[Node, str, int]
"""The other end of an edge, and its key: ``(node, value name, input slot)``."""


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
        pred: Each node's incoming edges: ``(producer, value, slot)``.
        succ: Each node's outgoing edges: ``(consumer, value, slot)``.
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
    pred: Mapping[Node, list[Edge]] = field(default_factory=dict)
    succ: Mapping[Node, list[Edge]] = field(default_factory=dict)

    _sites: dict[Node, NodeSite] = field(default_factory=dict, repr=False)

    def site(self, node: Node, trainable: frozenset[str] = frozenset(), *,
             loss_added: bool = False) -> NodeSite:
        """The node as a condition sees it: which inputs and outputs need gradients.

        Args:
            node: A node of the graph.
            trainable: The trainable weights the site names.
            loss_added: Whether the trainer adds a loss block (see ``NodeSite``).
        """
        known = self._sites.get(node)
        if known is None:  # a hot path: a site for every node a condition looks at
            needed, type_of = self.gradient_values, self.type_of
            inputs, outputs = node.inputs, node.outputs
            types = [type_of(name) if name else _ABSENT for name in inputs]
            elem_types, shapes = zip(*types, strict=True) if types else ((), ())
            known = self._sites[node] = NodeSite(
                node,
                frozenset([i for i, name in enumerate(inputs) if name and name in needed]),
                frozenset([i for i, name in enumerate(outputs) if name and name in needed]),
                trainable,
                elem_types,
                tuple([None if shape is None else len(shape) for shape in shapes]),
                shapes,
                tuple([type_of(name).shape if name else None for name in outputs]),
                loss_added,
            )
        if known.trainable is not trainable and known.trainable != trainable:
            return dataclasses.replace(known, trainable=trainable, loss_added=loss_added)
        if known.loss_added != loss_added:
            return dataclasses.replace(known, loss_added=loss_added)
        return known

    def ordered(self) -> list[Node]:
        """The visited nodes in the graph's topological order."""
        return [node for node in self.graph.topological_order() if node in self.visited]


def _edges(graph: Graph) -> tuple[dict[Node, list[Edge]], dict[Node, list[Edge]]]:
    """Every node's incoming and outgoing edges (one per use of a value computed here)."""
    nodes = list(graph)
    pred: dict[Node, list[Edge]] = {node: [] for node in nodes}
    succ: dict[Node, list[Edge]] = {node: [] for node in nodes}
    # The producers in one dict (a hot loop: one lookup per input of the graph).
    producer_of = {name: node for node in nodes for name in node.outputs if name}.get
    for node in nodes:
        incoming = pred[node]
        for slot, name in enumerate(node.inputs):
            if name:
                producer = producer_of(name)
                if producer is not None:
                    incoming.append((producer, name, slot))
                    succ[producer].append((node, name, slot))
        for name in node.captured_names:
            producer = producer_of(name)
            if producer is not None:
                incoming.append((producer, name, CAPTURE))
                succ[producer].append((node, name, CAPTURE))
    return pred, succ


def _consumers(graph: Graph, name: str) -> Iterator[tuple[Node, int]]:
    """``(node, first slot)`` for each node using ``name``; ``CAPTURE`` for subgraph use."""
    for node in graph.consumers(name):
        yield node, node.inputs.index(name) if name in node.inputs else CAPTURE


def differentiable_region(graph: Graph, seeds: Iterable[str], losses: Iterable[str],
                          rules: GradientRules, type_of: TypeOf) -> Region:
    """Compute the region of ``graph`` that gradients flow through, by a trainer's rules.

    Args:
        graph: The graph.
        seeds: Values whose gradient is wanted (trainable weights, or a function's
            inputs that need a gradient).
        losses: Values whose gradient is given (the loss outputs).
        rules: The trainer's rules (stop edges, differentiable element types).
        type_of: The element type and rank of a value of this graph.
    """
    no_stops: frozenset[int] = frozenset()
    operators_with_stops: dict[tuple[str, str], bool] = {}  # asked once per operator

    def stop_inputs(node: Node) -> frozenset[int]:
        operator = (node.domain, node.op_type)
        has_stops = operators_with_stops.get(operator)
        if has_stops is None:
            has_stops = operators_with_stops[operator] = rules.has_stop_edges(*operator)
        return rules.stop_inputs(NodeSite(node)) if has_stops else no_stops

    return gradient_region(
        graph, seeds, losses, stop_inputs,
        lambda name: rules.is_differentiable_type(type_of(name).elem_type), type_of)


def gradient_region(graph: Graph, seeds: Iterable[str], losses: Iterable[str],
                    stop_inputs: Callable[[Node], frozenset[int]],
                    is_differentiable: Callable[[str], bool],
                    type_of: TypeOf | None = None) -> Region:
    """Compute the region of ``graph`` that gradients flow through.

    Args:
        graph: The graph.
        seeds: Values whose gradient is wanted (``wrt``).
        losses: Values whose gradient is given.
        stop_inputs: The stop-gradient input positions of a node.
        is_differentiable: Whether a value's element type carries gradients.
        type_of: The element type and shape of a value (for :meth:`Region.site`).
    """
    seeds = list(dict.fromkeys(seeds))
    losses = list(losses)
    stops = {node: stop_inputs(node) for node in graph}
    differentiable: dict[str, bool] = {}

    def differentiable_value(name: str) -> bool:
        known = differentiable.get(name)
        if known is None:
            known = differentiable[name] = is_differentiable(name)
        return known

    pred, succ = _edges(graph)
    region = Region(graph, stops=stops, pred=pred, succ=succ)
    if type_of is not None:
        region.type_of = type_of
    seed_uses = {name: list(_consumers(graph, name)) for name in seeds}
    starts = [node for uses in seed_uses.values() for node, slot in uses
              if slot not in stops[node]]
    # Three walks along the edges, each with its test written inline: they follow every
    # edge of the graph, and a call per edge was most of their time.
    forward = set(starts)
    pending = list(forward)
    while pending:
        for target, _, slot in succ[pending.pop()]:
            if target not in forward and slot not in stops[target]:
                forward.add(target)
                pending.append(target)
    region.forward = forward

    for name in losses:
        producer = graph.producer(name)
        if producer is not None and producer in forward and differentiable_value(name):
            region.loss_nodes.add(producer)
    backward = set(region.loss_nodes)
    pending = list(backward)
    while pending:
        node = pending.pop()
        node_stops = stops[node]
        for source, name, slot in pred[node]:  # along pred: node <- source
            if source not in backward and slot not in node_stops and (
                    differentiable[name] if name in differentiable
                    else differentiable_value(name)):
                backward.add(source)
                pending.append(source)
    region.backward = backward

    for name in seeds:
        region.entries[name] = {node for node, _ in seed_uses[name] if node in backward}

    visited = {n for nodes in region.entries.values() for n in nodes}
    values = set(seeds)
    pending = list(visited)
    while pending:
        node = pending.pop()
        for target, name, slot in succ[node]:
            if target in backward and slot not in stops[target] and (
                    differentiable[name] if name in differentiable
                    else differentiable_value(name)):
                values.add(name)  # a gradient flows along this edge
                if target not in visited:
                    visited.add(target)
                    pending.append(target)
    region.visited = visited
    values.update(name for name in losses if graph.producer(name) in region.loss_nodes)
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
    pred = region.pred
    for node in region.ordered():
        value = bits.get(node, 0)
        node_stops = stops[node]
        for source, name, slot in pred[node]:
            if source in visited and slot not in node_stops and name in carried:
                value |= bits.get(source, 0)
        bits[node] = value
    return bits


def input_bits(region: Region, bits: Mapping[Node, int], weights: list[str], node: Node,
               slot: int) -> int:
    """The weights whose gradient reaches ``node`` through its input ``slot`` alone.

    ``bits`` is :func:`weight_bits`'s, which joins every input of a node: a
    ``BatchNormalization`` there holds its own scale and shift with what flows into its
    ``X``. Bit ``i`` stands for ``weights[i]``.
    """
    if slot >= len(node.inputs) or slot in region.stops.get(node, frozenset()):
        return 0
    name = node.inputs[slot]
    value = 0
    if name in weights and node in region.entries.get(name, ()):
        value |= 1 << weights.index(name)
    for source, edge_value, edge_slot in region.pred.get(node, ()):
        if edge_slot == slot and source in region.visited and \
                edge_value in region.gradient_values:
            value |= bits.get(source, 0)
    return value


def names_of(bits: int, weights: list[str]) -> list[str]:
    """The weight names in a bit set (in the order of ``weights``)."""
    digits = bin(bits)[:1:-1]  # bit i at index i
    names = []
    position = digits.find("1")
    while position >= 0:
        names.append(weights[position])
        position = digits.find("1", position + 1)
    return names
