"""Reverse-mode differentiation of an ONNX graph, written as standard ONNX nodes.

:func:`differentiate` appends to a model's main graph the nodes that compute the
gradients of seeded outputs (a loss, or any outputs with given cotangents) with
respect to chosen values (trainable weights, inputs):

1. the region gradients flow through is found (:mod:`graphpass.training._region`):
   forward from the ``wrt`` values, backward from the seeds, through inputs the
   builders declare differentiable and values of a float type;
2. every node in it must have a :class:`~graphpass.training.GradientBuilder` for its
   operator at the model's opset, no refusal of that builder may apply, and no
   node may hold subgraphs: otherwise a :class:`~graphpass.training.GradientError`
   names the node (nothing is changed then);
   Values of a float type carry gradients, and so do values that are not tensors (a
   sequence of float tensors would carry one; no builder handles them, so such a
   path is refused instead of silently giving a wrong gradient);
3. the nodes are visited in reverse topological order; each builder gets the summed
   gradients of its outputs (a value used several times gets the sum of the
   gradients from every use) and emits the gradients of the inputs that need one.
   Nodes no gradient reaches emit nothing: dead backward branches are never built.

Activations are kept, not recomputed: the backward nodes read the forward values
directly, so one graph computes the forward pass and then the backward pass, and
the runtime keeps each forward value alive until its last backward use. Builders
recompute only cheap per-node statistics (a normalization's mean and variance);
values the forward node computes anyway and the backward pass needs (a ``Dropout``
mask, ``MaxPool`` indices) are added to the forward node as extra outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from graphpass.ir import CAPTURE, Graph, Model, Node
from graphpass.training._builder import (
    GradientBuilder,
    GradientContext,
    GradientError,
    node_label,
    op_label,
)
from graphpass.training._emit import MIN_OPSET, Emitter, NameScope, names_in
from graphpass.training._region import Region, gradient_region
from graphpass.training._table import BuilderTable
from graphpass.training._value_types import ModelTypes, TypeInfo
from graphpass.training.rules import DIFFERENTIABLE_TYPES, NodeSite, normalize_domain

__all__ = ["CARRIER_TYPES", "Gradients", "differentiate", "model_opset", "prune"]

CARRIER_TYPES = DIFFERENTIABLE_TYPES | {0}
"""Element types gradients flow through: the float types, and values that are not
tensors (sequences, optionals): a gradient through one is refused loudly (no builder)
rather than dropped."""


@dataclass
class Gradients:
    """What :func:`differentiate` added.

    Attributes:
        values: For each ``wrt`` value, the name of its gradient (``None``: no
            gradient reaches it).
        nodes: The backward nodes appended, in order.
        visited: How many forward nodes were differentiated.
    """

    values: dict[str, str | None] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    visited: int = 0
    triggers: dict[Node, str] = field(default_factory=dict)
    """For each backward node a builder emitted, the output gradient of the forward node
    it differentiates (what the backward node waits for; used to recompute late)."""
    types: Callable[[str], TypeInfo] = field(default=lambda name: TypeInfo(None))
    """The types of the forward values (as the builders saw them)."""
    seeds: frozenset[str] = frozenset()
    """The cotangents the backward pass starts from (ones for a scalar loss)."""

    @property
    def missing(self) -> list[str]:
        """The ``wrt`` values no gradient reaches."""
        return [name for name, grad in self.values.items() if grad is None]


def model_opset(model: Model, domain: str = "") -> int:
    """The opset version ``model`` imports for ``domain`` (0 if none)."""
    domain = normalize_domain(domain)
    for key, version in model.opset_imports.items():
        if normalize_domain(key) == domain:
            return int(version)
    return 0


class _Engine:
    def __init__(self, model: Model, table: BuilderTable, names: NameScope | None):
        self.model = model
        self.graph = model.graph
        self.table = table
        self.opset = model_opset(model)
        if self.opset < MIN_OPSET:
            raise GradientError(
                f"the model imports ai.onnx opset {self.opset}; graphpass builds gradient "
                f"graphs at opset {MIN_OPSET} or later",
                hint="convert the model first (onnx.version_converter.convert_version)")
        if not self.graph.is_sorted():
            self.graph.sort()
        self.types = _snapshot_types(model)
        self.names = names or NameScope(names_in(self.graph))
        self._builders: dict[Node, GradientBuilder | None] = {}
        self.triggers: dict[Node, str] = {}

    def builder(self, node: Node) -> GradientBuilder | None:
        if node not in self._builders:
            self._builders[node] = self.table.find(node.domain, node.op_type,
                                                   model_opset(self.model, node.domain))
        return self._builders[node]

    def stop_inputs(self, node: Node) -> frozenset[int]:
        builder = self.builder(node)
        if builder is None:
            return frozenset()
        return frozenset(i for i in range(len(node.inputs)) if not builder.is_differentiable(i))

    def is_differentiable(self, name: str) -> bool:
        elem_type = self.types(name).elem_type
        return elem_type is None or elem_type in CARRIER_TYPES

    def site(self, region: Region, node: Node, trainable: frozenset[str]) -> NodeSite:
        needed = region.gradient_values
        infos = [self.types(name) if name else TypeInfo(None) for name in node.inputs]
        return NodeSite(
            node,
            frozenset(i for i, name in enumerate(node.inputs) if name and name in needed),
            frozenset(i for i, name in enumerate(node.outputs) if name and name in needed),
            trainable, tuple(t.elem_type for t in infos), tuple(t.rank for t in infos))

    # ----------------------------------------------------------------- checks
    def check(self, region: Region, wrt: Sequence[str]) -> None:
        for name in wrt:
            captured = [use.node for use in self.graph.uses(name)
                        if use.slot == CAPTURE and use.node is not None]
            if captured:
                node = captured[0]
                raise GradientError(
                    f"{name!r} is read inside a subgraph of node {node_label(node)!r} "
                    f"({op_label(node)}); graphpass does not differentiate control flow",
                    hint="freeze it, or remove the control flow (If/Loop/Scan) from the path",
                    node=node_label(node))
        trainable = frozenset(wrt)
        for node in region.ordered():
            if any(True for _ in node.subgraphs()):
                raise GradientError(
                    f"node {node_label(node)!r} ({op_label(node)}) holds subgraphs; graphpass "
                    "does not differentiate control flow (If, Loop, Scan)",
                    hint="freeze the weights whose gradient passes through it (option "
                         "frozen), or rewrite that part of the model without control flow",
                    node=node_label(node))
            builder = self.builder(node)
            if builder is None:
                raise self._missing(node)
            refusal = builder.refusal_for(self.site(region, node, trainable))
            if refusal is not None:
                raise GradientError(
                    f"cannot differentiate node {node_label(node)!r} ({op_label(node)}): "
                    f"{refusal.reason} ({refusal.describe()})", hint=refusal.hint,
                    node=node_label(node))

    def _missing(self, node: Node) -> GradientError:
        label = op_label(node)
        if node.is_function_call:
            return GradientError(
                f"node {node_label(node)!r} calls the model-local function {label}, which "
                "has no gradient builder",
                hint="run inline-functions first, or register a gradient builder for it",
                node=node_label(node))
        others = self.table.versions(node.domain, node.op_type)
        if others:
            opset = model_opset(self.model, node.domain)
            covered = ", ".join(b.name for b in others)
            return GradientError(
                f"no gradient builder for {label} at opset {opset} (node "
                f"{node_label(node)!r}); builders exist for {covered}",
                hint="convert the model to an opset the builders cover", node=node_label(node))
        return GradientError(
            f"no gradient builder for {label} (node {node_label(node)!r})",
            hint="freeze the weights whose gradient passes through it (option frozen), "
                 "rewrite that part of the model, or register a builder for it in a plugin "
                 "(hook graphpass_gradient_builders)", node=node_label(node))

    # --------------------------------------------------------------- backward
    def run(self, wrt: Sequence[str], seeds: Mapping[str, str | None]) -> Gradients:
        region = gradient_region(self.graph, wrt, seeds, self.stop_inputs,
                                 self.is_differentiable)
        self.check(region, wrt)
        emit = Emitter(self.graph, self.opset, self.names, self.types)
        pending: dict[str, list[str]] = {}
        for name, cotangent in seeds.items():
            if name not in region.gradient_values:
                continue
            emit.prefix = f"{name}_seed"
            pending.setdefault(name, []).append(
                cotangent if cotangent is not None else emit.filled_like(name, 1.0))
        seeded = frozenset(g for grads in pending.values() for g in grads)
        ordered = region.ordered()
        for node in reversed(ordered):
            self._backward(node, region, pending, emit)
        result = Gradients(nodes=emit.nodes, visited=len(ordered), triggers=self.triggers,
                           types=self.types, seeds=seeded)
        for name in wrt:
            grads = pending.get(name)
            if grads:
                emit.prefix = f"{name}_grad"
                result.values[name] = emit.add_all(grads)
            else:
                result.values[name] = None
        return result

    def _backward(self, node: Node, region: Region, pending: dict[str, list[str]],
                  emit: Emitter) -> None:
        needed = region.gradient_values
        emit.prefix = f"{node_label(node)}_grad"
        outputs: list[str | None] = []
        for name in node.outputs:
            grads = pending.pop(name, None) if name and name in needed else None
            grad = emit.add_all(grads) if grads else None
            if grad is not None:
                emit.note_type(grad, self.types(name))  # a gradient is typed like its value
            outputs.append(grad)
        if all(g is None for g in outputs):
            return  # no gradient reaches it: a dead backward branch
        builder = self.builder(node)
        assert builder is not None  # checked
        wanted = frozenset(i for i, name in enumerate(node.inputs)
                           if name and name in needed and builder.is_differentiable(i))
        if not wanted:
            return
        context = GradientContext(node, model_opset(self.model, node.domain), emit, outputs,
                                  wanted, emit.type_of, self._require_output)
        start = len(emit.nodes)
        returned = builder.build(context)
        trigger = next(g for g in outputs if g is not None)
        for emitted in emit.nodes[start:]:
            self.triggers[emitted] = trigger
        given = (dict(returned) if isinstance(returned, Mapping)
                 else dict(enumerate(returned)))
        for index in sorted(wanted):
            grad = given.get(index)
            if grad:
                pending.setdefault(node.inputs[index], []).append(grad)

    def _require_output(self, node: Node, index: int) -> str:
        outputs = list(node.outputs)
        while len(outputs) <= index:
            outputs.append("")
        if not outputs[index]:
            outputs[index] = self.names.fresh(f"{node_label(node)}.output{index}")
            node.set_outputs(outputs)
        return outputs[index]


def _snapshot_types(model: Model) -> Callable[[str], TypeInfo]:
    """The types of the forward values, looked up once before anything is added."""
    types = ModelTypes(model)
    graph = model.graph
    known: dict[str, TypeInfo] = {}
    names = [*graph.input_names, *graph.initializers]
    for node in graph:
        names.extend(n for n in node.inputs if n)
        names.extend(n for n in node.outputs if n)
    for name in dict.fromkeys(names):
        known[name] = types.of(graph, name)
    unknown = TypeInfo(None)
    return lambda name: known.get(name, unknown)


def _builtin() -> BuilderTable:
    from graphpass.training._builders import builtin_builders

    return BuilderTable(builtin_builders())


def differentiate(model: Model, wrt: Sequence[str], seeds: Mapping[str, str | None], *,
                  builders: BuilderTable | None = None,
                  names: NameScope | None = None) -> Gradients:
    """Append the backward pass to ``model``'s main graph (in place).

    Args:
        model: The model (its main graph is sorted first if it is not).
        wrt: The values to differentiate with respect to (initializers, graph inputs).
        seeds: The outputs gradients start from, each with the name of its cotangent
            (a value of the same shape), or ``None`` for ones (a scalar loss).
        builders: The builders to use (default: the built-in ones; for plugins' too,
            :func:`~graphpass.training.registered_builders` of a registry).
        names: Where fresh names come from (default: a scope of the model's names).

    Returns:
        The gradient of each ``wrt`` value and the nodes added.

    Raises:
        GradientError: A node on the gradient path has no builder, a builder refuses
            it, it holds subgraphs, or the model's opset is too old; the model is not
            changed then.
    """
    engine = _Engine(model, builders if builders is not None else _builtin(), names)
    return engine.run(list(wrt), seeds)


def prune(graph: Graph, keep: Sequence[str]) -> int:
    """Remove the nodes none of ``keep`` depends on; return how many were removed."""
    live = set(keep)
    dead: list[Node] = []
    for node in reversed(graph.nodes):
        if any(name and name in live for name in node.outputs):
            live.update(name for name in node.inputs if name)
            live.update(node.captured_names)
        else:
            dead.append(node)
    for node in dead:
        graph.remove(node, safe=False)
    return len(dead)
