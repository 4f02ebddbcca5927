"""The built-in plugin: graphpass's own passes, loaders, rules and pipelines.

They register through the same hooks as any third-party plugin, and are found the
same way: through graphpass's entry point ``builtin = "graphpass.plugins.builtin"``
(``pyproject.toml``), loaded before every other plugin. Imports happen inside the
hooks so that starting the command line stays fast.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from graphpass.framework import hookimpl

__all__ = [
    "graphpass_checkpoint_loaders",
    "graphpass_gradient_builders",
    "graphpass_gradient_rules",
    "graphpass_passes",
    "graphpass_pipelines",
]


@hookimpl
def graphpass_passes() -> Iterable[type[Any]]:
    """The built-in passes."""
    from graphpass.passes.build_training_graph import BuildTrainingGraph
    from graphpass.passes.check import Check
    from graphpass.passes.detect_missing_buffers import DetectMissingBuffers
    from graphpass.passes.fix_training_ops import FixTrainingOps
    from graphpass.passes.infer_shapes import InferShapes
    from graphpass.passes.inline_functions import InlineFunctions
    from graphpass.passes.lint_gradients import LintGradients
    from graphpass.passes.reconcile_initializers import ReconcileInitializers
    from graphpass.passes.remove_unused import RemoveUnused
    from graphpass.passes.restore_parameters import RestoreParameters
    from graphpass.passes.topological_sort import TopologicalSort

    return [
        InlineFunctions,
        ReconcileInitializers,
        DetectMissingBuffers,
        RestoreParameters,
        LintGradients,
        FixTrainingOps,
        BuildTrainingGraph,
        RemoveUnused,
        TopologicalSort,
        InferShapes,
        Check,
    ]


@hookimpl
def graphpass_checkpoint_loaders() -> Iterable[Any]:
    """The built-in checkpoint loaders (safetensors, torch, numpy, sharded)."""
    from graphpass.checkpoint import builtin_loaders

    return builtin_loaders()


@hookimpl
def graphpass_gradient_rules() -> Iterable[Any]:
    """The built-in gradient rules (onnxruntime-training, and graphpass's own).

    ``graphpass`` is derived from every registered builder (plugins' too) when
    ``lint-gradients`` judges by it (:class:`~graphpass.training.rules._derived.DerivedRules`).
    """
    from graphpass.training.rules import DerivedRules, builtin_rule_sets

    return [*builtin_rule_sets(), DerivedRules()]


@hookimpl
def graphpass_gradient_builders() -> Iterable[Any]:
    """The built-in gradient builders (``build-training-graph``)."""
    from graphpass.training import builtin_builders

    return builtin_builders()


@hookimpl
def graphpass_pipelines() -> Iterable[Any]:
    """The built-in pipeline presets (``train-ready`` ...)."""
    from graphpass.passes.presets import builtin_pipelines

    return builtin_pipelines()
