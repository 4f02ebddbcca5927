"""Reports of a run: text for people, JSON for scripts, SARIF for code-scanning tools.

* :func:`render_text` prints one table of passes and one table of findings per pass
  (worst first), coloured only when the output is a terminal (``rich`` decides, and
  respects ``NO_COLOR``).
* :func:`render_json` gives a stable document (``"schema": "graphpass-report/1"``):
  the passes run, with timing and stats, and every finding.
* :func:`render_sarif` gives SARIF 2.1.0: one run whose tool lists a rule for every
  code seen, and one result per finding with its level, message, the model file as
  the artifact and the node, function or value as logical locations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from rich.console import Console
from rich.table import Table
from rich.text import Text

from graphpass.findings import Finding, Severity, count_by_severity
from graphpass.framework import RunResult, RunSummary
from graphpass.reporting._tables import print_trimmed

__all__ = [
    "FRAMEWORK_CODES",
    "JSON_SCHEMA_ID",
    "SARIF_SCHEMA",
    "ReportInfo",
    "SarifModel",
    "render_json",
    "render_sarif",
    "render_text",
    "report_dict",
    "sarif_dict",
    "sarif_log",
    "summary_line",
]

JSON_SCHEMA_ID: Final = "graphpass-report/1"
"""The ``schema`` field of JSON reports; it changes only when the layout does."""

SARIF_SCHEMA: Final = "https://json.schemastore.org/sarif-2.1.0.json"

FRAMEWORK_CODES: Final[Mapping[str, str]] = {
    "GP001": "A fixed-point run did not settle within its maximum number of rounds.",
    "GP002": "A pass changed the model but returned changed=False.",
    "GP003": "A pass left nodes reading a name nothing defines.",
    "GP004": "Options were given for a pass that is not planned; they are ignored.",
    "GP010": "The model fails the ONNX checker after a transforming pass (verify-each).",
    "GP011": "The model was saved after a pass (dump-after).",
    "GP600": "The outputs after the pipeline equal the reference outputs (verify).",
    "GP601": "A pass changed what the model computes (verify).",
    "GP602": "Nothing could be verified: the model could not run, or inputs could not be made.",
}
"""Short descriptions of the framework's own finding codes."""

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
# SARIF has its own word for the info severity ("note"); reports of ours say "info".
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


@dataclass
class ReportInfo:
    """What a report says besides the run itself.

    Attributes:
        command: ``run`` or ``lint``.
        model: The model file, as the user named it.
        output: The file written, if any.
        tool_version: graphpass's version.
        rules: Short descriptions of finding codes (for SARIF rules).
        show_time: Show per-pass timing in text reports.
        timing: Include timing at all. Without it a report holds nothing that changes
            from run to run: the same model and pipeline give the same bytes.
    """

    command: str = "run"
    model: str | None = None
    output: str | None = None
    tool_version: str = ""
    rules: Mapping[str, str] = field(default_factory=dict)
    show_time: bool = False
    timing: bool = True


# ========================================================================= text
def render_text(result: RunResult | RunSummary, console: Console, info: ReportInfo) -> None:
    """Print the passes, the findings grouped by pass (worst first), and a summary."""
    passes = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold")
    passes.add_column("pass")
    passes.add_column("plugin", style="dim")
    passes.add_column("changed")
    passes.add_column("findings", justify="right")
    show_time = info.show_time and info.timing
    if show_time:
        passes.add_column("seconds", justify="right")
    passes.add_column("stats", style="dim")
    for record in result.records:
        name = record.name if record.iteration == 1 else f"{record.name} (round {record.iteration})"
        counts = count_by_severity(record.findings)
        cells = [name, record.plugin, "yes" if record.changed else "-",
                 _counts_text(counts)]
        if show_time:
            cells.append(f"{record.seconds:.3f}")
        cells.append(", ".join(f"{k}: {v}" for k, v in record.stats.items() if v))
        passes.add_row(*cells)
    if result.records:
        print_trimmed(console, passes)
    by_pass: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_pass.setdefault(finding.pass_name or "graphpass", []).append(finding)
    for pass_name, findings in by_pass.items():
        console.print()
        console.print(Text(f"findings of {pass_name}", style="bold"))
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="dim")
        table.add_column("severity", no_wrap=True)
        table.add_column("code", no_wrap=True)
        table.add_column("where")
        table.add_column("message", ratio=1)
        for finding in sorted(findings, key=lambda f: -f.severity.rank):
            message = Text(finding.message)
            if finding.hint:
                message.append(f"\nhint: {finding.hint}", style="dim")
            table.add_row(Text(finding.severity.value, style=_STYLE[finding.severity]),
                          finding.code, finding.location, message)
        print_trimmed(console, table)
    console.print()
    console.print(summary_line(result, info), soft_wrap=True)  # one line, a path never cut


