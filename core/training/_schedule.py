"""Learning-rate schedules: a warmup, then constant, linear or cosine decay.

A schedule is a pure function of the step's position in the run, so that a resumed
run takes exactly the learning rates the uninterrupted one would: the position is
the optimizer steps taken since the run began (what the saved state records). A run
resumed with another length (:mod:`graphpass.training._fit`) takes the schedule of the
new length: ``linear`` and ``cosine`` are recomputed over the new ``T``.

For step ``t`` (0 for the run's first step) of a run of ``T`` steps, with base rate
``lr`` and ``W`` warmup steps:

* warmup (``t < W``): ``lr * (t + 1) / W`` (the first step already learns);
* ``constant``: ``lr``;
* ``linear``: ``lr * (T - t) / (T - W)``, down to ``lr / (T - W)`` at the last step;
* ``cosine``: ``lr * (1 + cos(pi * (t - W) / (T - W))) / 2``.

The rate never reaches 0 within the run (the trainer takes positive rates only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from graphpass.training._errors import TrainingError

__all__ = ["SCHEDULES", "Schedule", "ScheduleKind"]

ScheduleKind = Literal["constant", "linear", "cosine"]
SCHEDULES: Final[tuple[ScheduleKind, ...]] = ("constant", "linear", "cosine")
"""The schedules' names."""


@dataclass(frozen=True)
class Schedule:
    """The learning rate of each step of a run (see the module docstring).

    Attributes:
        lr: The base learning rate.
        kind: ``constant``, ``linear`` or ``cosine``.
        warmup: Steps of linear warmup first.
        total: The run's steps (needed by ``linear`` and ``cosine``).
    """

    lr: float
    kind: ScheduleKind = "constant"
    warmup: int = 0
    total: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise TrainingError(f"unknown learning-rate schedule {self.kind!r}",
                                hint=f"choose one of {', '.join(SCHEDULES)}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise TrainingError(f"the learning rate must be a positive number, not {self.lr!r}")
        if self.warmup < 0:
            raise TrainingError("the warmup must be 0 or more steps")
        if self.kind != "constant":
            if self.total is None:
                raise TrainingError(f"a {self.kind} schedule needs the run's length",
                                    hint="give the number of steps or epochs")
            if self.total <= self.warmup:
                raise TrainingError(f"the warmup ({self.warmup} steps) is not shorter than "
                                    f"the run ({self.total} steps)",
                                    hint="give fewer warmup steps, or train longer")

    def at(self, position: int) -> float:
        """The learning rate of the run's step ``position`` (0 for the first)."""
        if position < self.warmup:
            return self.lr * (position + 1) / self.warmup
        if self.kind == "constant":
            return self.lr
        assert self.total is not None
        span = self.total - self.warmup
        done = min(position, self.total - 1) - self.warmup
        if self.kind == "linear":
            return self.lr * (span - done) / span
        return self.lr * (1 + math.cos(math.pi * done / span)) / 2

    def as_dict(self) -> dict[str, object]:
        """The schedule as JSON (what a saved state records)."""
        return {"lr": self.lr, "kind": self.kind, "warmup": self.warmup, "total": self.total}
