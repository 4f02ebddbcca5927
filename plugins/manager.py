"""The plugin manager: finds plugins, calls their hooks, builds the registry.

(First version: loads the built-in plugin and entry points. Hardened in issue #3.)
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable

import pluggy

from graphpass.errors import PluginError
from graphpass.plugins import builtin, hookspecs
from graphpass.registry import PluginInfo, Registry

__all__ = ["build_registry"]

_KINDS = {
    "graphpass_passes": "passes",
    "graphpass_checkpoint_loaders": "checkpoint_loaders",
    "graphpass_gradient_rules": "gradient_rules",
    "graphpass_pipelines": "pipelines",
}


def build_registry(*, disable: Iterable[str] = (), strict: bool = False) -> Registry:
    """Load the built-in plugin and every installed plugin into a new registry."""
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    registry = Registry()
    manager.register(builtin, name="builtin")
    registry.plugins.append(PluginInfo("builtin", _version("graphpass"), distribution="graphpass"))
    for entry_point in importlib.metadata.entry_points(group=hookspecs.PROJECT_NAME):
        if entry_point.name in set(disable):
            continue
        try:
            plugin = entry_point.load()
            manager.register(plugin, name=entry_point.name)
        except Exception as error:
            if strict:
                raise PluginError(f"plugin {entry_point.name!r} failed to load: {error}") from None
            continue
        dist = entry_point.dist
        registry.plugins.append(PluginInfo(entry_point.name, dist.version if dist else "",
                                           distribution=dist.name if dist else ""))
    for hook_name, kind in _KINDS.items():
        for impl in getattr(manager.hook, hook_name).get_hookimpls():
            for item in impl.function() or ():
                name = getattr(item, "name", None)
                registry.add(kind, name, item, impl.plugin_name)
    return registry


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""
