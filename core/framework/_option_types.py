"""Checking an option's value against its declared type, strictly.

Values come from TOML (pipeline files, ``-O PASS.OPTION=VALUE``) or from Python. A
value is taken only when it already is what the type says; nothing that merely looks
like one is converted: a boolean option takes ``true`` or ``false`` (not ``"no"``,
``"off"``, ``0`` or ``1.0``), an integer option takes no ``3.0`` and no ``"3"``, a
string option takes no number. The conversions that lose nothing are made: an
integer where a number (float) is expected, a string where a path is expected, a
tuple from Python where a list is expected.

A refused value raises :class:`OptionValueError` with what was expected, the value
as TOML writes it (:func:`toml_text`) and a hint saying how to write it. Types this
module does not know (a dataclass, an enum, a class of a plugin's own) are handed to
pydantic in strict mode.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

__all__ = ["OptionValueError", "check_value", "describe_type", "toml_text"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class OptionValueError(ValueError):
    """A value that does not have an option's type.

    Attributes:
        expected: What the option takes, in words (``true or false``, ``an integer``).
        hint: How to write a value it takes.
        path: Where inside the value the problem is (``item 2``, ``key 'a'``), if inside.
    """

    def __init__(self, expected: str, hint: str, path: str = ""):
        super().__init__(f"must be {expected}" + (f" ({path})" if path else ""))
        self.expected = expected
        self.hint = hint
        self.path = path


def describe_type(annotation: Any) -> str:
    """A readable name for an option's type (``list of string``, ``one of "a", "b"``)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(toml_text(a) for a in args)
    if origin in (list, Sequence, tuple, set, frozenset) and args:
        return f"list of {describe_type(args[0])}"
    if origin in (dict, Mapping) and len(args) == 2:
        return f"table of {describe_type(args[0])} to {describe_type(args[1])}"
    if origin in (typing.Union, types.UnionType):
        names = [describe_type(a) for a in args if a is not type(None)]
        text = " or ".join(names)
        return f"{text} (optional)" if type(None) in args else text
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
                "Path": "path"}.get(annotation.__name__, annotation.__name__)
    return str(annotation)


