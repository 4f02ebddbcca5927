"""The full matrix of the inline-functions corpus check: every ONNX node test case, every way
of wrapping it into local functions (the test suite runs the main way on every case and
the others on a sample).

Usage::

    .venv/bin/python benchmarks/inline_corpus.py [--variants whole,nested] [--limit N]

Prints, per variant, how many cases passed (and how many of those only onnx's reference
evaluator could confirm), failed and were skipped, why cases were skipped, and every
failure. Exits 1 if any case failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _inline_corpus import VARIANTS, collect_cases, run_corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--limit", type=int, default=None, help="only the first N cases")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    cases = collect_cases()[:args.limit]
    start = time.perf_counter()
    report = run_corpus(cases, variants)
    elapsed = time.perf_counter() - start
    counts = report.counts()
    by_reference = Counter(o.variant for o in report.passed_by_reference())
    print(f"{len(cases)} ONNX node test cases x {len(variants)} variants "
          f"in {elapsed:.0f} s\n")
    print(f"{'variant':<14}{'passed':>8}{'(ref)':>7}{'failed':>8}{'skipped':>9}")
    for variant in variants:
        print(f"{variant:<14}{counts[(variant, 'passed')]:>8}{by_reference[variant]:>7}"
              f"{counts[(variant, 'failed')]:>8}{counts[(variant, 'skipped')]:>9}")
    total = Counter(status for (_, status) in counts.elements())
    print(f"{'total':<14}{total['passed']:>8}{sum(by_reference.values()):>7}"
          f"{total['failed']:>8}{total['skipped']:>9}")
    print("\n(ref): passed, confirmed by onnx.reference because onnxruntime writes into its "
          "inputs")
    print("\nskipped cases (per variant), by reason:")
    for reason, count in report.skip_reasons().most_common():
        print(f"  {count // max(len(variants), 1):>5}  {reason}")
    failures = report.failures()
    if failures:
        print("\nfailures:")
        for outcome in failures:
            print(f"  {outcome.case} [{outcome.variant}]: {outcome.reason}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
