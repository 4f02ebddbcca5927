"""The registry: every pass, checkpoint loader, gradient rule set and pipeline, by name.

Each entry is credited to the plugin that gave it (built-ins come from the
``builtin`` plugin). A registry is filled by :mod:`graphpass.framework.plugin_loading`
and handed down by whoever starts the work (the CLI, :class:`~graphpass.PassManager`,
:func:`~graphpass.checkpoint.open_checkpoint`); passes reach it through
:attr:`PassContext.registry <graphpass.PassContext.registry>`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from graphpass.errors import PipelineError, PluginError

if TYPE_CHECKING:
    from graphpass.framework.pass_base import Pass

__all__ = ["PluginInfo", "Registered", "Registry"]

T = TypeVar("T")


@dataclass(frozen=True)
class Registered(Generic[T]):
    """A registered item and the plugin that gave it."""

    item: T
    plugin: str


@dataclass
class PluginInfo:
    """What graphpass knows about one plugin.

    Attributes:
        name: The plugin (entry point) name.
        version: The version of the distribution that ships it.
        status: ``active``, ``disabled`` or ``failed``.
        error: Why it failed, when it did.
        provides: What it gave, by kind (``passes``, ``checkpoint_loaders`` ...).
        distribution: The name of the distribution that ships it.
        warnings: Problems that did not stop it (a misspelled hook, an item that was
            skipped because graphpass cannot use it).
    """

    name: str
    version: str = ""
    status: str = "active"
    error: str | None = None
    provides: dict[str, list[str]] = field(default_factory=dict)
    distribution: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The plugin's name and version, for messages (``example 1.0``)."""
        return f"{self.name} {self.version}".strip()


class Registry:
    """Passes, checkpoint loaders, gradient rules and pipelines by name.

    Attributes:
        passes: Pass classes by pass name.
        checkpoint_loaders: Checkpoint loaders by loader name.
        gradient_rules: Gradient rule sets by name.
        pipelines: Pipeline presets by name.
        plugins: Every plugin seen, with its status.
        warnings: Problems not tied to one plugin (disabling a plugin that does not
            exist).
    """

    def __init__(self) -> None:
        self.passes: dict[str, Registered[type[Pass]]] = {}
        self.checkpoint_loaders: dict[str, Registered[Any]] = {}
        self.gradient_rules: dict[str, Registered[Any]] = {}
        self.pipelines: dict[str, Registered[Any]] = {}
        self.plugins: list[PluginInfo] = []
        self.warnings: list[str] = []

    # -------------------------------------------------------------- adding
    def add(self, kind: str, name: str, item: Any, plugin: str) -> None:
        """Register ``item`` under ``name`` in ``kind`` (``passes``, ``pipelines`` ...).

        Raises:
            PluginError: Another plugin already registered that name.
        """
        table: dict[str, Registered[Any]] = getattr(self, kind)
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {plugin!r} gave a {kind[:-1].replace('_', ' ')} "
                              f"without a name: {item!r}")
        existing = table.get(name)
        if existing is not None and existing.item is not item:
            raise PluginError(
                f"two plugins give the {kind[:-1].replace('_', ' ')} {name!r}: "
                f"{existing.plugin!r} and {plugin!r}",
                hint=f"disable one of them (--disable-plugin {plugin} or "
                     f"GRAPHPASS_DISABLE_PLUGINS={plugin})",
            )
        table[name] = Registered(item, plugin)

    # -------------------------------------------------------------- lookups
    def pass_class(self, name: str) -> type[Pass]:
        """Return the pass class called ``name``.

        Raises:
            PipelineError: No such pass (with a "did you mean").
        """
        entry = self.passes.get(name)
        if entry is None:
            raise PipelineError(f"unknown pass {name!r}", hint=_suggest(name, self.passes,
                                                                        "graphpass passes"))
        return entry.item

    def pipeline(self, name: str) -> Any:
        """Return the pipeline preset called ``name``.

        Raises:
            PipelineError: No such pipeline (with a "did you mean").
        """
        entry = self.pipelines.get(name)
        if entry is None:
            raise PipelineError(f"unknown pipeline {name!r}",
                                hint=_suggest(name, self.pipelines, "graphpass passes"))
        return entry.item

    def gradient_rule_set(self, name: str | None = None) -> Any:
        """Return the gradient rules called ``name`` (default: the built-in ORT rules).

        Raises:
            PipelineError: No such rule set.
        """
        if name is None:
            for candidate in self.gradient_rules.values():
                if getattr(candidate.item, "default", False):
                    return candidate.item
            if self.gradient_rules:
                return next(iter(self.gradient_rules.values())).item
            raise PipelineError("no gradient rules are registered")
        entry = self.gradient_rules.get(name)
        if entry is None:
            raise PipelineError(f"unknown gradient rule set {name!r}",
                                hint=_suggest(name, self.gradient_rules, "graphpass plugins"))
        return entry.item

    def loaders(self) -> list[Any]:
        """The checkpoint loaders, in registration order."""
        return [entry.item for entry in self.checkpoint_loaders.values()]

    def plugin_of(self, kind: str, name: str) -> str | None:
        """The plugin that registered ``name`` in ``kind``."""
        entry = getattr(self, kind).get(name)
        return entry.plugin if entry is not None else None

    def plugin(self, name: str) -> PluginInfo | None:
        """What is known about the plugin called ``name``."""
        for info in self.plugins:
            if info.name == name:
                return info
        return None

    @property
    def problems(self) -> list[str]:
        """Every plugin problem, one readable line each (failures, then warnings)."""
        lines = [f"plugin {info.label!r} failed and was skipped: {info.error}"
                 for info in self.plugins if info.status == "failed"]
        lines.extend(f"plugin {info.label!r}: {warning}"
                     for info in self.plugins for warning in info.warnings)
        lines.extend(self.warnings)
        return lines


def _suggest(name: str, known: Iterable[str], command: str) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"see `{command}` for the names available"
