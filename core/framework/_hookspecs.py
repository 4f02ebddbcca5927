"""The hooks a graphpass plugin can implement.

A plugin is a module (or any object) with functions decorated by
:data:`graphpass.plugins.hookimpl` and named like the hooks below. It is found
through the ``graphpass`` entry-point group::

    [project.entry-points.graphpass]
    my-plugin = "my_package.graphpass_plugin"

Every hook takes no arguments and returns an iterable of plain objects. Results are
collected per plugin, so each pass, loader, rule set and pipeline is credited to the
plugin that gave it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from graphpass.framework._onnx_ir_pass import RewriteRules
    from graphpass.framework._pass_base import Pass

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "graphpass"
"""The pluggy project name, which is also the entry-point group."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def graphpass_passes() -> Iterable[type[Pass]]:  # type: ignore[empty-body]
    """Return the pass classes this plugin provides."""


@hookspec
def graphpass_checkpoint_loaders() -> Iterable[Any]:  # type: ignore[empty-body]
    """Return checkpoint loaders (:class:`graphpass.checkpoint.CheckpointLoader` objects)."""


@hookspec
def graphpass_gradient_rules() -> Iterable[Any]:  # type: ignore[empty-body]
    """Return gradient rule sets (:class:`graphpass.GradientRules` objects)."""


@hookspec
def graphpass_gradient_builders() -> Iterable[Any]:  # type: ignore[empty-body]
    """Return gradient builders (:class:`graphpass.training.GradientBuilder` objects)."""


@hookspec
def graphpass_pipelines() -> Iterable[Any]:  # type: ignore[empty-body]
    """Return named pipeline presets (:class:`graphpass.Pipeline` objects)."""


@hookspec
def graphpass_rewrite_rules() -> Iterable[RewriteRules]:  # type: ignore[empty-body]
    """Return onnxscript pattern-rewrite rules (:class:`graphpass.RewriteRules`); each is a pass."""
