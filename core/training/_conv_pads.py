"""Folding a zero ``Pad`` into the ``Conv`` that reads it.

Exporters often pad a convolution's input with a separate ``Pad`` node (Hugging Face's
MobileNetV2 does so before each of its 52 convolutions, with zero pads before the
1 x 1 ones). In a training graph such a ``Pad`` costs a copy of the activation in the
forward pass, another in the backward pass (its gradient cuts the border off again),
and the padded copy is what the backward pass keeps. :func:`fold_conv_pads` moves the
padding into the convolutions' own ``pads``, which computes the same values.
"""

from __future__ import annotations

import numpy as np

from graphpass.ir import Attribute, Graph, Node
from graphpass.training._constants import constant_value

__all__ = ["fold_conv_pads"]


def _spatial_pads(graph: Graph, pad: Node) -> list[int] | None:
    """The spatial pads (begins, then ends) of a foldable zero ``Pad``; else ``None``."""
    if pad.domain or str(pad.attribute("mode", "constant")) != "constant":
        return None
    if len(pad.inputs) > 3 and pad.inputs[3]:  # axes (opset 18): left alone
        return None
    if len(pad.inputs) > 2 and pad.inputs[2]:
        fill = constant_value(graph, pad.inputs[2])
        if fill is None or np.any(np.asarray(fill)):
            return None
    pads = constant_value(graph, pad.inputs[1]) if len(pad.inputs) > 1 else None
    if pads is None or np.ndim(pads) != 1 or np.size(pads) % 2 or np.size(pads) < 6:
        return None
    values = [int(p) for p in np.asarray(pads)]
    rank = len(values) // 2
    if any(values[i] for i in (0, 1, rank, rank + 1)) or any(v < 0 for v in values):
        return None  # batch or channel padding, or a cut
    return values[2:rank] + values[rank + 2:]


def _readers_are_convs(graph: Graph, name: str) -> list[Node] | None:
    if not name or graph.value(name).is_graph_output:
        return None
    readers = graph.consumers(name)
    for reader in readers:
        if reader.op_type != "Conv" or reader.domain or list(reader.inputs).count(name) != 1 \
                or reader.inputs[0] != name \
                or str(reader.attribute("auto_pad", "NOTSET")) != "NOTSET":
            return None
    return readers or None


def fold_conv_pads(graph: Graph) -> int:
    """Fold every zero ``Pad`` read only by ``Conv`` nodes into their pads; return how many.

    A ``Pad`` folds when its mode is ``constant`` with a zero fill, its pads are
    constants that pad only spatial axes (none negative), and every reader is a
    ``Conv`` with explicit pads (no ``auto_pad``) that reads it as its input.

    Args:
        graph: The graph (changed in place).
    """
    folded = 0
    for pad in [node for node in graph if node.op_type == "Pad"]:
        spatial = _spatial_pads(graph, pad)
        readers = _readers_are_convs(graph, pad.outputs[0]) if spatial is not None else None
        if spatial is None or readers is None:
            continue
        owns = [[int(p) for p in conv.attribute("pads", [0] * len(spatial))] for conv in readers]
        if any(len(own) != len(spatial) for own in owns):
            continue
        for conv, own in zip(readers, owns, strict=True):
            conv.set_attribute(Attribute.from_value(
                "pads", [a + b for a, b in zip(own, spatial, strict=True)]))
            conv.set_input(0, pad.inputs[0])
        graph.remove(pad)
        folded += 1
    return folded
