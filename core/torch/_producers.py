"""Which tool exported a model, read from the file, and the re-export advice worded for it.

The advice to export again without constant folding is only useful in the words of the
tool the user ran: ``torch.onnx.export(..., dynamo=True, optimize=False)`` for torch's
dynamo exporter, ``do_constant_folding=False`` for its legacy exporter, and
``optimum-cli export onnx --no-constant-folding`` for Hugging Face Optimum (which runs the
legacy exporter with folding on, and says so in the file it writes only through the
exporter's own producer name).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Literal

from graphpass.ir import Graph
from graphpass.torch._export_record import records_state

__all__ = ["Producer", "producer", "separate_weights_advice", "unfolded_export_advice"]

Producer = Literal["torch-dynamo", "torch-legacy", "optimum", "unknown"]
"""The exporters graphpass tells apart."""

_ADVICE: Final[dict[Producer, str]] = {
    "torch-dynamo": (
        "re-export without the optimizer's folding: torch.onnx.export(..., dynamo=True, "
        "optimize=False) (every parameter then keeps an initializer of its own)"),
    "torch-legacy": (
        "re-export without constant folding: torch.onnx.export(..., dynamo=False, "
        "do_constant_folding=False), or with dynamo=True, optimize=False (every parameter then "
        "keeps an initializer of its own)"),
    "optimum": (
        "re-export without constant folding: optimum-cli export onnx --no-constant-folding "
        "(every parameter then keeps an initializer of its own), or export the model with "
        "torch.onnx.export(..., dynamo=True, optimize=False)"),
    "unknown": (
        "export the model again without constant folding (torch.onnx.export(..., dynamo=True, "
        "optimize=False), dynamo=False with do_constant_folding=False, or optimum-cli export "
        "onnx --no-constant-folding), so that every parameter keeps an initializer of its own"),
}


_SEPARATE_WEIGHTS: Final[dict[Producer, str]] = {
    "torch-dynamo": (
        "nothing to do: the weights are apart again; to export them apart, torch.onnx.export("
        "..., dynamo=True, optimize=False)"),
    "torch-legacy": (
        "nothing to do: the weights are apart again; the legacy exporter (dynamo=False) merges "
        "weights of equal values whatever do_constant_folding says, unless it exports in "
        "training mode (training=torch.onnx.TrainingMode.TRAINING, which also exports "
        "Dropout and BatchNorm as in training); torch.onnx.export(..., dynamo=True, "
        "optimize=False) keeps them apart"),
    "optimum": (
        "nothing to do: the weights are apart again; Optimum runs torch's legacy exporter, "
        "which merges weights of equal values with constant folding on or off; "
        "torch.onnx.export(..., dynamo=True, optimize=False) keeps them apart"),
    "unknown": (
        "nothing to do: the weights are apart again; with torch, torch.onnx.export(..., "
        "dynamo=True, optimize=False) exports them apart"),
}
"""What to say about weights the exporter merged because their values were equal.

Measured with torch 2.13: the dynamo exporter's optimizer merges them, ``optimize=False``
keeps them apart; the legacy exporter merges them with ``do_constant_folding`` on or off,
and keeps them apart only when it exports in training mode (its deduplication of
initializers by value runs for models exported for inference)."""


_OPTIMUM_AXES: Final = frozenset({
    "batch_size", "sequence_length", "num_channels", "height", "width", "decoder_sequence_length",
    "past_sequence_length", "encoder_sequence_length", "num_choices", "feature_size"})
"""The names Optimum's export configs give dynamic axes (``input_ids``: ``batch_size`` x
``sequence_length``; ``pixel_values``: ``batch_size`` x ``num_channels`` x ``height`` x
``width``)."""


def producer(graph: Graph) -> Producer:
    """The exporter that wrote ``graph``'s model, as far as the file says.

    torch's dynamo exporter leaves its export record (:func:`records_state`); its legacy
    exporter writes producer ``pytorch``. Optimum runs that legacy exporter and writes no
    mark of its own, but it names every dynamic axis of the inputs from its export configs
    (``batch_size``, ``sequence_length``, ``num_channels`` ...) and writes the model beside
    the Hugging Face ``config.json`` it was exported from: a legacy export with either is
    taken for Optimum's.
    """
    model = graph.root.model
    if records_state(graph):
        return "torch-dynamo"
    if model is None or model.producer_name != "pytorch":
        return "unknown"
    axes = {dim for value in graph.inputs for dim in (value.shape or ())
            if isinstance(dim, str)}
    if axes and axes <= _OPTIMUM_AXES:
        return "optimum"
    folder = model.source_path.parent if model.source_path is not None else None
    if folder is not None and _hugging_face_config(folder / "config.json"):
        return "optimum"
    return "torch-legacy"


def _hugging_face_config(path: Path) -> bool:
    try:
        return "transformers_version" in json.loads(path.read_text())
    except (OSError, ValueError, TypeError):
        return False


def separate_weights_advice(exporter: Producer) -> str:
    """What to do about weights ``exporter`` merged because their values were equal."""
    return _SEPARATE_WEIGHTS[exporter]


def unfolded_export_advice(graph: Graph) -> str:
    """How to export ``graph``'s model again without constant folding, in its tool's words."""
    return _ADVICE[producer(graph)]
