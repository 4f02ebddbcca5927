"""Built-in plugin ``ecosystem``: the ONNX ecosystem's passes inside graphpass pipelines.

It gives:

* ``onnx-ir-<name>`` for every pass in ``onnx_ir.passes.common``
  (``onnx-ir-common-subexpression-elimination``, ``onnx-ir-lift-constants-to-initializers``
  ...), their constructor arguments as options;
* ``onnxscript-optimize`` (``onnxscript.optimizer.optimize``, its keyword arguments as
  options) and ``onnxscript-rewrite`` (``onnxscript.rewriter.rewrite`` with the default
  rules).

Each runs on the model converted to onnx_ir and back (see
``_onnx_ir_bridge``): weights are not read, what the pass leaves alone is
written back as it was. Other plugins add onnxscript pattern rewrites through the
``graphpass_rewrite_rules`` hook (see :class:`graphpass.RewriteRules`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from graphpass.framework import hookimpl

__all__ = ["graphpass_passes"]


@hookimpl
def graphpass_passes() -> Iterable[type[Any]]:
    """The onnx_ir passes, then onnxscript's optimizer and rewriter (built once)."""
    return _passes()


@functools.cache
def _passes() -> tuple[type[Any], ...]:
    """The onnx_ir passes, then onnxscript's optimizer and rewriter.

    They are built from the snapshot of their descriptions when it matches the
    installed versions (no import of either library), else discovered (see
    :mod:`._catalog`).
    """
    from graphpass.plugins.ecosystem._catalog import snapshot_entries
    from graphpass.plugins.ecosystem._onnx_ir import onnx_ir_passes
    from graphpass.plugins.ecosystem._onnxscript import onnxscript_passes

    entries = snapshot_entries()
    return (*onnx_ir_passes(entries), *onnxscript_passes(entries))