def _counts_text(counts: Mapping[Severity, int]) -> Text:
    text = Text()
    for severity in Severity:
        if counts[severity]:
            if text:
                text.append(" ")
            text.append(f"{counts[severity]} {severity.value}", style=_STYLE[severity])
    return text if text else Text("-")


def summary_line(result: RunResult | RunSummary, info: ReportInfo) -> Text:
    """The report's last line: the findings by severity, the passes, the time, what was written.

    The command line prints it on the console also when the report goes to a file.
    """
    counts = count_by_severity(result.findings)
    text = Text()
    text.append(f"{counts[Severity.ERROR]} error{'s' * (counts[Severity.ERROR] != 1)}",
                style=_STYLE[Severity.ERROR] if counts[Severity.ERROR] else "")
    text.append(f", {counts[Severity.WARNING]} warning"
                f"{'s' * (counts[Severity.WARNING] != 1)}, {counts[Severity.INFO]} info")
    ran = len({r.name for r in result.records})
    text.append(f" from {ran} pass{'es' * (ran != 1)}")
    if info.timing:
        text.append(f" in {result.seconds:.2f} s")
    if result.iterations > 1:
        text.append(f" ({result.iterations} rounds)")
    if result.stopped_after:
        text.append(f"; stopped after {result.stopped_after!r} because of errors",
                    style="bold red")
        if info.command == "run":
            text.append(" - nothing was written", style="bold red")
    elif info.output:
        text.append(f"; wrote {info.output}")
    return text


# ========================================================================= JSON
def report_dict(result: RunResult | RunSummary, info: ReportInfo) -> dict[str, Any]:
    """The JSON report as a dictionary (see :func:`render_json`)."""
    counts = count_by_severity(result.findings)
    return {
        "schema": JSON_SCHEMA_ID,
        "tool": {"name": "graphpass", "version": info.tool_version},
        "command": info.command,
        "model": info.model,
        "output": info.output if result.ok else None,
        "ok": result.ok,
        "changed": result.changed,
        "stopped_after": result.stopped_after,
        "iterations": result.iterations,
        "plan": list(result.plan),
        "summary": {severity.value: counts[severity] for severity in Severity},
        "passes": _records(result, info),
        "findings": [finding.to_dict() for finding in result.findings],
    }


def _records(result: RunResult | RunSummary, info: ReportInfo) -> list[dict[str, Any]]:
    records = [record.to_dict() for record in result.records]
    if not info.timing:
        for record in records:
            del record["seconds"]
    return records


def render_json(result: RunResult | RunSummary, info: ReportInfo) -> str:
    """A JSON report.

    Layout (``schema`` = ``graphpass-report/1``): ``tool`` {name, version}, ``command``,
    ``model``, ``output`` (null when nothing was written), ``ok``, ``changed``,
    ``stopped_after``, ``iterations``, ``plan`` (names), ``summary`` {error, warning,
    info}, ``passes`` (name, plugin, iteration, analysis, seconds, changed, findings
    {error, warning, info}, stats) and ``findings`` (code, severity, message, pass, and
    node, function, value, graph, hint, data where they apply). With
    ``ReportInfo.timing`` off (``--no-timing``) the ``seconds`` are left out and the
    report is the same bytes for the same model and passes.
    """
    return json.dumps(report_dict(result, info), indent=2, default=str)


# ======================================================================== SARIF
@dataclass(frozen=True)
class SarifModel:
    """One model of a SARIF log: its file, and its run or why it could not be checked.

    Attributes:
        model: The model file, as the user named it (``None``: no file).
        result: The run, when the model could be checked.
        error: Why it could not (it could not be read, a pass failed ...), otherwise.
    """

    model: str | None
    result: RunResult | RunSummary | None = None
    error: str | None = None


def sarif_dict(result: RunResult | RunSummary, info: ReportInfo) -> dict[str, Any]:
    """The SARIF 2.1.0 log of one model's run as a dictionary (see :func:`render_sarif`)."""
    return sarif_log([SarifModel(info.model, result)], info)


