"""What PyTorch's ONNX exporters record about model state, read without torch.

``torch.onnx.export(..., dynamo=True)`` writes, in the ``metadata_props`` of each
state tensor's ``value_info`` (or graph input),
``pkg.torch.export.graph_signature.InputSpec.kind`` (``PARAMETER``, ``BUFFER``,
``CONSTANT_TENSOR``, ``USER_INPUT``) and ``...InputSpec.persistent``; the onnxscript
optimizer marks the constants it folds with ``pkg.onnxscript.optimizer.folded_from``.
When the model is saved without its initializers those declarations are gone, but
each consuming node still carries ``pkg.torch.onnx.fx_node``, which names the
torch.export placeholder it read: ``%p_<name>`` for a parameter, ``%b_`` for a
buffer, ``%c_`` for a tensor constant.

:func:`state_kinds` reads both, so that passes can tell parameters (what training
updates) from buffers and constants (what it must not), whatever the export mode.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import onnx

from graphpass.ir import Graph

__all__ = ["TRAINABLE_TYPES", "StateKind", "default_trainable", "state_kinds"]

StateKind = Literal["parameter", "buffer", "constant", "input"]
"""What a tensor of a torch export is: a parameter, a buffer (persistent or not), a
constant (a tensor attribute, a lifted or folded constant), or a user input."""

TRAINABLE_TYPES: Final = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                    onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16})
"""Element types a trainer can compute gradients for."""

_KIND_KEY: Final = "pkg.torch.export.graph_signature.InputSpec.kind"
_FOLDED_KEY: Final = "pkg.onnxscript.optimizer.folded_from"
_FX_NODE_KEY: Final = "pkg.torch.onnx.fx_node"
_SPEC_KINDS: Final[dict[str, StateKind]] = {
    "PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant",
    "USER_INPUT": "input"}
_PLACEHOLDER_KINDS: Final[dict[str, StateKind]] = {
    "p": "parameter", "b": "buffer", "c": "constant"}
_PLACEHOLDER: Final = re.compile(r"%([pbc])_([0-9A-Za-z_]+)")
_NOT_IN_PLACEHOLDER: Final = re.compile(r"[^0-9A-Za-z_]")


def state_kinds(graph: Graph) -> dict[str, StateKind]:
    """What torch's export record says each initializer or graph input of ``graph`` is.

    Names the record says nothing about are left out (models not exported by torch,
    or exported by the legacy exporter, which records nothing).
    """
    kinds: dict[str, StateKind] = {}
    names = list(dict.fromkeys([*graph.initializers, *graph.input_names]))
    for name in names:
        value = graph.values.get(name)
        metadata = value.metadata if value is not None else {}
        if _FOLDED_KEY in metadata:
            kinds[name] = "constant"
        elif metadata.get(_KIND_KEY) in _SPEC_KINDS:
            kinds[name] = _SPEC_KINDS[metadata[_KIND_KEY]]
    stems = {_NOT_IN_PLACEHOLDER.sub("_", name).lower(): name
             for name in names if name not in kinds}
    if not stems:
        return kinds
    for node in graph:
        fx_node = node.metadata.get(_FX_NODE_KEY)
        if not fx_node:
            continue
        for found in _PLACEHOLDER.finditer(fx_node):
            stem_of = stems.get(found.group(2))
            if stem_of is not None and stem_of in node.inputs and stem_of not in kinds:
                kinds[stem_of] = _PLACEHOLDER_KINDS[found.group(1)]
    return kinds


def default_trainable(graph: Graph) -> tuple[list[str], dict[str, StateKind]]:
    """The weights to train when the user names none.

    Every floating-point initializer, except those torch's export record marks as
    buffers or constants (a causal mask, rotary frequencies, folded constants):
    PyTorch never trains those either.

    Returns:
        The trainable initializer names, in order, and the float initializers left
        out with what they are.
    """
    kinds = state_kinds(graph)
    trainable: list[str] = []
    left_out: dict[str, StateKind] = {}
    for name, tensor in graph.initializers.items():
        if tensor.dtype not in TRAINABLE_TYPES:
            continue
        kind = kinds.get(name)
        if kind in ("buffer", "constant"):
            left_out[name] = kind
        else:
            trainable.append(name)
    return trainable, left_out
