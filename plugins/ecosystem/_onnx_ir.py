"""Every pass in ``onnx_ir.passes.common``, as a graphpass pass called ``onnx-ir-<name>``.

The passes are discovered from the module, so a new onnx_ir release's passes appear
without a change here. ``CommonSubexpressionEliminationPass`` becomes
``onnx-ir-common-subexpression-elimination``: kebab case, the ``Pass`` suffix
dropped. Constructor arguments become typed options (see :mod:`._options`); a pass
that only reads the model (``in_place`` and not ``changes_input``, such as
``CheckerPass``) becomes an analysis pass.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING, Any, ClassVar

from graphpass.framework.onnx_ir_pass import OnnxIRPass
from graphpass.framework.pass_base import PassContext
from graphpass.plugins.ecosystem._options import argument_docs, options_from_signature

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["PREFIX", "OnnxIRCommonPass", "onnx_ir_passes", "pass_name"]

PREFIX = "onnx-ir-"
_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def pass_name(class_name: str) -> str:
    """``CommonSubexpressionEliminationPass`` -> ``onnx-ir-common-subexpression-elimination``."""
    return PREFIX + _WORD_BOUNDARY.sub("-", class_name.removesuffix("Pass")).lower()


class OnnxIRCommonPass(OnnxIRPass):
    """Runs one ``onnx_ir.passes.common`` pass, built from this pass's options.

    Attributes:
        ir_pass: The onnx_ir pass class.
    """

    ir_pass: ClassVar[type[Any]]

    def run_onnx_ir(self, model: ir.Model, context: PassContext) -> ir.Model | None:
        """Build the onnx_ir pass with the options and run it."""
        arguments = {f.name: getattr(self.options, f.name)
                     for f in dataclasses.fields(self.options)}
        result = self.ir_pass(**arguments)(model)
        return None if result.model is model else result.model


@functools.cache
def onnx_ir_passes() -> tuple[type[OnnxIRCommonPass], ...]:
    """One graphpass pass class per pass class in ``onnx_ir.passes.common``."""
    import onnx_ir.passes
    from onnx_ir.passes import common

    names = getattr(common, "__all__", None) or dir(common)
    found = []
    for name in sorted(names):
        candidate = getattr(common, name, None)
        if (isinstance(candidate, type) and issubclass(candidate, onnx_ir.passes.PassBase)
                and not getattr(candidate, "__abstractmethods__", None)):
            found.append(_wrap(candidate))
    return tuple(found)


def _wrap(ir_pass: type[Any]) -> type[OnnxIRCommonPass]:
    graphpass_name = pass_name(ir_pass.__name__)
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
    namespace = {
        "name": graphpass_name,
        "description": summary,
        "analysis": _only_reads(ir_pass),
        "Options": options,
        "ir_pass": ir_pass,
        "__doc__": doc,
        "__module__": __name__,
        "__qualname__": class_name,
    }
    return type(class_name, (OnnxIRCommonPass,), namespace)


def _only_reads(ir_pass: type[Any]) -> bool:
    """Whether the pass never changes the model it is given (``CheckerPass``)."""
    try:
        instance = ir_pass()
        return bool(instance.in_place and not instance.changes_input)
    except Exception:  # a pass that needs arguments: assume it transforms
        return False
