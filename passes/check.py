"""The ``check`` pass: the ONNX checker's verdict as findings.

Runs ``onnx.checker.check_model`` (by default with ``full_check``, which adds strict
shape inference) on the model's structure. Weights are not read: large and external
initializers are handed to the checker as typed graph inputs (see
:func:`graphpass.files.checking.structural_proto`), so this works on models of any size and
with external data. The checker stops at the first problem, so at most one finding is
reported:

* ``GP501`` (error): the model breaks an ONNX rule (checker validation).
* ``GP502`` (error): strict shape inference fails (only with ``full-check``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from graphpass.files.checking import run_checker
from graphpass.findings import Finding, Severity
from graphpass.framework.pass_base import AnalysisPass, PassContext, PassResult
from graphpass.ir import Model

__all__ = ["CHECKER_CODES", "Check"]

CHECKER_CODES = {
    "validation": "GP501",
    "inference": "GP502",
}


class Check(AnalysisPass):
    """Run the ONNX checker (full check, with shape inference) on the model."""

    name = "check"
    description = "Run the ONNX checker (full check, with shape inference) on the model."
    codes: ClassVar[Mapping[str, str]] = {
        "GP501": "The model breaks a rule of the ONNX checker.",
        "GP502": "Strict ONNX shape inference fails on the model.",
    }

    @dataclass
    class Options:
        """How thorough the check is."""

        full_check: bool = True

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Check the model; a problem becomes an error finding."""
        problem = run_checker(model, full_check=self.options.full_check)
        if problem is None:
            return PassResult()
        what = ("fails strict shape inference" if problem.kind == "inference"
                else "breaks an ONNX rule")
        return PassResult(findings=[Finding(
            CHECKER_CODES[problem.kind], Severity.ERROR,
            f"the model {what}: {problem.message}", node=problem.node,
            hint="fix the model (or the pass that produced it); the message is onnx.checker's",
        )])
