"""The value of a constant in a graph: an initializer that is no graph input, or a ``Constant``."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import numpy as np
from onnx import numpy_helper

from graphpass.ir import Graph

__all__ = ["constant_value"]


def constant_value(graph: Graph, name: str, *,
                   variables: Container[str] | None = None) -> Any:
    """The value of ``name`` as a numpy array when it is a constant, else ``None``.

    Constants are initializers that are not variables, and the outputs of
    default-domain ``Constant`` nodes (``value``, ``value_int(s)``, ``value_float(s)``).

    Args:
        graph: The graph ``name`` is a value of.
        name: The value's name (``""``, an omitted input, is no constant).
        variables: The initializers that are not constants: by default the graph's
            inputs (a caller may feed them); the trainable weights for the gradient
            rules, which judge the graph the trainer differentiates.
    """
    if not name:
        return None
    if variables is None:
        variables = graph.input_names
    if name in graph.initializers and name not in variables:
        return graph.initializers[name].numpy()
    producer = graph.producer(name)
    if producer is None or producer.op_type != "Constant" or producer.domain not in ("", "ai.onnx"):
        return None
    tensor = producer.attribute("value")
    if tensor is not None:
        return numpy_helper.to_array(tensor)
    for key in ("value_int", "value_ints", "value_float", "value_floats"):
        value = producer.attribute(key)
        if value is not None:
            return np.asarray(value)
    return None
