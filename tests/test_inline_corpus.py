"""inline-functions preserves the semantics of ONNX's own node test cases.

Every case of ``onnx.backend.test.case.node.collect_testcases()`` that onnxruntime
can run correctly is moved into model-local functions (see ``_inline_corpus.py``
for the ways), inlined, checked with ``onnx.checker.check_model(full_check=True)``
and run: the outputs must be the case's expected outputs within ONNX's own
tolerances. The main variant (the whole graph as one function) runs on the full
corpus; the other variants on a seeded sample each, to keep the suite fast.
``benchmarks/inline_corpus.py`` runs the full matrix.
"""

from __future__ import annotations

import random
import zlib
from collections import Counter

from _inline_corpus import VARIANTS, Outcome, check_variant, collect_cases, original_problem

MAIN_VARIANT = "whole"
SAMPLE_SIZE = 200
SEED = 20240604
KNOWN_SKIPS = ("onnxruntime cannot run the original",
               "onnxruntime's outputs for the original differ from the expected",
               "the original fails the ONNX checker")


def _sample(cases: list, variant: str) -> list:
    if variant == MAIN_VARIANT:
        return cases
    rng = random.Random(SEED ^ zlib.crc32(variant.encode()))
    return rng.sample(cases, min(SAMPLE_SIZE, len(cases)))


def test_node_test_corpus_survives_inlining() -> None:
    cases = collect_cases()
    assert len(cases) > 1500
    problems = {case.name: original_problem(case) for case in cases}
    usable = [case for case in cases if problems[case.name] is None]
    skipped = Counter(p.split(":")[0] for p in problems.values() if p is not None)
    assert set(skipped) <= set(KNOWN_SKIPS), skipped
    assert len(usable) > 1400  # onnxruntime runs most of them

    outcomes: list[Outcome] = []
    for variant in VARIANTS:
        outcomes.extend(check_variant(case, variant) for case in _sample(usable, variant))
    counts = Counter((o.variant, o.status) for o in outcomes)
    summary = ", ".join(f"{v}: {counts[(v, 'passed')]} passed, {counts[(v, 'failed')]} failed"
                        for v in VARIANTS)
    print(f"\ncorpus: {len(cases)} cases, {len(usable)} usable, skipped {dict(skipped)}; "
          f"{summary}")
    failures = [f"{o.case} [{o.variant}]: {o.reason}" for o in outcomes if o.status == "failed"]
    assert not failures, "\n".join(failures)
    assert counts[(MAIN_VARIANT, "passed")] == len(usable)
    # Cases only the reference evaluator confirms are the ones where onnxruntime writes
    # into its inputs (a second reader of the same graph input sees changed values).
    by_reference = {o.case for o in outcomes if o.status == "passed" and o.reason}
    assert all("batchnorm" in name and "training" in name for name in by_reference), by_reference
