"""onnxscript's optimizer and default rewrites: ``onnxscript-optimize``, ``onnxscript-rewrite``."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from graphpass.framework import OnnxIRPass, PassContext, RewritePass
from graphpass.plugins.ecosystem._catalog import build_options, describe_options
from graphpass.plugins.ecosystem._options import argument_docs, options_from_signature

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["KIND", "OnnxscriptOptimize", "OnnxscriptRewrite", "live_entries",
           "onnxscript_passes"]

KIND = "onnxscript"
"""The ``kind`` of this module's entries in the snapshot."""


class OnnxscriptRewrite(RewritePass):
    """Apply onnxscript's default pattern rewrites (``onnxscript.rewriter.rewrite``).

    The default rules remove no-op nodes, collapse slices and reshapes, turn
    Min/Max pairs into Clip, fuse Relu/Clip chains, Pad into Conv and BatchNormalization
    into the preceding Conv/Gemm, and more; then unused nodes, functions and opset
    imports are removed.
    """

    name = "onnxscript-rewrite"
    description = ("onnxscript's default pattern rewrites (no-op removal, Clip/Relu fusion, "
                   "BatchNormalization and Pad folding, ...).")


class OnnxscriptOptimize(OnnxIRPass):
    """onnxscript's optimizer (``onnxscript.optimizer.optimize``).

    Inlines functions (unless ``inline = false``), folds constants, applies the default
    rewrite rules, removes unused nodes, functions and opset imports, lifts constants to
    initializers, deduplicates initializers, eliminates common subexpressions and fixes
    names and outputs.
    """

    name = "onnxscript-optimize"
    description = ("onnxscript's optimizer: constant folding, default rewrites, dead code, "
                   "CSE and initializer deduplication.")
    library: ClassVar[str] = "onnxscript"

    def run_onnx_ir(self, model: ir.Model, context: PassContext) -> None:
        """Run ``onnxscript.optimizer.optimize`` with the options."""
        from onnxscript import optimizer

        optimizer.optimize(model, **{f.name: getattr(self.options, f.name)
                                     for f in dataclasses.fields(self.options)})


def onnxscript_passes(entries: Iterable[Mapping[str, Any]] | None = None,
                      ) -> tuple[type[OnnxIRPass], ...]:
    """The two passes, with ``onnxscript-optimize``'s options read from ``optimize``.

    Args:
        entries: The passes' descriptions (the snapshot's); by default the options are
            read from the installed onnxscript (:func:`live_entries`).
    """
    chosen = live_entries() if entries is None else entries
    described = next(entry["options"] for entry in chosen if entry["kind"] == KIND)
    optimize: Any = type("OnnxscriptOptimize", (OnnxscriptOptimize,),
                         {"Options": build_options(described, __name__),
                          "__module__": __name__, "__doc__": OnnxscriptOptimize.__doc__})
    return optimize, OnnxscriptRewrite


@functools.cache
def live_entries() -> tuple[dict[str, Any], ...]:
    """The description of ``onnxscript-optimize``'s options, read from ``optimize``."""
    from onnxscript import optimizer

    options, _left_out = options_from_signature(
        optimizer.optimize, "OnnxscriptOptimizeOptions",
        docs=argument_docs(optimizer.optimize), skip=("model",), module=__name__)
    return ({"kind": KIND, "name": OnnxscriptOptimize.name,
             "options": describe_options(options)},)
