"""The ``detect-missing-buffers``  pass (placeholder: being written)."""

from __future__ import annotations

from graphpass.ir import Model
from graphpass.pass_base import AnalysisPass, PassContext, PassResult

__all__ = ["DetectMissingBuffers"]


class DetectMissingBuffers(AnalysisPass):
    """Name every weight, buffer or constant the graph needs and nothing provides."""

    name = "detect-missing-buffers"
    description = "Name every weight, buffer or constant the graph needs and nothing provides."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Not written yet."""
        raise NotImplementedError("detect-missing-buffers is not implemented yet")
