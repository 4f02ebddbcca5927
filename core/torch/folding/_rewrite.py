"""Putting the folding back into the graph: nodes from the sources, layers separated again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from graphpass.ir import Graph, Node, Tensor
from graphpass.torch._export_record import (
    FOLDED_FROM,
    INPUT_KIND,
    ORIGINAL_NAME,
    TIED_NAMES,
    StateKind,
    folded_from,
)
from graphpass.torch.folding._folds import Fold, FusedBatchNorm, MergedConstant

__all__ = ["mark_state", "mark_ties", "recompute", "split_merged_constants", "split_merges",
           "unfuse"]

_TAG: Final = "graphpass.folding"


def mark_ties(graph: Graph, ties: Mapping[str, Sequence[str]]) -> None:
    """Record on each tied initializer its other torch names (:data:`TIED_NAMES`)."""
    for name, aliases in ties.items():
        if name in graph.values:
            graph.values[name].set_metadata(TIED_NAMES, repr(sorted(aliases)))


def split_merges(graph: Graph, merges: Mapping[str, str]) -> list[str]:
    """Give each merged name (:func:`~graphpass.torch.folding.find_merges`) its own initializer.

    ``name = Identity(source)`` becomes an initializer ``name`` holding a copy of
    ``source``'s values (the values both held at export time), so that the two train
    apart, as torch trains them.

    Returns:
        The names split, in order.
    """
    split: list[str] = []
    for name, source in merges.items():
        producer = graph.producer(name)
        tensor = graph.initializers.get(source)
        if producer is None or producer.op_type != "Identity" or tensor is None or \
                list(producer.inputs) != [source]:
            continue
        graph.remove(producer, safe=False)
        graph.set_initializer(Tensor.from_array(name, tensor.numpy().copy(), tensor.dtype))
        graph.values[name].set_metadata(
            _TAG, f"split from {source!r}: the legacy exporter had merged the two because "
                  "they held equal values")
        split.append(name)
    return split


def split_merged_constants(graph: Graph, merges: Sequence[MergedConstant]) -> list[str]:
    """Give each merged constant back to its readers under its own name.

    The merges are :func:`~graphpass.torch.folding.find_merged_constants`'s.

    The readers read an initializer named after their FX value, a copy of the kept
    constant's values, recorded as folded from their own parameter by the kept constant's
    FX nodes; the folds found then compute it from that parameter, so that each layer's
    trains apart, as in torch.

    Returns:
        The constants added, in order.
    """
    split: list[str] = []
    for merge in merges:
        tensor = graph.initializers.get(merge.constant)
        if tensor is None or graph.is_defined(merge.name):
            continue
        record = folded_from(graph.values[merge.constant].metadata)
        graph.set_initializer(Tensor.from_array(merge.name, tensor.numpy().copy(), tensor.dtype))
        value = graph.values[merge.name]
        value.set_metadata(FOLDED_FROM, repr([merge.source, *(
            name for name in record if name != merge.replaces)]))
        value.set_metadata(_TAG, f"split from {merge.constant!r}: the exporter's optimizer had "
                                 "merged the two because they held equal values")
        for node, slot in merge.readers:
            node.set_input(slot, merge.name)
        split.append(merge.name)
    return split


def recompute(graph: Graph, fold: Fold, source: str | None = None) -> list[Node]:
    """Replace ``fold``'s initializer by nodes computing it from its source initializer.

    Args:
        graph: The graph holding the fold (as an initializer, or a name used but undefined).
        fold: A fold with a recipe.
        source: The initializer to compute from (default: ``fold.source``); it must exist.

    Returns:
        The nodes inserted (before the constant's first reader).

    Raises:
        ValueError: The fold has no recipe, or the source is no initializer.
    """
    if fold.recipe is None:
        raise ValueError(f"no recipe is known for {fold.name!r}")
    source = source or fold.source
    if source not in graph.initializers:
        raise ValueError(f"{source!r} is no initializer of the graph")
    nodes = fold.recipe.nodes(source, fold.name)
    renamed: dict[str, str] = {}  # the names of constants and intermediates must be free
    for node in nodes:
        node.set_inputs([renamed.get(name, name) for name in node.inputs])
        outputs = []
        for name in node.outputs:
            if name != fold.name:
                renamed[name] = _fresh(graph, name, taken=set(renamed.values()))
            outputs.append(renamed.get(name, name))
        node.set_outputs(outputs)
    if fold.name in graph.initializers:  # else undefined: the export was saved without it
        graph.remove_initializer(fold.name)
    value = graph.values[fold.name]
    value.set_metadata(FOLDED_FROM, None)
    for node in nodes:
        node.set_metadata(_TAG, f"computes the exporter's folded {fold.name!r} again "
                                f"({fold.evidence})")
    _insert_before_first_use(graph, fold.name, nodes)
    return nodes


def unfuse(graph: Graph, fused: FusedBatchNorm, names: Mapping[str, str] | None = None
           ) -> Node:
    """Turn the fused ``Conv`` back into ``Conv`` + ``BatchNormalization`` (torch's layers).

    The caller has set the initializers the layers read: the conv's weight (and bias) and
    the batch norm's scale, shift, mean and variance, under ``names`` (source -> initializer;
    default: the sources' own names). The fused weight's initializer, if named otherwise,
    and the fused bias are removed.

    Returns:
        The inserted ``BatchNormalization`` node.
    """
    names = dict(names or {})

    def name(source: str) -> str:
        return names.get(source, source)

    conv = fused.node
    output = conv.outputs[0]
    hidden = _fresh(graph, f"{output}__conv")
    conv_inputs = [conv.inputs[0], name(fused.conv_weight)]
    if fused.conv_bias is not None:
        conv_inputs.append(name(fused.conv_bias))
    batch_norm_metadata = dict(conv.metadata)
    conv.set_outputs([hidden, *conv.outputs[1:]])
    conv.set_inputs(conv_inputs)
    batch_norm = Node(
        "BatchNormalization",
        [hidden, name(fused.scale), name(fused.shift), name(fused.mean), name(fused.variance)],
        [output], name=f"{conv.name or 'conv'}__batch_norm",
        attributes={"epsilon": fused.epsilon, "momentum": 1.0 - fused.momentum},
        metadata={**batch_norm_metadata,
                  _TAG: f"the batch norm the exporter fused into {conv.name!r} ({fused.evidence})"})
    conv.set_metadata(_TAG, f"the convolution the exporter fused {batch_norm.name!r} into")
    graph.insert_after(conv, batch_norm)
    for leftover in (fused.weight, fused.bias):
        if leftover and leftover not in conv_inputs and leftover in graph.initializers \
                and not graph.is_used(leftover):
            graph.remove_initializer(leftover)
    return batch_norm


def mark_state(graph: Graph, name: str, kind: StateKind, placeholder: str | None) -> None:
    """Record on initializer ``name`` what torch says it is, as the exporter does."""
    value = graph.values[name]
    value.set_metadata(INPUT_KIND, {"parameter": "PARAMETER", "buffer": "BUFFER",
                                    "constant": "CONSTANT_TENSOR"}[kind])
    if placeholder:
        value.set_metadata(ORIGINAL_NAME, placeholder)


def _insert_before_first_use(graph: Graph, name: str, nodes: list[Node]) -> None:
    readers = {id(node) for node, _ in graph.uses(name) if node is not None}
    for node in graph:
        if id(node) in readers:
            graph.insert_before(node, nodes)
            return
    first = next(iter(graph), None)
    if first is None:
        graph.extend(nodes)
    else:
        graph.insert_before(first, nodes)


def _fresh(graph: Graph, name: str, taken: set[str] | None = None) -> str:
    candidate, number = name, 1
    while graph.is_defined(candidate) or graph.is_used(candidate) or candidate in (taken or ()):
        number += 1
        candidate = f"{name}{number}"
    return candidate
