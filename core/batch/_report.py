"""One report over many models: text grouped by model, JSON with an entry per model, SARIF.

* text: a line per model with its counts; below the models that have findings (or with
  ``--time``) their single-model report, below those that could not be checked the
  error; then the totals;
* JSON (``"schema": "graphpass-batch/1"``): ``models`` holds one entry per model, each
  the single-model report (``graphpass-report/1``) plus its ``exit_code``, or for a model
  that could not be checked ``{"model", "ok": false, "exit_code": 2, "error"}``;
* SARIF: one run whose results are located in each model's file (see
  :func:`graphpass.reporting._render.sarif_log`).

The exit code of a batch is the worst of its models' (:func:`exit_code`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from rich.console import Console
from rich.text import Text

from graphpass.batch._tasks import ModelResult
from graphpass.errors import ExitCode
from graphpass.findings import Severity, count_by_severity
from graphpass.reporting import ReportInfo, SarifModel, render_text, report_dict, sarif_log

__all__ = ["BATCH_SCHEMA_ID", "batch_dict", "batch_totals", "exit_code", "render_batch_json",
           "render_batch_sarif", "render_batch_text"]

BATCH_SCHEMA_ID: Final = "graphpass-batch/1"
"""The ``schema`` field of JSON reports over several models."""

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def exit_code(results: Sequence[ModelResult]) -> int:
    """The worst exit code of the models (2 over 1 over 0; 0 for none)."""
    return max((result.exit_code for result in results), default=ExitCode.OK)


def render_batch_text(results: Sequence[ModelResult], console: Console,
                      info: ReportInfo) -> None:
    """Print the report of every model, grouped by model, then the totals."""
    detailed = False  # the last model printed more than its heading
    for result in results:
        heading = Text(result.model, style="bold")
        if result.error is not None:
            heading.append("  could not be checked", style="bold red")
            if not detailed:
                console.print()
            console.print(heading, soft_wrap=True)
            console.print(Text(f"error: {result.error.text()}", style="red"), soft_wrap=True)
            console.print()
            detailed = True
            continue
        assert result.summary is not None
        counts = count_by_severity(result.summary.findings)
        heading.append("  " + _counts(counts), style=_STYLE[Severity.ERROR]
                       if counts[Severity.ERROR] else "dim")
        if result.output:
            heading.append(f"; wrote {result.output}", style="dim")
        details = bool(result.summary.findings) or info.show_time
        if details and not detailed:
            console.print()
        console.print(heading, soft_wrap=True)
        if details:
            render_text(result.summary, console, replace(info, model=result.model,
                                                         output=result.output))
            console.print()
        detailed = details
    if not detailed:
        console.print()
    console.print(batch_totals(results), soft_wrap=True)


def batch_dict(results: Sequence[ModelResult], info: ReportInfo) -> dict[str, Any]:
    """The JSON report over several models as a dictionary."""
    models = []
    for result in results:
        if result.summary is None:
            models.append({"model": result.model, "ok": False, "exit_code": result.exit_code,
                           "error": result.error.to_dict() if result.error else None})
            continue
        entry = report_dict(result.summary, replace(info, model=result.model,
                                                    output=result.output))
        entry["exit_code"] = result.exit_code
        if info.timing:
            entry["seconds"] = round(result.seconds, 6)
        models.append(entry)
    findings = [f for r in results if r.summary is not None for f in r.summary.findings]
    counts = count_by_severity(findings)
    code = exit_code(results)
    return {
        "schema": BATCH_SCHEMA_ID,
        "tool": {"name": "graphpass", "version": info.tool_version},
        "command": info.command,
        "ok": code == ExitCode.OK,
        "exit_code": code,
        "summary": {
            "models": len(results),
            "ok": sum(1 for r in results if r.exit_code == ExitCode.OK),
            "with_errors": sum(1 for r in results if r.exit_code == ExitCode.FINDINGS),
            "failed": sum(1 for r in results if r.error is not None),
            **{severity.value: counts[severity] for severity in Severity},
        },
        "models": models,
    }


def render_batch_json(results: Sequence[ModelResult], info: ReportInfo) -> str:
    """The JSON report over several models (``graphpass-batch/1``)."""
    return json.dumps(batch_dict(results, info), indent=2, default=str)


def render_batch_sarif(results: Sequence[ModelResult], info: ReportInfo) -> str:
    """One SARIF 2.1.0 run over several models."""
    entries = [SarifModel(result.model, result.summary,
                          result.error.text() if result.error is not None else None)
               for result in results]
    return json.dumps(sarif_log(entries, info), indent=2, default=str)


def _counts(counts: dict[Severity, int]) -> str:
    return (f"{counts[Severity.ERROR]} error{'s' * (counts[Severity.ERROR] != 1)}, "
            f"{counts[Severity.WARNING]} warning{'s' * (counts[Severity.WARNING] != 1)}, "
            f"{counts[Severity.INFO]} info")


def batch_totals(results: Sequence[ModelResult]) -> Text:
    """The batch report's last line: models ok, with errors, failed; findings in all.

    The command line prints it on the console also when the report goes to a file.
    """
    findings = [f for r in results if r.summary is not None for f in r.summary.findings]
    counts = count_by_severity(findings)
    failed = sum(1 for r in results if r.error is not None)
    with_errors = sum(1 for r in results if r.exit_code == ExitCode.FINDINGS)
    text = Text(f"{len(results)} model{'s' * (len(results) != 1)}: "
                f"{len(results) - failed - with_errors} ok, {with_errors} with errors")
    if failed:
        text.append(f", {failed} could not be checked", style="bold red")
    text.append(f"; {_counts(counts)} in all")
    return text
