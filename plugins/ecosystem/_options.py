"""Options of a graphpass pass made from the keyword arguments of a Python callable.

The ecosystem's passes are configured through constructor or function arguments
(``CommonSubexpressionEliminationPass(size_limit=10)``, ``optimize(model,
num_iterations=2)``). :func:`options_from_signature` turns those arguments into the
``Options`` dataclass of a graphpass pass, so that pipeline files and ``-O`` set
them and they are checked like every option: same names (dashes in files), same
types, same defaults, the descriptions from the docstrings. Arguments whose type a
pipeline file cannot write (a Python callable, an object) are left out and named.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import docstring_parser

__all__ = ["argument_docs", "options_from_signature"]

_SCALARS = (bool, int, float, str)


def argument_docs(*objects: Any) -> dict[str, str]:
    """Argument descriptions from the Google-style docstrings of ``objects``.

    ``Args:`` and ``Attributes:`` sections both count (onnx_ir documents constructor
    arguments in either); an earlier object wins.
    """
    docs: dict[str, str] = {}
    for owner in objects:
        text = owner.__dict__.get("__doc__") if isinstance(owner, type) else getattr(
            owner, "__doc__", None)
        if not text:
            continue
        for parameter in docstring_parser.parse(text).params:
            if parameter.description:
                docs.setdefault(parameter.arg_name.split()[0],
                                " ".join(parameter.description.split()))
    return docs


def options_from_signature(function: Callable[..., Any], class_name: str, *,
                           docs: Mapping[str, str], skip: Iterable[str] = ("self",),
                           module: str = __name__) -> tuple[type[Any], list[str]]:
    """A dataclass of ``function``'s keyword arguments that pipeline files can give.

    Args:
        function: The constructor or function.
        class_name: The dataclass's name.
        docs: Descriptions by argument name (see :func:`argument_docs`).
        skip: Arguments that are not options (``self``, the model).
        module: The dataclass's ``__module__``.

    Returns:
        The dataclass, and the names of the arguments left out because a pipeline
        file cannot write their type or they have no default.
    """
    skipped_names = set(skip)
    hints = _type_hints(function)
    fields: list[tuple[str, Any, Any]] = []
    left_out: list[str] = []
    lines = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name in skipped_names or parameter.kind in (
                parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            continue
        annotation = hints.get(parameter.name, parameter.annotation)
        default = parameter.default
        if default is parameter.empty or not pipeline_type(annotation) or not _writable(default):
            left_out.append(parameter.name)
            continue
        if isinstance(default, (list, dict, set)):
            fields.append((parameter.name, annotation,
                           dataclasses.field(default_factory=_copier(default))))
        else:
            fields.append((parameter.name, annotation, dataclasses.field(default=default)))
        lines.append(f"    {parameter.name}: {docs.get(parameter.name, 'See the library.')}")
    doc = f"Options of {class_name.removesuffix('Options')}."
    if lines:
        doc += "\n\nAttributes:\n" + "\n".join(lines)
    options = dataclasses.make_dataclass(class_name, fields,
                                         namespace={"__doc__": doc, "__module__": module})
    return options, left_out


def pipeline_type(annotation: Any) -> bool:
    """Whether a pipeline file (TOML) can write a value of this type."""
    if annotation in _SCALARS:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return all(isinstance(a, _SCALARS) for a in args)
    if origin in (typing.Union, types.UnionType):
        return all(a is type(None) or pipeline_type(a) for a in args)
    if origin in (list, tuple, set, frozenset, Sequence) and args:
        return pipeline_type(args[0]) and (origin is not tuple or len(args) == 1 or (
            len(args) == 2 and args[1] is Ellipsis))
    if origin in (dict, Mapping) and len(args) == 2:
        return args[0] is str and pipeline_type(args[1])
    return False


def _writable(default: Any) -> bool:
    if default is None or isinstance(default, _SCALARS):
        return True
    if isinstance(default, (list, tuple, set, frozenset)):
        return all(_writable(item) for item in default)
    if isinstance(default, dict):
        return all(isinstance(k, str) and _writable(v) for k, v in default.items())
    return False


def _copier(default: Any) -> Callable[[], Any]:
    return lambda: type(default)(default)


def _type_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """The evaluated annotations; one that cannot be evaluated is left out."""
    try:
        return typing.get_type_hints(function)
    except Exception:  # a forward reference the module cannot resolve: go one by one
        pass
    hints: dict[str, Any] = {}
    namespace = getattr(function, "__globals__", {})
    for name, annotation in getattr(function, "__annotations__", {}).items():
        try:
            hints[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation
        except Exception:  # unresolvable: the argument is left out of the options
            hints[name] = object
    return hints
