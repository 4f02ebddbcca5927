"""The graphpass IR: models, graphs, nodes, values, functions, tensors.

A :class:`Graph` owns a ``networkx.MultiDiGraph`` (:attr:`Graph.nx`) with one node
per ONNX node and one edge per use of a value. Everything here converts to and
from ``onnx`` protos without loss (see :mod:`graphpass.ir.proto`).
"""

from graphpass.ir._attribute import Attribute, AttributeType
from graphpass.ir._function import Function, FunctionId, format_function_id
from graphpass.ir._graph import Graph
from graphpass.ir._model import Model
from graphpass.ir._node import Node
from graphpass.ir._tensor import Tensor, dtype_name, dtype_size, numpy_dtype
from graphpass.ir._value import CAPTURE, Use, Value

__all__ = [
    "CAPTURE",
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
    "dtype_name",
    "dtype_size",
    "format_function_id",
    "numpy_dtype",
]
