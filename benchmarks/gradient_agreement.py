"""Agreement of ``lint-gradients`` with onnxruntime-training 1.19.2 on the whole corpus.

For every case of the corpus (ONNX node tests with each float input made the
trainable weight, and torch exports; see ``tests/ort_training/gradient_corpus.py``)
this asks ORT itself (``generate_artifacts``, in the onnxruntime-training venv, all
cases in one batch process) and the lint, and compares the verdicts:

    ok | missing OP | broken OP | unreachable W | no-gradient W | duplicate W |
    captured W | loss-type | other: ... | crash: ...

It prints the confusion matrix, every disagreement, and the cases where ORT fails for
another reason, writes a report to ``benchmarks/results/gradient_agreement.json``,
and with ``--write-golden`` the golden verdicts the test suite checks the lint
against (``tests/ort_training/gradient_golden.json``).

Usage::

    .venv/bin/python benchmarks/gradient_agreement.py [--write-golden] [--no-torch]
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

from graphpass.training.rules._onnxruntime_training import onnxruntime_training_rules  # noqa: E402

GOLDEN = REPO / "tests" / "ort_training" / "gradient_golden.json"
RESULTS = REPO / "benchmarks" / "results"


def run_oracle(python: str, cases: list[corpus.Case]) -> dict[str, dict]:
    """ORT's results for every case, from one batch run."""
    with tempfile.TemporaryDirectory() as scratch:
        return corpus.run_oracle(python, corpus.iter_jobs(cases, scratch), Path(scratch))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ort-python", default=corpus.default_ort_python())
    parser.add_argument("--write-golden", action="store_true")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()

    started = time.perf_counter()
    cache = REPO / "benchmarks" / ".cache" / "gradient_corpus"
    cases, skipped = corpus.node_test_cases(args.only, cache=cache)
    if not args.no_torch:
        torch_cases, torch_skipped = corpus.torch_cases(cache, args.only)
        cases.extend(torch_cases)
        skipped.extend(torch_skipped)
    built = time.perf_counter()
    ort = run_oracle(args.ort_python, cases)
    ran = time.perf_counter()
    rules = onnxruntime_training_rules()
    rows = []
    lint_seconds = 0.0
    for case in cases:
        begin = time.perf_counter()
        predicted = corpus.lint_verdict(corpus.lint_findings(case))
        lint_seconds += time.perf_counter() - begin
        rows.append({"case": case.name, "ort": corpus.ort_verdict(ort[case.name], rules),
                     "lint": predicted, "changes": case.changes})
    matrix = corpus.confusion((row["ort"], row["lint"]) for row in rows)
    disagreements = [row for row in rows if corpus.kind(row["ort"]) != "other"
                     and not corpus.same(row["ort"], row["lint"])]
    others = [row for row in rows if corpus.kind(row["ort"]) == "other"]

    ort_seconds = sum(float(r.get("seconds") or 0) for r in ort.values())
    print(f"{len(cases)} cases ({sum(c.name.startswith('torch_') for c in cases)} torch "
          f"exports), {len(skipped)} test inputs skipped; building {built - started:.1f} s, "
          f"ORT batch {ran - built:.1f} s")
    print(f"time per case: lint {lint_seconds / len(cases) * 1000:.1f} ms, ORT "
          f"generate_artifacts {ort_seconds / len(cases) * 1000:.1f} ms "
          f"(lint/ORT {lint_seconds / max(ort_seconds, 1e-9):.2f})")
    print(f"changed to fit the trainer: "
          f"{sum(bool(row['changes']) for row in rows)} cases (opset/IR lowered)")
    print("\nconfusion matrix (cases where ORT succeeds or fails predictably):")
    for label, count in matrix.items():
        print(f"  {label:36} {count}")
    print(f"\nORT verdicts: {dict(collections.Counter(corpus.kind(r['ort']) for r in rows))}")
    print(f"\ndisagreements: {len(disagreements)}")
    for row in disagreements:
        print(f"  {row['case']}: ORT {row['ort']!r}, lint {row['lint']!r}")
    print(f"\nORT fails for another reason: {len(others)} cases")
    for reason, count in collections.Counter(r["ort"] for r in others).most_common():
        lint_said = collections.Counter(r["lint"].split(" ")[0] for r in others
                                        if r["ort"] == reason)
        print(f"  {count:4} {reason}  [lint: {dict(lint_said)}]")
    print("\nskipped:")
    for reason, count in collections.Counter(
            s.reason.split(":")[0] for s in skipped).most_common():
        print(f"  {count:4} {reason}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"matrix": matrix, "disagreements": disagreements, "other": others,
              "skipped": [vars(s) for s in skipped], "rows": rows}
    (RESULTS / "gradient_agreement.json").write_text(json.dumps(report, indent=1))
    if args.write_golden:
        golden = {"trainer": rules.label, "cases": {row["case"]: row["ort"] for row in rows}}
        GOLDEN.write_text(json.dumps(golden, indent=0, sort_keys=True) + "\n")
        print(f"\nwrote {GOLDEN.relative_to(REPO)} ({len(rows)} verdicts)")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
