"""The training loop: epochs, evaluation, schedules, accumulation, saving and resuming.

:meth:`Trainer.fit <graphpass.training.Trainer.fit>` calls :func:`fit`; ``graphpass
train`` is this loop with a progress bar. :meth:`~graphpass.training.Trainer.step`
stays the primitive: each optimizer step is one call, given one batch, or with
``accumulate=N`` the list of N consecutive batches (one step on all of them).

One step of the run, in order: the schedule sets the learning rate; the step; its
record goes to the log and the callback; an evaluation when one is due (every
``eval_every`` steps, at the end of each epoch and of the run); the state is saved
when due (every ``save_every`` steps and at the end of the run), with the position
in the data after this step. A run resumed from that state (``resume=True``) starts
from there and takes the steps, learning rates, batches and evaluations the
uninterrupted run would have.

**Extending a run.** ``epochs`` and ``steps`` count the whole run, and they are the
only settings a resumed run may change: a larger one extends the saved run (a smaller
one, that the saved run has not passed, shortens it). The steps, batches and
evaluations are then those of a run started with the new length, so a schedule that
does not depend on the length (``constant``, after any warmup) gives bit for bit the
straight run of the new length. ``linear`` and ``cosine`` are recomputed over the new
length, as Hugging Face's ``Trainer`` does when resumed with a new ``max_steps``: the
steps still to come take the learning rates of a straight run of the new length, and
:attr:`FitResult.notes` says so in one line.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from graphpass.training._data import Batches, batch_rows
from graphpass.training._errors import TrainingError
from graphpass.training._metrics import MetricsLog
from graphpass.training._schedule import Schedule, ScheduleKind
from graphpass.training._state import load_state, save_state

if TYPE_CHECKING:
    from graphpass.training._trainer import Trainer

__all__ = ["BatchSource", "FitResult", "fit"]

Batch: TypeAlias = Mapping[str, Any]
BatchSource: TypeAlias = "Batches | Iterable[Batch] | Callable[[int], Iterable[Batch]]"
"""What :func:`fit` trains on: :class:`~graphpass.training._data.Batches`, a re-iterable
collection of batches (a list: each epoch iterates it again), or a function of the
epoch number giving that epoch's batches."""


@dataclass
class FitResult:
    """What a :func:`fit` call did.

    Attributes:
        steps: The trainer's step count at the end.
        epochs: The epochs completed.
        losses: The loss of each step this call took.
        evaluations: The evaluation records (``step``, ``epoch``, ``loss``, ...).
        seconds: Wall seconds of this call.
        resumed_from: The step of the saved state the run resumed from, if it did.
        error: Why the run stopped early (a loss that is not finite), if it did.
        stopped: Whether the callback stopped the run.
        notes: Lines worth saying: a resumed run extended (or shortened), and how its
            schedule was recomputed.
    """

    steps: int
    epochs: int = 0
    losses: list[float] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int | None = None
    error: str | None = None
    stopped: bool = False
    notes: list[str] = field(default_factory=list)


