"""Every built-in gradient builder against finite differences on ONNX's node test cases.

Each one-node case of ``onnx/backend/test/data/node`` whose operator has a built-in
builder is converted to float64 and its builder's gradients (of a random linear
function of the outputs) are compared with central differences along random
directions (``tests/_gradcheck.py``). A case passes, or is one the builder declares
it refuses, or has no float input and output to differentiate, or sits on a kink of
the function (every direction crosses one); it never fails.
"""

from __future__ import annotations

import functools
import os
from collections import Counter

import numpy as np
import pytest
from _gradcheck import TABLE, check_node_case, node_cases

# Cases whose refusal is declared by the builder (and so reported by lint-gradients).
DECLARED_REFUSALS = {
    "a crop's positions outside the region": "Resize with tf_crop_and_resize",
    "not the one each axis's size gives": "Resize with sizes and keep_aspect_ratio_policy",
    "storage_order": "MaxPool with storage_order 1",
    "repeats a subscript": "Einsum with a diagonal",
    "reduction none and add only": "ScatterND with reduction mul, max or min",
    "at opset 13 or later": "a model below opset 13 (graphpass writes opset 13 or later)",
}


@functools.lru_cache(maxsize=1)
def _cases_by_op() -> dict[str, list[object]]:
    found: dict[str, list[object]] = {}
    for case in node_cases():
        found.setdefault(case.model.graph.node[0].op_type, []).append(case)
    return found


OPS = sorted({b.op_type for b in TABLE})

# make test skips the few large cases that run slowly in onnx.reference (3-D pooling
# over 32^3 inputs); make bench (benchmarks/gradient_builders.py) checks them all.
MAX_ELEMENTS = None if os.environ.get("GRAPHPASS_FULL_SWEEP") else 4096


def _small(case: object) -> bool:
    if MAX_ELEMENTS is None:
        return True
    inputs, _ = case.data_sets[0]  # type: ignore[attr-defined]
    return sum(int(np.size(np.asarray(v))) for v in inputs if hasattr(v, "shape")) \
        <= MAX_ELEMENTS


@pytest.mark.parametrize("op_type", OPS)
def test_builder_matches_finite_differences_on_node_tests(op_type: str) -> None:
    cases = _cases_by_op().get(op_type, [])
    if not cases:
        pytest.skip(f"ONNX has no one-node test case for {op_type}")
    statuses: Counter[str] = Counter()
    for case in filter(_small, cases):
        result = check_node_case(case)
        assert result.status != "failed", f"{result.name}: {result.detail}"
        if result.status == "refused":
            assert any(key in result.detail for key in DECLARED_REFUSALS), (
                f"{result.name} refused for an undeclared reason: {result.detail}")
        if result.status == "passed":
            assert result.max_error < 1e-5, (result.name, result.max_error)
        statuses[result.status] += 1
    assert statuses["passed"] or statuses["no-gradient"] == len(cases), dict(statuses)
