"""The ``remove-unused``  pass (placeholder: being written)."""

from __future__ import annotations

from graphpass.ir import Model
from graphpass.pass_base import Pass, PassContext, PassResult

__all__ = ["RemoveUnused"]


class RemoveUnused(Pass):
    """Remove nodes, initializers, functions and opset imports nothing uses."""

    name = "remove-unused"
    description = "Remove nodes, initializers, functions and opset imports nothing uses."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Not written yet."""
        raise NotImplementedError("remove-unused is not implemented yet")
