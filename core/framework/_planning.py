"""Planning: from what the user asked for to the order passes run in.

The user names passes and presets (or gives pass classes and instances). Planning

1. expands presets into their passes, in order;
2. adds every pass a planned pass ``requires``, transitively;
3. drops the passes the user disabled;
4. sorts the passes topologically on a networkx graph whose edges come from
   ``requires`` (always) and ``after``/``before`` (only between planned passes),
   using the order in which passes were first mentioned as the tie-break;
5. checks each pass's options.

Every problem (an unknown name, a cycle, a bad option) is a
:class:`~graphpass.PipelineError` raised before any pass runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from graphpass.errors import PipelineError
from graphpass.framework._pass_base import Pass
from graphpass.framework._pipeline import Pipeline, split_option_path

if TYPE_CHECKING:
    import networkx

    from graphpass.framework._registry import Registry

__all__ = ["PassSpec", "PlannedPass", "plan_passes", "unknown_order_names"]

PassSpec: TypeAlias = "str | type[Pass] | Pass | Pipeline"
"""What a user can put in a pass list: a pass or preset name, a pass class, a pass
instance, or a :class:`~graphpass.Pipeline`."""


@dataclass(frozen=True)
class PlannedPass:
    """One pass of a plan.

    Attributes:
        name: The pass name.
        instance: The pass, with its validated options.
        plugin: The plugin that gave it (``"<user>"`` for classes given directly).
        requested: Whether the user asked for it (directly or through a preset).
        required_by: The planned passes whose ``requires`` pulled it in.
        preset: The preset that brought it in, if any.
        runs_after: The planned passes it must run after, in plan order, each with the
            declaration that says so: ``requires`` (it requires that pass), ``after``
            (its own ``after``) or ``before`` (that pass's ``before`` names it).
    """

    name: str
    instance: Pass
    plugin: str
    requested: bool = True
    required_by: tuple[str, ...] = ()
    preset: str | None = None
    runs_after: tuple[tuple[str, str], ...] = ()

    @property
    def analysis(self) -> bool:
        """Whether the pass only reports."""
        return bool(self.instance.analysis)


@dataclass
class _Entry:
    name: str
    pass_class: type[Pass]
    plugin: str
    instance: Pass | None = None
    requested: bool = False
    required_by: list[str] = field(default_factory=list)
    preset: str | None = None
    options: dict[str, Any] | None = None
    options_object: Any = None


USER_PLUGIN = "<user>"
"""The plugin name credited to pass classes and instances given directly."""


def plan_passes(
    requested: Iterable[PassSpec] | PassSpec,
    options: Mapping[str, Any] | None,
    registry: Registry,
    *,
    has_checkpoint: bool = False,
    disable: Iterable[str] = (),
) -> list[PlannedPass]:
    """Resolve what the user asked for into the passes to run, in order.

    Args:
        requested: Pass names, preset names, pass classes or instances, pipelines (one,
            or an iterable).
        options: Options by pass name: an ``Options`` instance or a mapping of option
            names to values. User options win over a preset's.
        registry: Where names are looked up.
        has_checkpoint: Whether a checkpoint is given (decides conditional preset steps).
        disable: Pass names to leave out.

    Returns:
        The plan, in the order the passes run.

    Raises:
        PipelineError: An unknown pass or preset, options for an unknown pass, a
            disabled pass another pass requires, a dependency cycle, a bad option.
    """
    items: list[Any] = (
        [requested] if isinstance(requested, (str, type)) or not isinstance(requested, Iterable)
        else list(requested))
    user_options = dict(options or {})
    entries: dict[str, _Entry] = {}
    mention: list[str] = []
    given: dict[str, _Entry] = {}

    # Pass classes and instances given directly take precedence over registered names.
    for item in items:
        if isinstance(item, Pass):
            entry = _Entry(_name_of(type(item)), type(item), _plugin_of(registry, type(item)),
                           instance=item)
            given[entry.name] = entry
        elif isinstance(item, type) and issubclass(item, Pass):
            given[_name_of(item)] = _Entry(_name_of(item), item, _plugin_of(registry, item))

    def lookup(name: str, wanted_by: str | None) -> _Entry:
        if name in entries:
            return entries[name]
        if name in given:
            entry = given[name]
        elif name in registry.passes:
            registered = registry.passes[name]
            entry = _Entry(name, registered.item, registered.plugin)
        else:
            known = [*registry.passes, *given]
            if wanted_by is not None:
                raise registry.missing_error(
                    "passes", name, f"pass {wanted_by!r} requires unknown pass {name!r}",
                    _did_you_mean(name, known) or "install the plugin that provides it")
            if registry.unavailable("passes", name) is None:
                explained = registry.unavailable("pipelines", name)
                if explained is not None:
                    raise explained
            raise registry.missing_error(
                "passes", name, f"unknown pass or pipeline {name!r}",
                _did_you_mean(name, [*known, *registry.pipelines])
                or "see `graphpass passes` for the passes available")
        entries[name] = entry
        return entry

    def visit(name: str, wanted_by: str | None, stack: tuple[str, ...]) -> None:
        entry = lookup(name, wanted_by)
        if wanted_by is not None and wanted_by not in entry.required_by:
            entry.required_by.append(wanted_by)
        if name in mention:
            return
        if name in stack:  # a requires-cycle: reported with the full cycle below
            return
        for required in _names(entry.pass_class, "requires"):
            visit(required, name, (*stack, name))
        mention.append(name)  # the visits above stop at it: it is on their stack

    def request(name: str, preset: str | None, preset_options: Mapping[str, Any]) -> None:
        entry = lookup(name, None)
        entry.requested = True
        if entry.preset is None:
            entry.preset = preset
        if preset_options:
            merged = {**preset_options, **(entry.options or {})}
            if entry.options is not None and any(
                    entry.options.get(k, v) != v for k, v in preset_options.items()):
                raise PipelineError(
                    f"pass {name!r} is planned twice with different options",
                    hint="a pass runs once per plan; give its options once")
            entry.options = merged
        visit(name, None, ())

    expanded: list[Pipeline] = []
    for item in items:
        if isinstance(item, Pipeline):
            _expand(item, request, has_checkpoint)
            expanded.append(item)
        elif isinstance(item, str):
            if item in registry.passes or item in given:
                request(item, None, {})
            elif item in registry.pipelines:
                pipeline = registry.pipeline(item)
                if not isinstance(pipeline, Pipeline):
                    raise PipelineError(f"pipeline {item!r} is not a graphpass.Pipeline")
                _expand(pipeline, request, has_checkpoint)
                expanded.append(pipeline)
            else:
                lookup(item, None)  # raises with a suggestion
        elif isinstance(item, Pass) or (isinstance(item, type) and issubclass(item, Pass)):
            request(_name_of(item if isinstance(item, type) else type(item)), None, {})
        else:
            raise PipelineError(
                f"cannot plan {item!r}: give pass names, pipeline names, Pass classes, Pass "
                "instances or Pipeline objects")

    _apply_preset_defaults(entries, expanded)
    _apply_user_options(entries, user_options, registry, given)
    _apply_shared_options(entries, expanded)
    _drop_disabled(entries, mention, set(disable), registry, given)
    order, graph = _sort(entries, mention)
    position = {name: index for index, name in enumerate(order)}
    return [_finish(entries[name], _runs_after(graph, name, position)) for name in order]


def unknown_order_names(pass_class: type[Pass], known: Collection[str]
                        ) -> list[tuple[str, str, str | None]]:
    """The names in a pass's ``after`` and ``before`` that no known pass has.

    Such a name orders nothing. Usually it is a pass of a plugin that is not installed;
    a name close to a known one is more likely a typo.

    Args:
        pass_class: The pass.
        known: The pass names some plugin gives.

    Returns:
        ``(attribute, name, closest known name or None)`` for each unknown name.
    """
    choices = sorted(set(known))
    found = []
    for attribute in ("after", "before"):
        for name in _names(pass_class, attribute):
            if name in known:
                continue
            close = difflib.get_close_matches(name, choices, n=1, cutoff=0.8)
            found.append((attribute, name, close[0] if close else None))
    return found


def _expand(pipeline: Pipeline, request: Any, has_checkpoint: bool) -> None:
    for name, step_options in pipeline.steps(has_checkpoint=has_checkpoint):
        request(name, pipeline.name, step_options)


def _apply_preset_defaults(entries: dict[str, _Entry], presets: Sequence[Pipeline]) -> None:
    """A preset's options for passes that are not its steps, when they are planned anyway.

    They go under the options the pass already has, and under the user's (applied next).
    """
    for preset in presets:
        steps = set(preset.pass_names)
        for name, values in preset.options.items():
            entry = entries.get(name)
            if name in steps or entry is None or entry.instance is not None:
                continue
            entry.options = {**values, **(entry.options or {})}


def _apply_shared_options(entries: dict[str, _Entry], presets: Sequence[Pipeline]) -> None:
    """A preset's ``share``: an option one planned pass has, copied to another that lacks it."""
    for preset in presets:
        for source, target in preset.share:
            (from_pass, from_option), (to_pass, to_option) = map(split_option_path,
                                                                 (source, target))
            giver, taker = entries.get(from_pass), entries.get(to_pass)
            if (giver is None or taker is None or taker.instance is not None
                    or taker.options_object is not None
                    or from_option not in (giver.options or {})
                    or to_option in (taker.options or {})):
                continue
            assert giver.options is not None
            taker.options = {**(taker.options or {}), to_option: giver.options[from_option]}


def _apply_user_options(entries: dict[str, _Entry], options: dict[str, Any],
                        registry: Registry, given: Mapping[str, _Entry]) -> None:
    for name, value in options.items():
        entry = entries.get(name)
        if entry is None:
            if (name in registry.passes or name in given
                    or registry.unavailable("passes", name) is not None):
                continue  # a known pass that is not planned (e.g. a skipped preset step)
            raise PipelineError(f"options given for unknown pass {name!r}",
                                hint=_did_you_mean(name, [*registry.passes, *given])
                                or "see `graphpass passes` for the passes available")
        if entry.instance is not None:
            raise PipelineError(
                f"options given for pass {name!r}, which was given as an instance",
                hint="give the options when creating the instance, or pass the class")
        if isinstance(value, entry.pass_class.Options):
            entry.options_object = value
        elif isinstance(value, Mapping):
            entry.options = {**(entry.options or {}), **value}
        else:
            raise PipelineError(
                f"options of pass {name!r} must be a table of option names to values or a "
                f"{entry.pass_class.__name__}.Options instance, not {type(value).__name__}")


def _drop_disabled(entries: dict[str, _Entry], mention: list[str], disable: set[str],
                   registry: Registry, given: Mapping[str, _Entry]) -> None:
    for name in sorted(disable):
        if (name not in registry.passes and name not in given
                and registry.unavailable("passes", name) is None):
            raise PipelineError(f"cannot disable unknown pass {name!r}",
                                hint=_did_you_mean(name, [*registry.passes, *given])
                                or "see `graphpass passes` for the passes available")
    for name in list(entries):
        if name not in disable:
            continue
        needing = [other for other in entries
                   if other not in disable and name in _names(entries[other].pass_class,
                                                                "requires")]
        if needing:
            raise PipelineError(
                f"pass {name!r} is disabled, but {_join(needing)} require"
                f"{'s' if len(needing) == 1 else ''} it",
                hint="disable those passes too, or do not disable this one")
        del entries[name]
        mention.remove(name)


def _sort(entries: dict[str, _Entry], mention: list[str]
          ) -> tuple[list[str], networkx.DiGraph]:
    import networkx as nx  # imported when a plan is made, not with graphpass

    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(mention)
    for name in mention:
        pass_class = entries[name].pass_class
        for required in _names(pass_class, "requires"):
            _add_edge(graph, required, name, f"{name} requires {required}", "requires")
        for earlier in _names(pass_class, "after"):
            if earlier in entries:
                _add_edge(graph, earlier, name, f"{name} runs after {earlier}", "after")
        for later in _names(pass_class, "before"):
            if later in entries:
                _add_edge(graph, name, later, f"{name} runs before {later}", "before")
    if not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        path = " -> ".join([edge[0] for edge in cycle] + [cycle[0][0]])
        reasons = "; ".join(sorted({graph.edges[edge[0], edge[1]]["reason"] for edge in cycle}))
        raise PipelineError(f"the passes form a cycle: {path} ({reasons})",
                            hint="remove one of these requires/after/before declarations, "
                                 "or leave one of the passes out")
    index = {name: position for position, name in enumerate(mention)}
    return list(nx.lexicographical_topological_sort(graph, key=index.__getitem__)), graph


def _add_edge(graph: networkx.DiGraph, first: str, then: str, reason: str,
              because: str) -> None:
    if graph.has_edge(first, then):
        graph.edges[first, then]["reason"] += f"; {reason}"
        graph.edges[first, then]["because"].append(because)
    else:
        graph.add_edge(first, then, reason=reason, because=[because])


def _runs_after(graph: networkx.DiGraph, name: str, position: Mapping[str, int]
                ) -> tuple[tuple[str, str], ...]:
    """The passes ``name`` is ordered after, each once with its first declaration."""
    earlier = sorted(graph.predecessors(name), key=position.__getitem__)
    return tuple((other, graph.edges[other, name]["because"][0]) for other in earlier)


def _finish(entry: _Entry, runs_after: tuple[tuple[str, str], ...]) -> PlannedPass:
    instance = entry.instance
    if instance is None:
        options = entry.options_object
        if options is None:
            try:
                instance = entry.pass_class(entry.options or {})
            except PipelineError:
                raise
            except Exception as error:
                raise PipelineError(
                    f"cannot create pass {entry.name!r} (plugin {entry.plugin!r}): "
                    f"{type(error).__name__}: {error}") from error
        else:
            instance = entry.pass_class(options)
    return PlannedPass(entry.name, instance, entry.plugin, entry.requested,
                       tuple(entry.required_by), entry.preset, runs_after)


def _names(pass_class: type[Pass], attribute: str) -> tuple[str, ...]:
    value = getattr(pass_class, attribute, ())
    if isinstance(value, str):
        return (value,)
    return tuple(value or ())


def _name_of(pass_class: type[Pass]) -> str:
    name = getattr(pass_class, "name", "")
    if not isinstance(name, str) or not name:
        raise PipelineError(f"pass class {pass_class.__qualname__} has no name",
                            hint="set the class attribute `name`, e.g. name = 'my-pass'")
    return str(name)


def _plugin_of(registry: Registry, pass_class: type[Pass]) -> str:
    registered = registry.passes.get(getattr(pass_class, "name", ""))
    if registered is not None and registered.item is pass_class:
        return str(registered.plugin)
    return USER_PLUGIN


def _did_you_mean(name: str, known: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    if not close:
        return None
    return "did you mean " + " or ".join(repr(c) for c in close) + "?"


def _join(names: Sequence[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
