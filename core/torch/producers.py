"""Which tool exported a model, read from the file, and the re-export advice worded for it.

The advice to export again without constant folding is only useful in the words of the
tool the user ran: ``torch.onnx.export(..., dynamo=True, optimize=False)`` for torch's
dynamo exporter, ``do_constant_folding=False`` for its legacy exporter, and
``optimum-cli export onnx --no-constant-folding`` for Hugging Face Optimum (which runs the
legacy exporter with folding on, and says so in the file it writes only through the
exporter's own producer name).
"""

from __future__ import annotations

from typing import Final, Literal

from graphpass.ir import Graph
from graphpass.torch.export_record import records_state

__all__ = ["Producer", "producer", "unfolded_export_advice"]

Producer = Literal["torch-dynamo", "torch-legacy", "optimum", "unknown"]
"""The exporters graphpass tells apart."""

_ADVICE: Final[dict[Producer, str]] = {
    "torch-dynamo": (
        "re-export without the optimizer's folding: torch.onnx.export(..., dynamo=True, "
        "optimize=False) (every parameter then keeps an initializer of its own); or name the "
        "key with a rename"),
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


def producer(graph: Graph) -> Producer:
    """The exporter that wrote ``graph``'s model, as far as the file says.

    torch's dynamo exporter leaves its export record (:func:`records_state`); its legacy
    exporter writes producer ``pytorch`` and names nodes by module path; Optimum runs the
    legacy exporter and adds ``optimum`` to the model's metadata or doc string when it
    records itself.
    """
    model = graph.root.model
    if records_state(graph):
        return "torch-dynamo"
    if model is None:
        return "unknown"
    marks = " ".join([model.doc_string, *model.metadata.keys(), *model.metadata.values()])
    if "optimum" in marks.lower():
        return "optimum"
    if model.producer_name == "pytorch":
        return "torch-legacy"
    return "unknown"


def unfolded_export_advice(graph: Graph) -> str:
    """How to export ``graph``'s model again without constant folding, in its tool's words."""
    return _ADVICE[producer(graph)]
