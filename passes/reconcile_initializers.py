"""The ``reconcile-initializers``  pass (placeholder: being written)."""

from __future__ import annotations

from graphpass.ir import Model
from graphpass.pass_base import Pass, PassContext, PassResult

__all__ = ["ReconcileInitializers"]


class ReconcileInitializers(Pass):
    """Fill the model's weights from a checkpoint, matching names across prefixes and separators."""

    name = "reconcile-initializers"
    description = "Fill the model's weights from a checkpoint, matching names across prefixes and separators."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Not written yet."""
        raise NotImplementedError("reconcile-initializers is not implemented yet")
