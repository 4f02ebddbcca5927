"""The ``check`` pass: the ONNX checker's verdict as findings.

Runs ``onnx.checker.check_model`` (by default with ``full_check``, which adds strict
shape inference) on the model's structure. Weights are not read: large and external
initializers are handed to the checker as typed graph inputs (see
:func:`graphpass.files._checking.structural_proto`), so this works on models of any size and
with external data. The checker stops at the first problem, so at most one finding is
reported:

* ``GP501`` (error): the model breaks an ONNX rule (checker validation). A model whose
  nodes use names nothing defines (weights an export did not save) is told so in
  graphpass's words, with every such name, before the checker would stop at the first
  (in its words: "not topologically sorted").
* ``GP502`` (error): strict shape inference fails (only with ``full-check``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from graphpass.files import run_checker
from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework import AnalysisPass, PassContext, PassResult
from graphpass.ir import Model, describe_node

__all__ = ["CHECKER_CODES", "Check"]

_SHOWN = 4
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
        undefined = _undefined(model)
        if undefined is not None:
            return PassResult(findings=[undefined])
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


def _undefined(model: Model) -> Finding | None:
    """``GP501`` for the names the main graph uses and nothing defines, if there are any.

    The checker would stop at the first of them and call it a node out of order.
    """
    graph = model.graph
    names = list(graph.free_names)
    if not names:
        return None
    readers = [use.node for use in graph.uses(names[0]) if use.node is not None]
    read_by = f" (node {describe_node(readers[0])} reads it)" if readers else ""
    message = (f"the model uses {names[0]!r}{read_by} and nothing defines it (no initializer, "
               "graph input or node output)") if len(names) == 1 else (
        f"the model uses {len(names)} names that nothing defines (no initializer, graph input "
        f"or node output): {shortened_list(names, _SHOWN, quote=True)}"
        + (f"; node {describe_node(readers[0])} reads {names[0]!r}" if readers else ""))
    return Finding(
        CHECKER_CODES["validation"], Severity.ERROR, message,
        node=readers[0].name if readers else None,
        value=names[0],
        hint="run detect-missing-buffers (graphpass lint MODEL -p detect-missing-buffers) to "
             "learn what each is: weights or buffers an export did not save are filled from a "
             "checkpoint (-p reconcile-initializers --checkpoint PATH); otherwise a node that "
             "produced the name was removed",
        data={"undefined": names})
