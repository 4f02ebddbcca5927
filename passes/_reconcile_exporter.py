"""What torch's ONNX exporters record about weights (reconcile-initializers).

``torch.onnx.export(..., dynamo=True)`` (torch 2.13) writes:

* on the graph, ``pkg.torch.export.ExportedProgram.graph_signature``: one line per
  placeholder, ``p_blocks_0_norm_weight: PARAMETER target='blocks.0.norm.weight'``;
* on each weight's ``value_info``, ``pkg.torch.onnx.original_node_name`` (its
  placeholder) and ``pkg.torch.export.graph_signature.InputSpec.kind``;
* on an initializer its optimizer computed from weights (a folded transpose),
  ``pkg.onnxscript.optimizer.folded_from = "['blocks.0.proj.0.weight']"``;
* on each node, ``pkg.torch.onnx.fx_node`` (the FX node it came from, whose
  arguments name the placeholders it reads, even after the optimizer merged
  identical initializers) and ``pkg.torch.onnx.name_scopes`` (module path).

The legacy exporter (``dynamo=False``) records none of this, but names nodes by
module path: ``/transformer/blocks.0/proj/proj.0/MatMul``.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from graphpass.ir import Graph, Node

__all__ = [
    "FOLDED_FROM",
    "INPUT_KIND",
    "ORIGINAL_NAME",
    "WEIGHT_KINDS",
    "folded_from",
    "fx_arguments",
    "fx_target",
    "graph_signature",
    "is_placeholder_name",
    "module_scope",
]

SIGNATURE: Final = "pkg.torch.export.ExportedProgram.graph_signature"
ORIGINAL_NAME: Final = "pkg.torch.onnx.original_node_name"
INPUT_KIND: Final = "pkg.torch.export.graph_signature.InputSpec.kind"
FOLDED_FROM: Final = "pkg.onnxscript.optimizer.folded_from"
FX_NODE: Final = "pkg.torch.onnx.fx_node"
NAME_SCOPES: Final = "pkg.torch.onnx.name_scopes"
WEIGHT_KINDS: Final = frozenset({"PARAMETER", "BUFFER", "CONSTANT_TENSOR"})
"""``InputSpec.kind`` values of inputs that stand for weights."""

_SIGNATURE_LINE: Final = re.compile(
    r"^\s*(\w+): (?:PARAMETER|BUFFER|CONSTANT_TENSOR) target='([^']+)'", re.MULTILINE)
_FX_ARGUMENT: Final = re.compile(r"%(\w+)")
_FX_TARGET: Final = re.compile(r"target=(?:torch\.ops\.)?([\w.]+)\]")
_PLACEHOLDER: Final = re.compile(r"^[pbc]_\w+$")


def graph_signature(graph: Graph) -> dict[str, str]:
    """Placeholder names and the state-dict names they stand for (dynamo exports)."""
    text = graph.metadata.get(SIGNATURE, "")
    return {placeholder: target for placeholder, target in _SIGNATURE_LINE.findall(text)}


def folded_from(metadata: dict[str, str]) -> tuple[str, ...]:
    """The weights an optimizer folded a value from (empty when not folded)."""
    text = metadata.get(FOLDED_FROM)
    if not text:
        return ()
    try:
        names = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return ()
    if isinstance(names, str):
        return (names,)
    if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
        return tuple(names)
    return ()


def fx_arguments(node: Node) -> tuple[str, ...]:
    """The FX values (``p_...`` placeholders, other nodes) the node's FX node reads."""
    text = node.metadata.get(FX_NODE, "")
    _, found, arguments = text.partition("](")
    return tuple(_FX_ARGUMENT.findall(arguments)) if found else ()


def fx_target(node: Node) -> str | None:
    """The operator of the node's FX node (``aten.linear.default``), if recorded."""
    match = _FX_TARGET.search(node.metadata.get(FX_NODE, ""))
    return match.group(1) if match else None


def is_placeholder_name(name: str) -> bool:
    """Whether an FX name looks like a torch.export weight placeholder (``p_...``)."""
    return bool(_PLACEHOLDER.match(name))


def module_scope(node: Node) -> str | None:
    """The path of the module the node was exported from (``transformer.blocks.0.norm``).

    Read from ``pkg.torch.onnx.name_scopes`` (dynamo), whose last entry is the FX
    node, or from a legacy node name such as ``/transformer/blocks.0/proj/proj.0/MatMul``,
    where a container's child repeats the container's name (``proj`` then ``proj.0``).
    """
    text = node.metadata.get(NAME_SCOPES)
    if text:
        try:
            scopes = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            scopes = None
        if isinstance(scopes, list) and len(scopes) >= 2 and isinstance(scopes[-2], str):
            return scopes[-2] or None
        return None
    if not node.name.startswith("/"):
        return None
    parts = [part for part in node.name.split("/")[1:-1] if part]
    path: list[str] = []
    for part in parts:
        if path and part.startswith(path[-1] + "."):
            path[-1] = part
        else:
            path.append(part)
    return ".".join(path) or None
