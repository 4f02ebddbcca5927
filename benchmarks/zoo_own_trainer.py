"""The model zoo through graphpass's own trainer: standard ONNX on stock onnxruntime vs torch.

Each case of the zoo (``tests/zoo``), exported in each mode (cached under
``$GRAPHPASS_ZOO_CACHE``), goes through ``graphpass run -p train-ready
--emit-training-graph DIR`` in this venv (stock onnxruntime, no onnxruntime-training)
and is judged by ``zoo.own_training.own_judge``: **trains** (``gradient.onnx`` and
``step.onnx`` pass ``onnx.checker`` with ``full_check`` and hold only default-domain
nodes; ``gradient.onnx``'s loss and every torch parameter's gradient equal
``torch.autograd``'s, relative 1e-3; ten AdamW steps of ``step.onnx`` through the
``Trainer`` give ``torch.optim.AdamW``'s weights within 1e-4), **refused rightly** (the
error names what is missing and its advice, followed, trains) or **wrong**. The table
goes into the ``zoo-own-trainer`` section of ``docs/benchmarks.md``.

A case graphpass calls ready with a torch parameter outside the manifest's trainable set
is wrong whatever else holds (listed on its own); the ``optimum`` modes need the Optimum
venv (``make optimum-venv``) and are left out, with a message, without it.

Usage::

    .venv/bin/python benchmarks/zoo_own_trainer.py [--cases bert,vit] [--modes dynamo|new|all]
                                                   [--jobs 2] [--json F] [--no-docs]
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
from zoo.own_training import OwnOutcome, own_judge  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "zoo_own_trainer.json"


def _judge(name: str, mode: str, workdir: str) -> dict[str, Any]:
    return _record(own_judge(zoo.case(name), mode, Path(workdir) / name))


def _record(outcome: OwnOutcome) -> dict[str, Any]:
    record: dict[str, Any] = {
        "case": outcome.case, "mode": outcome.mode, "label": outcome.label,
        "reason": outcome.reason, "findings": outcome.findings,
        "seconds": {k: round(v, 2) for k, v in outcome.seconds.items()},
        "loss_error": outcome.loss_error, "gradient_error": outcome.gradient_error,
        "weight_error": outcome.weight_error, "noisy": outcome.noisy,
        "losses": outcome.losses,
        "torch_losses": outcome.torch_losses, "left_out": outcome.left_out}
    if outcome.followed is not None:
        record["followed"] = _record(outcome.followed)
    return record


def run(cases: list[str], modes: list[str], jobs: int) -> list[dict[str, Any]]:
    """Judge every case in every mode; the records in (case, mode) order."""
    return judge_zoo(_judge, cases, modes, jobs, prefix="graphpass-zoo-own-")


def _checked(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every record whose training graphs were checked against torch (followed hints too)."""
    found = []
    for record in records:
        for item in (record, record.get("followed")):
            if item is not None and item["gradient_error"] is not None:
                found.append(item)
    return found


def _cell(record: dict[str, Any]) -> str:
    label = {"trains": "trains", "refused rightly": "refused rightly", "wrong": "**wrong**",
             "undecided": "undecided", "not exported": "not exported"}
    if record.get("left_out"):
        return f"**wrong: {len(record['left_out'])} left out**"
    text = label[record["label"]]
    if _kinked(record):
        text += f" (a kink: {record['gradient_error']:.0e} / -)"
    elif record["label"] in ("trains", "undecided"):
        text += f" ({record['gradient_error']:.0e} / {record['weight_error']:.0e})"
    return text


def _kinked(record: dict[str, Any]) -> bool:
    """Undecided gradients: off, but by what float32 noise moves torch's own by."""
    return record["label"] == "undecided" and record["weight_error"] is None


