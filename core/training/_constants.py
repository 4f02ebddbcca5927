"""The value of a constant in a graph.

An initializer that is no graph input, a ``Constant``, or a shape operator's output over
constants (an unoptimized export writes ``Slice``'s axes as ``Reshape(Constant)``).
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import numpy as np
from onnx import helper, numpy_helper

from graphpass.ir import Graph

__all__ = ["constant_value"]


def constant_value(graph: Graph, name: str, *,
                   variables: Container[str] | None = None) -> Any:
    """The value of ``name`` as a numpy array when it is a constant, else ``None``.

    Constants are initializers that are not variables, the outputs of default-domain
    ``Constant`` nodes (``value``, ``value_int(s)``, ``value_float(s)``), and the outputs of
    ``Identity``, ``Cast``, ``Reshape``, ``Squeeze``, ``Unsqueeze`` and ``Concat`` whose
    inputs are all constants.

    Args:
        graph: The graph ``name`` is a value of.
        name: The value's name (``""``, an omitted input, is no constant).
        variables: The initializers that are not constants: by default the graph's
            inputs (a caller may feed them); the trainable weights for the gradient
            rules, which judge the graph the trainer differentiates.
    """
    if variables is None:
        variables = graph.input_names
    return _value(graph, name, variables, _DEPTH)


_DEPTH = 8
"""How many shape operators deep a constant is looked for."""


def _value(graph: Graph, name: str, variables: Container[str], depth: int) -> Any:
    if not name:
        return None
    if name in graph.initializers and name not in variables:
        return graph.initializers[name].numpy()
    producer = graph.producer(name)
    if producer is None or producer.domain not in ("", "ai.onnx"):
        return None
    if producer.op_type != "Constant":
        if depth == 0 or producer.op_type not in _SHAPE_OPS or len(producer.outputs) != 1:
            return None
        inputs = [_value(graph, i, variables, depth - 1) if i else None
                  for i in producer.inputs]
        if any(value is None for i, value in zip(producer.inputs, inputs, strict=True) if i):
            return None
        return _SHAPE_OPS[producer.op_type](producer, inputs)
    tensor = producer.attribute("value")
    if tensor is not None:
        return numpy_helper.to_array(tensor)
    for key in ("value_int", "value_ints", "value_float", "value_floats"):
        value = producer.attribute(key)
        if value is not None:
            return np.asarray(value)
    return None


def _reshape(node: Any, inputs: list[Any]) -> Any:
    data, shape = inputs[0], [int(d) for d in inputs[1]]
    if not node.attribute("allowzero", 0):
        shape = [data.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return np.reshape(data, shape)


def _given_axes(node: Any, inputs: list[Any]) -> Any:
    """``axes`` as the input (opset 13 and later) or the attribute, else ``None``."""
    return inputs[1] if len(inputs) > 1 and inputs[1] is not None else node.attribute("axes")


def _unsqueeze(node: Any, inputs: list[Any]) -> Any:
    data, axes = inputs[0], _given_axes(node, inputs)
    if axes is None:
        return None
    rank = np.ndim(data) + np.size(axes)
    for axis in sorted(int(a) % rank for a in np.ravel(axes)):
        data = np.expand_dims(data, axis)
    return data


def _squeeze(node: Any, inputs: list[Any]) -> Any:
    axes = _given_axes(node, inputs)
    if axes is None:
        return np.squeeze(inputs[0])
    return np.squeeze(inputs[0], axis=tuple(int(a) % np.ndim(inputs[0]) for a in np.ravel(axes)))


_SHAPE_OPS: dict[str, Any] = {
    "Identity": lambda node, inputs: inputs[0],
    "Cast": lambda node, inputs: inputs[0].astype(
        helper.tensor_dtype_to_np_dtype(node.attribute("to"))),
    "Reshape": _reshape,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda node, inputs: np.concatenate(inputs, axis=int(node.attribute("axis"))),
}
