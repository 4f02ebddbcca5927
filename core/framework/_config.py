"""Pipeline files: passes, options, plugin switches and instruments in TOML.

```toml
[pipeline]
passes = ["inline-functions", "reconcile-initializers", "lint-gradients"]
checkpoints = ["model.safetensors"]     # relative to this file

[passes.reconcile-initializers]
strict = true

[plugins]
disable = ["experimental-fusions"]

[instrument]
verify-each = true

[presets.tidy]
description = "Clean up."
passes = ["remove-unused", { pass = "infer-shapes", when = "checkpoint" }]
```

:func:`load_pipeline_file` reads and checks the file's shape; :meth:`PipelineFile.check`
checks pass names and options against a registry. Every error is a
:class:`~graphpass.ConfigError` whose location is ``file:line`` and which names the
key. Relative paths (``checkpoints``, ``dump-dir``, and path options of passes, which
passes resolve through ``PassContext.resolve_path``) are relative to the file's folder.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from graphpass.errors import ConfigError, PipelineError
from graphpass.framework._pass_base import resolve_path, validate_options
from graphpass.framework._pipeline import Pipeline, PipelineStep, StepCondition
from graphpass.framework._registry import Registry
from graphpass.framework._verify import VerifyOptions

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["InstrumentSettings", "PipelineFile", "load_pipeline_file", "parse_value"]


@dataclass
class InstrumentSettings:
    """The ``[instrument]`` table.

    Attributes:
        verify_each: Run the ONNX checker after every transforming pass.
        time: Show per-pass timing in the text report.
        dump_after: Save the model after these passes.
        dump_dir: Where dumps go (relative paths: relative to the pipeline file).
        fixed_point: Repeat the plan until nothing changes.
        max_iterations: The most rounds of a fixed-point run.
        disable: Passes to leave out of the plan.
        verify: Semantic verification settings (``None``: off).
    """

    verify_each: bool = False
    time: bool = False
    dump_after: tuple[str, ...] = ()
    dump_dir: Path | None = None
    fixed_point: bool = False
    max_iterations: int = 10
    disable: tuple[str, ...] = ()
    verify: VerifyOptions | None = None


@dataclass
class PipelineFile:
    """A parsed pipeline file.

    Attributes:
        path: The file.
        passes: Pass and preset names to plan, in order (``preset`` first, if given).
        options: Options by pass name, as written.
        checkpoints: Checkpoint files, resolved against the file's folder.
        description: The pipeline's description.
        disable_plugins: Plugins to switch off.
        strict_plugins: Whether a broken plugin is an error.
        instruments: The ``[instrument]`` settings.
        presets: Presets defined in the file, by name.
        preset: The ``preset`` key of ``[pipeline]``, if given.
        label: The file as the user named it (used in messages).
    """

    path: Path
    passes: list[str] = field(default_factory=list)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoints: tuple[Path, ...] = ()
    description: str = ""
    disable_plugins: tuple[str, ...] = ()
    strict_plugins: bool = False
    instruments: InstrumentSettings = field(default_factory=InstrumentSettings)
    presets: dict[str, Pipeline] = field(default_factory=dict)
    preset: str | None = None
    label: str = ""
    _lines: _KeyLines | None = None

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in this file are resolved against."""
        return self.path.parent

    def where(self, *key: str, value: str | None = None) -> str:
        """``file:line`` of a key (or of the closest enclosing table).

        With ``value``, the line where that string stands inside the key's value (a
        list spread over several lines), when it can be found.
        """
        line = None
        if self._lines is not None:
            line = self._lines.value_line(key, value) if value is not None else None
            line = line or self._lines.line(key)
        return f"{self.label}:{line}" if line else self.label

    def error(self, key: Sequence[str], message: str, hint: str | None = None,
              value: str | None = None) -> ConfigError:
        """A :class:`ConfigError` located at ``key`` (and at ``value`` inside it, if given)."""
        return ConfigError(f"{_format_key(key)}: {message}", where=self.where(*key, value=value),
                           hint=hint)

    def check(self, registry: Registry) -> None:
        """Check pass and preset names and every option against ``registry``.

        That the checkpoints exist is checked with the run's other inputs, by
        :meth:`graphpass.RunSpec.check`.

        Raises:
            ConfigError: An unknown pass or preset (with a suggestion) or a bad option;
                located at the offending line and naming the key.
        """
        known = set(registry.passes) | set(registry.pipelines) | set(self.presets)
        for name in self.passes:
            key = ("pipeline", "preset") if name == self.preset else ("pipeline", "passes")
            if name not in known:
                explained = (registry.unavailable("passes", name)
                             or registry.unavailable("pipelines", name))
                if explained is not None:
                    raise self.error(key, explained.message, explained.hint, value=name)
                raise self.error(key, f"unknown pass or pipeline {name!r}",
                                 _suggest(name, known), value=name)
        for preset in self.presets.values():
            self._check_pass_names(("presets", preset.name, "passes"), preset.pass_names,
                                   registry)
        self._check_pass_names(("instrument", "disable"), self.instruments.disable, registry)
        self._check_pass_names(("instrument", "dump-after"), self.instruments.dump_after,
                               registry)
        for pass_name, options in self.options.items():
            self._check_options(("passes", pass_name), pass_name, options, registry)
        for preset in self.presets.values():
            for pass_name, preset_options in preset.options.items():
                self._check_options(("presets", preset.name, "options", pass_name), pass_name,
                                    preset_options, registry)

    def _check_pass_names(self, key: tuple[str, ...], names: Iterable[str],
                          registry: Registry) -> None:
        for name in names:
            if name not in registry.passes:
                explained = registry.unavailable("passes", name)
                if explained is not None:
                    raise self.error(key, explained.message, explained.hint, value=name)
                raise self.error(key, f"unknown pass {name!r}", _suggest(name, registry.passes),
                                 value=name)

    def _check_options(self, key: tuple[str, ...], pass_name: str, options: Mapping[str, Any],
                       registry: Registry) -> None:
        entry = registry.passes.get(pass_name)
        if entry is None:
            explained = registry.unavailable("passes", pass_name)
            if explained is not None:
                raise self.error(key, explained.message, explained.hint)
            raise self.error(key, f"unknown pass {pass_name!r}",
                             _suggest(pass_name, registry.passes))
        for option, value in options.items():
            try:
                validate_options(entry.item, {option: value}, python_names=False)
            except PipelineError as error:
                raise self.error((*key, option), error.message, error.hint) from None

    def requested(self) -> list[str | Pipeline]:
        """What to give :class:`~graphpass.PassManager`: names, and this file's presets."""
        return [self.presets.get(name, name) for name in self.passes]


