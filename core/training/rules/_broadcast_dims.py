"""Dimensions that are 1 where the declared or inferred shape says only a symbol.

onnxruntime-training 1.19.2 decides from the *static* shapes it infers whether the
gradient of a broadcast ``Add`` or ``Mul`` input must be summed over a dimension
(``ComputeBroadcastBackwardAxes``): a dimension it knows as the number 1 facing a larger
one is summed over; a *symbolic* one (a ``dim_param`` such as ONNX's ``unk__0``, or a
missing value) is taken to equal the other side's, and nothing is summed. When that
symbolic dimension is 1 at run time and the other side's is larger, the input's gradient
keeps the output's shape. The classic case is Hugging Face Optimum's export of BERT:
``Gather(position_embeddings.weight, Slice(position_ids, 0, seq_len))`` where
``position_ids`` is a constant ``[1, max_positions]``. ONNX's shape inference cannot
type a ``Slice`` with computed ends, so the gathered rows are ``[unk__0, unk__1, H]``
instead of ``[1, T, H]``; ``Add`` with the ``[batch, T, H]`` word embeddings then gives
them a ``[batch, T, H]`` gradient, and ``GatherGrad`` reads only its first batch row
(relative error 0.88 on the zoo's BERT). The fix is to state the 1: a ``Reshape`` by a
constant ``[1, 0, 0]`` (``0`` keeps a dimension) computes the same values and ONNX infers
``[1, unk__1, H]`` from it.

:func:`proven_dims` proves dimensions from the graph itself (constants, initializers,
and the operators that carry them through: ``Slice`` along constant axes, ``Gather``,
``Unsqueeze``, ``Squeeze``, ``Reshape`` by a constant, ``Identity``, ``Cast`` ...), where
ONNX's inference gives up; :func:`hidden_ones` names the input dimensions that matter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from graphpass.ir import Graph, Node
from graphpass.training._constants import constant_value

__all__ = ["BROADCAST_OPS", "hidden_ones", "proven_dims"]

BROADCAST_OPS = frozenset({"Add", "Sub", "Mul"})
"""The operators whose ORT gradient sums over broadcast dimensions by static shapes
(measured: ``Add`` and ``Mul`` come out wrong, ``Sub``'s first step fails; ``Div``'s
gradient is right)."""

Dims = tuple["int | None", ...]
ShapeOf = Callable[[str], "Sequence[Any] | None"]
_MAX_DEPTH = 24
_PASS_THROUGH = frozenset({"Identity", "Cast", "CastLike", "Neg", "Abs", "Relu", "Sigmoid",
                           "Tanh", "Exp", "Log", "Sqrt", "Erf", "Dropout"})


def _constant(graph: Graph, name: str, depth: int = 0) -> np.ndarray | None:
    """The value of a small constant, or ``None``.

    An initializer, a ``Constant`` node, or index arithmetic on them (``Unsqueeze``,
    ``Squeeze``, ``Concat``, ``Cast``, ``Identity``: the legacy exporter without constant
    folding writes ``axes`` that way).
    """
    tensor = graph.initializers.get(name)
    if tensor is not None and (tensor.size > 4096 or tensor.is_external):
        return None
    value = constant_value(graph, name, variables=())  # an initializer fixes its shape
    if value is not None:
        return np.asarray(value)
    producer = graph.producer(name)
    if producer is None or producer.domain not in ("", "ai.onnx") or depth >= _MAX_DEPTH:
        return None
    op = producer.op_type
    if op not in ("Unsqueeze", "Squeeze", "Concat", "Cast", "Identity"):
        return None
    values = [_constant(graph, item, depth + 1) if item else None for item in producer.inputs]
    if not values or values[0] is None:
        return None
    try:
        return _evaluate(producer, values)
    except (ValueError, TypeError, IndexError):  # numpy's AxisError is both of the first
        return None  # an invalid node: the checker's business, not this analysis's


def _evaluate(producer: Node, values: list[np.ndarray | None]) -> np.ndarray | None:
    op, first = producer.op_type, values[0]
    if first is None:
        return None
    if op == "Identity":
        return first
    if op == "Cast":
        to = producer.attribute("to", None)
        if to is None:
            return None
        return first.astype(onnx.helper.tensor_dtype_to_np_dtype(int(to)))
    if op == "Concat":
        if any(v is None for v in values):
            return None
        return np.concatenate([np.asarray(v) for v in values],
                              axis=int(producer.attribute("axis", 0)))
    axes_value = values[1] if len(values) > 1 else None
    axes = producer.attribute("axes", None) if axes_value is None else axes_value.reshape(-1)
    if op == "Unsqueeze":
        if axes is None:
            return None
        rank = first.ndim + len(axes)
        return np.expand_dims(first, tuple(int(a) % rank for a in axes))
    if axes is None:
        return np.squeeze(first)
    return np.squeeze(first, tuple(int(a) % max(first.ndim, 1) for a in axes))


def _axes(graph: Graph, node: Node, position: int) -> list[int] | None:
    """Constant ``axes`` of a node: its input at ``position`` (opset 13+) or attribute."""
    if len(node.inputs) > position and node.inputs[position]:
        value = _constant(graph, node.inputs[position])
        return None if value is None else [int(a) for a in value.reshape(-1)]
    attribute = node.attribute("axes", None)
    return None if attribute is None else [int(a) for a in attribute]


def proven_dims(graph: Graph, name: str, shape_of: ShapeOf, depth: int = 0) -> Dims | None:
    """The dimensions of ``name`` that the graph proves (numbers), ``None`` where unknown.

    Args:
        graph: The graph the value is in.
        name: The value.
        shape_of: The declared or inferred shape of a value (what the trainer sees).
        depth: The recursion depth (producers are followed at most 24 deep).

    Returns:
        One entry per dimension, or ``None`` when not even the rank is known.
    """
    seen = shape_of(name)
    known: Dims | None = None if seen is None else tuple(
        d if isinstance(d, int) else None for d in seen)
    tensor = graph.initializers.get(name)
    if tensor is not None:
        return tuple(tensor.shape)
    producer = graph.producer(name)
    if producer is None or depth >= _MAX_DEPTH or producer.domain not in ("", "ai.onnx"):
        return known
    try:
        derived = _derive(graph, producer, name, shape_of, depth + 1)
    except (ValueError, TypeError, IndexError, StopIteration):
        derived = None  # an invalid node (axes out of range ...): nothing proven
    if derived is None:
        return known
    if known is None or len(known) != len(derived):
        return derived
    return tuple(k if k is not None else d for k, d in zip(known, derived, strict=True))


def _derive(graph: Graph, node: Node, name: str, shape_of: ShapeOf, depth: int) -> Dims | None:
    op = node.op_type
    inputs = node.inputs
    if op == "Constant":
        value = node.attribute("value", None)
        return tuple(value.dims) if isinstance(value, onnx.TensorProto) else None

    def of(index: int) -> Dims | None:
        if index >= len(inputs) or not inputs[index]:
            return None
        return proven_dims(graph, inputs[index], shape_of, depth)

    if op in _PASS_THROUGH and node.outputs and node.outputs[0] == name:
        return of(0)
    if op == "Slice":
        data = of(0)
        if data is None:
            return None
        axes = _axes(graph, node, 3) if len(inputs) > 3 and inputs[3] else None
        starts, ends = _constant(graph, inputs[1]), _constant(graph, inputs[2])
        if axes is None:
            if len(inputs) > 3 and inputs[3]:
                return tuple(None for _ in data)  # axes computed: any may be sliced
            count = starts.size if starts is not None else (ends.size if ends is not None
                                                            else len(data))
            axes = list(range(count))
        rank = len(data)
        out: list[int | None] = list(data)
        for axis in axes:
            if not -rank <= axis < rank:
                return None
            out[axis % rank] = None  # sliced: the length depends on the bounds
        return tuple(out)
    if op == "Gather":
        data, indices = of(0), of(1)
        if data is None or indices is None:
            return None
        axis = node.attribute("axis", 0)
        rank = len(data)
        if not isinstance(axis, int) or not -rank <= axis < rank:
            return None
        axis %= rank
        return data[:axis] + indices + data[axis + 1:]
    if op == "Unsqueeze":
        data, axes = of(0), _axes(graph, node, 1)
        if data is None or axes is None:
            return None
        rank = len(data) + len(axes)
        positions = sorted(a % rank for a in axes)
        if len(set(positions)) != len(positions):
            return None  # an axis twice: invalid
        rest = iter(data)
        grown: list[int | None] = []
        for position in range(rank):
            grown.append(1 if position in positions else next(rest))
        return tuple(grown)
    if op == "Squeeze":
        data, axes = of(0), _axes(graph, node, 1)
        if data is None or axes is None:
            return None
        rank = len(data)
        drop = {a % rank for a in axes}
        return tuple(d for i, d in enumerate(data) if i not in drop)
    if op == "Reshape":
        target = _constant(graph, inputs[1]) if len(inputs) > 1 else None
        if target is None:
            return None
        data = of(0)
        allowzero = node.attribute("allowzero", 0)
        out = []
        for index, size in enumerate(int(s) for s in target.reshape(-1)):
            if size == 0 and not allowzero:
                out.append(data[index] if data is not None and index < len(data) else None)
            else:
                out.append(size if size > 0 else None)
        return tuple(out)
    return None


_FOLDED_OPS = frozenset({"Identity", "Cast", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
                         "Reshape", "Add", "Sub", "Mul", "Div", "Range", "ConstantOfShape"})


def _folds(graph: Graph, name: str, shape_of: ShapeOf, depth: int = 0) -> bool:
    """Whether ORT's constant folding computes ``name`` before it builds the gradient.

    Constants do, and ``Shape`` of a value whose dimensions are all numbers (ORT's shape
    optimizer), and the usual index arithmetic over such values.
    """
    if name in graph.initializers or depth >= _MAX_DEPTH:
        return name in graph.initializers
    producer = graph.producer(name)
    if producer is None or producer.domain not in ("", "ai.onnx"):
        return False
    if producer.op_type == "Constant":
        return True
    if producer.op_type == "Shape":
        return all(isinstance(d, int) for d in _shape_taken(producer, shape_of) or [None])
    if producer.op_type in ("Gather", "Slice") and producer.inputs and \
            (source := graph.producer(producer.inputs[0])) is not None and \
            source.op_type == "Shape" and not source.domain:
        # ORT's shape optimizer folds the dimensions picked from a Shape that are numbers
        dims = _shape_taken(source, shape_of)
        picked = _picked(graph, producer, dims)
        return picked is not None and all(isinstance(d, int) for d in picked)
    if producer.op_type in _FOLDED_OPS:
        return all(_folds(graph, item, shape_of, depth + 1) for item in producer.inputs if item)
    return False


def _shape_taken(node: Node, shape_of: ShapeOf) -> list[Any] | None:
    """The dimensions a ``Shape`` node outputs (its ``start``/``end``), as seen."""
    shape = shape_of(node.inputs[0]) if node.inputs else None
    if shape is None:
        return None
    start, end = node.attribute("start", 0), node.attribute("end", None)
    return list(shape)[start:end]


def _picked(graph: Graph, node: Node, dims: list[Any] | None) -> list[Any] | None:
    """The dimensions a ``Gather`` or ``Slice`` with constant positions takes from ``dims``."""
    if dims is None:
        return None
    if node.op_type == "Gather":
        indices = _constant(graph, node.inputs[1]) if len(node.inputs) > 1 else None
        if indices is None or not all(-len(dims) <= int(i) < len(dims)
                                      for i in indices.reshape(-1)):
            return None
        return [dims[int(i)] for i in indices.reshape(-1)]
    bounds = [_constant(graph, item) if item else None for item in node.inputs[1:3]]
    if any(bound is None for bound in bounds) or len(node.inputs) > 3:
        return None  # axes and steps: rare on a shape, not worth the cases
    start, end = (int(np.asarray(bound).reshape(-1)[0]) for bound in bounds)
    return dims[start:end]


def _seen_by_ort(graph: Graph, name: str, shape_of: ShapeOf, depth: int = 0) -> bool:
    """Whether ORT's own inference, after its constant folding, types ``name`` as the graph does.

    It does when every ``Slice`` that :func:`proven_dims` goes through on the way has
    bounds ORT folds (then the slice is a constant, or its shape known).
    """
    producer = graph.producer(name)
    if producer is None or depth >= _MAX_DEPTH or producer.domain not in ("", "ai.onnx"):
        return True
    if producer.op_type == "Slice":
        return all(_folds(graph, item, shape_of) for item in producer.inputs[1:] if item) \
            and _seen_by_ort(graph, producer.inputs[0], shape_of, depth + 1)
    if producer.op_type in _PASS_THROUGH or producer.op_type in (
            "Gather", "Unsqueeze", "Squeeze", "Reshape"):
        return all(_seen_by_ort(graph, item, shape_of, depth + 1)
                   for item in producer.inputs if item)
    return True


def _seen_number(shape: Sequence[Any] | None, position: int) -> int | None:
    if shape is None or not -len(shape) <= position < len(shape):
        return None
    size = shape[position]
    return size if isinstance(size, int) else None


def hidden_ones(graph: Graph, node: Node, shape_of: ShapeOf,
                inputs: Sequence[int] = (0, 1)) -> list[tuple[int, int]]:
    """The ``(input, dimension)`` pairs of ``node`` that ORT's gradient fails to sum over.

    A dimension counts when the input's shape, as the trainer sees it (``shape_of``),
    says no number there, the graph proves it is 1 (:func:`proven_dims`) through a
    ``Slice`` whose bounds are computed at run time (ORT folds bounds it can compute,
    and then sees the 1 itself), and the other
    input, aligned from the right, has a dimension there that is not known to be 1 (a
    number above 1, or a symbol: a batch that may be larger). An input of lower rank is
    right (ORT sums over the dimensions it lacks).

    Args:
        graph: The node's graph.
        node: A binary broadcasting node (:data:`BROADCAST_OPS`).
        shape_of: The declared or inferred shape of a value.
        inputs: The input positions to examine (those that need a gradient).
    """
    if node.op_type not in BROADCAST_OPS or len(node.inputs) != 2 or not all(node.inputs):
        return []
    found: list[tuple[int, int]] = []
    shapes = [shape_of(name) for name in node.inputs]
    for index in inputs:
        mine, other = shapes[index], shapes[1 - index]
        if mine is None or other is None or len(mine) > len(other):
            continue
        proven = proven_dims(graph, node.inputs[index], shape_of)
        if proven is None or len(proven) != len(mine) \
                or _seen_by_ort(graph, node.inputs[index], shape_of):
            continue
        other_proven = proven_dims(graph, node.inputs[1 - index], shape_of)
        offset = len(other) - len(mine)
        for position, size in enumerate(mine):
            if isinstance(size, int) or proven[position] != 1:
                continue
            facing = other[position + offset]
            facing_proven = (other_proven[position + offset]
                             if other_proven is not None and len(other_proven) == len(other)
                             else None)
            if facing == 1 or facing_proven == 1:
                continue
            if _seen_number([facing], 0) is None or int(facing) > 1:
                found.append((index, position))
    return found
