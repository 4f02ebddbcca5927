"""Plugin loading: finds plugins, calls their hooks, builds the registry.

Plugins are the entry points in the ``graphpass`` group, the built-in plugin
(``builtin = "graphpass.plugins.builtin"``, graphpass's own entry point) first. The
framework finds the built-in plugin like any other, so it never imports
:mod:`graphpass.plugins`. Each plugin is loaded and asked separately, so one bad
plugin never takes the others down:

* a plugin that fails to import, fails pluggy's validation, or raises in a hook is
  marked ``failed`` (with its name, version and the reason) and contributes nothing;
* a hook implementation with a misspelled name (``graphpass_pases``) is reported with
  a "did you mean" and ignored;
* an item graphpass cannot use (a pass without a name, a string where a class
  belongs, a hook that returns something not iterable) is reported and skipped;
* with ``strict=True`` every one of these is a :class:`~graphpass.PluginError`.

graphpass's own plugins (``builtin``, then the other plugins of the ``graphpass``
distribution) are loaded first, and what they give is never replaced: a plugin's pass
(or loader, rule set, builder, pipeline) that takes one of their names is refused, with
a warning naming the plugin's package, and graphpass's own item is used. That holds
with ``builtin`` switched off too, so that no installed package can turn ``graphpass
lint`` green by shadowing ``check``. One plugin giving two different items of one name
is that plugin's own error (neither is used; the same item twice counts once). A pass
whose ``after``/``before`` names a pass nobody gives but one close to it (a typo) gets
a warning with a "did you mean".

Two other plugins that give the same pass (or loader, rule set, pipeline) name clash:
the name is held back (neither item is used) and recorded in ``registry.clashes``, so
that ``graphpass plugins`` lists it and only what asks for that name fails, naming both
(with ``strict=True`` the clash itself is an error). What a failed plugin would have
given, as far as its hooks told before it failed, is kept on its
:class:`~graphpass.framework._registry.PluginInfo` (``withheld``), with the plugin's own
exception (``exception``), so that asking for one of those names says which plugin
would give it and why it failed. ``GRAPHPASS_DISABLE_PLUGINS=a,b`` and ``disable=``
switch plugins off before they are imported.

Every problem is also logged (logger ``graphpass.plugins``, level ``WARNING``), so that
Python callers hear of a plugin that failed; the command line prints them itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pluggy

from graphpass.errors import PluginError
from graphpass.framework import _hookspecs as hookspecs
from graphpass.framework._onnx_ir_pass import RewriteRules
from graphpass.framework._pass_base import Pass
from graphpass.framework._pipeline import Pipeline
from graphpass.framework._planning import unknown_order_names
from graphpass.framework._registry import KIND_PLURALS, KIND_WORDS, PluginInfo, Registry

__all__ = ["BUILTIN", "DISABLE_ENV", "build_registry", "default_registry", "disabled_plugins",
           "reset_default_registry"]

DISABLE_ENV = "GRAPHPASS_DISABLE_PLUGINS"
"""Environment variable: comma-separated plugin names to switch off."""

BUILTIN = "builtin"
"""The name of the plugin that registers graphpass's own passes."""

_BUILTIN_MODULE = "graphpass.plugins.builtin"
"""What graphpass's own ``builtin`` entry point points at (pyproject.toml)."""

_OWN_DISTRIBUTION = "graphpass"
"""The distribution whose plugins are graphpass's own (never replaced by another's)."""

_log = logging.getLogger("graphpass.plugins")

_KINDS = {
    "graphpass_passes": "passes",
    "graphpass_checkpoint_loaders": "checkpoint_loaders",
    "graphpass_gradient_rules": "gradient_rules",
    "graphpass_gradient_builders": "gradient_builders",
    "graphpass_pipelines": "pipelines",
    "graphpass_rewrite_rules": "passes",  # each RewriteRules becomes a pass
}
_PASS_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
"""A pass name: lowercase letters and digits, in words joined by single dashes."""


@dataclass
class _Candidate:
    info: PluginInfo
    load: Any  # () -> plugin object


