"""The model names a checkpoint can fill (reconcile-initializers).

* every initializer of the main graph;
* graph inputs that stand for weights: inputs with a default (the legacy
  exporter's ``keep_initializers_as_inputs=True``), inputs the exporter marked as
  parameters or buffers, and any other input that is not marked as user data (the
  legacy exporter's ``export_params=False`` marks nothing); the last kind is filled
  only when a key matches it, and otherwise stays an input;
* names the main graph uses but nothing defines (``ONNXProgram.save(...,
  include_initializers=False)`` leaves the weights out but keeps using them).

In a dynamo export, whose graph records its state-dict names, the exporter's own
constants (``val_0``) are candidates too, but nothing is said when no key fills them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from graphpass.torch import (
    INPUT_PERSISTENT,
    ORIGINAL_NAME,
    folded_from,
    input_spec_kind,
    signature_kinds,
)

if TYPE_CHECKING:
    from graphpass.ir import Graph

__all__ = ["Target", "collect_targets"]

Source = Literal["initializer", "input", "undefined"]
_STATE = ("parameter", "buffer", "constant")


@dataclass(frozen=True)
class Target:
    """A name in the model that a checkpoint tensor can fill.

    Attributes:
        name: The value name.
        source: ``initializer``, ``input`` (a graph input without default), or
            ``undefined`` (used but defined nowhere).
        dtype: The declared ONNX element type, if known.
        shape: The declared shape (ints, symbolic names, ``None``), if known.
        required: Whether leaving it unfilled is worth a finding (an initializer, an
            input the exporter marked as a weight, an undefined name).
        is_input: Whether it is a graph input (with or without a default).
        placeholder: The torch.export placeholder it came from, if recorded.
        folded_from: The weights the exporter's optimizer computed it from, if any.
        outside_state_dict: What torch's export record says it is when that is a tensor
            ``state_dict()`` never holds (``"non-persistent buffer"``, ``"tensor
            constant"``), so that no rename can fill it from such a checkpoint; or
            ``"buffer"`` when the record says buffer without saying whether a persistent
            one (which ``state_dict()`` holds); else ``None``.
    """

    name: str
    source: Source
    dtype: int | None
    shape: tuple[int | str | None, ...] | None
    required: bool
    is_input: bool
    placeholder: str | None = None
    folded_from: tuple[str, ...] = ()
    outside_state_dict: str | None = None


def collect_targets(graph: Graph, signature: Mapping[str, str]) -> list[Target]:
    """The names of ``graph`` a checkpoint can fill, initializers first.

    Args:
        graph: The main graph.
        signature: The exporter's placeholder names and the names they stand for; it
            gives the placeholder of a weight whose own record was dropped.
    """
    placeholder_of = {name: placeholder for placeholder, name in signature.items()}
    targets: list[Target] = []
    inputs = set(graph.input_names)
    for name, tensor in graph.initializers.items():
        metadata = graph.value(name).metadata
        placeholder = metadata.get(ORIGINAL_NAME) or placeholder_of.get(name)
        folds = folded_from(metadata)
        targets.append(Target(name, "initializer", tensor.dtype, tensor.shape,
                              _is_weight(name, placeholder, folds, signature), name in inputs,
                              placeholder, folds, _outside_state_dict(metadata)))
    for value in graph.inputs:
        if value.name in graph.initializers:
            continue
        kind = input_spec_kind(value.metadata)
        if kind == "input":
            continue
        targets.append(Target(value.name, "input", value.elem_type, value.shape,
                              kind in _STATE or value.name.startswith("onnx::"), True,
                              value.metadata.get(ORIGINAL_NAME) or placeholder_of.get(value.name),
                              folded_from(value.metadata), _outside_state_dict(value.metadata)))
    kinds = signature_kinds(graph) if graph.free_names else {}
    for name in graph.free_names:
        value = graph.value(name)
        placeholder = value.metadata.get(ORIGINAL_NAME) or placeholder_of.get(name)
        folds = folded_from(value.metadata)
        # Saved without initializers, a name keeps no record of its own; the export's
        # signature still says it is a buffer, though not whether a persistent one.
        outside = _outside_state_dict(value.metadata) or (
            "buffer" if kinds.get(name) == "buffer" else None)
        targets.append(Target(name, "undefined", value.elem_type, value.shape,
                              _is_weight(name, placeholder, folds, signature), False,
                              placeholder, folds, outside))
    return targets


def _outside_state_dict(metadata: Mapping[str, str]) -> str | None:
    """``"non-persistent buffer"`` or ``"tensor constant"`` when torch's record says so."""
    kind = input_spec_kind(dict(metadata))
    if kind == "buffer" and metadata.get(INPUT_PERSISTENT) == "False":
        return "non-persistent buffer"
    if kind == "constant" and not folded_from(dict(metadata)):
        return "tensor constant"
    return None


def _is_weight(name: str, placeholder: str | None, folds: tuple[str, ...],
               signature: Mapping[str, str]) -> bool:
    """Whether an initializer or undefined name stands for a weight.

    Without the dynamo exporter's records, every one may. With them, a weight is a
    state-dict name, has a placeholder, or was computed from a weight; the rest are
    the exporter's constants (``val_0``), which no checkpoint holds.
    """
    if not signature:
        return True
    weights = set(signature.values())
    return name in weights or placeholder is not None or any(s in weights for s in folds)
