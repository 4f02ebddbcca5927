"""The whole model zoo: every architecture x export mode, judged against torch.

Each case is exported (cached under ``$GRAPHPASS_ZOO_CACHE``, default ``tests/.cache/zoo``),
run through ``graphpass run -p train-ready --emit-training-artifacts`` and three AdamW
steps of onnxruntime-training, and judged by ``tests/zoo`` (``zoo.judge``): trains
(outputs and every parameter's first-step gradient equal torch's), refused rightly (the
refusal names what is missing and its advice, followed, trains), wrong, or not exported
(the exporter failed on it). A case graphpass calls ready with a torch parameter outside
the trainable set it wrote is wrong whatever else holds, and is listed on its own. The
table goes into the ``zoo`` section of ``docs/benchmarks.md``; ``make zoo`` runs this, and
so does ``make bench``. The ``optimum`` modes need the Optimum venv (``make
optimum-venv``) and are left out, with a message, without it.

Usage::

    .venv/bin/python benchmarks/zoo.py [--cases bert,vit] [--modes dynamo|new|all]
                                       [--jobs 2] [--json results.json] [--no-docs]
                                       [--from-json records.json]
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
    available_modes,
    docs_from_records,
    judge_zoo,
    markdown_text,
    mode_counts,
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
                     for f in outcome.findings],
        "left_out": outcome.left_out,
        "trainable": len(outcome.trainable) if outcome.trainable is not None else None}
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
    label = {"trains": "trains", "refused rightly": "refused rightly", "wrong": "**wrong**",
             "not exported": "not exported"}
    if record.get("left_out"):
        return f"**wrong: {len(record['left_out'])} left out** ({seconds:.1f} s)"
    return f"{label[record['label']]} ({seconds:.1f} s)"


def left_out(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of runs graphpass called ready with torch parameters outside the
    trainable set (followed hints included)."""
    found = []
    for record in records:
        for item in (record, record.get("followed")):
            if item is not None and item.get("left_out"):
                found.append(item)
    return found


def docs_lines(records: list[dict[str, Any]], modes: list[str], wall: float) -> list[str]:
    """The ``zoo`` section of docs/benchmarks.md."""
    versions = zoo_versions()
    counts = collections.Counter(r["label"] for r in records)
    architectures = len({r["case"] for r in records})
    silent = left_out(records)
    lines = [
        "## The model zoo: real Hugging Face exports, judged against torch", "",
        f"`benchmarks/zoo.py` (`make zoo`): {architectures} `transformers` architectures "
        f"(tiny configs, random init) x {len(modes)} export modes, each exported, run "
        "through `graphpass run -p train-ready --emit-training-artifacts` and three AdamW "
        "steps of onnxruntime-training, and judged by `tests/zoo` against torch: **trains** "
        "(outputs, every torch parameter's first-step gradient (against torch in float64, "
        "relative 1e-3) and the first AdamW step equal torch's; the loss falls), **refused "
        "rightly** (the error names what is missing and its advice, followed, trains), "
        "**wrong**, or not exported (the exporter failed on the case). Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".", "",
        "The modes: `dynamo` (`torch.onnx.export(dynamo=True)`, weights inside, the "
        "default optimizer), `dynamo-state-dict` (`optimize=False`, no weights, the "
        "Hugging Face model's `state_dict()` as `--checkpoint`), `dynamo-full-state` (the "
        "same, `graphpass.torch.save_state`), `legacy-functions` (`dynamo=False`, layers as "
        "functions, constant folding on); then issue 22's: `dynamo+state_dict` (the "
        "`dynamo` file and the `state_dict()`: the very values inside it), "
        "`dynamo+finetuned` (the `dynamo` file and the `state_dict()` of the model "
        "fine-tuned after the export, every tensor moved by 5% of its scale; judged against "
        "torch with those weights), `legacy+state_dict` (the `legacy-functions` file and the "
        "`state_dict()`), and `optimum-cli export onnx` of the `save_pretrained` folder "
        "(optimum-onnx 0.1.0, transformers 4.57 in its own venv; the Hugging Face model "
        "itself, judged against that model) alone, with the `state_dict()` "
        "(`optimum+state_dict`; transformers 5's key names) and with the saved "
        "`model.safetensors` (`optimum+pretrained`). A refusal's advice is followed with "
        "the same checkpoint (`optimize=False`, `do_constant_folding=False`, Optimum's "
        "`--no-constant-folding`; advice worded for `torch.onnx.export` does not count for "
        "an Optimum file).", "",
        f"**{counts['trains']} train correctly, {counts['refused rightly']} are refused "
        f"rightly, {counts['wrong']} go wrong, {counts['not exported']} are not exported** "
        f"(of {len(records)}); {wall:.0f} s in all "
        f"({wall / max(len(records), 1):.1f} s a case). "
        + (f"**{len(silent)} runs exit 0 with torch parameters outside the trainable set** "
           "(\"N left out\" below: they train, and those parameters never move): "
           + ", ".join(f"{r['case']} / `{r['mode']}` ({len(r['left_out'])})" for r in silent)
           + ". " if silent else "No run exits 0 with a torch parameter outside the "
           "trainable set. ")
        + "Cells: verdict (wall seconds of the "
        "case: graphpass, training, checks and a followed hint; exports cached).", "",
        *zoo_table(records, modes, _cell), "", "Per mode:", "", *mode_counts(records, modes)]
    lines += ["", "Why, case by case:", ""]
    for record in records:
        lines.append(f"- {record['case']} / `{record['mode']}`: {record['label']}: "
                     f"{markdown_text(record['reason'])}")
    return lines


def main() -> int:
    args = zoo_arguments(__doc__.splitlines()[0], [c.name for c in zoo.CASES], list(zoo.MODES),
                         RESULTS, jobs=1)
    if args.from_json:
        docs_from_records(args.from_json, args.modes, "zoo", docs_lines)
        return 0
    if zoo.ort_training_python() is None:
        print("no onnxruntime-training venv (make ort-venv): the zoo cannot run")
        return 1
    modes = available_modes(args.modes, zoo.OPTIMUM_MODES, zoo.optimum_python() is not None)
    started = time.perf_counter()
    records = run(args.cases, modes, args.jobs)
    wall = time.perf_counter() - started
    write_records(args.json, records)
    counts = collections.Counter(r["label"] for r in records)
    silent = left_out(records)
    print(f"\n{counts['trains']} trains, {counts['refused rightly']} refused rightly, "
          f"{counts['wrong']} wrong, {counts['not exported']} not exported, of "
          f"{len(records)}; {len(silent)} exit 0 with torch parameters outside the trainable "
          f"set; {wall:.0f} s")
    for line in mode_counts(records, modes):
        print(line)
    for record in silent:
        print(f"LEFT OUT: {record['case']} / {record['mode']}: {', '.join(record['left_out'])}")
    if not args.no_docs:
        write_docs_section("zoo", docs_lines(records, modes, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