class _PluginFailed(Exception):
    """A plugin cannot be used (the message says why).

    Attributes:
        original: The plugin's own exception, if one made it fail.
        items: What its hooks gave before or besides the failure (not to be used).
    """

    def __init__(self, message: str, original: BaseException | None = None,
                 items: list[tuple[str, str, Any]] | None = None):
        super().__init__(message)
        self.original = original
        self.items = items or []


def disabled_plugins(extra: Iterable[str] = ()) -> set[str]:
    """The plugin names switched off by ``GRAPHPASS_DISABLE_PLUGINS`` and ``extra``."""
    names = {name.strip() for name in os.environ.get(DISABLE_ENV, "").split(",")}
    names.update(name.strip() for name in extra)
    names.discard("")
    return names


def build_registry(*, disable: Iterable[str] = (), strict: bool = False) -> Registry:
    """Load the built-in plugin and every installed plugin into a new registry.

    Args:
        disable: Plugin names to switch off (added to ``GRAPHPASS_DISABLE_PLUGINS``).
        strict: Turn every plugin problem into a :class:`~graphpass.PluginError`.

    Returns:
        The registry; ``registry.plugins`` says what happened to each plugin and
        ``registry.problems`` lists every problem in one line each.

    Raises:
        PluginError: With ``strict``, any plugin problem (two plugins giving the same
            name included).
    """
    disabled = disabled_plugins(disable)
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    registry = Registry()
    candidates = _entry_point_candidates()
    registry.own_plugins = {c.info.name for c in candidates if _is_own(c.info)}
    seen_names = {c.info.name for c in candidates}
    for name in sorted(disabled - seen_names):
        close = difflib.get_close_matches(name, sorted(seen_names), n=1)
        registry.warnings.append(
            f"no plugin called {name!r} to disable"
            + (f" (did you mean {close[0]!r}?)" if close else ""))
    # What graphpass's own plugins give, by (kind, name): the plugin. Nobody else takes it.
    reserved: dict[tuple[str, str], str] = {}
    for candidate in candidates:
        info = candidate.info
        own = info.name in registry.own_plugins
        registry.plugins.append(info)
        if info.status == "failed":
            _check_strict(info, strict, own)
            continue
        if info.name in disabled:
            info.status = "disabled"
            if info.name == BUILTIN:  # off, but its names stay graphpass's own
                reserved.update(_names_of_builtin(candidate))
            continue
        try:
            items = _collect(manager, candidate)
        except _PluginFailed as failure:
            info.status = "failed"
            info.error = str(failure)
            info.exception = failure.original
            for kind, name, _item in failure.items:
                info.withheld.setdefault(kind, {})[name] = info.error
            _check_strict(info, strict, own)
            continue
        items = _one_per_name(items, info)
        if not own:
            items = _without_reserved(items, info, reserved)
        if strict and info.warnings:
            raise PluginError(f"plugin {info.label!r}: {info.warnings[0]}",
                              hint="fix the plugin, or run without --strict-plugins to skip "
                                   "what it gives that graphpass cannot use")
        for kind, name, item in items:
            if strict:
                registry.add(kind, name, item, info.name)  # a clash is an error
            else:
                registry.offer(kind, name, item, info.name)
            info.provides.setdefault(kind, []).append(name)
            if own:
                reserved.setdefault((kind, name), info.name)
    _check_ordering(registry, strict)
    if strict and registry.warnings:
        raise PluginError(registry.warnings[0])
    for problem in registry.problems:
        _log.warning("%s", problem)
    return registry


def _is_own(info: PluginInfo) -> bool:
    """Whether a plugin ships with graphpass itself."""
    return info.distribution.lower() == _OWN_DISTRIBUTION


def _is_own_distribution(distribution: Any) -> bool:
    return distribution is not None and str(distribution.name).lower() == _OWN_DISTRIBUTION


def _names_of_builtin(candidate: _Candidate) -> dict[tuple[str, str], str]:
    """What the built-in plugin gives, read without registering it (it is switched off)."""
    scratch = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    scratch.add_hookspecs(hookspecs)
    try:
        items = _collect(scratch, _Candidate(dataclasses.replace(candidate.info),
                                             candidate.load))
    except _PluginFailed:  # pragma: no cover - graphpass's own plugin always loads
        return {}
    return {(kind, name): BUILTIN for kind, name, _item in items}