def docs_lines(records: list[dict[str, Any]], modes: list[str], wall: float) -> list[str]:
    """The ``zoo-own-trainer`` section of docs/benchmarks.md."""
    counts = collections.Counter(r["label"] for r in records)
    checked = _checked(records)
    passed = [r for r in checked if r["label"] == "trains"]
    gradients_right = [r for r in checked
                       if r["label"] in ("trains", "undecided") and not _kinked(r)]
    kinked = [r for r in records if _kinked(r)]
    architectures = len({r["case"] for r in records})
    silent = [r for r in records if r.get("left_out")]

    def worst(key: str, among: list[dict[str, Any]]) -> float:
        return max((r[key] for r in among), default=0.0)

    lines = [
        "## The model zoo through graphpass's own trainer (stock onnxruntime)", "",
        f"`benchmarks/zoo_own_trainer.py`: the zoo's {architectures} architectures x "
        f"{len(modes)} export modes through `graphpass run -p train-ready "
        "--emit-training-graph DIR` in the main venv (stock onnxruntime, onnxruntime-training "
        "not installed), judged by `tests/zoo/own_training.py` against torch: **trains** "
        "(`gradient.onnx` and `step.onnx` pass `onnx.checker.check_model(full_check=True)` "
        "and hold no node outside the default domain; the loss (relative 1e-3) and every "
        "torch parameter's gradient (against `torch.autograd` in float64, BatchNorm with "
        "batch statistics, relative 1e-3 as in the table above) equal torch's; ten AdamW "
        "steps of `step.onnx` through `graphpass.training.Trainer` give "
        "`torch.optim.AdamW`'s weights within 1e-4; the loss falls), **refused rightly** or "
        "**wrong**. Versions: "
        + ", ".join(f"{k} {v}" for k, v in zoo_versions().items()) + ".", "",
        f"**{counts['trains']} train correctly, {counts['refused rightly']} are refused "
        f"rightly, {counts['wrong']} go wrong, {counts['undecided']} undecided, "
        f"{counts['not exported']} not exported** (of "
        f"{len(records)}; undecided: the gradients equal torch's, but torch's own float32 "
        "training run ends further than 1e-4 from its float64 run on most weights, so the "
        "weights after ten steps compare nothing"
        + (f"; or, in {len(kinked)} (" + ", ".join(f"{r['case']} / `{r['mode']}`" for r in kinked)
           + "), the gradients are off, but by no more than twice what noise of 1e-6 relative "
           "in the weights moves torch's own float64 gradients by: an input within float32 "
           "rounding of a kink (ReLU6) decides them" if kinked else "")
        + "); with the followed "
        f"hints, {len(checked)} training-graph directories were checked against torch: "
        f"{len(gradients_right)} give torch's loss and gradients (largest relative gradient "
        f"error {worst('gradient_error', gradients_right):.1e}, loss "
        f"{worst('loss_error', gradients_right):.1e}), {len(passed)} of them torch's weights "
        f"after ten AdamW steps (largest difference {worst('weight_error', passed):.1e}). "
        f"{wall:.0f} s in all. "
        + (f"**{len(silent)} exit 0 with torch parameters outside the trainable set** "
           "(\"N left out\"): " + ", ".join(f"{r['case']} / `{r['mode']}`" for r in silent)
           + ". " if silent else "No run exits 0 with a torch parameter outside the "
           "trainable set. ")
        + "Cells: verdict (largest relative gradient error / largest "
        "weight difference after ten steps); the modes are those of the table above.", "",
        *zoo_table(records, modes, _cell), "", "Per mode:", "", *mode_counts(records, modes)]
    lines += ["", "Refusals and failures, case by case:", ""]
    for record in records:
        if record["label"] != "trains":
            lines.append(f"- {record['case']} / `{record['mode']}`: {record['label']}: "
                         f"{markdown_text(record['reason'])}")
    return lines


def main() -> int:
    args = zoo_arguments(__doc__.splitlines()[0], [c.name for c in zoo.CASES], list(zoo.MODES),
                         RESULTS, jobs=2)
    if args.from_json:
        docs_from_records(args.from_json, args.modes, "zoo-own-trainer", docs_lines)
        return 0
    args.modes = available_modes(args.modes, zoo.OPTIMUM_MODES,
                                 zoo.optimum_python() is not None)
    started = time.perf_counter()
    records = run(args.cases, args.modes, args.jobs)
    wall = time.perf_counter() - started
    write_records(args.json, records)
    counts = collections.Counter(r["label"] for r in records)
    checked = _checked(records)
    print(f"\n{counts['trains']} trains, {counts['refused rightly']} refused rightly, "
          f"{counts['wrong']} wrong, {counts['undecided']} undecided, {counts['not exported']} "
          f"not exported, of {len(records)}; "
          f"{len(checked)} directories checked, "
          f"{sum(r['label'] == 'trains' for r in checked)} passed; {wall:.0f} s")
    if not args.no_docs:
        write_docs_section("zoo-own-trainer", docs_lines(records, args.modes, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
