"""Activation recomputation: cheap forward values computed again in the backward pass.

A training graph keeps every forward value a backward node reads alive from the forward
pass to that backward node. With a policy other than ``none``,
:func:`recompute` gives some of them up: the nodes that computed them are written a
second time, right before the first backward node that reads them, and the backward
nodes read the copies. The runtime frees the forward value after its last forward use.

Policies:

* ``none`` (the default): every value is kept;
* ``elementwise``: the values of cheap nodes (elementwise arithmetic and activations
  such as ``Gelu``, ``Erf``, ``Tanh``, ``Sigmoid``, ``Add``/``Mul`` of kept values,
  ``Cast``, and views and copies such as ``Reshape``, ``Transpose``, ``Expand``).

The nodes a policy allows form *segments* (connected groups of such nodes); a segment
is recomputed when the values it stops keeping are larger than the values it must keep
instead (its inputs produced by other nodes): the chain of a ``Gelu`` written with
``Erf`` keeps its input instead of four tensors of the same size; a residual ``Add``,
whose input would have to be kept instead, is left alone. Sizes come from the static
shapes (a symbolic dimension counts as :data:`SYMBOLIC_DIM`).

**Late, not hoisted.** The copies read their inputs through a ``Reshape`` whose shape
depends on one element of the gradient that reaches the backward node (``Shape(x) +
0 * IsNaN(dy[0])``, in ``int64``: exact for any value of ``dy``). That data dependency
is what makes a runtime compute the copies when the backward pass gets there, not
earlier (onnxruntime orders nodes by a depth-first walk from the outputs, which could
otherwise reach a copy long before it is needed), and it keeps onnxruntime's
common-subexpression elimination from merging a copy with the forward node it copies
(same operator and same inputs). The ``Reshape`` is a view (no copy).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import onnx

from graphpass.ir import Graph, Node, numpy_dtype
from graphpass.training._builder import GradientError
from graphpass.training._emit import NameScope
from graphpass.training._value_types import TypeInfo

__all__ = ["ELEMENTWISE_OPS", "RECOMPUTE_POLICIES", "SYMBOLIC_DIM", "Recomputation",
           "RecomputePolicy", "recompute"]

RecomputePolicy = Literal["none", "elementwise"]

RECOMPUTE_POLICIES: tuple[str, ...] = ("none", "elementwise")
"""The values of the ``recompute`` option of ``build-training-graph``."""

SYMBOLIC_DIM = 64
"""The size a symbolic dimension counts as when segments are weighed."""

ELEMENTWISE_OPS = frozenset({
    # activations and unary arithmetic
    "Abs", "Ceil", "Celu", "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu",
    "HardSigmoid", "HardSwish", "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu",
    "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt",
    "Tan", "Tanh", "ThresholdedRelu", "Not", "IsNaN", "IsInf",
    # binary and n-ary arithmetic, comparisons, selection
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Mod", "PRelu",
    "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or",
    "Xor", "Clip",
    # types, views and copies
    "Cast", "CastLike", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
    "Expand", "Concat", "Slice", "Split",
})
"""The operators the ``elementwise`` policy recomputes (default domain only)."""

_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
"""Operators whose output shares its input's buffer (onnxruntime): releasing one frees
nothing by itself."""

_INDEXED_VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze"})
"""Views whose second input is an ``int64`` shape or axes."""

_CONSTANT_SOURCES = frozenset({"ConstantOfShape", "Range", "Shape", "Size"})
"""Deterministic operators whose output is constant when their inputs are."""

_POLICY_OPS: dict[str, frozenset[str]] = {"none": frozenset(), "elementwise": ELEMENTWISE_OPS}


@dataclass
class Recomputation:
    """What :func:`recompute` changed.

    Attributes:
        values: The forward values the backward pass now computes again, in order.
        nodes: The nodes added (the copies and their data dependencies).
        released_bytes: The estimated size of ``values`` (static shapes; a symbolic
            dimension counts as :data:`SYMBOLIC_DIM`).
        kept_bytes: The estimated size of the values kept instead (segment inputs that
            were not kept before).
    """

    values: list[str] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    released_bytes: int = 0
    kept_bytes: int = 0


def _check(policy: str) -> frozenset[str]:
    ops = _POLICY_OPS.get(policy)
    if ops is None:
        raise GradientError(f"unknown recompute policy {policy!r}",
                            hint=f"choose one of {', '.join(RECOMPUTE_POLICIES)}")
    return ops


class _Segments:
    """Union-find over nodes."""

    def __init__(self) -> None:
        self.parent: dict[Node, Node] = {}

    def find(self, node: Node) -> Node:
        root = node
        while self.parent[root] is not root:
            root = self.parent[root]
        while self.parent[node] is not root:
            self.parent[node], node = root, self.parent[node]
        return root

    def union(self, a: Node, b: Node) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def _after_forward(backward: Sequence[Node], position: Mapping[Node, int],
                   seeds: frozenset[str]) -> set[Node]:
    """The backward nodes that run after the forward pass.

    Builders move some of their nodes next to the forward node (a ``Clip``'s mask, the
    batch statistics): those read only forward values and run among the forward nodes,
    so they count as forward nodes here. The rest start at the first node that reads a
    value computed from the seeds.
    """
    if not seeds:
        return set(backward)
    reached = set(seeds)
    late: set[Node] = set()
    for node in sorted(backward, key=position.__getitem__):
        if any(name in reached for name in node.inputs):
            late.add(node)
            reached.update(name for name in node.outputs if name)
    if not late:
        return set(backward)
    start = min(position[node] for node in late)
    return {node for node in backward if position[node] >= start}


def recompute(graph: Graph, backward: Sequence[Node], triggers: Mapping[Node, str],
              policy: str, types: Callable[[str], TypeInfo], names: NameScope, *,
              trainable: frozenset[str] = frozenset(),
              seeds: frozenset[str] = frozenset()) -> Recomputation:
    """Recompute the values ``policy`` allows in the backward pass (in place).

    Args:
        graph: The training graph (forward nodes, then ``backward``, in order).
        backward: The backward nodes.
        triggers: For each backward node, the gradient it waits for
            (:attr:`~graphpass.training._autodiff.Gradients.triggers`).
        policy: One of :data:`RECOMPUTE_POLICIES`.
        types: The types of the forward values.
        names: Where fresh names come from.
        trainable: The trainable weights (still initializers; inputs of the training
            graphs, so copies that read them wait for the backward pass too).
        seeds: The cotangents the backward pass starts from (a value needed by the
            nodes that read them is needed right after the forward pass: kept).

    Raises:
        GradientError: ``policy`` is unknown.
    """
    ops = _check(policy)
    done = Recomputation()
    if not ops or not backward:
        return done
    order = list(graph.nodes)
    position = {node: i for i, node in enumerate(order)}
    backward_set = _after_forward(backward, position, seeds)
    first_backward = min(position[node] for node in backward_set)
    forward = order[:first_backward]
    producer: dict[str, Node] = {name: node for node in forward for name in node.outputs
                                 if name}
    initializers = graph.initializers
    outputs = set(graph.output_names)

    # Values computed from constants and frozen weights only, which onnxruntime folds
    # (a copy that read only those would wait for nothing): a CastLike of a constant, a
    # Shape or Size of a value of static shape count too.
    constants: set[str] = set()

    def fixed(name: str) -> bool:
        return not name or name in constants or (name in initializers
                                                 and name not in trainable)

    for node in forward:
        if node.domain:
            continue
        op = node.op_type
        if (op == "Constant"
                or (op == "CastLike" and fixed(node.inputs[0]))
                or (op in ("Shape", "Size") and types(node.inputs[0]).static_shape is not None)
                or (node.inputs and op in ops | _CONSTANT_SOURCES
                    and all(fixed(name) for name in node.inputs))):
            constants.update(name for name in node.outputs if name)

    def constant(name: str) -> bool:
        return name in constants

    def free(name: str) -> bool:  # always available (weights, inputs): nothing to keep
        return not name or name in initializers or name not in producer or constant(name)

    def routable(name: str) -> bool:  # a value a copy must wait for (not a constant)
        return bool(name) and not constant(name) and (name not in initializers
                                                      or name in trainable)

    uses: dict[str, list[Node]] = {}
    for node in order:
        for name in dict.fromkeys((*node.inputs, *node.captured_names)):
            if name:
                uses.setdefault(name, []).append(node)

    def kept(name: str) -> bool:  # read by a backward node
        return not free(name) and any(u in backward_set for u in uses.get(name, ()))

    def releasable(name: str) -> bool:  # read late only by backward nodes
        return (kept(name) and name not in outputs
                and all(u in backward_set or position[u] < first_backward
                        for u in uses.get(name, ())))

    chosen = [node for node in forward
              if node.op_type in ops and not node.domain
              and not any(True for _ in node.subgraphs())]
    segments = _Segments()
    for node in chosen:
        segments.parent[node] = node
    for node in chosen:
        for name in node.inputs:
            source = producer.get(name) if name else None
            if source is not None and source in segments.parent:
                segments.union(node, source)
    groups: dict[Node, list[Node]] = {}
    for node in chosen:
        groups.setdefault(segments.find(node), []).append(node)

    for members in groups.values():
        member_set = set(members)
        released = [name for node in members for name in node.outputs if name
                    and releasable(name)]
        if not released:
            continue
        needed: set[Node] = set()
        stack = [producer[name] for name in released]
        while stack:
            node = stack.pop()
            if node in needed:
                continue
            needed.add(node)
            stack.extend(producer[name] for name in node.inputs
                         if name in producer and producer[name] in member_set
                         and not constant(name))
        ordered = sorted(needed, key=position.__getitem__)
        made = {name for node in ordered for name in node.outputs if name}
        boundary = list(dict.fromkeys(name for node in ordered for name in node.inputs
                                      if name and name not in made))
        cost = sum(_bytes(types(name)) for name in boundary
                   if not free(name) and not kept(name))
        gain = sum(_bytes(types(name)) for name in released
                   if producer[name].op_type not in _VIEWS)
        if gain <= cost:
            continue
        consumers = [u for name in released for u in uses[name] if u in backward_set]
        anchor = min(consumers, key=position.__getitem__)
        trigger = triggers.get(anchor)
        if trigger is None or trigger in seeds:
            continue  # needed as the backward pass starts: nothing to wait for
        nodes, copies = _emit_copies(ordered, boundary, trigger, routable, names)
        graph.insert_before(anchor, nodes)
        for node in dict.fromkeys(consumers):  # only the backward readers: linear
            for index, name in enumerate(node.inputs):
                if name in copies and name in released:
                    node.set_input(index, copies[name])
        done.values.extend(released)
        done.nodes.extend(nodes)
        done.released_bytes += gain
        done.kept_bytes += cost
    return done


def _emit_copies(ordered: Sequence[Node], boundary: Sequence[str], trigger: str,
                 routable: Callable[[str], bool],
                 names: NameScope) -> tuple[list[Node], dict[str, str]]:
    """Copies of ``ordered`` that read ``boundary`` through a data dependency on ``trigger``.

    Returns the nodes and, for each original output (and routed input), its copy.
    """
    nodes: list[Node] = []
    prefix = f"{trigger}.recompute"

    def node(op_type: str, inputs: Sequence[str], **attributes: object) -> str:
        output = names.fresh(f"{prefix}/{op_type}")
        nodes.append(Node(op_type, list(inputs), [output], name=names.fresh(
            f"{prefix}/{op_type}"), attributes=attributes))
        return output

    def ints(values: Sequence[int]) -> str:
        array = np.array(list(values), dtype=np.int64)
        return node("Constant", [], value=onnx.numpy_helper.from_array(array))

    copies: dict[str, str] = {}
    made = {name for node in ordered for name in node.outputs if name}
    zero: str | None = None

    def depend(name: str, *, data: bool) -> str:
        """``name`` again, through a node that waits for ``trigger`` (exact, no copy)."""
        nonlocal zero
        if zero is None:  # 0 * IsNaN(dy[0]) as [1] int64: exact for any dy, even empty
            first = node("Slice", [node("Reshape", [trigger, ints([-1])]), ints([0]),
                                   ints([1])])
            count = node("ReduceSum", [node("Cast", [node("IsNaN", [first])],
                                            to=onnx.TensorProto.INT64)], keepdims=1)
            zero = node("Mul", [count, ints([0])])
        if not data:  # an int64 shape or axes input: itself plus zero
            return node("Add", [name, zero])
        return node("Reshape", [name, node("Add", [node("Shape", [name]), zero])])

    routes: dict[Node, dict[int, str]] = {}
    for original in ordered:
        if any(name in made for name in original.inputs):
            continue  # waits for another copy already
        inputs = list(original.inputs)
        if original.op_type in _INDEXED_VIEWS and len(inputs) > 1 and inputs[1]:
            # a view reads its shape through the dependency: a Reshape before it would
            # be fused with it by onnxruntime (and the dependency lost)
            routes[original] = {1: depend(inputs[1], data=False)}
        else:
            for name in inputs:
                if routable(name) and name not in copies:
                    copies[name] = depend(name, data=True)
            routes[original] = {i: copies[name] for i, name in enumerate(inputs)
                                if routable(name)}
    for original in ordered:
        duplicate = original.copy()
        duplicate.name = names.fresh(f"{original.name or original.op_type}.recompute")
        routed = routes.get(original, {})
        duplicate.set_inputs([routed.get(i, copies.get(name, name))
                              for i, name in enumerate(original.inputs)])
        fresh = []
        for name in original.outputs:
            if name:
                copies[name] = names.fresh(f"{name}.recompute")
            fresh.append(copies[name] if name else "")
        duplicate.set_outputs(fresh)
        nodes.append(duplicate)
    return nodes, copies


def _bytes(info: TypeInfo) -> int:
    if info.shape is None:
        return 0
    count = 1
    for dim in info.shape:
        count *= dim if isinstance(dim, int) and dim >= 0 else SYMBOLIC_DIM
    itemsize = 4
    if info.elem_type:
        try:
            itemsize = np.dtype(numpy_dtype(info.elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 4
    return count * itemsize