def _one_per_name(items: list[tuple[str, str, Any]],
                  info: PluginInfo) -> list[tuple[str, str, Any]]:
    """``items`` with each name once.

    The same item twice counts once; two different items of one name are the plugin's
    own error, and neither is used.
    """
    first: dict[tuple[str, str], list[Any]] = {}
    for kind, name, item in items:
        given = first.setdefault((kind, name), [])
        if not any(other is item for other in given):
            given.append(item)
    kept = []
    for (kind, name), given in first.items():
        if len(given) == 1:
            kept.append((kind, name, given[0]))
            continue
        words = KIND_PLURALS[kind]
        count = "two" if len(given) == 2 else str(len(given))
        described = _join([_describe(item) for item in given])
        reason = (f"it gives {count} {words} named {name!r} ({described}), so "
                  f"{'neither' if len(given) == 2 else 'none of them'} is used")
        info.warnings.append(f"gives {count} {words} named {name!r}: {described}; "
                             f"{'neither' if len(given) == 2 else 'none'} is used (give "
                             "each a name of its own)")
        info.withheld.setdefault(kind, {})[name] = reason
    return kept


def _without_reserved(items: list[tuple[str, str, Any]], info: PluginInfo,
                      reserved: dict[tuple[str, str], str]) -> list[tuple[str, str, Any]]:
    """``items`` without those that take a name of graphpass's own (each refused aloud)."""
    kept = []
    for kind, name, item in items:
        owner = reserved.get((kind, name))
        if owner is None:
            kept.append((kind, name, item))
            continue
        word = KIND_WORDS[kind]
        package = f"package {info.distribution!r}" if info.distribution else "the plugin"
        info.warnings.append(
            f"its {word} {name!r} is refused: {name!r} is a {word} of graphpass's own "
            f"plugin {owner!r}, which a plugin never replaces; graphpass's own is used "
            f"(rename the {word} in {package})")
    return kept


def _check_ordering(registry: Registry, strict: bool) -> None:
    """Warn of ``after``/``before`` names that look like typos of passes plugins give."""
    known = registry.known_names("passes")
    for name, entry in registry.passes.items():
        info = registry.plugin(entry.plugin)
        if info is None:
            continue
        for attribute, unknown, close in unknown_order_names(entry.item, known):
            if close is None:
                continue
            warning = (f"pass {name!r} runs {attribute} {unknown!r}, which no plugin gives: "
                       f"did you mean {close!r}? (until it is fixed, that ordering is "
                       "ignored)")
            if strict:
                raise PluginError(f"plugin {info.label!r}: {warning}",
                                  hint=f"fix `{attribute}` of the pass, or run without "
                                       "--strict-plugins to run it unordered")
            info.warnings.append(warning)


def _describe(item: Any) -> str:
    if isinstance(item, type):
        return f"{item.__module__}.{item.__qualname__}"
    return _short_repr(item)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _check_strict(info: PluginInfo, strict: bool, own: bool) -> None:
    if strict:
        hint = ("graphpass's own plugin: reinstall graphpass, and report it if that does not "
                "help" if own else f"fix or uninstall it, or switch it off with "
                f"--disable-plugin {info.name} (or {DISABLE_ENV}={info.name})")
        raise PluginError(f"plugin {info.label!r} failed: {info.error}",
                          hint=hint) from info.exception


