"""The value of a constant in a graph: an initializer that is no graph input, or a ``Constant``."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from graphpass.ir import Graph

__all__ = ["constant_value"]


def constant_value(graph: Graph, name: str) -> Any:
    """The value of ``name`` as a numpy array when it is a constant, else ``None``.

    Constants are initializers that are not graph inputs, and the outputs of
    default-domain ``Constant`` nodes (``value``, ``value_int(s)``, ``value_float(s)``).
    """
    if not name:
        return None
    if name in graph.initializers and name not in graph.input_names:
        return graph.initializers[name].numpy()
    producer = graph.producer(name)
    if producer is None or producer.op_type != "Constant" or producer.domain:
        return None
    tensor = producer.attribute("value")
    if tensor is not None:
        return numpy_helper.to_array(tensor)
    for key in ("value_int", "value_ints", "value_float", "value_floats"):
        value = producer.attribute(key)
        if value is not None:
            return np.asarray(value)
    return None
