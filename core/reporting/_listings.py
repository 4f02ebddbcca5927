"""What ``graphpass passes``, ``plan`` and ``plugins`` print (as tables or JSON data)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from graphpass.framework import (
    KIND_WORDS,
    Pass,
    PlannedPass,
    Registry,
    describe_type,
    option_fields,
    toml_text,
    unknown_order_names,
)
from graphpass.reporting._tables import print_trimmed

__all__ = ["clashes_data", "describe_options", "passes_data", "pipelines_data", "plan_data",
           "plugins_data", "print_passes", "print_plan", "print_plugins"]


def describe_options(pass_class: type[Pass]) -> list[dict[str, Any]]:
    """Each option of a pass: ``name`` (as written in files), ``type`` and ``default``."""
    fields = option_fields(pass_class)
    if not fields:
        return []
    try:
        hints = typing.get_type_hints(pass_class.Options)
    except Exception:  # an unresolvable annotation in a plugin: show it as written
        hints = {}
    described = []
    for option in fields:
        if option.default is not dataclasses.MISSING:
            default = option.default
        elif option.default_factory is not dataclasses.MISSING:
            default = option.default_factory()
        else:
            default = None
        described.append({"name": option.name.replace("_", "-"),
                          "type": describe_type(hints.get(option.name, option.type)),
                          "default": default})
    return described


def passes_data(registry: Registry) -> list[dict[str, Any]]:
    """Every registered pass as JSON-ready data.

    ``unknown_order`` lists the ``after``/``before`` names no plugin gives (they order
    nothing), each with the closest name that exists when one is close (a typo).
    """
    entries = []
    known = registry.known_names("passes")
    for name, entry in sorted(registry.passes.items()):
        pass_class = entry.item
        entries.append({
            "name": name,
            "plugin": entry.plugin,
            "kind": "analysis" if pass_class.analysis else "transform",
            "description": pass_class.description,
            "requires": list(pass_class.requires),
            "after": list(pass_class.after),
            "before": list(pass_class.before),
            "unknown_order": [{"attribute": attribute, "name": unknown, "did_you_mean": close}
                              for attribute, unknown, close
                              in unknown_order_names(pass_class, known)],
            "options": describe_options(pass_class),
        })
    return entries


def pipelines_data(registry: Registry) -> list[dict[str, Any]]:
    """Every registered pipeline preset as JSON-ready data."""
    return [{
        "name": name,
        "plugin": entry.plugin,
        "description": entry.item.description,
        "passes": [{"pass": step.pass_name, "when": step.when} for step in entry.item.passes],
    } for name, entry in sorted(registry.pipelines.items())]


def print_passes(registry: Registry, console: Console) -> None:
    """A table of passes: name, plugin, kind, description and options."""
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for column in ("pass", "plugin", "kind", "description / options"):
        table.add_column(column)
    for entry in passes_data(registry):
        text = Text(entry["description"])
        for option in entry["options"]:
            text.append(f"\n  {option['name']}", style="bold")
            default = ("not set" if option["default"] is None
                       else toml_text(option["default"]))
            text.append(f": {option['type']} = {default}", style="dim")
        for key in ("requires", "after", "before"):
            if entry[key]:
                text.append(f"\n  {key}: {', '.join(entry[key])}", style="dim")
        for unknown in entry["unknown_order"]:
            text.append(f"\n  {unknown['attribute']} {unknown['name']!r}: ", style="yellow")
            text.append(f"no such pass, did you mean {unknown['did_you_mean']!r}?"
                        if unknown["did_you_mean"] else "no installed plugin gives it",
                        style="yellow")
        table.add_row(entry["name"], entry["plugin"], entry["kind"], text)
    print_trimmed(console, table)
    _print_clashes(registry, console)
    if registry.pipelines:
        presets = Table(title="pipeline presets", title_justify="left", title_style="bold",
                        box=None, show_edge=False, pad_edge=False, header_style="bold")
        for column in ("preset", "plugin", "passes", "description"):
            presets.add_column(column)
        for preset in pipelines_data(registry):
            steps = ", ".join(step["pass"] + (" (with a checkpoint)" if step["when"] == "checkpoint"
                                              else "") for step in preset["passes"])
            presets.add_row(preset["name"], preset["plugin"], steps, preset["description"])
        console.print()
        print_trimmed(console, presets)


def plan_data(plan: Sequence[PlannedPass]) -> list[dict[str, Any]]:
    """A plan as JSON-ready data."""
    return [{
        "position": index,
        "name": planned.name,
        "plugin": planned.plugin,
        "kind": "analysis" if planned.analysis else "transform",
        "requested": planned.requested,
        "required_by": list(planned.required_by),
        "runs_after": [{"pass": other, "because": because}
                       for other, because in planned.runs_after],
        "preset": planned.preset,
        "options": _options_dict(planned.instance.options),
    } for index, planned in enumerate(plan, 1)]


def print_plan(plan: Sequence[PlannedPass], console: Console) -> None:
    """The order passes will run in, noting why each is there and runs where it does."""
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for column in ("#", "pass", "plugin", "kind", "why"):
        table.add_column(column)
    for entry in plan_data(plan):
        reasons = []
        if entry["requested"]:
            reasons.append(f"from preset {entry['preset']}" if entry["preset"] else "requested")
        if entry["required_by"]:
            reasons.append("required by " + ", ".join(entry["required_by"]))
        # Why it runs where it does (a pass it requires says "required by" itself).
        reasons.extend(f"after {earlier['pass']}" for earlier in entry["runs_after"]
                       if earlier["because"] != "requires")
        table.add_row(str(entry["position"]), entry["name"], entry["plugin"], entry["kind"],
                      "; ".join(reasons))
    print_trimmed(console, table)


def plugins_data(registry: Registry) -> list[dict[str, Any]]:
    """Every plugin seen, with status and what it gives, as JSON-ready data."""
    return [{
        "name": info.name,
        "version": info.version,
        "distribution": info.distribution,
        "status": info.status,
        "error": info.error,
        "warnings": list(info.warnings),
        "provides": {kind: list(names) for kind, names in info.provides.items()},
    } for info in registry.plugins]


def clashes_data(registry: Registry) -> list[dict[str, Any]]:
    """Every name two or more plugins give (none of them is used) as JSON-ready data."""
    return [{"kind": KIND_WORDS[kind], "name": name, "plugins": list(plugins)}
            for (kind, name), plugins in sorted(registry.clashes.items())]


def print_plugins(registry: Registry, console: Console) -> None:
    """A table of plugins: name, version, status, what each gives, problems."""
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for column in ("plugin", "version", "status", "gives / problems"):
        table.add_column(column)
    styles = {"active": "green", "disabled": "dim", "failed": "bold red"}
    for entry in plugins_data(registry):
        text = Text()
        for kind, names in entry["provides"].items():
            if text:
                text.append("\n")
            text.append(f"{kind.replace('_', ' ')}: {', '.join(names)}")
        if entry["status"] == "active" and not text and not entry["warnings"]:
            text.append("nothing here (a plugin may give passes only where what it needs is "
                        "installed)", style="dim")
        if entry["error"]:
            text.append(("\n" if text else "") + entry["error"], style="red")
        for warning in entry["warnings"]:
            text.append(("\n" if text else "") + f"warning: {warning}", style="yellow")
        for clash in _clashes_of(registry, entry["name"]):
            text.append(("\n" if text else "") + f"clash: {clash}", style="bold red")
        table.add_row(entry["name"], entry["version"],
                      Text(entry["status"], style=styles.get(entry["status"], "")), text)
    print_trimmed(console, table)
    for warning in registry.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"), soft_wrap=True)
    _print_clashes(registry, console)


def _clashes_of(registry: Registry, plugin: str) -> list[str]:
    """What ``plugin`` gives that other plugins give too, one line each."""
    lines = []
    for (kind, name), plugins in sorted(registry.clashes.items()):
        if plugin in plugins:
            others = ", ".join(repr(p) for p in plugins if p != plugin)
            lines.append(f"{KIND_WORDS[kind]} {name!r} is also given by {others}; neither "
                         "is used")
    return lines


def _print_clashes(registry: Registry, console: Console) -> None:
    for kind, name in sorted(registry.clashes):
        error = registry.unavailable(kind, name)
        text = f"clash: {error.message}" if error is not None else f"clash: {name!r}"
        console.print(Text(text, style="bold red"), soft_wrap=True)
        if error is not None and error.hint:
            console.print(Text(f"  hint: {error.hint}", style="dim"), soft_wrap=True)


def _options_dict(options: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return {k.replace("_", "-"): v for k, v in dataclasses.asdict(options).items()}
    return {}
