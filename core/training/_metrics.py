"""The metrics of a training run: one JSON line per step and per evaluation, and a plot.

``graphpass train --log metrics.jsonl`` writes, as the run goes (each line flushed)::

    {"step": 1, "epoch": 1, "loss": 0.93, "lr": 0.001, "samples_per_s": 812.4}
    ...
    {"step": 100, "epoch": 1, "eval": true, "loss": 0.71, "samples": 64}

``step`` counts the optimizer steps taken (after this one), ``epoch`` the epoch it
belongs to (from 1), ``loss`` is the step's loss (before its update) or the mean
evaluation loss over the evaluation data (weighted by batch size), ``lr`` the step's
learning rate. A resumed run first drops the lines of the steps after the saved state
(the killed run's steps that are taken again), so the file ends up as one run's.

:func:`plot_metrics` draws the training and evaluation losses against the step
(matplotlib, ``pip install graphpass[plot]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from graphpass.errors import ModelSaveError
from graphpass.files import replace_file
from graphpass.training._errors import TrainingError

__all__ = ["MetricsLog", "plot_metrics", "read_metrics"]


class MetricsLog:
    """Appends metrics records to a JSON-lines file, one flushed line each.

    Attributes:
        path: The file.
    """

    def __init__(self, path: str | os.PathLike[str], *, after_step: int | None = None):
        """Open ``path`` for appending.

        Args:
            path: The file (made if missing).
            after_step: Resuming after this step: first drop the lines of later steps
                (``None``: start the file anew).

        Raises:
            ModelSaveError: The file cannot be written.
        """
        self.path = Path(path)
        kept: list[str] = []
        if after_step is not None and self.path.exists():
            kept = [json.dumps(r) for r in read_metrics(self.path)
                    if int(r.get("step", 0)) <= after_step]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.path, "".join(line + "\n" for line in kept), step="metrics")
            self._stream: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as error:
            raise ModelSaveError(f"cannot write the metrics ({error.strerror})",
                                 where=str(self.path)) from None

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record."""
        if self._stream is None:
            raise ValueError("the metrics log is closed")
        self._stream.write(json.dumps(dict(record)) + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Close the file."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a metrics file (a torn last line, from a kill, is left out)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def plot_metrics(records: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
                 path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Draw the training and evaluation loss against the step into an image (atomic).

    Args:
        records: Metrics records, or a metrics file.
        path: The image (``.png``, ``.svg``, ``.pdf``: any format matplotlib writes).
        title: The plot's title.

    Raises:
        TrainingError: matplotlib is not installed, or there is nothing to draw.
        ModelSaveError: The image cannot be written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure
    except ImportError:
        raise TrainingError("plotting needs matplotlib, which is not installed",
                            hint="pip install 'graphpass[plot]'") from None
    if isinstance(records, (str, os.PathLike)):
        records = read_metrics(records)
    rows = list(records)
    train = [(r["step"], r["loss"]) for r in rows if not r.get("eval") and "loss" in r]
    evaluation = [(r["step"], r["loss"]) for r in rows if r.get("eval") and "loss" in r]
    if not train and not evaluation:
        raise TrainingError("no loss to plot")
    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    axes = figure.add_subplot()
    if train:
        axes.plot(*zip(*train, strict=True), label="training loss", linewidth=1.0)
    if evaluation:
        axes.plot(*zip(*evaluation, strict=True), label="evaluation loss", marker="o")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.grid(alpha=0.3)
    axes.legend()
    if title:
        axes.set_title(title)
    figure.tight_layout()
    target = Path(path)
    image_format = target.suffix.lstrip(".") or "png"
    metadata = {"Software": None} if target.suffix == ".png" else None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(target, lambda tmp: figure.savefig(tmp, format=image_format,
                                                        metadata=metadata), step="plot")
    except OSError as error:
        raise ModelSaveError(f"cannot write ({error.strerror})", where=str(target)) from None
    return target
