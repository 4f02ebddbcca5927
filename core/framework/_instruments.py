"""Instruments: code that runs around every pass without being a pass.

An instrument watches a run: it is told when the run starts, before and after each
pass, and when the run ends. After a pass it may return findings about it (for
example that the model no longer passes the ONNX checker); error findings stop
the run like a pass's own would. Instruments must not change the model.

Writing one::

    class CountNodes(graphpass.Instrument):
        def after_pass(self, planned, model, record, context):
            record.stats["nodes after"] = len(model.graph)
            return []

    graphpass.PassManager(["inline-functions"], instruments=[CountNodes()])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from graphpass.files import run_checker, save
from graphpass.findings import Finding, Severity
from graphpass.framework._pass_base import PassContext
from graphpass.framework._planning import PlannedPass
from graphpass.framework._results import PassRecord, RunResult
from graphpass.ir import Model

__all__ = ["DumpAfter", "Instrument", "VerifyEach"]

VERIFY_EACH_CODE = "GP010"
"""The model fails the ONNX checker after a transforming pass."""


class Instrument:
    """Base class of instruments: override the hooks you need (all do nothing)."""

    name: str = "instrument"

    def before_run(self, plan: Sequence[PlannedPass], model: Model, context: PassContext) -> None:
        """Called once before the first pass, with the plan and the working model."""

    def before_pass(self, planned: PlannedPass, model: Model, context: PassContext) -> None:
        """Called before each pass runs."""

    def after_pass(self, planned: PlannedPass, model: Model, record: PassRecord,
                   context: PassContext) -> Iterable[Finding]:
        """Called after each pass that finished; may return findings about it."""
        return ()

    def after_run(self, result: RunResult | None, context: PassContext) -> None:
        """Called once at the end; ``result`` is ``None`` when a pass raised."""


class VerifyEach(Instrument):
    """Run the ONNX checker after every transforming pass that changed the model.

    A failure becomes an error finding (``GP010``) credited to the pass, so the run
    stops there and nothing is written.

    Attributes:
        full_check: Also run strict shape inference (slower, stricter).
    """

    name = "verify-each"

    def __init__(self, *, full_check: bool = False):
        self.full_check = full_check

    def after_pass(self, planned: PlannedPass, model: Model, record: PassRecord,
                   context: PassContext) -> Iterable[Finding]:
        """Check the model if the pass changed it."""
        if planned.analysis or not record.changed:
            return ()
        problem = run_checker(model, full_check=self.full_check)
        if problem is None:
            return ()
        return [Finding(
            VERIFY_EACH_CODE, Severity.ERROR,
            f"the model fails the ONNX checker after pass {planned.name!r} "
            f"(plugin {planned.plugin!r}): {problem.message}",
            pass_name=planned.name, node=problem.node,
            hint=f"pass {planned.name!r} produced an invalid model; report it to the "
                 f"authors of plugin {planned.plugin!r}, or leave the pass out",
        )]


class DumpAfter(Instrument):
    """Save the model after the named passes (to look at what a pass did).

    Files are called ``<model>.after-<pass>.onnx`` (``...-<round>.onnx`` in
    fixed-point runs after the first round) in ``directory``.

    Attributes:
        pass_names: The passes after which to save.
        directory: Where the files go.
        written: The files written so far.
    """

    name = "dump-after"

    def __init__(self, pass_names: Iterable[str], directory: str | Path = "."):
        self.pass_names = frozenset(pass_names)
        self.directory = Path(directory)
        self.written: list[Path] = []

    def after_pass(self, planned: PlannedPass, model: Model, record: PassRecord,
                   context: PassContext) -> Iterable[Finding]:
        """Save the model if this is one of the named passes."""
        if planned.name not in self.pass_names:
            return ()
        stem = model.source_path.stem if model.source_path is not None else "model"
        suffix = f"-{record.iteration}" if record.iteration > 1 else ""
        path = self.directory / f"{stem}.after-{planned.name}{suffix}.onnx"
        # A dump shows the model as the pass left it, valid or not: that is what it is for.
        self.written.append(save(model, path, validate=False))
        return [Finding("GP011", Severity.INFO, f"model after pass {planned.name!r} saved to "
                        f"{path}", pass_name=planned.name, data={"path": str(path)})]
