"""Conversion between ``onnx`` protobuf messages and the graphpass IR: its serialization.

The conversion is lossless: ``model_to_proto(model_from_proto(p)) == p`` for any model
the IR can represent (fields the IR does not model are carried over verbatim). It is
the IR's own, as ``onnx_ir.serde`` is onnx-ir's: :meth:`Model.from_proto
<graphpass.Model.from_proto>` and :meth:`~graphpass.Model.to_proto` stand on it, and it
imports nothing above the IR.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from graphpass.ir._model import Model
from graphpass.ir._serde import (
    TENSOR_ATTRIBUTE_TYPES,
    UNKNOWN_FIELDS,
    TensorEmitter,
    attribute_tensors,
    attribute_to_proto,
    function_from_proto,
    function_to_proto,
    graph_from_proto,
    graph_to_proto,
    model_to_bytes,
    model_to_chunks,
    model_to_proto,
    node_to_proto,
    subgraph_protos,
    unknown_fields,
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
    "unknown_fields",
]


def model_from_proto(proto: onnx.ModelProto, base_dir: str | Path | None = None) -> Model:
    """Build a :class:`~graphpass.Model` from a ``ModelProto`` (``Model.from_proto``).

    Args:
        proto: The model; it is referenced, not copied.
        base_dir: The folder external data locations are relative to.

    Raises:
        InvalidModelError: The model cannot be represented (no graph, a name defined twice,
            a function defined twice).
        ExternalDataError: A tensor's external data location is unsafe (absolute, ``..``,
            or a link out of ``base_dir``).
    """
    return Model.from_proto(proto, base_dir)
