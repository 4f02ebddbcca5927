"""Checking the shapes of weights the model never declared (reconcile-initializers).

An export saved with ``include_initializers=False`` uses its weights without
declaring their types, so the checkpoint's shapes cannot be compared with the
model's. Instead, ONNX shape inference (strict) runs over the filled model, with
every initializer's type and shape but none of its data, and any error at a node
that reads such a weight is reported.
"""

from __future__ import annotations

from collections.abc import Collection

import onnx

from graphpass.files.checking import infer_shapes
from graphpass.files.proto import model_to_proto
from graphpass.ir import Model, Tensor

__all__ = ["undeclared_shape_problems"]


def _without_data(tensor: Tensor) -> onnx.TensorProto:
    return onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)


def undeclared_shape_problems(model: Model, names: Collection[str]) -> list[str]:
    """Shape-inference errors at nodes downstream of ``names`` (empty when consistent)."""
    graph = model.graph
    pending = [node for name in names for node in graph.consumers(name)]
    reached = {id(node): node for node in pending}
    while pending:
        for following in graph.nx.successors(pending.pop()):
            if id(following) not in reached:
                reached[id(following)] = following
                pending.append(following)
    readers = {node.name for node in reached.values() if node.name}
    try:
        infer_shapes(model_to_proto(model, _without_data), strict_mode=True)
    except onnx.shape_inference.InferenceError as error:
        return [line.strip() for line in str(error).splitlines()
                if any(f"node name: {reader})" in line for reader in readers)
                and "instead is null" not in line]  # untyped: unknown, not inconsistent
    except (onnx.checker.ValidationError, ValueError, RuntimeError):
        return []  # the model itself is malformed; the check pass reports that
    return []