def _entry_point_candidates() -> list[_Candidate]:
    """Every plugin's entry point, graphpass's own built-in plugin first."""
    builtin: _Candidate | None = None
    candidates: list[_Candidate] = []
    by_name: dict[str, str] = {BUILTIN: "graphpass"}
    seen: set[tuple[str, str]] = set()
    # graphpass's own entry points first: their names are taken before any other plugin's,
    # and what they give is reserved before any other plugin loads.
    entry_points = sorted(importlib.metadata.entry_points(group=hookspecs.PROJECT_NAME),
                          key=lambda entry_point: not _is_own_distribution(entry_point.dist))
    for entry_point in entry_points:
        if (entry_point.name, entry_point.value) in seen:
            continue  # the same distribution found twice on sys.path
        seen.add((entry_point.name, entry_point.value))
        if entry_point.name == BUILTIN and entry_point.value == _BUILTIN_MODULE:
            builtin = _Candidate(PluginInfo(BUILTIN, _version("graphpass"),
                                            distribution="graphpass"), entry_point.load)
            continue
        dist = entry_point.dist
        info = PluginInfo(entry_point.name, dist.version if dist else "",
                          distribution=dist.name if dist else "")
        if entry_point.name in by_name:
            info.status = "failed"
            info.error = (f"another plugin is already called {entry_point.name!r} "
                          f"(from {by_name[entry_point.name]!r})")
        by_name.setdefault(entry_point.name, info.distribution)
        candidates.append(_Candidate(info, entry_point.load))
    if builtin is None:
        raise PluginError(
            f"graphpass's built-in plugin is not registered (no entry point {BUILTIN!r} = "
            f"{_BUILTIN_MODULE!r} in the {hookspecs.PROJECT_NAME!r} group)",
            hint="install graphpass (pip install graphpass, or pip install -e . in a "
                 "checkout) rather than running it from the source folder")
    return [builtin, *candidates]


def _collect(manager: pluggy.PluginManager, candidate: _Candidate) -> list[tuple[str, str, Any]]:
    """Import a plugin, register it, call each of its hooks; what it gives, checked."""
    info = candidate.info
    try:
        plugin = candidate.load()
    except (Exception, SystemExit) as error:  # a plugin must not end the program
        raise _PluginFailed(f"failed to import: {type(error).__name__}: {error}",
                            error) from None
    try:
        manager.register(plugin, name=info.name)
    except Exception as error:
        raise _PluginFailed(f"not a valid plugin: {error}", error) from None
    try:
        info.warnings.extend(_misspelled_hooks(manager, plugin, info.name))
        items: list[tuple[str, str, Any]] = []
        failure: _PluginFailed | None = None
        for hook_name, kind in _KINDS.items():
            for impl in getattr(manager.hook, hook_name).get_hookimpls():
                if impl.plugin_name != info.name:
                    continue
                try:
                    returned = impl.function()
                    # Reading what it returned runs plugin code too (a generator, say).
                    items.extend(_checked_items(kind, hook_name, returned, info))
                except (Exception, SystemExit) as error:
                    # The other hooks are still asked, to know what the plugin would give.
                    failure = failure or _PluginFailed(
                        f"hook {hook_name} raised {type(error).__name__}: {error}", error)
        if failure is not None:
            failure.items = items
            raise failure
    except _PluginFailed:
        manager.unregister(name=info.name)
        raise
    except (Exception, SystemExit) as error:
        manager.unregister(name=info.name)
        raise _PluginFailed(f"cannot be inspected: {type(error).__name__}: {error}",
                            error) from None
    return items


def _misspelled_hooks(manager: pluggy.PluginManager, plugin: Any, name: str) -> list[str]:
    """Report hook implementations whose name matches no hook."""
    known = sorted(_KINDS)
    problems = []
    unknown_impls = set()
    for hook_name in dir(manager.hook):
        caller = getattr(manager.hook, hook_name, None)
        if not isinstance(caller, pluggy.HookCaller) or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin_name == name and not impl.optionalhook:
                unknown_impls.add(hook_name)
    for attribute in sorted(dir(plugin)):
        if not attribute.startswith("graphpass_"):
            continue
        value = getattr(plugin, attribute, None)
        if not callable(value):
            continue
        marked = manager.parse_hookimpl_opts(plugin, attribute) is not None
        if attribute in known and not marked:
            problems.append(f"{attribute} is not decorated with @hookimpl "
                            "(from graphpass.plugins import hookimpl), so it is never called")
        elif attribute not in known and (marked or attribute in unknown_impls):
            close = difflib.get_close_matches(attribute, known, n=1, cutoff=0.6)
            suggestion = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"hook {attribute!r} is not a graphpass hook, ignored"
                            f"{suggestion}")
    return problems


