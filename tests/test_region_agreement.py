"""lint-gradients and graphpass's autodiff walk one region, and agree on it on real exports.

Both call :func:`graphpass.training._region.gradient_region`: the lint with the stop
edges and element types of the ``graphpass`` rule set (derived from the registered
builders), the engine with its builders' own. On torch exports of small models the
two give the same nodes to differentiate and the same values to carry gradients.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from _training_models import exported

import graphpass
from graphpass.training import ModelTypes
from graphpass.training._autodiff import _builtin, _Engine
from graphpass.training._region import differentiable_region, gradient_region
from graphpass.training.rules import rules_from_builders


@pytest.mark.parametrize("name", ["mlp", "convnet", "tinylm", "gated"])
def test_the_lint_and_the_engine_walk_the_same_region(name: str) -> None:
    model = graphpass.load(exported(name))
    graphpass.PassManager(["inline-functions"]).run(model)
    graph = model.graph
    weights = [name for name, tensor in graph.initializers.items()
               if tensor.numpy().dtype.kind == "f" and name not in graph.input_names]
    losses = graph.output_names[:1]
    table = _builtin()
    engine = _Engine(model, table, None)
    types = ModelTypes(model)
    linted = differentiable_region(graph, weights, losses, rules_from_builders(table),
                                   lambda value: types.of(graph, value))
    built = gradient_region(graph, weights, losses, engine.stop_inputs,
                            engine.is_differentiable)
    assert len(built.visited) > 5
    assert linted.visited == built.visited
    assert linted.gradient_values == built.gradient_values
    assert linted.entries == built.entries
