"""Every pass in ``onnx_ir.passes.common``, as a graphpass pass called ``onnx-ir-<name>``.

The passes are discovered from the module, so a new onnx_ir release's passes appear
without a change here (their descriptions are kept in a snapshot for the installed
version: see :mod:`._catalog`). ``CommonSubexpressionEliminationPass`` becomes
``onnx-ir-common-subexpression-elimination``: kebab case, the ``Pass`` suffix
dropped. Constructor arguments become typed options (see :mod:`._options`); a pass
that only reads the model (``in_place`` and not ``changes_input``, such as
``CheckerPass``) becomes an analysis pass.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from graphpass.framework import OnnxIRPass, PassContext
from graphpass.plugins.ecosystem._catalog import build_options, describe_options
from graphpass.plugins.ecosystem._options import argument_docs, options_from_signature

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["KIND", "PREFIX", "OnnxIRCommonPass", "live_entries", "onnx_ir_passes", "pass_name"]

KIND = "onnx_ir"
"""The ``kind`` of this module's entries in the snapshot."""
PREFIX = "onnx-ir-"
_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def pass_name(class_name: str) -> str:
    """``CommonSubexpressionEliminationPass`` -> ``onnx-ir-common-subexpression-elimination``."""
    return PREFIX + _WORD_BOUNDARY.sub("-", class_name.removesuffix("Pass")).lower()


class OnnxIRCommonPass(OnnxIRPass):
    """Runs one ``onnx_ir.passes.common`` pass, built from this pass's options.

    Attributes:
        ir_pass_name: The onnx_ir pass class's name in ``onnx_ir.passes.common``
            (imported when the pass runs).
    """

    ir_pass_name: ClassVar[str]

    def run_onnx_ir(self, model: ir.Model, context: PassContext) -> ir.Model | None:
        """Build the onnx_ir pass with the options and run it."""
        from onnx_ir.passes import common

        arguments = {f.name: getattr(self.options, f.name)
                     for f in dataclasses.fields(self.options)}
        result = getattr(common, self.ir_pass_name)(**arguments)(model)
        return None if result.model is model else result.model


def onnx_ir_passes(entries: Iterable[Mapping[str, Any]] | None = None,
                   ) -> tuple[type[OnnxIRCommonPass], ...]:
    """One graphpass pass class per pass class in ``onnx_ir.passes.common``.

    Args:
        entries: The passes' descriptions (the snapshot's); by default they are
            discovered from the installed onnx_ir (:func:`live_entries`).
    """
    chosen = live_entries() if entries is None else entries
    return tuple(_build(entry) for entry in chosen if entry["kind"] == KIND)


@functools.cache
def live_entries() -> tuple[dict[str, Any], ...]:
    """The description of every pass class in ``onnx_ir.passes.common``, discovered."""
    import onnx_ir.passes
    from onnx_ir.passes import common

    names = getattr(common, "__all__", None) or dir(common)
    found = []
    for name in sorted(names):
        candidate = getattr(common, name, None)
        if (isinstance(candidate, type) and issubclass(candidate, onnx_ir.passes.PassBase)
                and not getattr(candidate, "__abstractmethods__", None)):
            found.append(_describe(candidate))
    return tuple(found)


def _describe(ir_pass: type[Any]) -> dict[str, Any]:
    class_name = "OnnxIR" + ir_pass.__name__.removesuffix("Pass")
    options, left_out = options_from_signature(
        ir_pass.__init__, f"{class_name}Options",
        docs=argument_docs(ir_pass, ir_pass.__init__), module=__name__)
    own_doc = ir_pass.__dict__.get("__doc__") or ""
    summary = own_doc.strip().splitlines()[0].strip() if own_doc.strip() else (
        f"Run onnx_ir's {ir_pass.__name__}.")
    doc = (f"{own_doc.strip() or summary}\n\n"
           f"This is onnx_ir's ``{ir_pass.__module__}.{ir_pass.__name__}``.")
    if left_out:
        doc += (" Not available as options (a pipeline file cannot write their values): "
                + ", ".join(f"``{name}``" for name in left_out) + ".")
    return {
        "kind": KIND,
        "name": pass_name(ir_pass.__name__),
        "class_name": class_name,
        "ir_pass_name": ir_pass.__name__,
        "description": summary,
        "doc": doc,
        "analysis": _only_reads(ir_pass),
        "options": describe_options(options),
    }


def _build(entry: Mapping[str, Any]) -> type[OnnxIRCommonPass]:
    namespace = {
        "name": entry["name"],
        "description": entry["description"],
        "analysis": entry["analysis"],
        "Options": build_options(entry["options"], __name__),
        "ir_pass_name": entry["ir_pass_name"],
        "__doc__": entry["doc"],
        "__module__": __name__,
        "__qualname__": entry["class_name"],
    }
    return type(entry["class_name"], (OnnxIRCommonPass,), namespace)


def _only_reads(ir_pass: type[Any]) -> bool:
    """Whether the pass never changes the model it is given (``CheckerPass``)."""
    try:
        instance = ir_pass()
        return bool(instance.in_place and not instance.changes_input)
    except Exception:  # a pass that needs arguments: assume it transforms
        return False