def fit(trainer: Trainer, batches: Any, *, epochs: int | None = None,
        steps: int | None = None, eval_batches: Any = None, eval_every: int | None = None,
        accumulate: int = 1, schedule: ScheduleKind | Schedule = "constant", warmup: int = 0,
        lr: float | None = None, callback: Callable[[dict[str, Any]], Any] | None = None,
        log: str | os.PathLike[str] | None = None, state_dir: str | os.PathLike[str] | None = None,
        save_every: int | None = None, resume: bool | str | os.PathLike[str] = False,
        settings: Mapping[str, Any] | None = None) -> FitResult:
    """Train ``trainer`` on ``batches`` for ``epochs`` epochs or ``steps`` steps.

    Args:
        trainer: The trainer.
        batches: A :data:`BatchSource`.
        epochs: Epochs to train (counted from the run's start; a resumed run goes on
            to this end, which extends the saved run when it is larger).
        steps: Optimizer steps to train instead (likewise).
        eval_batches: Evaluation data (a :data:`BatchSource`; its epoch 0), evaluated
            with ``eval.onnx`` every ``eval_every`` steps, at the end of each epoch and
            at the end of the run. The loss is the mean over its samples.
        eval_every: Steps between evaluations.
        accumulate: Batches per optimizer step (given to ``step`` as one list); an
            epoch's last step takes what is left.
        schedule: ``constant``, ``linear`` or ``cosine`` (with ``warmup`` steps first),
            or a :class:`~graphpass.training._schedule.Schedule`.
        warmup: Warmup steps of a named schedule.
        lr: The base learning rate (default: the trainer's, when the run started).
        callback: Called with each step's and evaluation's record (a dict, as in the
            metrics log); returning ``False`` stops the run (its state is saved).
        log: A metrics file (JSON lines, :mod:`graphpass.training._metrics`).
        state_dir: Where the state is saved (every ``save_every`` steps and at the end).
        save_every: Steps between saves.
        resume: Continue the run saved in ``state_dir`` (``True``) or in this folder,
            if a state was saved there (else the run starts from the beginning).
        settings: More of the run's settings, recorded in the state and compared on
            resume (``graphpass train`` records its data paths).

    Raises:
        TrainingError: Bad arguments, a resumed run whose settings (but its length)
            differ from the saved one's or that has passed the new end, a static
            model given batches of another size, or whatever
            :meth:`~graphpass.training.Trainer.step` raises.
    """
    started = time.perf_counter()
    _check_arguments(epochs, steps, eval_every, accumulate, save_every, state_dir, resume)
    per_epoch = _steps_per_epoch(batches, accumulate)
    total = steps if steps is not None else (epochs * per_epoch
                                             if epochs is not None and per_epoch else None)
    base = trainer.lr if lr is None else lr
    plan = schedule if isinstance(schedule, Schedule) else Schedule(
        base, schedule, warmup, total)
    recorded = {"epochs": epochs, "steps": steps, "accumulate": accumulate,
                "schedule": plan.as_dict(), "eval_every": eval_every,
                "data": batches.settings() if isinstance(batches, Batches)
                else {"batches": _length(batches)}, **dict(settings or {})}
    _check_static_sizes(trainer, batches, "training")
    if eval_batches is not None:
        _check_static_sizes(trainer, eval_batches, "evaluation")

    first_step, epoch, index = trainer.steps, 0, 0
    result = FitResult(trainer.steps)
    source = state_dir if resume is True else (resume or None)
    if source is not None:
        saved = load_state(trainer, source, missing_ok=True)
        if saved is not None:
            settings = saved.run.get("settings", {})
            _check_same_run(settings, recorded, source)
            first_step = int(saved.run["first_step"])
            epoch, index = (int(v) for v in saved.run["position"])
            result.resumed_from = saved.steps
            if _length_of(settings) != _length_of(recorded):
                result.notes.append(_resized(settings, recorded, plan, saved.lr,
                                             trainer.steps - first_step, (epoch, index),
                                             first_step, source))
    loop = _Loop(trainer, plan, accumulate, eval_batches, eval_every, save_every, state_dir,
                 callback, recorded, first_step, total, epochs)
    metrics = MetricsLog(log, after_step=trainer.steps if result.resumed_from is not None
                         else None) if log is not None else None
    try:
        loop.metrics = metrics
        loop.run(batches, epoch, index, result)
    finally:
        if metrics is not None:
            metrics.close()
    result.steps = trainer.steps
    result.seconds = time.perf_counter() - started
    return result


