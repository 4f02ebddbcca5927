"""The ``check``  pass (placeholder: being written)."""

from __future__ import annotations

from graphpass.ir import Model
from graphpass.pass_base import AnalysisPass, PassContext, PassResult

__all__ = ["Check"]


class Check(AnalysisPass):
    """Run the ONNX checker (full check, with shape inference) on the model."""

    name = "check"
    description = "Run the ONNX checker (full check, with shape inference) on the model."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Not written yet."""
        raise NotImplementedError("check is not implemented yet")
