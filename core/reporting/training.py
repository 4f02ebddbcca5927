"""Reports of ``graphpass train``: the loss per step, what was written.

The text report prints one line per step as it is taken (:func:`print_step`) and a
summary at the end (:func:`print_training_summary`); the JSON report
(:func:`training_dict`, ``schema`` = ``graphpass-train/1``) holds the same data, and the
report of the passes that built the training graphs when ``graphpass train`` built them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from graphpass.findings import Severity
from graphpass.framework.results import RunSummary

__all__ = ["TRAIN_SCHEMA_ID", "TrainingReport", "print_build_summary", "print_step",
           "print_training_summary", "training_dict"]

TRAIN_SCHEMA_ID = "graphpass-train/1"
"""The ``schema`` of ``graphpass train --format json``."""


@dataclass
class TrainingReport:
    """What a training run did.

    Attributes:
        model: The model or training-graph directory, as the user named it.
        directory: The training-graph directory (``None``: a temporary one, removed).
        optimizer: The optimizer's kind (``adamw``, ``sgd``).
        lr: The learning rate.
        steps: The steps asked for.
        losses: The loss of each step taken (before its update).
        saved: The model written with the trained weights, if any.
        checkpoint: The safetensors checkpoint written, if any.
        seconds: Wall seconds spent in the steps.
        build: The JSON report of the passes that built the directory, if they ran.
        error: Why training stopped early, if it did.
    """

    model: str
    directory: str | None
    optimizer: str
    lr: float
    steps: int
    losses: list[float] = field(default_factory=list)
    saved: str | None = None
    checkpoint: str | None = None
    seconds: float = 0.0
    build: dict[str, Any] | None = None
    error: str | None = None


def print_build_summary(summary: RunSummary, console: Console) -> None:
    """One line for the passes that built the training graphs, and their warnings."""
    wrote = next((f for f in summary.findings if f.code == "GP850"), None)
    weights = len(wrote.data.get("trainable", [])) if wrote is not None else 0
    console.print(f"built the training graphs ({', '.join(summary.plan)}): {weights} "
                  f"trainable weight{'s' * (weights != 1)}")
    for finding in summary.findings:
        if finding.severity is Severity.WARNING:
            console.print(f"warning {finding.code}: {finding.message}")


def print_step(console: Console, index: int, total: int, loss: float) -> None:
    """One step's line: ``step   3/10  loss 0.527822``."""
    console.print(f"step {index:>{len(str(total))}}/{total}  loss {loss:.6g}")


def print_training_summary(report: TrainingReport, console: Console) -> None:
    """The lines after the steps: the loss's way, and the files written."""
    if report.error:
        console.print(f"stopped after {len(report.losses)} steps: {report.error}")
    elif report.losses:
        first, last = report.losses[0], report.losses[-1]
        console.print(f"trained {len(report.losses)} steps ({report.optimizer}, lr "
                      f"{report.lr:g}) in {_duration(report.seconds)}: loss {first:.6g} -> "
                      f"{last:.6g}")
    for what, path in (("model with the trained weights", report.saved),
                       ("checkpoint (torch keys)", report.checkpoint)):
        if path:
            console.print(f"wrote the {what}: {path}", soft_wrap=True)  # paths unbroken
    if report.directory:
        console.print(f"training graphs: {report.directory}", soft_wrap=True)


def _duration(seconds: float) -> str:
    """``1.23 s``, or ``4.6 ms`` below a tenth of a second (a few steps take milliseconds)."""
    return f"{seconds:.2f} s" if seconds >= 0.1 else f"{seconds * 1000:.2g} ms"


def training_dict(report: TrainingReport) -> dict[str, Any]:
    """The JSON report: ``schema``, ``ok``, ``exit_code``, the run's data and ``build``."""
    return {
        "schema": TRAIN_SCHEMA_ID,
        "ok": report.error is None,
        "exit_code": 0 if report.error is None else 1,
        "model": report.model,
        "directory": report.directory,
        "optimizer": report.optimizer,
        "lr": report.lr,
        "steps": report.steps,
        "losses": report.losses,
        "saved": report.saved,
        "checkpoint": report.checkpoint,
        "seconds": round(report.seconds, 4),
        "error": report.error,
        "build": report.build,
    }