class _Loop:
    """One run's loop (see the module docstring): what it needs between steps."""

    def __init__(self, trainer: Trainer, plan: Schedule, accumulate: int, eval_batches: Any,
                 eval_every: int | None, save_every: int | None,
                 state_dir: str | os.PathLike[str] | None,
                 callback: Callable[[dict[str, Any]], Any] | None, recorded: dict[str, Any],
                 first_step: int, total: int | None, epochs: int | None):
        self.trainer = trainer
        self.plan = plan
        self.accumulate = accumulate
        self.eval_batches = eval_batches
        self.eval_every = eval_every
        self.save_every = save_every
        self.state_dir = state_dir
        self.callback = callback
        self.recorded = recorded
        self.first_step = first_step
        self.total = total
        self.epochs = epochs
        self.metrics: MetricsLog | None = None

    def run(self, batches: Any, epoch: int, index: int, result: FitResult) -> None:
        trainer = self.trainer
        if self._finished(epoch):  # a resumed run that had ended: nothing to train
            if self.state_dir is not None:
                self._save(epoch, index)  # the same state again; tidies the folder up
            result.epochs = epoch
            return
        clock = time.perf_counter()
        while True:
            upcoming = _Lookahead(_epoch_batches(batches, epoch, index))
            if upcoming.exhausted():
                if index == 0:
                    raise TrainingError("the training data gave no batch"
                                        + (f" in epoch {epoch + 1}" if epoch else ""),
                                        hint="give batches that can be iterated once per "
                                             "epoch (a list, or a function of the epoch)")
                epoch, index = epoch + 1, 0  # a resumed position at an epoch's very end
                continue
            while not upcoming.exhausted():
                group = list(itertools.islice(upcoming, self.accumulate))
                index += len(group)
                position = trainer.steps - self.first_step
                trainer.lr = self.plan.at(position)
                batch: Any = group[0] if self.accumulate == 1 else group
                loss = trainer.step(batch)
                now = time.perf_counter()
                samples = sum(batch_rows(b) for b in group)
                record = {"step": trainer.steps, "epoch": epoch + 1, "loss": loss,
                          "lr": trainer.lr,
                          "samples_per_s": round(samples / max(now - clock, 1e-9), 3)}
                clock = now
                result.losses.append(loss)
                go_on = self._emit(record)
                if not math.isfinite(loss):
                    result.error = (f"the loss is {loss} at step {trainer.steps}; the weights "
                                    "are not written (try a smaller learning rate)")
                    result.epochs = epoch
                    return
                epoch_ends = upcoming.exhausted()
                done_steps = trainer.steps - self.first_step
                evaluated = False
                if self.eval_every and done_steps % self.eval_every == 0 and not epoch_ends:
                    self._evaluate(epoch, result)
                    evaluated = True
                if epoch_ends:
                    epoch, index = epoch + 1, 0
                finished = self._finished(epoch)
                if epoch_ends or (finished and not evaluated):
                    self._evaluate(epoch - 1 if epoch_ends else epoch, result)
                stop = go_on is False
                if self.state_dir is not None and (
                        finished or stop or (self.save_every and
                                             done_steps % self.save_every == 0)):
                    self._save(epoch, index)
                if finished or stop:
                    result.stopped = stop and not finished
                    result.epochs = epoch
                    return
                clock = time.perf_counter()

    def _finished(self, epoch: int) -> bool:
        done = self.trainer.steps - self.first_step
        if self.total is not None and self.epochs is None:
            return done >= self.total
        return self.epochs is not None and epoch >= self.epochs

    def _emit(self, record: dict[str, Any]) -> Any:
        if self.metrics is not None:
            self.metrics.write(record)
        return self.callback(record) if self.callback is not None else None

    def _evaluate(self, epoch: int, result: FitResult) -> None:
        if self.eval_batches is None:
            return
        total, samples = 0.0, 0
        for batch in _epoch_batches(self.eval_batches, 0, 0):
            rows = batch_rows(batch)
            total += self.trainer.evaluate(batch).loss * rows
            samples += rows
        if not samples:
            raise TrainingError("the evaluation data gave no batch")
        record = {"step": self.trainer.steps, "epoch": epoch + 1, "eval": True,
                  "loss": total / samples, "samples": samples}
        result.evaluations.append(record)
        self._emit(record)

    def _save(self, epoch: int, index: int) -> None:
        assert self.state_dir is not None
        save_state(self.trainer, self.state_dir, run={
            "first_step": self.first_step, "position": [epoch, index],
            "settings": self.recorded})


class _Lookahead(Iterator[Batch]):
    """An iterator that knows whether another item follows (it reads one ahead)."""

    _END = object()

    def __init__(self, iterator: Iterator[Batch]):
        self._iterator = iterator
        self._next: Any = next(iterator, self._END)

    def exhausted(self) -> bool:
        """Whether no item follows."""
        return self._next is self._END

    def __next__(self) -> Batch:
        if self._next is self._END:
            raise StopIteration
        item, self._next = self._next, next(self._iterator, self._END)
        return item  # type: ignore[no-any-return]


def _epoch_batches(batches: Any, epoch: int, start: int) -> Iterator[Batch]:
    if isinstance(batches, Batches):
        return batches.epoch(epoch, start)
    if callable(batches) and not isinstance(batches, Mapping):
        iterable = batches(epoch)
    elif isinstance(batches, Mapping):  # one batch
        iterable = [batches]
    else:
        iterable = batches
    return itertools.islice(iter(iterable), start, None)


def _length(batches: Any) -> int | None:
    if isinstance(batches, Mapping):
        return 1
    try:
        return len(batches)
    except TypeError:
        return None


