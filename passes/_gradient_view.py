"""The model as the trainer sees it: ``If`` nodes with a constant condition resolved.

ONNX Runtime folds constants before it builds gradients, and an ``If`` whose
condition folds to a constant is replaced by the branch it takes; what that branch
reads from outside is then an ordinary input of ordinary nodes. A condition is
constant when it is computed only from constants: ``Constant`` nodes, initializers
that are not trainable or frozen (those become graph inputs), and the ``Shape`` of a
value whose shape is fully known (ORT folds ``Shape`` so, not ``Size``).

:func:`resolve_constant_ifs` returns a copy of the model with those ``If`` nodes
replaced (nested ones too), or ``None`` when there is nothing to resolve; the caller's
model is never changed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import onnx

from graphpass.errors import GraphpassError
from graphpass.ir import Graph, Model, Node
from graphpass.training import ModelTypes, TypeInfo

__all__ = ["resolve_constant_ifs"]

_MAX_ELEMENTS = 1 << 16
_MAX_DEPTH = 64
_MAX_ROUNDS = 8


class _Constants:
    """Values of the main graph that fold to constants (small tensors only)."""

    def __init__(self, graph: Graph, variable: frozenset[str],
                 type_of: Callable[[str], TypeInfo]):
        self.graph = graph
        self.variable = variable
        self.type_of = type_of
        self.known: dict[str, np.ndarray | None] = {}

    def value(self, name: str, depth: int = 0) -> np.ndarray | None:
        if name in self.known:
            return self.known[name]
        found = self._value(name, depth) if depth < _MAX_DEPTH else None
        self.known[name] = found
        return found

    def _value(self, name: str, depth: int) -> np.ndarray | None:
        graph = self.graph
        if name in graph.initializers:
            tensor = graph.initializers[name]
            if name in self.variable or tensor.size > _MAX_ELEMENTS \
                    or name in graph.input_names:
                return None
            try:
                return np.asarray(tensor.numpy())
            except GraphpassError:  # external data not there: leave the branch undecided
                return None
        producer = graph.producer(name)
        if producer is None or producer.domain not in ("", "ai.onnx") \
                or any(True for _ in producer.subgraphs()):
            return None
        if producer.op_type == "Shape":
            return self._shape_value(producer)
        if producer.op_type == "Size":
            return None  # ORT folds Shape of a static shape, but not Size
        inputs = []
        for input_name in producer.inputs:
            if not input_name:
                inputs.append(None)
                continue
            value = self.value(input_name, depth + 1)
            if value is None:
                return None
            inputs.append(value)
        return self._evaluate(producer, inputs, name)

    def _shape_value(self, node: Node) -> np.ndarray | None:
        shape = self.type_of(node.inputs[0]).static_shape
        if shape is None:
            return None
        start, end = node.attribute("start", 0), node.attribute("end", None)
        return np.array(shape[slice(start, end)], dtype=np.int64)

    def _evaluate(self, node: Node, inputs: list[np.ndarray | None],
                  name: str) -> np.ndarray | None:
        from onnx.reference import ReferenceEvaluator

        from graphpass.ir.proto import node_to_proto

        feeds = {}
        graph_inputs = []
        for position, value in enumerate(inputs):
            if value is None:
                continue
            feed = f"in{position}"
            feeds[feed] = value
            graph_inputs.append(onnx.helper.make_tensor_value_info(
                feed, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
        proto = onnx.NodeProto()
        proto.CopyFrom(node_to_proto(node))
        del proto.input[:]
        proto.input.extend(f"in{i}" if value is not None else "" for i, value in
                           enumerate(inputs))
        opset = (self.graph.model.opset_imports.get("", 21) if self.graph.model else 21)
        model = onnx.helper.make_model(
            onnx.helper.make_graph([proto], "fold", graph_inputs,
                                   [onnx.ValueInfoProto(name=o) for o in node.outputs if o]),
            opset_imports=[onnx.helper.make_opsetid("", opset)])
        try:
            results = ReferenceEvaluator(model).run(None, feeds)
        except Exception:  # not evaluable here: treat as not constant
            return None
        outputs = [o for o in node.outputs if o]
        for output, result in zip(outputs, results, strict=False):
            self.known[output] = np.asarray(result)
        found = self.known.get(name)
        return found if found is not None and found.size <= _MAX_ELEMENTS else None


def _decide(graph: Graph, variable: frozenset[str],
            type_of: Callable[[str], TypeInfo]) -> dict[int, bool]:
    """The position of each ``If`` whose condition is constant, and the branch it takes."""
    constants = _Constants(graph, variable, type_of)
    decisions = {}
    for position, node in enumerate(graph):
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.inputs:
            value = constants.value(node.inputs[0])
            if value is not None and value.size == 1:
                decisions[position] = bool(value.reshape(-1)[0])
    return decisions


def _inline_branch(graph: Graph, node: Node, take_then: bool) -> bool:
    """Replace ``node`` by the nodes of the branch it takes (``False`` if names clash)."""
    attribute = node.attributes.get("then_branch" if take_then else "else_branch")
    if attribute is None or not attribute.graphs:
        return False
    branch = attribute.graphs[0]
    local = [name for inner in branch for name in inner.outputs if name]
    local.extend(branch.initializers)
    if any(graph.is_defined(name) for name in local) \
            or len(branch.output_names) != len(node.outputs):
        return False
    nodes = graph.nodes
    position = nodes.index(node)
    following = nodes[position + 1] if position + 1 < len(nodes) else None
    outputs = [(source, target) for source, target in
               zip(branch.output_names, node.outputs, strict=True) if target]
    moved = list(branch)
    node.remove_attribute("then_branch")
    node.remove_attribute("else_branch")
    graph.remove(node, safe=False)
    for tensor in branch.initializers.values():
        graph.set_initializer(tensor)
    added: list[Node] = []
    for inner in moved:
        branch.remove(inner, safe=False)
        added.append(inner)
    added.extend(Node("Identity", [source], [target], name=f"{node.name or 'If'}/{target}")
                 for source, target in outputs)
    if following is None:
        graph.extend(added)
    else:
        graph.insert_before(following, added)
    return True


def _types(model: Model) -> Callable[[str], TypeInfo]:
    types = ModelTypes(model)
    return functools.partial(types.of, model.graph)


def resolve_constant_ifs(model: Model, variable: frozenset[str]) -> Model | None:
    """A copy of ``model`` with constant-condition ``If`` nodes of the main graph resolved.

    Args:
        model: The model (not changed).
        variable: Initializers that are not constants (trainable and frozen weights).

    Returns:
        The copy, or ``None`` when no ``If`` has a constant condition.
    """
    if not any(node.op_type == "If" for node in model.graph):
        return None
    decisions = _decide(model.graph, variable, _types(model))
    if not decisions:
        return None
    view = model.copy()
    for _ in range(_MAX_ROUNDS):
        graph = view.graph
        nodes = graph.nodes
        changed = False
        for position, take_then in sorted(decisions.items(), reverse=True):
            changed |= _inline_branch(graph, nodes[position], take_then)
        if not changed:
            break
        decisions = _decide(graph, variable, _types(view))
        if not decisions:
            break
    return view
