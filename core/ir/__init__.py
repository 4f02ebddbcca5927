"""The graphpass IR: models, graphs, nodes, values, functions, tensors.

A :class:`Graph` owns a ``networkx.MultiDiGraph`` (:attr:`Graph.nx`) with one node
per ONNX node and one edge per use of a value. Everything here converts to and
from ``onnx`` protos without loss (see :mod:`graphpass.ir.proto`).
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.ir._attribute import Attribute, AttributeType
from graphpass.ir._function import Function, FunctionId, format_function_id
from graphpass.ir._graph import Graph
from graphpass.ir._model import Model
from graphpass.ir._node import Node
from graphpass.ir._tensor import Tensor, dtype_name, dtype_size, numpy_dtype
from graphpass.ir._value import CAPTURE, Use, Value

if TYPE_CHECKING:
    from graphpass.ir._clone import (
        clone_node,
    )
    from graphpass.ir._describe import (
        describe_node,
    )
    from graphpass.ir._gc import (
        paused_gc,
        sparing_older_objects,
    )
    from graphpass.ir._node import (
        CHANGED_ATTRIBUTES,
        CHANGED_INPUTS,
        CHANGED_METADATA,
        CHANGED_NAME,
        CHANGED_OUTPUTS,
    )

__all__ = [
    "CAPTURE",
    "CHANGED_ATTRIBUTES",
    "CHANGED_INPUTS",
    "CHANGED_METADATA",
    "CHANGED_NAME",
    "CHANGED_OUTPUTS",
    "Attribute",
    "AttributeType",
    "Function",
    "FunctionId",
    "Graph",
    "Model",
    "Node",
    "Tensor",
    "Use",
    "Value",
    "clone_node",
    "describe_node",
    "dtype_name",
    "dtype_size",
    "format_function_id",
    "numpy_dtype",
    "paused_gc",
    "sparing_older_objects",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "CHANGED_ATTRIBUTES": "graphpass.ir._node",
    "CHANGED_INPUTS": "graphpass.ir._node",
    "CHANGED_METADATA": "graphpass.ir._node",
    "CHANGED_NAME": "graphpass.ir._node",
    "CHANGED_OUTPUTS": "graphpass.ir._node",
    "clone_node": "graphpass.ir._clone",
    "describe_node": "graphpass.ir._describe",
    "paused_gc": "graphpass.ir._gc",
    "sparing_older_objects": "graphpass.ir._gc",
})