def load_pipeline_file(path: str | Path) -> PipelineFile:
    """Read a pipeline file and check its shape (tables, keys, types).

    Names of passes and their options are checked later, against the plugins in use:
    see :meth:`PipelineFile.check`.

    Args:
        path: The ``.toml`` file.

    Raises:
        ConfigError: The file is missing or unreadable, is not valid TOML (with line
            and column), or has an unknown table or key (with a suggestion) or a value
            of the wrong type.
    """
    file_path = Path(path)
    try:
        text = file_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such pipeline file", where=str(file_path)) from None
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise ConfigError(f"cannot read the pipeline file ({reason})",
                          where=str(file_path)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _syntax_error(file_path, text, error) from None
    config = PipelineFile(file_path.absolute(), label=str(file_path), _lines=_KeyLines(text))
    _read(config, data)
    return config


def parse_value(text: str) -> Any:
    """Read an option value given on the command line: a TOML value, else a string.

    ``3`` is an integer, ``true`` a boolean, ``["a", "b"]`` a list, and anything that
    is not valid TOML (``fast``) the string itself.
    """
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


# ======================================================================= reading
_TOP = ("pipeline", "passes", "plugins", "instrument", "presets")
_PIPELINE_KEYS = ("passes", "preset", "description", "checkpoints")
_PLUGIN_KEYS = ("disable", "strict")
_PRESET_KEYS = ("description", "passes", "options")
_STEP_KEYS = ("pass", "when", "options")


def _read(config: PipelineFile, data: dict[str, Any]) -> None:
    _known_keys(config, (), data, _TOP)
    pipeline = _table(config, ("pipeline",), data.get("pipeline", {}))
    _known_keys(config, ("pipeline",), pipeline, _PIPELINE_KEYS)
    preset = pipeline.get("preset")
    if preset is not None:
        config.preset = _string(config, ("pipeline", "preset"), preset)
        config.passes.append(config.preset)
    config.passes.extend(_strings(config, ("pipeline", "passes"), pipeline.get("passes", [])))
    config.description = _string(config, ("pipeline", "description"),
                                  pipeline.get("description", ""))
    checkpoints = pipeline.get("checkpoints", [])
    if isinstance(checkpoints, str):
        checkpoints = [checkpoints]
    config.checkpoints = tuple(resolve_path(p, config.base_dir) for p in _strings(
        config, ("pipeline", "checkpoints"), checkpoints))

    passes = _table(config, ("passes",), data.get("passes", {}))
    for name, options in passes.items():
        config.options[name] = dict(_table(config, ("passes", name), options))

    plugins = _table(config, ("plugins",), data.get("plugins", {}))
    _known_keys(config, ("plugins",), plugins, _PLUGIN_KEYS)
    config.disable_plugins = tuple(_strings(config, ("plugins", "disable"),
                                            plugins.get("disable", [])))
    config.strict_plugins = _bool(config, ("plugins", "strict"), plugins.get("strict", False))

    instrument = _table(config, ("instrument",), data.get("instrument", {}))
    _known_keys(config, ("instrument",), instrument, tuple(_INSTRUMENT_KEYS))
    for key, value in instrument.items():
        _INSTRUMENT_KEYS[key](config, value)

    presets = _table(config, ("presets",), data.get("presets", {}))
    for name, table in presets.items():
        config.presets[name] = _preset(config, name, _table(config, ("presets", name), table))


def _preset(config: PipelineFile, name: str, table: dict[str, Any]) -> Pipeline:
    _known_keys(config, ("presets", name), table, _PRESET_KEYS)
    key = ("presets", name, "passes")
    raw_steps = table.get("passes", [])
    if not isinstance(raw_steps, list):
        raise config.error(key, f"must be a list, got {_type_name(raw_steps)}")
    steps: list[str | PipelineStep] = []
    for raw in raw_steps:
        if isinstance(raw, str):
            steps.append(raw)
            continue
        if not isinstance(raw, dict) or not isinstance(raw.get("pass"), str):
            raise config.error(key, f"a step must be a pass name or a table like "
                                    f'{{ pass = "name", when = "checkpoint" }}, got {raw!r}')
        _known_keys(config, key, raw, _STEP_KEYS)
        when = raw.get("when", "always")
        if when not in get_args(StepCondition):
            raise config.error(key, f"'when' must be \"always\" or \"checkpoint\", got {when!r}",
                               value=str(when))
        options = _table(config, key, raw.get("options", {}))
        steps.append(PipelineStep(raw["pass"], options, when))
    options_table = _table(config, ("presets", name, "options"), table.get("options", {}))
    options = {p: dict(_table(config, ("presets", name, "options", p), o))
               for p, o in options_table.items()}
    description = _string(config, ("presets", name, "description"), table.get("description", ""))
    return Pipeline(name, description, steps, options)


def _instrument_bool(attribute: str, key: str) -> Callable[[PipelineFile, Any], None]:
    def read(config: PipelineFile, value: Any) -> None:
        setattr(config.instruments, attribute, _bool(config, ("instrument", key), value))
    return read


def _read_dump_after(config: PipelineFile, value: Any) -> None:
    names = [value] if isinstance(value, str) else value
    config.instruments.dump_after = tuple(_strings(config, ("instrument", "dump-after"), names))


def _read_dump_dir(config: PipelineFile, value: Any) -> None:
    text = _string(config, ("instrument", "dump-dir"), value)
    config.instruments.dump_dir = resolve_path(text, config.base_dir)


def _read_max_iterations(config: PipelineFile, value: Any) -> None:
    config.instruments.max_iterations = _whole_number(config, ("instrument", "max-iterations"),
                                                      value, minimum=1)


def _read_disable(config: PipelineFile, value: Any) -> None:
    config.instruments.disable = tuple(_strings(config, ("instrument", "disable"), value))


_VERIFY_KEYS = ("inputs", "dims", "default-dim", "seed", "rtol", "atol", "each", "backend",
                "optional")
_VERIFY_BACKENDS = ("auto", "onnxruntime", "reference")


def _read_verify(config: PipelineFile, value: Any) -> None:
    """``verify = true`` or ``verify = { inputs = "feeds.npz", rtol = 1e-4, each = true }``."""
    key = ("instrument", "verify")
    if isinstance(value, bool):
        config.instruments.verify = VerifyOptions() if value else None
        return
    table = _table(config, key, value)
    _known_keys(config, key, table, _VERIFY_KEYS)
    options = VerifyOptions()
    if "inputs" in table:
        options.inputs = resolve_path(_string(config, (*key, "inputs"), table["inputs"]),
                                      config.base_dir)  # RunSpec.check: that it exists
    if "dims" in table:
        dims = _table(config, (*key, "dims"), table["dims"])
        options.dims = {str(name): _whole_number(config, (*key, "dims", name), size, minimum=1)
                        for name, size in dims.items()}
    for name, attribute in (("default-dim", "default_dim"), ("seed", "seed")):
        if name in table:
            setattr(options, attribute, _whole_number(config, (*key, name), table[name],
                                                      minimum=0))
    for name in ("rtol", "atol"):
        if name in table:
            number = table[name]
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
                raise config.error((*key, name), f"must be a number of at least 0, "
                                                 f"got {number!r}")
            setattr(options, name, float(number))
    for name in ("each", "optional"):
        if name in table:
            setattr(options, name, _bool(config, (*key, name), table[name]))
    if "backend" in table:
        backend = _string(config, (*key, "backend"), table["backend"])
        if backend not in _VERIFY_BACKENDS:
            raise config.error((*key, "backend"), f"must be one of "
                               f"{', '.join(map(repr, _VERIFY_BACKENDS))}, got {backend!r}")
        options.backend = backend
    config.instruments.verify = options


_INSTRUMENT_KEYS: dict[str, Callable[[PipelineFile, Any], None]] = {
    "verify": _read_verify,
    "verify-each": _instrument_bool("verify_each", "verify-each"),
    "time": _instrument_bool("time", "time"),
    "dump-after": _read_dump_after,
    "dump-dir": _read_dump_dir,
    "fixed-point": _instrument_bool("fixed_point", "fixed-point"),
    "max-iterations": _read_max_iterations,
    "disable": _read_disable,
}
"""The keys of ``[instrument]`` and how each is read (add new instruments here)."""


# ================================================================== type checks
def _known_keys(config: PipelineFile, key: tuple[str, ...], table: Mapping[str, Any],
                allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    for name in table:
        if name not in allowed:
            what = "table" if not key else "key"
            close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else (
                "allowed: " + ", ".join(allowed))
            raise config.error((*key, name), f"unknown {what} {name!r}", hint)


def _table(config: PipelineFile, key: tuple[str, ...], value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise config.error(key, f"must be a table, got {_type_name(value)}")
    return value


def _string(config: PipelineFile, key: tuple[str, ...], value: Any) -> str:
    if not isinstance(value, str):
        raise config.error(key, f"must be a string, got {_type_name(value)}")
    return value


def _strings(config: PipelineFile, key: tuple[str, ...], value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise config.error(key, f"must be a list of strings, got {_type_name(value)}"
                           + (f" {value!r}" if isinstance(value, list) else ""))
    return value


def _whole_number(config: PipelineFile, key: tuple[str, ...], value: Any, *,
                  minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        at_least = f" of at least {minimum}" if minimum else ""
        raise config.error(key, f"must be a whole number{at_least}, got {value!r}")
    return value


def _bool(config: PipelineFile, key: tuple[str, ...], value: Any) -> bool:
    if not isinstance(value, bool):
        raise config.error(key, f"must be true or false, got {value!r}")
    return value


def _type_name(value: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else "see `graphpass passes` for the names"


def _format_key(key: Sequence[str]) -> str:
    if not key:
        return "file"
    parts = [part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"' for part in key]
    return "key " + ".".join(parts)


# ================================================================ line numbers
_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_KEY = re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=")
_KEY_PART = re.compile(_PART)


class _KeyLines:
    """Where tables and keys are in a TOML text (tomllib does not say)."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.tables: dict[tuple[str, ...], int] = {}
        self.keys: dict[tuple[str, ...], int] = {}
        current: tuple[str, ...] = ()
        depth = 0  # inside a multi-line array
        for number, line in enumerate(self.lines, 1):
            value = line
            if depth == 0:
                header = _HEADER.match(line)
                if header:
                    current = _split_key(header.group(1))
                    self.tables.setdefault(current, number)
                    continue
                key = _KEY.match(line)
                if key:
                    self.keys.setdefault((*current, *_split_key(key.group(1))), number)
                    value = line[key.end():]
            depth = max(0, depth + _bracket_balance(value))

    def line(self, key: tuple[str, ...]) -> int | None:
        """The line of ``key``, or of the closest enclosing key or table."""
        for length in range(len(key), 0, -1):
            prefix = key[:length]
            if prefix in self.keys:
                return self.keys[prefix]
            if prefix in self.tables:
                return self.tables[prefix]
        return None

    def value_line(self, key: tuple[str, ...], value: str) -> int | None:
        """The line where the string ``value`` appears in the value of ``key``."""
        start = self.keys.get(key)
        if start is None:
            return None
        depth = 0
        for number in range(start, len(self.lines) + 1):
            text = self.lines[number - 1]
            if number == start:
                text = text.split("=", 1)[1] if "=" in text else text
            if f'"{value}"' in text or f"'{value}'" in text:
                return number
            depth += _bracket_balance(text)
            if depth <= 0:
                return None
        return None


def _split_key(text: str) -> tuple[str, ...]:
    return tuple(part.strip("\"'") for part in _KEY_PART.findall(text))


def _bracket_balance(text: str) -> int:
    balance = 0
    quote: str | None = None
    for char in text:
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            break
        elif char in "[{":
            balance += 1
        elif char in "]}":
            balance -= 1
    return balance


def _syntax_error(path: Path, text: str, error: Exception) -> ConfigError:
    message = str(error)
    match = re.search(r"\(at line (\d+), column (\d+)\)", message)
    lines = text.splitlines()
    if match:
        line, column = int(match.group(1)), int(match.group(2))
    else:
        line, column = max(len(lines), 1), 0
    reason = re.sub(r"\s*\(at [^)]*\)", "", message)
    duplicate = _duplicate_key(lines) if "overwrite" in reason else None
    if duplicate is not None:
        line, key = duplicate
        return ConfigError(f"invalid TOML: key {key} is defined twice",
                           where=f"{path}:{line}", hint="give each key once")
    key_match = _KEY.match(lines[line - 1]) if 0 < line <= len(lines) else None
    key_text = ""
    if key_match:
        table: tuple[str, ...] = ()
        for previous in lines[:line - 1]:
            header = _HEADER.match(previous)
            if header:
                table = _split_key(header.group(1))
        key_text = f" in key {'.'.join((*table, *_split_key(key_match.group(1))))}"
    where = f"{path}:{line}" + (f":{column}" if column else "")
    return ConfigError(f"invalid TOML{key_text}: {reason}", where=where,
                       hint="see https://toml.io for the syntax")


def _duplicate_key(lines: list[str]) -> tuple[int, str] | None:
    seen: set[tuple[str, ...]] = set()
    tables: set[tuple[str, ...]] = set()
    current: tuple[str, ...] = ()
    for number, line in enumerate(lines, 1):
        header = _HEADER.match(line)
        if header:
            current = _split_key(header.group(1))
            if current in tables:
                return number, ".".join(current)
            tables.add(current)
            continue
        key = _KEY.match(line)
        if key:
            full = (*current, *_split_key(key.group(1)))
            if full in seen:
                return number, ".".join(full)
            seen.add(full)
    return None

