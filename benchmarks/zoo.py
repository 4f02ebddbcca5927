"""The whole model zoo: every architecture x export mode, judged against torch.

Each case is exported (cached under ``$GRAPHPASS_ZOO_CACHE``, default ``tests/.cache/zoo``),
run through ``graphpass run -p train-ready --emit-training-artifacts`` and three AdamW
steps of onnxruntime-training, and judged by ``tests/zoo`` (``zoo.judge``): trains
(outputs and every parameter's first-step gradient equal torch's), refused rightly (the
refusal names what is missing and its advice, followed, trains), or wrong. The table goes
into the ``zoo`` section of ``docs/benchmarks.md``; ``make zoo`` runs this, and so does
``make bench``.

Usage::

    .venv/bin/python benchmarks/zoo.py [--cases bert,vit] [--modes dynamo] [--jobs 2]
                                       [--json results.json] [--no-docs]
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The zoo package lives in tests/; put it first (this script is named zoo.py too).
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import zoo  # noqa: E402
from _bench import (  # noqa: E402
    judge_zoo,
    markdown_text,
    write_docs_section,
    write_records,
    zoo_arguments,
    zoo_table,
)
from zoo.cache import versions as zoo_versions  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "zoo.json"


def _judge(name: str, mode: str, workdir: str) -> dict[str, Any]:
    outcome = zoo.judge(zoo.case(name), mode, Path(workdir) / name)
    return _record(outcome)


def _record(outcome: zoo.Outcome) -> dict[str, Any]:
    record: dict[str, Any] = {
        "case": outcome.case, "mode": outcome.mode, "label": outcome.label,
        "verdict": outcome.verdict, "reason": outcome.reason,
        "seconds": {k: round(v, 2) for k, v in outcome.seconds.items()},
        "findings": [{k: f.get(k) for k in ("code", "message", "node", "value", "hint")}
                     for f in outcome.findings]}
    if outcome.gradients is not None:
        record["gradient_errors"] = outcome.gradients.errors
        record["weight_drift"] = outcome.gradients.weight_drift
        record["untrained"] = outcome.gradients.untrained
        record["extra"] = outcome.gradients.extra
    if outcome.run is not None:
        record["losses"] = outcome.run.losses
    if outcome.followed is not None:
        record["followed"] = _record(outcome.followed)
    return record


def run(cases: list[str], modes: list[str], jobs: int) -> list[dict[str, Any]]:
    """Judge every case in every mode; return the records in (case, mode) order."""
    return judge_zoo(_judge, cases, modes, jobs, prefix="graphpass-zoo-")


def _cell(record: dict[str, Any]) -> str:
    seconds = record["seconds"].get("total", 0.0)
    label = {"trains": "trains", "refused rightly": "refused rightly", "wrong": "**wrong**"}
    return f"{label[record['label']]} ({seconds:.1f} s)"


def docs_lines(records: list[dict[str, Any]], modes: list[str], wall: float) -> list[str]:
    """The ``zoo`` section of docs/benchmarks.md."""
    versions = zoo_versions()
    counts = collections.Counter(r["label"] for r in records)
    architectures = len({r["case"] for r in records})
    lines = [
        "## The model zoo: real Hugging Face exports, judged against torch", "",
        f"`benchmarks/zoo.py` (`make zoo`): {architectures} `transformers` architectures "
        f"(tiny configs, random init) x {len(modes)} export modes, each exported, run "
        "through `graphpass run -p train-ready --emit-training-artifacts` and three AdamW "
        "steps of onnxruntime-training, and judged by `tests/zoo` against torch: **trains** "
        "(outputs, every torch parameter's first-step gradient (against torch in float64, "
        "relative 1e-3) and the first AdamW step equal torch's; the loss falls), **refused "
        "rightly** (the error names what is missing and its advice, followed, trains) or "
        "**wrong**. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".", "",
        f"**{counts['trains']} train correctly, {counts['refused rightly']} are refused "
        f"rightly, {counts['wrong']} go wrong** (of {len(records)}); {wall:.0f} s in all "
        f"({wall / max(len(records), 1):.1f} s a case). Cells: verdict (wall seconds of the "
        "case: graphpass, training, checks and a followed hint; exports cached; two cases "
        "at a time on a shared 2-core machine).", "",
        *zoo_table(records, modes, _cell)]
    lines += ["", "Why, case by case:", ""]
    for record in records:
        lines.append(f"- {record['case']} / `{record['mode']}`: {record['label']}: "
                     f"{markdown_text(record['reason'])}")
    return lines


def main() -> int:
    args = zoo_arguments(__doc__.splitlines()[0], [c.name for c in zoo.CASES], list(zoo.MODES),
                         RESULTS, jobs=1)
    if zoo.ort_training_python() is None:
        print("no onnxruntime-training venv (make ort-venv): the zoo cannot run")
        return 1
    started = time.perf_counter()
    records = run(args.cases, args.modes, args.jobs)
    wall = time.perf_counter() - started
    write_records(args.json, records)
    counts = collections.Counter(r["label"] for r in records)
    print(f"\n{counts['trains']} trains, {counts['refused rightly']} refused rightly, "
          f"{counts['wrong']} wrong, of {len(records)}; {wall:.0f} s")
    if not args.no_docs:
        write_docs_section("zoo", docs_lines(records, args.modes, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
