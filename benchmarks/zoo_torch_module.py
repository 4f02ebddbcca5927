"""The model zoo through ``graphpass.torch.Module``, in torch's own loop, against torch eager.

Each case of the zoo (``tests/zoo``) is wrapped by ``graphpass.torch.Module`` (dynamo
export, graphpass's defaults) and trained beside torch eager by
``zoo.torch_module.judge_module``: outputs, the first step's gradients and ten AdamW steps
with gradient clipping against torch (``eval`` mode for every case, ``train`` mode with
batch statistics for the convolutional ones). The table goes into the
``zoo-torch-module`` section of ``docs/benchmarks.md``.

Usage::

    .venv/bin/python benchmarks/zoo_torch_module.py [--cases bert,vit] [--no-docs]
    .venv/bin/python benchmarks/zoo_torch_module.py --sweep [--cases roformer,bit]

``--sweep`` runs the architectures of issue 30's sweep (``tests/zoo/sweep_cases.py``)
instead, into the ``zoo-torch-module-sweep`` section; an export that fails inside torch
is counted as torch's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import zoo  # noqa: E402
from _bench import write_docs_section  # noqa: E402
from zoo.torch_module import ModuleOutcome, judge_module, modes_of  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "zoo_torch_module.json"
SWEEP_RESULTS = REPO / "benchmarks" / "results" / "zoo_torch_module_sweep.json"
LABELS = ("trains", "undecided", "wrong", "refused", "torch export failure", "torch failure",
          "crash")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="")
    parser.add_argument("--sweep", action="store_true",
                        help="the sweep's architectures (tests/zoo/sweep_cases.py)")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if args.sweep:
        from zoo.sweep_cases import SWEEP_CASES, missing

        absent = set(missing())
        known = {c.name: c for c in SWEEP_CASES if c.name not in absent}
    else:
        known = {c.name: c for c in zoo.CASES}
    names = args.cases.split(",") if args.cases else list(known)
    records = []
    for name in names:
        case = known[name] if name in known else zoo.case(name)
        for mode in modes_of(case):
            try:
                outcome = judge_module(case, mode)
            except Exception as error:  # a crash after the first call: one row, go on
                outcome = ModuleOutcome(case.name, mode, "crash",
                                        f"{type(error).__name__}: {error}"[:300])
            if outcome.label == "refused" and "torch.onnx.export" in outcome.reason:
                outcome.label = "torch export failure"
            records.append(asdict(outcome))
            print(f"{name:16} {mode:5} {outcome.label:8} outputs {outcome.output_error} "
                  f"gradients {outcome.gradient_error} losses {outcome.loss_error} "
                  f"{outcome.reason}", flush=True)
    results = SWEEP_RESULTS if args.sweep else RESULTS
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(records, indent=1))
    counts = {label: sum(r["label"] == label for r in records) for label in LABELS}
    print(", ".join(f"{n} {label}" for label, n in counts.items()), f"of {len(records)}")
    if not args.no_docs:
        write_docs_section("zoo-torch-module-sweep" if args.sweep else "zoo-torch-module",
                           _table(records, counts))


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0e}"


def _table(records: list[dict], counts: dict[str, int]) -> list[str]:
    lines = [
        "| architecture | mode | verdict | outputs | first-step gradients | 10 AdamW losses "
        "| running statistics | exports |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        verdict = r["label"] + (f" ({r['reason']})" if r["reason"] else "")
        lines.append(f"| {r['case']} | {r['mode']} | {verdict} | {_cell(r['output_error'])} | "
                     f"{_cell(r['gradient_error'])} | {_cell(r['loss_error'])} | "
                     f"{_cell(r['statistics_error'])} | {r['exports']} |")
    lines.append("")
    lines.append("Counts: " + ", ".join(f"{n} {label}" for label, n in counts.items())
                 + f" of {len(records)} (relative errors against torch eager in float32).")
    return lines


if __name__ == "__main__":
    main()