def _checked_items(kind: str, hook_name: str, returned: Any,
                   info: PluginInfo) -> list[tuple[str, str, Any]]:
    if returned is None:
        return []
    if isinstance(returned, (str, bytes, dict)) or not isinstance(returned, Iterable):
        info.warnings.append(f"{hook_name} returned {type(returned).__name__}, not a list; "
                             "ignored")
        return []
    items: list[tuple[str, str, Any]] = []
    for given in list(returned):
        item = given
        if hook_name == "graphpass_rewrite_rules":
            if not isinstance(given, RewriteRules):
                info.warnings.append(f"{hook_name} gave {_short_repr(given)}: not a "
                                     "graphpass.RewriteRules; skipped")
                continue
            try:
                item = given.as_pass()
            except PluginError as error:
                info.warnings.append(f"{hook_name} gave rewrite rules {given.name!r} that "
                                     f"cannot be used: {error.message}; skipped")
                continue
        problem = _item_problem(kind, item)
        if problem is not None:
            info.warnings.append(f"{hook_name} gave {_short_repr(item)}: {problem}; skipped")
            name = _plain_name(item)
            if name is not None:
                info.withheld.setdefault(kind, {})[name] = problem
            continue
        items.append((kind, item.name, item))
    return items


def _plain_name(item: Any) -> str | None:
    """The name an item says it has, if reading it is harmless and gives a string."""
    try:
        name = item.__dict__.get("name") if isinstance(item, type) else getattr(item, "name",
                                                                                None)
    except Exception:  # a hostile item: its name is not worth knowing
        return None
    return name if isinstance(name, str) and name else None


def _item_problem(kind: str, item: Any) -> str | None:
    if kind == "passes":
        if not (isinstance(item, type) and issubclass(item, Pass)):
            return "not a graphpass.Pass subclass"
        name = getattr(item, "name", "")
        if not isinstance(name, str) or not name:
            return "the pass has no name (set the class attribute `name`)"
        if not _PASS_NAME.match(name):
            dashed = "-".join(part for part in re.split(r"[^a-z0-9]+", name.lower()) if part)
            return (f"{name!r} is not a usable pass name: pass names are lowercase words "
                    "joined by dashes" + (f" (e.g. {dashed!r})" if dashed else ""))
        for attribute in ("requires", "after", "before"):
            value = getattr(item, attribute, ())
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                return f"`{attribute}` must be a list of pass names"
        if not isinstance(getattr(item, "description", ""), str):
            return "`description` must be a string"
        options = getattr(item, "Options", None)
        if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
            return "`Options` must be a dataclass (graphpass.framework.NoOptions for none)"
        return None
    if kind == "gradient_builders":  # graphpass.training.GradientBuilder (a layer above)
        if not (isinstance(getattr(item, "op_type", None), str)
                and callable(getattr(item, "build", None))
                and callable(getattr(item, "covers", None))):
            return "not a graphpass.training.GradientBuilder"
        return None
    if kind == "pipelines":
        if not isinstance(item, Pipeline):
            return "not a graphpass.Pipeline"
        return None if item.name else "the pipeline has no name"
    name = getattr(item, "name", None)
    if not isinstance(name, str) or not name:
        return "it has no `name`"
    return None


def _short_repr(item: Any) -> str:
    text = item.__qualname__ if isinstance(item, type) else repr(item)
    return text if len(text) <= 80 else text[:77] + "..."


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


_DEFAULT: Registry | None = None


def default_registry(*, disable: Iterable[str] = (), strict: bool = False,
                     reload: bool = False) -> Registry:
    """Return the registry built from the built-in plugin and installed plugins.

    Built once and kept (unless ``disable`` or ``strict`` ask for another one).

    Args:
        disable: Plugin names to switch off (added to ``GRAPHPASS_DISABLE_PLUGINS``).
        strict: Make a plugin that fails to load an error instead of a skipped plugin.
        reload: Build it again even if it was built before (with these arguments).

    Raises:
        PluginError: With ``strict``, a plugin that fails or two plugins that give the
            same name.
    """
    global _DEFAULT
    disable = tuple(disable)
    if _DEFAULT is None or reload or disable or strict:
        registry = build_registry(disable=disable, strict=strict)
        if not (disable or strict) or reload:
            _DEFAULT = registry
        return registry
    return _DEFAULT


def reset_default_registry() -> None:
    """Forget the cached default registry (plugins are loaded again on next use)."""
    global _DEFAULT
    _DEFAULT = None
