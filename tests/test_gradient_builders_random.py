"""Every built-in gradient builder against finite differences on random float64 models.

``tests/_gradient_cases.py`` draws one-node models per operator: shapes that
broadcast, attributes, axes as attributes or inputs, constant or run-time index
inputs, and (half the time) inputs declared with symbolic dimensions, so that the
builders' run-time paths (shapes and reduction axes computed in the graph) are
checked as well as their static ones. ``make bench`` runs many more examples
(``benchmarks/gradient_builders.py``).
"""

from __future__ import annotations

import os

import pytest
from _gradcheck import TABLE
from _gradient_cases import CASES, run_random

EXAMPLES = int(os.environ.get("GRAPHPASS_GRADIENT_EXAMPLES", "8"))


def test_every_builtin_builder_has_random_cases() -> None:
    assert {b.op_type for b in TABLE} == set(CASES)


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_builder_matches_finite_differences_on_random_models(op_type: str) -> None:
    tally = run_random(op_type, EXAMPLES)
    assert tally.examples >= min(EXAMPLES, 3)
    assert tally.passed >= tally.examples - 1  # an example may sit on a kink
    assert tally.max_error < 1e-5
