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
from graphpass.framework import RunSummary

__all__ = ["TRAIN_SCHEMA_ID", "TrainingReport", "print_build_summary", "print_evaluation",
           "print_step", "print_training_summary", "training_dict"]

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
        evaluations: The evaluation records (``step``, ``epoch``, ``loss``, ``samples``).
        epochs: The epochs completed.
        resumed_from: The step of the saved state the run resumed from, if it did.
        state: The state folder, if the state was saved.
        log: The metrics file, if one was written.
        plot: The loss plot, if one was drawn.
        notes: Lines worth saying (a ``--resume`` folder that held no state yet, a
            resumed run extended and how its schedule was recomputed).
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
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    epochs: int = 0
    resumed_from: int | None = None
    state: str | None = None
    log: str | None = None
    plot: str | None = None
    notes: list[str] = field(default_factory=list)


def print_build_summary(summary: RunSummary, console: Console) -> None:
    """One line for the passes that built the training graphs, and their warnings."""
    wrote = next((f for f in summary.findings if f.code == "GP850"), None)
    weights = len(wrote.data.get("trainable", [])) if wrote is not None else 0
    console.print(f"built the training graphs ({', '.join(summary.plan)}): {weights} "
                  f"trainable weight{'s' * (weights != 1)}")
    for finding in summary.findings:
        if finding.severity is Severity.WARNING:
            console.print(f"warning {finding.code}: {finding.message}")


def print_step(console: Console, index: int, total: int, loss: float, *,
               epoch: int | None = None) -> None:
    """One step's line: ``step   3/10  loss 0.527822`` (``epoch 2`` before the loss)."""
    during = f"  epoch {epoch}" if epoch is not None else ""
    console.print(f"step {index:>{len(str(total))}}/{total}{during}  loss {loss:.6g}")


def print_evaluation(console: Console, record: dict[str, Any]) -> None:
    """An evaluation's line: ``eval after step 20 (epoch 1): loss 0.71 on 64 samples``."""
    console.print(f"eval after step {record['step']} (epoch {record['epoch']}): loss "
                  f"{record['loss']:.6g} on {record['samples']} samples")


def print_training_summary(report: TrainingReport, console: Console) -> None:
    """The lines after the steps: the loss's way, and the files written."""
    for note in report.notes:
        console.print(note, soft_wrap=True)
    resumed = (f", resumed after step {report.resumed_from}"
               if report.resumed_from is not None else "")
    if report.error:
        console.print(f"stopped after {len(report.losses)} steps: {report.error}")
    elif report.losses:
        first, last = report.losses[0], report.losses[-1]
        console.print(f"trained {len(report.losses)} steps ({report.optimizer}, lr "
                      f"{report.lr:g}{resumed}) in {_duration(report.seconds)}: loss "
                      f"{first:.6g} -> {last:.6g}")
    elif report.resumed_from is not None:
        console.print(f"nothing left to train: the saved run ended at step "
                      f"{report.resumed_from}")
    if report.evaluations:
        first_eval, last_eval = report.evaluations[0], report.evaluations[-1]
        console.print(f"evaluation loss {first_eval['loss']:.6g} (step {first_eval['step']}) "
                      f"-> {last_eval['loss']:.6g} (step {last_eval['step']})")
    for what, path in (("model with the trained weights", report.saved),
                       ("checkpoint (torch keys)", report.checkpoint),
                       ("trainer state", report.state if report.error is None else None),
                       ("metrics", report.log), ("loss plot", report.plot)):
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
        "evaluations": report.evaluations,
        "epochs": report.epochs,
        "resumed_from": report.resumed_from,
        "state": report.state,
        "log": report.log,
        "plot": report.plot,
        "saved": report.saved,
        "checkpoint": report.checkpoint,
        "seconds": round(report.seconds, 4),
        "error": report.error,
        "notes": report.notes,
        "build": report.build,
    }
