"""The ``inline-functions``  pass (placeholder: being written)."""

from __future__ import annotations

from graphpass.ir import Model
from graphpass.pass_base import Pass, PassContext, PassResult

__all__ = ["InlineFunctions"]


class InlineFunctions(Pass):
    """Replace every call of a model-local function with the function's body."""

    name = "inline-functions"
    description = "Replace every call of a model-local function with the function's body."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Not written yet."""
        raise NotImplementedError("inline-functions is not implemented yet")
