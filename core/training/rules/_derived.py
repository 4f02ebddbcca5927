"""The ``graphpass`` gradient rule set, derived from the registered builders.

``lint-gradients`` judges a model by a :class:`~graphpass.training.rules._model.GradientRules`.
The rules of graphpass's own trainer are not written down separately: they are
computed from the :class:`~graphpass.training.BuilderTable` (the built-in builders and
every plugin's), so that the lint says exactly what ``build-training-graph`` will do:

* an operator has a builder when some builder covers it at the model's opset (a
  builder outside its opset range is an ``op_failure``);
* the inputs a builder does not declare differentiable are stop edges;
* each builder's :class:`~graphpass.training.Refusal` is an ``op_failure`` with the
  same conditions;
* builders are looked up by domain and op_type together;
* a trainable weight read inside a subgraph, and a loss that is not a float, are
  errors (the engine refuses both); a weight no gradient reaches is a warning (the
  pass leaves it frozen).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from graphpass.training._autodiff import CARRIER_TYPES, model_opset
from graphpass.training._builder import GradientBuilder
from graphpass.training._table import BuilderTable
from graphpass.training.rules._model import (
    DIFFERENTIABLE_TYPES,
    Check,
    GradientRules,
    NodeSite,
    OpFailure,
    StopEdges,
    TrainerFailure,
    normalize_domain,
)

__all__ = ["RULES_NAME", "DerivedRules", "rules_from_builders"]

RULES_NAME = "graphpass"
"""The name of the derived rule set (``lint-gradients`` option ``rules = "graphpass"``)."""

_MAX_ARITY = 64


@dataclass(frozen=True)
class DerivedRules:
    """graphpass's own rule set as the built-in plugin registers it: derived when used.

    Its rules depend on every registered builder (plugins' too), which no single
    plugin's hook sees; :meth:`resolve` derives them from the registry's builders.

    Attributes:
        name: The rule set's name (``graphpass``).
        version: The graphpass version, for messages.
        default: Never the default set (onnxruntime-training's is).
    """

    name: str = RULES_NAME
    version: str = ""
    default: bool = False

    def resolve(self, builders: BuilderTable) -> GradientRules:
        """The rules that describe what ``builders`` differentiate."""
        return rules_from_builders(builders, self.version)


def _opset_of(site: NodeSite, domain: str) -> int:
    graph = site.node.graph
    model = graph.root.model if graph is not None else None
    return model_opset(model, domain) if model is not None else 0


def _covered_by(builder: GradientBuilder) -> Check:
    def covered(site: NodeSite) -> bool:
        return normalize_domain(site.node.domain) == builder.domain and \
            builder.covers(_opset_of(site, builder.domain))
    return Check(f"builder {builder.name}", f"{builder.name} covers the node's opset", covered)


def _outside(builders: list[GradientBuilder]) -> Check:
    ranges = ", ".join(b.name for b in builders)

    def outside(site: NodeSite) -> bool:
        opset = _opset_of(site, builders[0].domain)
        return not any(b.covers(opset) for b in builders)
    return Check("opset-outside", f"the model's opset is outside {ranges}", outside)


def _both(first: Check, second: Callable[[NodeSite], bool], description: str) -> Check:
    return Check(first.name, description, lambda site: first.matches(site) and second(site))


def _arity(builder: GradientBuilder) -> int:
    if builder.domain:
        return _MAX_ARITY
    try:
        schema = onnx.defs.get_schema(builder.op_type, builder.domain)
    except onnx.defs.SchemaError:
        return _MAX_ARITY
    return min(int(schema.max_input), _MAX_ARITY)


def rules_from_builders(table: BuilderTable, version: str = "") -> GradientRules:
    """The rule set that describes what ``table``'s builders differentiate.

    Args:
        table: The builders (usually :func:`~graphpass.training.registered_builders`).
        version: The graphpass version, for messages.
    """
    stop_edges: list[StopEdges] = []
    failures: list[OpFailure] = []
    for key in sorted(table.keys()):
        versions = table.versions(*key)
        for builder in versions:
            covered = _covered_by(builder)
            if builder.differentiable is not None:
                stopped = frozenset(range(_arity(builder))) - builder.differentiable
                if stopped:
                    stop_edges.append(StopEdges(builder.op_type, stopped, (covered,),
                                                "declared non-differentiable"))
            for refusal in builder.refusals:
                condition = _both(covered, refusal.matches, refusal.describe())
                failures.append(OpFailure(builder.op_type, (condition,), refusal.reason,
                                          refusal.hint, domain=builder.domain))
        failures.append(OpFailure(
            key[1], (_outside(versions),),
            "no builder of this operator covers the model's opset",
            "convert the model to an opset the builders cover", domain=key[0]))
    trainer_failures = (
        TrainerFailure("captured", "graphpass does not differentiate control flow",
                       "freeze it, or remove the control flow"),
        TrainerFailure("loss-type", "graphpass seeds float losses only",
                       "cast the loss to a float type"),
    )
    return GradientRules(
        name=RULES_NAME, trainer="graphpass", version=version,
        builders=frozenset(table.keys()), lookup="domain", stop_edges=tuple(stop_edges),
        op_failures=tuple(failures), trainer_failures=trainer_failures,
        differentiable_types=CARRIER_TYPES, loss_types=DIFFERENTIABLE_TYPES,
        description="graphpass's own trainer (build-training-graph): derived from the "
                    "registered gradient builders",
        source="the graphpass_gradient_builders hook")
