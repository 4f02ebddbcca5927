"""The ``infer-shapes``  pass (placeholder: being written)."""

from __future__ import annotations

from graphpass.ir import Model
from graphpass.pass_base import Pass, PassContext, PassResult

__all__ = ["InferShapes"]


class InferShapes(Pass):
    """Add value_info for every value ONNX shape inference can type."""

    name = "infer-shapes"
    description = "Add value_info for every value ONNX shape inference can type."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Not written yet."""
        raise NotImplementedError("infer-shapes is not implemented yet")
