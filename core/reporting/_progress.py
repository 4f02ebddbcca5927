"""Progress on long runs: passes, big loads, batches of files, training steps.

What is shown: the pass running, a big model loading, a batch's files done, the
steps of a training run.

Shown on standard error, and only when it is a terminal: logs, pipes and CI output
stay clean. The display disappears when the work is done.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from graphpass.findings import Finding
from graphpass.framework import Instrument, PassContext, PassRecord, PlannedPass, RunResult
from graphpass.ir import Model
from graphpass.reporting._summary import format_bytes

__all__ = ["FileProgress", "PassProgress", "StepProgress", "loading"]


class PassProgress(Instrument):
    """An instrument that shows a progress bar over the planned passes.

    Attributes:
        console: Where it draws (standard error by default).
        enabled: Whether it draws at all (only on a terminal).
    """

    name = "progress"

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._total = 0
        self._done = 0

    def before_run(self, plan: Sequence[PlannedPass], model: Model, context: PassContext) -> None:
        """Start the display."""
        if not self.enabled:
            return
        self._total = len(plan)
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                  BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                  TimeElapsedColumn(), console=self.console, transient=True)
        self._task = self._progress.add_task("planning", total=self._total)
        self._progress.start()

    def before_pass(self, planned: PlannedPass, model: Model, context: PassContext) -> None:
        """Name the pass that starts."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=f"running {planned.name}")

    def after_pass(self, planned: PlannedPass, model: Model, record: PassRecord,
                   context: PassContext) -> list[Finding]:
        """Count the pass as done (a fixed-point round starts the count again)."""
        if self._progress is not None and self._task is not None:
            self._done = self._done + 1 if self._done < self._total else 1
            self._progress.update(self._task, completed=self._done)
        return []

    def after_run(self, result: RunResult | None, context: PassContext) -> None:
        """Remove the display."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class _Bar:
    """What the file and step bars share: a transient bar on a terminal, none elsewhere."""

    def __init__(self, total: int, console: Console | None):
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal
        self.total = total
        self.completed = 0
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def _start(self, unit: str, description: str, *extra: ProgressColumn) -> None:
        """Draw the bar (on a terminal): ``description``, ``7/10 <unit>``, time, ``extra``."""
        if not self.enabled:
            return
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                  BarColumn(), TextColumn(f"{{task.completed}}/{{task.total}} "
                                                          f"{unit}"),
                                  TimeElapsedColumn(), *extra, console=self.console,
                                  transient=True)
        self._task = self._progress.add_task(description, total=self.total)
        self._progress.start()

    def _update(self, description: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.completed,
                                  description=description)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class FileProgress(_Bar):
    """A progress bar over the files of a batch: ``12/50 files`` and the last one done.

    Use it as a context manager and call :meth:`done` as each file is finished (in any
    order)::

        with FileProgress(len(tasks), verb="linting") as progress:
            for result in results:
                progress.done(result.model)

    Attributes:
        console: Where it draws (standard error by default).
        enabled: Whether it draws at all (only on a terminal).
        completed: How many files are done.
    """

    def __init__(self, total: int, *, verb: str = "checking", console: Console | None = None):
        super().__init__(total, console)
        self.verb = verb

    def __enter__(self) -> FileProgress:
        self._start("files", f"{self.verb} {self.total} files")
        return self

    def done(self, name: str) -> None:
        """Count one more file as done (``name`` is shown as the latest)."""
        self.completed += 1
        self._update(f"{self.verb}: {name}")


class StepProgress(_Bar):
    """A progress bar over training steps: ``7/10 steps``, the epoch, loss, samples/s, time left.

    Use it as a context manager and call :meth:`done` after each step::

        with StepProgress(steps) as progress:
            for _ in range(steps):
                progress.done(trainer.step(batch))

    Attributes:
        console: Where it draws (standard error by default).
        enabled: Whether it draws at all (only on a terminal).
        completed: How many steps are done.
    """

    def __init__(self, total: int, *, epochs: int | None = None,
                 console: Console | None = None):
        super().__init__(total, console)
        self.epochs = epochs

    def __enter__(self) -> StepProgress:
        self._start("steps", "training", TextColumn("left"), TimeRemainingColumn())
        return self

    def done(self, loss: float, *, step: int | None = None, epoch: int | None = None,
             samples_per_s: float | None = None) -> None:
        """Count one more step as done (or up to ``step``): its loss, epoch and speed."""
        self.completed = self.completed + 1 if step is None else step
        if self._progress is not None:
            parts = ["training"]
            if epoch is not None and self.epochs is not None:
                parts.append(f"epoch {epoch}/{self.epochs}")
            parts.append(f"loss {loss:.6g}")
            if samples_per_s is not None:
                parts.append(f"{samples_per_s:.4g} samples/s")
            self._update(", ".join(parts))


@contextlib.contextmanager
def loading(path: str | Path, console: Console | None = None) -> Iterator[None]:
    """Show a spinner while a model file is read (on a terminal only)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    try:
        size = Path(path).stat().st_size
    except OSError:
        size = 0
    with console.status(f"loading {path} ({format_bytes(size)})"):
        yield
