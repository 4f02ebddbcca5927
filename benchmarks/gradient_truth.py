"""Is onnxruntime-training's gradient right where it builds one, and does GP425 say so?

For every ONNX node test case of the corpus (``tests/ort_training/gradient_corpus.py``:
each float input in turn made the trainable weight, the first output summed is the
loss), this asks onnxruntime-training 1.19.2 for training artifacts, runs one training
step on the test's own data and compares ORT's gradient with finite differences of the
forward model in three random directions (``tests/ort_training/finite_differences.py``).
Each case ORT builds gets a verdict: ``right``, ``wrong``, ``fails`` (the step itself
fails), ``rough`` (the loss is not smooth enough along a direction to tell at float32
precision) or ``unchecked`` (no finite loss, or inputs numpy cannot hold).

It then lints every case and compares: ``lint-gradients``' ``GP425`` ("computes a wrong
gradient") must be given exactly to the cases whose gradient is ``wrong``, and to none
that could not be checked. It prints the table, every case where the two disagree, writes
``benchmarks/results/gradient_truth.json`` and, with ``--write-golden``, the verdicts
the test suite checks the lint against (``tests/ort_training/gradient_truth.json``).

ORT's answers are kept in ``benchmarks/results/gradient_truth_ort.jsonl``; ``--reuse``
judges the lint against them again without running ORT (about 15 minutes on a shared
2-core machine: every case that is not wrong at the test's data is checked at random
points too, and the pooling tests crash the runtime one by one).

Usage::

    .venv/bin/python benchmarks/gradient_truth.py [--write-golden] [--reuse]
        [--ort-python .venv-ort-training/bin/python] [--only CASE ...]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from ort_training import gradient_corpus as corpus  # noqa: E402

GOLDEN = REPO / "tests" / "ort_training" / "gradient_truth.json"
BUILDS = REPO / "tests" / "ort_training" / "gradient_golden.json"
"""ORT's verdicts on building artifacts (``gradient_agreement.py``): ``ok`` where it builds."""
RESULTS = REPO / "benchmarks" / "results"
ANSWERS = RESULTS / "gradient_truth_ort.jsonl"
WRONG = ("wrong",)
"""The verdicts GP425 stands for (a step that fails is another matter: no gradient)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ort-python", default=corpus.default_ort_python())
    parser.add_argument("--write-golden", action="store_true")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--reuse", action="store_true",
                        help="judge the lint against ORT's kept answers; do not run ORT")
    args = parser.parse_args()

    started = time.perf_counter()
    cache = REPO / "benchmarks" / ".cache" / "gradient_corpus"
    cases, _ = corpus.node_test_cases(args.only, cache=cache)
    by_name = {case.name: case for case in cases}
    if args.reuse:
        kept = [json.loads(line) for line in ANSWERS.read_text().splitlines()]
        results = {r["id"]: r for r in kept if r["id"] in by_name}
    else:
        with tempfile.TemporaryDirectory() as scratch:
            results = corpus.run_oracle(
                args.ort_python, corpus.iter_jobs(cases, scratch, check_gradient=True),
                Path(scratch))
        if not args.only:
            RESULTS.mkdir(parents=True, exist_ok=True)
            ANSWERS.write_text("".join(json.dumps(r) + "\n" for r in results.values()))
    ran = time.perf_counter()
    builds = json.loads(BUILDS.read_text())["cases"]
    rows = []
    for name, answer in results.items():
        result = answer
        if answer.get("crashed") and builds.get(name) == "ok":
            # it builds (the golden verdict), and the step brought the runtime down
            result = {"ok": True, "gradient": {"verdict": "fails", "why": "crash: " + str(
                answer.get("error") or "")[-200:]}}
        if not result.get("ok"):
            continue  # ORT builds nothing: there is no gradient to check
        truth = result.get("gradient") or {"verdict": "unchecked", "why": "inputs"}
        findings = corpus.lint_findings(by_name[name])
        flagged = sorted({str(f.node) for f in findings if f.code == "GP425"})
        rows.append({"case": name, "verdict": truth["verdict"], "why": truth.get("why", ""),
                     "at": truth.get("at", "the test's data"),
                     "directions": truth.get("directions", []), "gp425": flagged,
                     "changes": by_name[name].changes})
    table = collections.Counter((row["verdict"], bool(row["gp425"])) for row in rows)
    print(f"{len(cases)} cases, {len(rows)} built by ORT; {ran - started:.0f} s")
    print("\nORT's gradient       GP425   no GP425")
    for verdict in ("right", "zero", "wrong", "fails", "rough", "unchecked"):
        print(f"  {verdict:18} {table[(verdict, True)]:6} {table[(verdict, False)]:9}")
    disagreements = [row for row in rows
                     if (row["verdict"] in WRONG) != bool(row["gp425"])
                     and row["verdict"] in ("right", *WRONG)]
    print(f"\ndisagreements: {len(disagreements)}")
    for row in disagreements:
        print(f"  {row['case']}: ORT's gradient {row['verdict']} ({row['why'][:100]}), "
              f"GP425 {row['gp425']}")
    unsure = [row for row in rows if row["gp425"] and row["verdict"] not in ("right", *WRONG)]
    for row in unsure:
        print(f"  GP425 where ORT's gradient is {row['verdict']}: {row['case']}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gradient_truth.json").write_text(json.dumps(
        {"table": {f"{v} / {'GP425' if g else 'no GP425'}": n for (v, g), n in table.items()},
         "rows": rows}, indent=1))
    if args.write_golden:
        golden = {row["case"]: row["verdict"] for row in rows}
        GOLDEN.write_text(json.dumps({"cases": golden}, indent=0, sort_keys=True) + "\n")
        print(f"\nwrote {GOLDEN.relative_to(REPO)} ({len(golden)} verdicts)")
    return 1 if disagreements or unsure else 0


if __name__ == "__main__":
    sys.exit(main())