def _steps_per_epoch(batches: Any, accumulate: int) -> int | None:
    count = _length(batches)
    return None if count is None else -(-count // accumulate)


def _check_arguments(epochs: int | None, steps: int | None, eval_every: int | None,
                     accumulate: int, save_every: int | None, state_dir: Any,
                     resume: Any) -> None:
    if (epochs is None) == (steps is None):
        raise TrainingError("give either epochs or steps" if epochs is None else
                            "give epochs or steps, not both")
    for name, value in (("epochs", epochs), ("steps", steps), ("eval_every", eval_every),
                        ("save_every", save_every)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise TrainingError(f"{name} must be a whole number of at least 1, not {value!r}")
    if not isinstance(accumulate, int) or accumulate < 1:
        raise TrainingError(f"accumulate must be at least 1, not {accumulate!r}")
    if (save_every is not None or resume is True) and state_dir is None:
        raise TrainingError("saving or resuming the state needs a state folder",
                            hint="give state_dir (graphpass train: --state-dir DIR)")


def _check_static_sizes(trainer: Trainer, batches: Any, what: str) -> None:
    """Refuse, before training, batches whose size a static export fixed otherwise."""
    if not isinstance(batches, Batches) or batches.batch_size is None:
        return
    fixed = {name: shape[0] for name, shape in trainer.batch_shapes().items()
             if shape and isinstance(shape[0], int)}
    if not fixed:
        return
    name, size = next(iter(fixed.items()))
    for count, why in ((batches.batch_size, "the batch size"),
                       (batches.last_batch_size, "the last batch")):
        if count is not None and count != size:
            short = why == "the last batch"
            raise TrainingError(
                f"{why} of the {what} data is {count} sample{'s' * (count != 1)}"
                + (f" ({batches.samples} samples in batches of {batches.batch_size})"
                   if short else "")
                + f", and the model's input {name!r} has dimension 0 fixed at {size}",
                where=batches.description,
                hint=("leave the short batch out with --drop-last (drop_last=True), or "
                      if short else f"give batches of {size} (--batch-size {size}), or ")
                + "export the model with dynamic_shapes (a dynamic batch dimension)")


def _check_same_run(saved: Mapping[str, Any], now: Mapping[str, Any],
                    state_dir: str | os.PathLike[str]) -> None:
    """Refuse a resume whose settings differ from the saved run's, but for its length."""
    saved, now = _lengthless(saved), _lengthless(now)
    changed = [key for key in sorted({*saved, *now}) if _plain(saved.get(key))
               != _plain(now.get(key))]
    if changed:
        shown = "; ".join(f"{key}: {_plain(saved.get(key))!r} then, {_plain(now.get(key))!r} now"
                          for key in changed[:3])
        raise TrainingError(f"the saved run was made with other settings ({shown})",
                            where=str(Path(state_dir)),
                            hint="resume with the command (or arguments) of the run that "
                                 "saved the state; only --steps or --epochs may change (they "
                                 "count the whole run: a larger one extends it)")


def _length_of(settings: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """The settings that give a run's length: epochs, steps, and the steps in all."""
    schedule = settings.get("schedule")
    total = schedule.get("total") if isinstance(schedule, Mapping) else None
    return settings.get("epochs"), settings.get("steps"), total


def _lengthless(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without the run's length (what a resumed run may change)."""
    kept = {key: value for key, value in settings.items() if key not in ("epochs", "steps")}
    if isinstance(kept.get("schedule"), Mapping):
        kept["schedule"] = {k: v for k, v in kept["schedule"].items() if k != "total"}
    return kept


def _resized(saved: Mapping[str, Any], now: Mapping[str, Any], plan: Schedule,
             saved_lr: float, done: int, position: tuple[int, int], first_step: int,
             state_dir: str | os.PathLike[str]) -> str:
    """The note on a resumed run given another length; refuses one the saved run passed."""
    epochs, steps, total = _length_of(now)
    epoch, index = position
    if steps is not None and done > steps:
        raise TrainingError(f"the saved run has taken {_count(done, 'step')}, past the end "
                            f"of a run of {_describe(now)}", where=str(Path(state_dir)),
                            hint=f"give --steps {done} or more (--steps and --epochs count "
                                 "the whole run), or start a new run in another --state-dir")
    if steps is None and (epoch > epochs or (epoch == epochs and index > 0)):
        reached = f", into epoch {epoch + 1}" if index else f" ({_count(epoch, 'epoch')})"
        raise TrainingError(f"the saved run has taken {_count(done, 'step')}{reached}, past "
                            f"the end of a run of {_describe(now)}",
                            where=str(Path(state_dir)),
                            hint=f"give --epochs {epoch + (index > 0)} or more (--steps and "
                                 "--epochs count the whole run), or start a new run in "
                                 "another --state-dir")
    _, _, before = _length_of(saved)
    shorter = (total < before if total is not None and before is not None
               else (epochs or 0) < (saved.get("epochs") or 0))
    note = (f"{'shortened' if shorter else 'extended'} the saved run of {_describe(saved)} "
            f"to {_describe(now)}")
    if plan.kind != "constant" and plan.total != before and plan.total is not None \
            and done < plan.total:
        note += (f": the {plan.kind} schedule was recomputed over the {plan.total} steps, "
                 f"and steps {first_step + done + 1} to {first_step + plan.total} take the "
                 f"learning rates of a straight run of {plan.total} (step "
                 f"{first_step + done + 1}: {plan.at(done):.6g}; the saved run's last step "
                 f"had {saved_lr:.6g})")
    return note


def _describe(settings: Mapping[str, Any]) -> str:
    """A run's length in words: ``8 steps``, ``2 epochs (32 steps)``."""
    epochs, steps, total = _length_of(settings)
    if steps is not None:
        return _count(steps, "step")
    return _count(epochs, "epoch") + (f" ({_count(total, 'step')})" if total is not None
                                      else "")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _plain(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
