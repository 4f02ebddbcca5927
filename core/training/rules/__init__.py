"""Gradient rules: what a trainer can differentiate, as data.

* ``_model``: the rule model (:class:`GradientRules`, its
  conditions, the node a condition sees) and its loader (``GradientRules.from_toml``);
  the selection of the weights to train;
* ``_onnxruntime_training``: onnxruntime-training's set,
  written in ``data/onnxruntime_training.toml``, with the checks that file names;
* ``_derived``: graphpass's own set (``rules = "graphpass"``),
  derived from the registered gradient builders.

The package imports none of them itself: the builders need the model, and graphpass's
own set needs the builders.
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports

if TYPE_CHECKING:
    from graphpass.training.rules._broadcast_dims import (
        BROADCAST_OPS,
        hidden_ones,
    )
    from graphpass.training.rules._derived import (
        DerivedRules,
        rules_from_builders,
    )
    from graphpass.training.rules._model import (
        DIFFERENTIABLE_TYPES,
        AttributeIn,
        AttributeMissing,
        AttributeNotIn,
        Check,
        GradientRules,
        InputNeedsGradient,
        InputRankIn,
        InputTypeNotIn,
        NodeSite,
        OutputsFewerThan,
        Predicate,
        SelectionReport,
        TrainerFailureKind,
        normalize_domain,
        trainable_weights,
        weight_matches,
    )
    from graphpass.training.rules._onnxruntime_training import (
        builtin_rule_sets,
        onnxruntime_training_rules,
    )

__all__ = [
    "BROADCAST_OPS",
    "DIFFERENTIABLE_TYPES",
    "AttributeIn",
    "AttributeMissing",
    "AttributeNotIn",
    "Check",
    "DerivedRules",
    "GradientRules",
    "InputNeedsGradient",
    "InputRankIn",
    "InputTypeNotIn",
    "NodeSite",
    "OutputsFewerThan",
    "Predicate",
    "SelectionReport",
    "TrainerFailureKind",
    "builtin_rule_sets",
    "hidden_ones",
    "normalize_domain",
    "onnxruntime_training_rules",
    "rules_from_builders",
    "trainable_weights",
    "weight_matches",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "SelectionReport": "graphpass.training.rules._model",
    "weight_matches": "graphpass.training.rules._model",
    "AttributeIn": "graphpass.training.rules._model",
    "AttributeMissing": "graphpass.training.rules._model",
    "AttributeNotIn": "graphpass.training.rules._model",
    "BROADCAST_OPS": "graphpass.training.rules._broadcast_dims",
    "Check": "graphpass.training.rules._model",
    "DIFFERENTIABLE_TYPES": "graphpass.training.rules._model",
    "DerivedRules": "graphpass.training.rules._derived",
    "GradientRules": "graphpass.training.rules._model",
    "InputNeedsGradient": "graphpass.training.rules._model",
    "InputRankIn": "graphpass.training.rules._model",
    "InputTypeNotIn": "graphpass.training.rules._model",
    "NodeSite": "graphpass.training.rules._model",
    "OutputsFewerThan": "graphpass.training.rules._model",
    "Predicate": "graphpass.training.rules._model",
    "TrainerFailureKind": "graphpass.training.rules._model",
    "builtin_rule_sets": "graphpass.training.rules._onnxruntime_training",
    "hidden_ones": "graphpass.training.rules._broadcast_dims",
    "normalize_domain": "graphpass.training.rules._model",
    "onnxruntime_training_rules": "graphpass.training.rules._onnxruntime_training",
    "rules_from_builders": "graphpass.training.rules._derived",
    "trainable_weights": "graphpass.training.rules._model",
})
