"""What the ecosystem's passes look like, written down so a start need not import them.

Discovering the passes means importing ``onnx_ir`` (and with it sympy) and
``onnxscript``: about half a second that every ``graphpass`` command would pay,
whether it runs one of these passes or not. So the description of every pass (its
name, summary, documentation and options) is kept in :mod:`._snapshot`, written by
this module for the onnx_ir and onnxscript versions named there. When the installed
versions are those, the pass classes are built from the snapshot and the libraries
are imported only when one of their passes runs; otherwise they are discovered live,
as before. Both ways build the classes with the same function from the same
description, and ``tests/test_ecosystem_catalog.py`` checks that the snapshot equals
what live discovery finds.

After upgrading onnx_ir or onnxscript, write a new snapshot with::

    .venv/bin/python -m graphpass.plugins.ecosystem
"""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib.metadata
import pprint
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["LIBRARIES", "build_options", "describe_options", "installed_versions",
           "snapshot_entries", "write_snapshot"]

LIBRARIES = ("onnx_ir", "onnxscript")
"""The distributions whose passes the snapshot describes."""

_SNAPSHOT_FILE = Path(__file__).with_name("_snapshot.py")
_TYPE_NAMESPACE: dict[str, Any] = {
    "bool": bool, "int": int, "float": float, "str": str, "list": list, "tuple": tuple,
    "set": set, "frozenset": frozenset, "dict": dict, "NoneType": type(None),
    "typing": typing, "collections": collections,
}


def installed_versions() -> dict[str, str | None]:
    """The installed version of each library in :data:`LIBRARIES` (``None``: missing)."""
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def snapshot_entries() -> list[dict[str, Any]] | None:
    """The snapshot's pass descriptions, if it was written for the installed versions."""
    try:
        from graphpass.plugins.ecosystem import _snapshot
    except ImportError:
        return None
    if installed_versions() != _snapshot.VERSIONS:
        return None
    entries: list[dict[str, Any]] = _snapshot.PASSES
    return entries


def describe_options(options: type[Any]) -> dict[str, Any]:
    """An options dataclass as plain data (the inverse of :func:`build_options`).

    Raises:
        ValueError: A field's type or default cannot be written down faithfully.
    """
    fields = []
    for field in dataclasses.fields(options):
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = field.default
        text = _type_text(field.type)
        if eval(text, dict(_TYPE_NAMESPACE)) != field.type:
            raise ValueError(f"option {field.name!r}: cannot write its type {field.type!r}")
        fields.append({"name": field.name, "type": text, "default": default})
    return {"class": options.__name__, "doc": options.__doc__ or "", "fields": fields}


def build_options(described: Mapping[str, Any], module: str) -> type[Any]:
    """The options dataclass that :func:`describe_options` described."""
    fields: list[tuple[str, Any, Any]] = []
    for field in described["fields"]:
        annotation = eval(field["type"], dict(_TYPE_NAMESPACE))
        default = field["default"]
        if isinstance(default, (list, dict, set)):
            fields.append((field["name"], annotation,
                           dataclasses.field(default_factory=_copier(default))))
        else:
            fields.append((field["name"], annotation, dataclasses.field(default=default)))
    return dataclasses.make_dataclass(described["class"], fields,
                                      namespace={"__doc__": described["doc"],
                                                 "__module__": module})


def write_snapshot(entries: Iterable[Mapping[str, Any]], path: Path = _SNAPSHOT_FILE) -> None:
    """Write the snapshot module for the installed versions."""
    text = (
        '"""The ecosystem passes as discovered from the versions below (generated).\n\n'
        "Written by ``python -m graphpass.plugins.ecosystem``; do not edit.\n"
        '"""\n\n'
        "from typing import Any\n\n"
        f"VERSIONS: dict[str, str | None] = {pprint.pformat(installed_versions(), width=90)}\n\n"
        "PASSES: list[dict[str, Any]] = "
        f"{pprint.pformat(list(entries), width=90, sort_dicts=False)}\n"
    )
    path.write_text(text, encoding="utf-8")


def _type_text(annotation: Any) -> str:
    if isinstance(annotation, type) and annotation.__module__ == "builtins":
        return annotation.__name__
    return repr(annotation)


def _copier(default: Any) -> Callable[[], Any]:
    return lambda: type(default)(default)
