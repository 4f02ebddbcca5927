"""The registry: every pass, checkpoint loader, gradient rule set and pipeline, by name.

Each entry is credited to the plugin that gave it (built-ins come from the
``builtin`` plugin). A registry is filled by :mod:`graphpass.framework._plugin_loading`
and handed down by whoever starts the work (the CLI, :class:`~graphpass.PassManager`,
:func:`~graphpass.checkpoint.open_checkpoint`); passes reach it through
:attr:`PassContext.registry <graphpass.PassContext.registry>`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from graphpass.errors import GraphpassError, PipelineError, PluginError

if TYPE_CHECKING:
    from graphpass.framework._pass_base import Pass

__all__ = ["KIND_PLURALS", "KIND_WORDS", "PluginInfo", "Registered", "Registry"]

KIND_WORDS = {
    "passes": "pass",
    "checkpoint_loaders": "checkpoint loader",
    "gradient_rules": "gradient rule set",
    "gradient_builders": "gradient builder",
    "pipelines": "pipeline",
}
"""What one item of each kind is called in messages."""

KIND_PLURALS = {kind: f"{word}es" if word.endswith("s") else f"{word}s"
                for kind, word in KIND_WORDS.items()}
"""What several items of each kind are called in messages."""

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
        exception: The plugin's own exception when it failed (its import error, or what
            its hook raised), with the traceback into the plugin's code.
        withheld: What it would have given but does not, by kind: names of a failed
            plugin's items and of items skipped because graphpass cannot use them.
    """

    name: str
    version: str = ""
    status: str = "active"
    error: str | None = None
    provides: dict[str, list[str]] = field(default_factory=dict)
    distribution: str = ""
    warnings: list[str] = field(default_factory=list)
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    withheld: dict[str, dict[str, str]] = field(default_factory=dict)

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
        gradient_builders: Gradient builders by name (``Softmax``, ``my.domain::Op``,
            ``Gather@16+``).
        pipelines: Pipeline presets by name.
        plugins: Every plugin seen, with its status.
        warnings: Problems not tied to one plugin (disabling a plugin that does not
            exist).
        clashes: Names that two or more plugins give, by ``(kind, name)``: the plugins,
            sorted by name. Neither plugin's item is registered under a clashing name;
            asking for it is an error naming them all (see :meth:`unavailable`).
        own_plugins: The plugins graphpass ships itself (``builtin``, ``ecosystem`` ...).
            What they give is never replaced by another plugin's item of the same
            name (that item is refused, with a warning on its plugin), and no message
            suggests switching them off.
    """

    def __init__(self) -> None:
        self.passes: dict[str, Registered[type[Pass]]] = {}
        self.checkpoint_loaders: dict[str, Registered[Any]] = {}
        self.gradient_rules: dict[str, Registered[Any]] = {}
        self.gradient_builders: dict[str, Registered[Any]] = {}
        self.pipelines: dict[str, Registered[Any]] = {}
        self.plugins: list[PluginInfo] = []
        self.warnings: list[str] = []
        self.clashes: dict[tuple[str, str], list[str]] = {}
        self.own_plugins: set[str] = set()

    # -------------------------------------------------------------- adding
    def add(self, kind: str, name: str, item: Any, plugin: str) -> None:
        """Register ``item`` under ``name`` in ``kind`` (``passes``, ``pipelines`` ...).

        Raises:
            PluginError: Another plugin already registered that name.
        """
        table: dict[str, Registered[Any]] = getattr(self, kind)
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {plugin!r} gave a {KIND_WORDS[kind]} "
                              f"without a name: {item!r}")
        existing = table.get(name)
        if existing is not None and existing.item is not item:
            raise _clash_error(kind, name, [existing.plugin, plugin], self.own_plugins)
        table[name] = Registered(item, plugin)

    def offer(self, kind: str, name: str, item: Any, plugin: str) -> bool:
        """Register ``item`` unless another plugin gives the same name; say which it was.

        A second plugin giving a name is a clash: the name is taken out of the table
        (neither plugin's item is used) and recorded in :attr:`clashes`, so that only
        what asks for that name fails, naming every plugin that gives it.

        Returns:
            Whether ``item`` was registered.
        """
        if (kind, name) in self.clashes:
            self.clashes[kind, name] = sorted([*self.clashes[kind, name], plugin])
            return False
        table: dict[str, Registered[Any]] = getattr(self, kind)
        existing = table.get(name)
        if existing is not None and existing.item is not item:
            del table[name]
            self.clashes[kind, name] = sorted([existing.plugin, plugin])
            return False
        self.add(kind, name, item, plugin)
        return True

    def unavailable(self, kind: str, name: str) -> GraphpassError | None:
        """Why ``name`` is not in ``kind`` though a plugin gives it, or ``None``.

        Returns:
            A :class:`~graphpass.PluginError` when plugins clash over the name, or when
            the plugin that would give it failed to load or had it skipped (naming the
            plugin and why); ``None`` when no plugin is known to give it.
        """
        clash = self.clashes.get((kind, name))
        if clash is not None:
            return _clash_error(kind, name, clash, self.own_plugins)
        for info in self.plugins:
            reason = info.withheld.get(kind, {}).get(name)
            if reason is None:
                continue
            if info.status == "failed":
                # The reason says what happened: it failed to import, or a hook raised.
                return PluginError(
                    f"{KIND_WORDS[kind]} {name!r} would be given by plugin {info.label!r}, "
                    f"which was skipped: {reason}",
                    hint=f"fix or reinstall plugin {info.name!r} (`graphpass plugins "
                         "--traceback` shows its traceback)")
            return PluginError(
                f"{KIND_WORDS[kind]} {name!r} of plugin {info.label!r} was skipped: {reason}",
                hint=f"this is a bug in plugin {info.name!r}; report it to its authors")
        return None

    def failed_plugins_note(self) -> str | None:
        """A sentence about the plugins that failed, for the hint of an unknown name.

        Any of them may be the one that gives a name nobody is known to give.
        """
        unknown = [info.label for info in self.plugins if info.status == "failed"]
        if not unknown:
            return None
        names = ", ".join(repr(label) for label in unknown)
        return (f"plugin{'s' * (len(unknown) != 1)} {names} failed and may give it (see "
                "`graphpass plugins`)")

    def missing_error(self, kind: str, name: str, unknown: str, hint: str | None,
                      ) -> GraphpassError:
        """The error for asking for ``name`` in ``kind`` when it is not registered.

        Args:
            kind: ``passes``, ``pipelines`` ...
            name: The name asked for.
            unknown: The message when no plugin is known to give it.
            hint: The hint then (a "did you mean", say).
        """
        explained = self.unavailable(kind, name)
        if explained is not None:
            return explained
        note = self.failed_plugins_note()
        if note is not None:
            hint = f"{hint}; {note}" if hint else note
        return PipelineError(unknown, hint=hint)

    def known_names(self, kind: str) -> set[str]:
        """Every name of ``kind`` some plugin gives: registered, clashing or withheld."""
        table: dict[str, Registered[Any]] = getattr(self, kind)
        names = set(table)
        names.update(name for clash_kind, name in self.clashes if clash_kind == kind)
        for info in self.plugins:
            names.update(info.withheld.get(kind, {}))
        return names

    # -------------------------------------------------------------- lookups
    def pass_class(self, name: str) -> type[Pass]:
        """Return the pass class called ``name``.

        Raises:
            PipelineError: No such pass (with a "did you mean").
        """
        return self._named(self.passes, "passes", name, "pass", "graphpass passes")

    def pipeline(self, name: str) -> Any:
        """Return the pipeline preset called ``name``.

        Raises:
            PipelineError: No such pipeline (with a "did you mean").
        """
        return self._named(self.pipelines, "pipelines", name, "pipeline", "graphpass passes")

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
        return self._named(self.gradient_rules, "gradient_rules", name, "gradient rule set",
                           "graphpass plugins")

    def _named(self, table: dict[str, Registered[T]], kind: str, name: str, what: str,
               listing: str) -> T:
        """The item called ``name`` in ``table`` (of ``kind``, a ``what``).

        Raises:
            PipelineError: No such item (with a "did you mean", else the ``listing`` command).
        """
        entry = table.get(name)
        if entry is None:
            raise self.missing_error(kind, name, f"unknown {what} {name!r}",
                                     _suggest(name, table, listing))
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
        """Every plugin problem, one readable line each (failures, then warnings).

        Clashes are not among them: they are reported by ``graphpass plugins`` and by
        whatever asks for a clashing name, not by every command.
        """
        lines = [f"plugin {info.label!r} failed and was skipped: {info.error}"
                 for info in self.plugins if info.status == "failed"]
        lines.extend(f"plugin {info.label!r}: {warning}"
                     for info in self.plugins for warning in info.warnings)
        lines.extend(self.warnings)
        return lines


def _clash_error(kind: str, name: str, plugins: list[str], own: set[str]) -> PluginError:
    names = sorted(plugins)  # load order follows sys.path, an accident: messages do not
    quoted = [repr(plugin) for plugin in names]
    listed = " and ".join(quoted) if len(quoted) == 2 else ", ".join(quoted)
    word = "two" if len(names) == 2 else str(len(names))
    others = [plugin for plugin in names if plugin not in own]  # graphpass's own stay on
    if not others:
        hint = "this is a bug in graphpass: report it"
    else:
        switches = " or ".join(f"--disable-plugin {plugin}" for plugin in others)
        hint = (f"switch {'all but one of them' if len(others) == len(names) else 'it'} off "
                f"({switches}, or GRAPHPASS_DISABLE_PLUGINS)")
    return PluginError(f"{word} plugins give the {KIND_WORDS[kind]} {name!r}: {listed}",
                       hint=hint)


def _suggest(name: str, known: Iterable[str], command: str) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"see `{command}` for the names available"
