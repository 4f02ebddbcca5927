"""What a run gives back: the model, the findings, and one record per pass run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from graphpass.findings import Finding, Severity, count_by_severity
from graphpass.framework._analyses import Analyses
from graphpass.ir import Model

_T = TypeVar("_T")

__all__ = ["PassRecord", "RunResult", "RunSummary", "unique_findings"]


@dataclass
class PassRecord:
    """What happened when one pass ran.

    Attributes:
        name: The pass.
        plugin: The plugin that gave it.
        seconds: How long it ran (wall clock).
        changed: Whether it changed the model.
        findings: What it reported (and what instruments reported about it).
        stats: Its counters (``{"inlined calls": 12}``).
        iteration: The round it ran in (1 unless the run repeats to a fixed point).
        analysis: Whether it is an analysis pass.
    """

    name: str
    plugin: str
    seconds: float = 0.0
    changed: bool = False
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    iteration: int = 1
    analysis: bool = False

    @property
    def has_errors(self) -> bool:
        """Whether any finding is an error."""
        return any(f.severity is Severity.ERROR for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (findings counted, not listed)."""
        return {
            "name": self.name,
            "plugin": self.plugin,
            "iteration": self.iteration,
            "analysis": self.analysis,
            "seconds": round(self.seconds, 6),
            "changed": self.changed,
            "findings": {str(k): v for k, v in count_by_severity(self.findings).items()},
            "stats": dict(self.stats),
        }


class _Outcome:
    """What a run's result and its summary both answer, from their records and findings."""

    records: list[PassRecord]
    findings: list[Finding]

    @property
    def changed(self) -> bool:
        """Whether any pass changed the model."""
        return any(record.changed for record in self.records)

    @property
    def ok(self) -> bool:
        """Whether the run finished with no error findings."""
        return not self.errors

    @property
    def errors(self) -> list[Finding]:
        """The error findings."""
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def seconds(self) -> float:
        """Total time spent in passes."""
        return sum(record.seconds for record in self.records)


@dataclass
class RunResult(_Outcome):
    """The outcome of :meth:`graphpass.PassManager.run`.

    Attributes:
        model: The resulting model: a copy, unless ``run`` was told to work on the
            model it was given (``copy=False``). When the run stopped early (see
            :attr:`stopped_after`), it holds the state after the last pass that ran.
        records: One record per pass run, in order.
        findings: Every finding, in the order reported (repeats across fixed-point
            rounds are reported once), plus the instruments' findings.
        plan: The names of the planned passes, in order.
        stopped_after: The pass after which the run stopped because of error
            findings, or ``None`` if every planned pass ran.
        iterations: How many rounds ran (more than one only for fixed-point runs).
        analyses: The analyses still valid at the end of the run (ask with
            :meth:`analysis`).
    """

    model: Model
    records: list[PassRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    plan: tuple[str, ...] = ()
    stopped_after: str | None = None
    iterations: int = 1
    analyses: Analyses = field(default_factory=Analyses)

    def analysis(self, kind: type[_T]) -> _T | None:
        """The analysis of type ``kind`` valid for :attr:`model`, or ``None``."""
        return self.analyses.get(kind)

    def summary(self) -> RunSummary:
        """Everything but the model: small, picklable, and what reports are made of."""
        return RunSummary(list(self.records), list(self.findings), self.plan,
                          self.stopped_after, self.iterations)


@dataclass
class RunSummary(_Outcome):
    """A run's outcome without its model: what a report needs, cheap to send around.

    What a worker process or a cluster sends back for each model of a batch
    (:mod:`graphpass.batch`); the reports render it like a :class:`RunResult`.

    Attributes:
        records: One record per pass run, in order.
        findings: Every finding.
        plan: The names of the planned passes, in order.
        stopped_after: The pass after which the run stopped because of errors, if any.
        iterations: How many rounds ran.
    """

    records: list[PassRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    plan: tuple[str, ...] = ()
    stopped_after: str | None = None
    iterations: int = 1


def unique_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Drop repeats of the same finding (same code, place and message), keeping order."""
    seen: set[tuple[Any, ...]] = set()
    unique = []
    for finding in findings:
        key = (finding.code, finding.severity, finding.message, finding.pass_name, finding.node,
               finding.function, finding.value, finding.graph)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique
