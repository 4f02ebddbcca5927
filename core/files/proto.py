"""The conversion between ``onnx`` protos and the IR, under its 0.2 path.

It lives in the IR, :mod:`graphpass.ir.proto` (the IR's own serialization, below every
other layer); this module gives the very same functions, so that code importing
``graphpass.files.proto`` keeps working.
"""

from __future__ import annotations

from graphpass.ir.proto import (
    TENSOR_ATTRIBUTE_TYPES,
    UNKNOWN_FIELDS,
    TensorEmitter,
    attribute_tensors,
    attribute_to_proto,
    function_from_proto,
    function_to_proto,
    graph_from_proto,
    graph_to_proto,
    model_from_proto,
    model_to_bytes,
    model_to_chunks,
    model_to_proto,
    node_to_proto,
    subgraph_protos,
)

__all__ = [
    "TENSOR_ATTRIBUTE_TYPES",
    "UNKNOWN_FIELDS",
    "TensorEmitter",
    "attribute_tensors",
    "attribute_to_proto",
    "function_from_proto",
    "function_to_proto",
    "graph_from_proto",
    "graph_to_proto",
    "model_from_proto",
    "model_to_bytes",
    "model_to_chunks",
    "model_to_proto",
    "node_to_proto",
    "subgraph_protos",
]