def toml_text(value: Any) -> str:
    """``value`` as TOML writes it: ``"no"``, ``true``, ``1.0``, ``["a", 2]``, ``{ a = 1 }``.

    Values TOML has no way to write are shown as Python writes them (``None``).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, PurePath):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = ", ".join(f"{_toml_key(k)} = {toml_text(v)}" for k, v in value.items())
        return "{ " + items + " }"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    return repr(value)


def _toml_key(key: Any) -> str:
    text = str(key)
    return text if _BARE_KEY.match(text) else json.dumps(text, ensure_ascii=False)


def check_value(annotation: Any, value: Any) -> Any:
    """``value`` if it has type ``annotation`` (converted only where nothing is lost).

    Raises:
        OptionValueError: It does not.
    """
    if annotation is Any or annotation is object:
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return check_value(args[0], value)
    if origin in (typing.Union, types.UnionType):
        return _union(annotation, args, value)
    if origin is typing.Literal:
        for allowed in args:
            if value == allowed and type(value) is type(allowed):
                return value
        choices = ", ".join(toml_text(a) for a in args)
        raise OptionValueError(f"one of {choices}", f"write one of {choices}")
    if origin in (list, tuple, set, frozenset, Sequence) or annotation in (list, tuple):
        return _sequence(origin or annotation, args, value)
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return _mapping(args, value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise OptionValueError("true or false", _bool_hint(value))
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise OptionValueError("an integer", _integer_hint(value))
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise OptionValueError("a number", _number_hint(value))
    if annotation is str:
        if isinstance(value, str):
            return value
        raise OptionValueError("a string", 'write the text in quotes, e.g. "' +
                               str(toml_text(value)).strip('"') + '"')
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        if isinstance(value, (str, PurePath)):
            return annotation(value)
        raise OptionValueError("a path", 'write the path in quotes, e.g. "data/model.onnx"')
    if isinstance(annotation, type) and isinstance(value, annotation) and not (
            dataclasses.is_dataclass(annotation) or issubclass(annotation, enum.Enum)):
        return value
    return _with_pydantic(annotation, value)


def _union(annotation: Any, args: tuple[Any, ...], value: Any) -> Any:
    if value is None and type(None) in args:
        return None
    members = [a for a in args if a is not type(None)]
    refusals = []
    for member in members:
        try:
            return check_value(member, value)
        except OptionValueError as refused:
            refusals.append(refused)
    expected = " or ".join(r.expected for r in refusals)
    hint = "; or ".join(dict.fromkeys(r.hint for r in refusals))
    if type(None) in args:
        hint += "; to keep the default, leave the option out"
    raise OptionValueError(expected or describe_type(annotation), hint)


def _sequence(origin: Any, args: tuple[Any, ...], value: Any) -> Any:
    item_type = args[0] if args else Any
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item_type = args[0]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(
            value, (list, tuple, set, frozenset)):
        example = toml_text([value]) if isinstance(value, (str, int, float)) else '["a", "b"]'
        raise OptionValueError(f"a list of {describe_type(item_type)}",
                               f"write a list in brackets, e.g. {example}")
    checked = []
    for position, item in enumerate(value, start=1):
        try:
            checked.append(check_value(item_type, item))
        except OptionValueError as refused:
            raise OptionValueError(
                f"a list of {describe_type(item_type)}",
                f"item {position} is {toml_text(item)}: {refused.hint}",
                f"item {position}") from None
    if origin in (set, frozenset):
        return origin(checked)
    if origin is tuple:
        return tuple(checked)
    return checked


def _mapping(args: tuple[Any, ...], value: Any) -> dict[Any, Any]:
    key_type, value_type = args if len(args) == 2 else (Any, Any)
    if not isinstance(value, Mapping):
        raise OptionValueError(f"a table of {describe_type(value_type)}",
                               'write a table, e.g. { name = "value" } (or a [table] of '
                               "its own in a pipeline file)")
    checked = {}
    for key, item in value.items():
        try:
            checked_key = check_value(key_type, key)
            checked[checked_key] = check_value(value_type, item)
        except OptionValueError as refused:
            raise OptionValueError(
                f"a table of {describe_type(value_type)}",
                f"key {_toml_key(key)} is {toml_text(item)}: {refused.hint}",
                f"key {_toml_key(key)}") from None
    return checked


def _bool_hint(value: Any) -> str:
    """How to write a boolean, for a value that is not one (quotes only when it had some)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return "write true or false without quotes"
    if isinstance(value, str):
        return "write true or false (yes/no, on/off and the like are not booleans here)"
    if isinstance(value, (int, float)):
        return "write true or false (a number is not a boolean here)"
    return "write true or false"


def _integer_hint(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"write {int(value)}, not {toml_text(value)}: a whole number has no decimal point"
    if isinstance(value, str):
        return "write a whole number without quotes, e.g. 3"
    return "write a whole number, e.g. 3"


def _number_hint(value: Any) -> str:
    if isinstance(value, str):
        return "write a number without quotes, e.g. 0.5"
    return "write a number, e.g. 0.5"


def _with_pydantic(annotation: Any, value: Any) -> Any:
    """Check a type this module does not know with pydantic (strict mode).

    pydantic is imported here only, so a run that sets no such option never loads it.
    """
    import pydantic

    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
            annotation, config=pydantic.ConfigDict(strict=True))
    except pydantic.PydanticUserError:  # a class that sets a config of its own
        adapter = pydantic.TypeAdapter(annotation)
    try:
        return adapter.validate_python(value, strict=True)
    except pydantic.ValidationError:
        name = describe_type(annotation)
        raise OptionValueError(f"a {name}" if not name.startswith(("a ", "an ")) else name,
                               "see `graphpass passes` for what the option takes") from None