def sarif_log(models: Sequence[SarifModel], info: ReportInfo) -> dict[str, Any]:
    """One SARIF 2.1.0 run over several models: every result located in its model's file.

    ``artifacts`` lists the models (results point at them by ``index``); rules cover
    every code seen; a model that could not be checked is a
    ``toolExecutionNotification`` of level ``error`` located in its file, and makes the
    invocation's ``executionSuccessful`` false. With one model the invocation's
    properties hold its pass records; with several, a ``models`` list holds each model's.
    """
    first_finding: dict[str, Finding] = {}
    for entry in models:
        for finding in entry.result.findings if entry.result is not None else ():
            first_finding.setdefault(finding.code, finding)
    descriptions = {**FRAMEWORK_CODES, **info.rules}
    rules = []
    for code, finding in first_finding.items():
        text = descriptions.get(code) or f"Reported by the {finding.pass_name or 'graphpass'} pass."
        rule: dict[str, Any] = {
            "id": code,
            "shortDescription": {"text": text},
            "defaultConfiguration": {"level": _SARIF_LEVEL[finding.severity]},
            "properties": {"pass": finding.pass_name},
        }
        rules.append(rule)
    index = {code: position for position, code in enumerate(first_finding)}
    artifacts: list[dict[str, Any]] = []
    artifact_index: dict[str, int] = {}
    for entry in models:
        if entry.model is not None and _uri(entry.model) not in artifact_index:
            artifact_index[_uri(entry.model)] = len(artifacts)
            artifacts.append({"location": {"uri": _uri(entry.model)},
                              "roles": ["analysisTarget"]})
    results = []
    notifications = []
    for entry in models:
        where = None
        if entry.model is not None:
            uri = _uri(entry.model)
            where = {"artifactLocation": {"uri": uri, "index": artifact_index[uri]}}
        if entry.error is not None:
            notification: dict[str, Any] = {"level": "error", "message": {"text": entry.error}}
            if where is not None:
                notification["locations"] = [{"physicalLocation": where}]
            notifications.append(notification)
        for finding in entry.result.findings if entry.result is not None else ():
            results.append(_sarif_result(finding, index[finding.code], where))
    invocation: dict[str, Any] = {"executionSuccessful": not notifications}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    if len(models) == 1 and models[0].result is not None:
        only = models[0].result
        invocation["properties"] = {"command": info.command,
                                    "stoppedAfter": only.stopped_after,
                                    "passes": _records(only, info)}
    else:
        invocation["properties"] = {"command": info.command, "models": [
            {"model": entry.model,
             "stoppedAfter": entry.result.stopped_after if entry.result else None,
             "passes": _records(entry.result, info) if entry.result else []}
            for entry in models]}
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "graphpass",
            "version": info.tool_version or "0",
            "informationUri": "https://example.invalid/graphpass",
            "rules": rules,
        }},
        "invocations": [invocation],
        "results": results,
    }
    if artifacts:
        run["artifacts"] = artifacts
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _sarif_result(finding: Finding, rule_index: int,
                  where: dict[str, Any] | None) -> dict[str, Any]:
    message = finding.message
    if finding.hint:
        message = f"{message} (hint: {finding.hint})"
    entry: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _SARIF_LEVEL[finding.severity],
        "message": {"text": message},
    }
    location: dict[str, Any] = {}
    if where is not None:
        location["physicalLocation"] = where
    logical = _logical_locations(finding)
    if logical:
        location["logicalLocations"] = logical
    if location:
        entry["locations"] = [location]
    properties: dict[str, Any] = {"pass": finding.pass_name}
    if finding.hint:
        properties["hint"] = finding.hint
    if finding.graph:
        properties["graph"] = finding.graph
    if finding.data:
        properties["data"] = json.loads(json.dumps(dict(finding.data), default=str))
    entry["properties"] = properties
    return entry


def render_sarif(result: RunResult | RunSummary, info: ReportInfo) -> str:
    """A SARIF 2.1.0 log (for GitHub code scanning and other SARIF viewers)."""
    return json.dumps(sarif_dict(result, info), indent=2, default=str)


def _logical_locations(finding: Finding) -> list[dict[str, str]]:
    scope = finding.function or "main"
    if finding.graph and finding.graph != "main":
        scope = f"{scope} > {finding.graph}" if finding.function else finding.graph
    locations = []
    if finding.function:
        locations.append({"name": finding.function, "kind": "function"})
    if finding.node:
        locations.append({"name": finding.node, "kind": "element",
                          "fullyQualifiedName": f"{scope}/{finding.node}"})
    if finding.value:
        locations.append({"name": finding.value, "kind": "variable",
                          "fullyQualifiedName": f"{scope}/{finding.value}"})
    return locations


def _uri(path: str) -> str:
    candidate = Path(path)
    if candidate.is_absolute():
        return candidate.as_uri()
    return quote("/".join(part for part in candidate.as_posix().split("/") if part != "."))
