"""The ``lint-gradients``  pass (placeholder: being written)."""

from __future__ import annotations

from graphpass.ir import Model
from graphpass.pass_base import AnalysisPass, PassContext, PassResult

__all__ = ["LintGradients"]


class LintGradients(AnalysisPass):
    """Name every node on the trainable path that the trainer cannot differentiate."""

    name = "lint-gradients"
    description = "Name every node on the trainable path that the trainer cannot differentiate."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Not written yet."""
        raise NotImplementedError("lint-gradients is not implemented yet")
