"""Rewriting ``SplitToSequence`` read by constant ``SequenceAt`` into ``Split``.

``torch.chunk`` and ``torch.split`` export (``dynamo=True`` without the exporter's
optimizer, or the legacy exporter) as ``SplitToSequence`` whose sequence is read
only by ``SequenceAt`` nodes at constant positions. A sequence is not a tensor, so a
trainer that differentiates tensors drops the gradient flowing through it;
:func:`split_sequences` writes the same computation with ``Split`` and ``Identity``,
which computes the same values and can be differentiated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphpass.ir import Graph, Node
from graphpass.training._constants import constant_value
from graphpass.training._emit import NameScope, names_in
from graphpass.training._value_types import ModelTypes

__all__ = ["split_sequences"]

ShapeOf = Callable[[str], "tuple[int | str | None, ...] | None"]


def _shapes(graph: Graph) -> ShapeOf:
    model = graph.root.model
    if model is None or graph.function is not None:
        return lambda name: graph.value(name).shape if name in graph.values else None
    types = ModelTypes(model)
    return lambda name: types.of(graph, name).shape


def _rewrite(graph: Graph, node: Node, names: NameScope, shape_of: ShapeOf) -> bool:
    """Replace one ``SplitToSequence`` and its ``SequenceAt`` readers, if the pattern holds."""
    sequence = node.outputs[0] if node.outputs else ""
    if not sequence or graph.value(sequence).is_graph_output:
        return False
    readers = graph.consumers(sequence)
    if not readers or any(r.op_type != "SequenceAt" or r.domain or r.inputs[0] != sequence
                          for r in readers):
        return False
    sizes = constant_value(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    axis = int(node.attribute("axis", 0))
    if sizes is None or not int(node.attribute("keepdims", 1)):
        # keepdims applies only without a split input by the standard, yet onnxruntime
        # honours it with one too: ambiguous, so left alone.
        return False
    if np.ndim(sizes) == 0:  # one chunk size: the pieces follow from the dimension
        shape = shape_of(node.inputs[0])
        dim = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
        chunk = int(sizes)
        if not isinstance(dim, int) or chunk <= 0:
            return False
        sizes = np.array([chunk] * (dim // chunk) + ([dim % chunk] if dim % chunk else []))
    if np.ndim(sizes) != 1:
        return False
    count = int(np.size(sizes))
    positions = []
    for reader in readers:
        position = constant_value(graph, reader.inputs[1])
        if position is None or np.size(position) != 1:
            return False
        index = int(np.asarray(position).reshape(()))
        if not -count <= index < count:
            return False
        positions.append(index % count)
    pieces = [names.fresh(f"{sequence}.{i}") for i in range(count)]
    split_sizes = names.fresh(f"{sequence}.sizes")
    graph.insert_before(node, Node("Constant", [], [split_sizes],
                                   name=names.fresh(f"{split_sizes}.constant"),
                                   attributes={"value_ints": [int(v) for v in sizes]}))
    split_inputs = [node.inputs[0], split_sizes]
    split = Node("Split", split_inputs, pieces, name=names.fresh(f"{node.name or 'Split'}"),
                 attributes={"axis": axis})
    graph.insert_before(node, split)
    for reader, index in zip(readers, positions, strict=True):
        output = reader.outputs[0]
        replacement = Node("Identity", [pieces[index]], [output],
                           name=names.fresh(reader.name or reader.op_type))
        graph.replace(reader, [replacement])
    graph.remove(node)
    return True


def split_sequences(graph: Graph, shape_of: ShapeOf | None = None) -> int:
    """Rewrite every ``SplitToSequence``/``SequenceAt`` pattern of ``graph``; return how many.

    Args:
        graph: The graph (changed in place).
        shape_of: The shape of a value of ``graph``, for a split given as one chunk size
            (default: declarations, then ONNX shape inference, for a model's graphs).
    """
    splits = [node for node in graph if node.op_type == "SplitToSequence" and not node.domain]
    if not splits:  # the usual case: no names or shapes to gather
        return 0
    if shape_of is None:
        shape_of = _shapes(graph)
    names = NameScope(names_in(graph))
    count = 0
    for node in splits:
        if node.graph is graph and _rewrite(graph, node, names, shape_of):
            count += 1
    return count
