"""Findings: what passes report (errors, warnings, info) with stable codes.

Codes are stable across releases so that people can search for them, suppress
them and track them in CI. Ranges:

* ``GP0xx``: the framework (pipelines, plugins, instruments, verification)
* ``GP1xx``: ``inline-functions``
* ``GP2xx``: ``reconcile-initializers``
* ``GP3xx``: ``detect-missing-buffers``
* ``GP4xx``: ``lint-gradients``
* ``GP5xx``: hygiene passes (``check``, ``remove-unused``, ``infer-shapes`` ...)
* ``GP9xx``: third-party plugins (pick a prefix of your own inside it)
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Finding", "Severity", "count_by_severity", "shortened_list", "worst_severity"]


class Severity(str, enum.Enum):
    """How bad a finding is."""

    ERROR = "error"
    """The model is wrong, or will fail where the user means to use it."""
    WARNING = "warning"
    """Probably wrong, or surprising; the run goes on."""
    INFO = "info"
    """What a pass did or noticed."""

    @property
    def rank(self) -> int:
        """2 for errors, 1 for warnings, 0 for info."""
        return {"error": 2, "warning": 1, "info": 0}[self.value]

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """One thing a pass reports.

    Attributes:
        code: Stable identifier, e.g. ``GP301``.
        severity: Error, warning or info.
        message: What was found, in one or two sentences.
        pass_name: The pass that reported it.
        node: The node's name (or ``op_type`` when unnamed), if it concerns a node.
        function: The function (``domain::name``), if it concerns one or lies inside one.
        value: The value or initializer name, if it concerns one.
        hint: What to do about it.
        graph: Where in nested graphs it lies, e.g. ``main > If 'cond' > then_branch``.
        data: Further structured details (kept in JSON and SARIF output).
    """

    code: str
    severity: Severity
    message: str
    pass_name: str = ""
    node: str | None = None
    function: str | None = None
    value: str | None = None
    hint: str | None = None
    graph: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Accept plain strings ("error") too: Severity(...) maps both to the member.
        object.__setattr__(self, "severity", Severity(self.severity))
        # Reports rely on these types: refuse a malformed finding where it is made.
        for name in ("code", "message", "pass_name"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Finding.{name} must be a string, not "
                                f"{type(getattr(self, name)).__name__}")
        for name in ("node", "function", "value", "hint", "graph"):
            item = getattr(self, name)
            if item is not None and not isinstance(item, str):
                raise TypeError(f"Finding.{name} must be a string or None, not "
                                f"{type(item).__name__}")
        if not isinstance(self.data, Mapping):
            raise TypeError(f"Finding.data must be a mapping, not {type(self.data).__name__}")

    @property
    def location(self) -> str:
        """A short, human-readable description of where the finding applies."""
        parts = []
        if self.function:
            parts.append(f"function {self.function}")
        if self.graph and self.graph != "main":
            parts.append(self.graph)
        if self.node:
            parts.append(f"node {self.node}")
        if self.value:
            parts.append(f"value {self.value}")
        return ", ".join(parts) or "model"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (``None`` fields left out)."""
        result: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "pass": self.pass_name,
        }
        for key in ("node", "function", "value", "graph", "hint"):
            item = getattr(self, key)
            if item is not None:
                result[key] = item
        if self.data:
            result["data"] = dict(self.data)
        return result

    def with_pass(self, pass_name: str) -> Finding:
        """Return a copy credited to ``pass_name`` (when it has no pass yet)."""
        if self.pass_name:
            return self
        return self.credited_to(pass_name)

    def credited_to(self, pass_name: str) -> Finding:
        """Return a copy credited to ``pass_name`` (whatever pass it named before)."""
        if self.pass_name == pass_name:
            return self
        return Finding(self.code, self.severity, self.message, pass_name, self.node,
                       self.function, self.value, self.hint, self.graph, self.data)


def worst_severity(findings: Iterable[Finding]) -> Severity | None:
    """The most severe severity among ``findings``, or ``None`` if there are none."""
    worst: Severity | None = None
    for finding in findings:
        if worst is None or finding.severity.rank > worst.rank:
            worst = finding.severity
    return worst


def count_by_severity(findings: Iterable[Finding]) -> dict[Severity, int]:
    """Count findings per severity (every severity present as a key)."""
    counts = dict.fromkeys(Severity, 0)
    for finding in findings:
        counts[finding.severity] += 1
    return counts


def shortened_list(items: Iterable[object], shown: int = 5, *, quote: bool = False) -> str:
    """The first ``shown`` items, comma-separated, and how many more there are.

    For messages that name what they found without growing with the model::

        shortened_list(["a", "b", "c"], 2, quote=True)  # "'a', 'b' and 1 more"

    Args:
        items: What to list, in order.
        shown: How many to name.
        quote: Write each as ``repr`` (names) instead of ``str`` (descriptions).
    """
    everything = list(items)
    text = ", ".join(repr(item) if quote else str(item) for item in everything[:shown])
    hidden = len(everything) - shown
    return f"{text} and {hidden} more" if hidden > 0 else text
