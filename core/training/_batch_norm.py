"""Batch normalization in training mode: batch statistics, running statistics carried.

A model exported from ``model.eval()`` holds its ``BatchNormalization`` nodes in
inference mode: they normalize with the running statistics, which stay fixed. Training
the way ``model.train()`` does (and onnxruntime-training does) means normalizing each
batch with its own statistics and moving the running statistics towards them.
:func:`use_batch_statistics` rewrites a training graph that way:

* every ``BatchNormalization`` node of the main graph is switched to
  ``training_mode=1`` while the gradient is built, so that the
  ``BatchNormalization`` builder differentiates through the batch statistics;
* for each node, the new running statistics are computed next to it, exactly as
  ``torch.nn.BatchNorm*d`` does in ``train()`` mode: ``mean' = m * mean + (1 - m) *
  batch_mean`` and ``var' = m * var + (1 - m) * batch_var * n / (n - 1)`` (the
  *unbiased* batch variance, over the ``n`` values a channel sees), with the node's
  ONNX momentum ``m`` (torch's ``momentum`` is ``1 - m``; the exporters write ``m``).
* while the gradient is built the node reads the batch's mean and biased variance
  computed beside it as its inputs 3 and 4 (in training mode they only feed the
  running statistics, which the node no longer outputs), where the builder takes them
  instead of computing them again: the backward pass keeps the node's input ``X`` and
  two ``[C]`` vectors from the forward pass, like onnxruntime-training's kernel;
* once the gradient is built (:func:`finish_batch_statistics`), the node goes back to
  inference mode and reads the batch's mean and biased variance computed beside it:
  the same output, without onnxruntime's training-mode kernel, which writes its
  (biased) running statistics into the buffers of the node's inputs, even when they
  are graph inputs the caller owns.

The running statistics must be initializers (as torch's exporters write them), read
by one node each; they become state that ``step.onnx`` reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import onnx

from graphpass.ir import Attribute, Graph, Node
from graphpass.training._builder import GradientError, node_label
from graphpass.training._constants import constant_value
from graphpass.training._emit import Emitter
from graphpass.training.rules import normalize_domain

__all__ = ["BATCH_NORM_MODES", "BatchNormMode", "RunningStatistics", "check_batch_norm_mode",
           "finish_batch_statistics", "use_batch_statistics"]

BatchNormMode = Literal["batch-statistics", "running-statistics"]
"""How batch normalizations train (``build-training-graph``'s ``batch-norm`` option)."""

BATCH_NORM_MODES: tuple[BatchNormMode, ...] = ("batch-statistics", "running-statistics")
"""The values of :data:`BatchNormMode`."""

_MEAN, _VARIANCE = 3, 4


def check_batch_norm_mode(mode: str) -> None:
    """Raise :class:`GradientError` unless ``mode`` is one of :data:`BATCH_NORM_MODES`."""
    if mode not in BATCH_NORM_MODES:
        raise GradientError(f"unknown batch-norm mode {mode!r}",
                            hint=f"choose one of {', '.join(BATCH_NORM_MODES)}")


@dataclass(frozen=True)
class RunningStatistics:
    """The running statistics of one batch normalization, and their values after a step.

    Attributes:
        node: The node's name.
        mean: The running-mean initializer.
        variance: The running-variance initializer.
        new_mean: The value holding the running mean after the step.
        new_variance: The value holding the running variance after the step.
        batch_mean: The batch's mean per channel.
        batch_variance: The batch's biased variance per channel.
    """

    node: str
    mean: str
    variance: str
    new_mean: str
    new_variance: str
    batch_mean: str
    batch_variance: str


def _batch_norms(graph: Graph) -> list[Node]:
    return [node for node in graph
            if node.op_type == "BatchNormalization" and not normalize_domain(node.domain)]


def use_batch_statistics(graph: Graph, emit: Emitter, opset: int,
                         frozen_inputs: frozenset[str] = frozenset()) -> list[RunningStatistics]:
    """Switch every batch normalization of ``graph`` to batch statistics (in place).

    Args:
        graph: The training graph's main graph (sorted).
        emit: Emits the running-statistics updates into ``graph``.
        opset: The model's ai.onnx opset (14 or later: ``training_mode`` is an attribute).
        frozen_inputs: Names that may not be running statistics (the trainable weights).

    Returns:
        The running statistics of every node, in graph order.

    Raises:
        GradientError: A node's running statistics are not initializers, are shared
            between nodes, the rank of its input is unknown, or the opset is below 14.
    """
    nodes = _batch_norms(graph)
    if not nodes:
        return []
    if opset < 14:
        raise GradientError(
            f"batch-norm = \"batch-statistics\" needs ai.onnx opset 14 or later (the model "
            f"imports {opset})", hint="convert the model (onnx.version_converter."
            "convert_version(model, 15)), or train with batch-norm = \"running-statistics\"",
            node=node_label(nodes[0]))
    readers: dict[str, int] = {}
    for node in graph:
        for name in set(node.inputs):
            if name:
                readers[name] = readers.get(name, 0) + 1
    found = []
    for node in nodes:
        if _reads_computed_statistics(graph, node):
            continue
        start = len(emit.nodes)
        found.append(_switch(graph, node, emit, readers, frozen_inputs))
        added = emit.nodes[start:]
        for new in added:  # computed right before the node, which will read them
            graph.remove(new, safe=False)
        graph.insert_before(node, added)
    return found


def _reads_computed_statistics(graph: Graph, node: Node) -> bool:
    """Whether ``node`` normalizes with statistics the model computes (it has no running ones).

    torch's ``batch_norm(x, None, None, training=True)`` (a weight standardized in
    ``forward``, BiT's convolutions) exports as an inference-mode node reading the mean
    and variance computed beside it: it already normalizes with the statistics of what
    it reads, in ``train()`` as in ``eval()``, and has no running statistics to carry.
    """
    inputs = list(node.inputs)
    statistics = [inputs[i] if i < len(inputs) else "" for i in (_MEAN, _VARIANCE)]
    return all(name and graph.producer(name) is not None
               and constant_value(graph, name) is None
               and _merged_into(graph, name) is None for name in statistics)


def finish_batch_statistics(graph: Graph, statistics: list[RunningStatistics]) -> None:
    """Put each switched node back in inference mode, reading the batch's statistics.

    Call it once the gradient is built (the builder needed ``training_mode=1``).
    """
    for found in statistics:
        (node,) = [n for n in graph.consumers(found.batch_variance)
                   if n.op_type == "BatchNormalization"]
        node.set_attribute(Attribute.from_value("training_mode", 0))
        node.set_outputs(list(node.outputs)[:1])
        node.set_inputs([*node.inputs[:_MEAN], found.batch_mean, found.batch_variance])


def _switch(graph: Graph, node: Node, emit: Emitter, readers: dict[str, int],
            frozen_inputs: frozenset[str]) -> RunningStatistics:
    label = node_label(node)
    inputs = list(node.inputs)
    mean, variance = (inputs[i] if i < len(inputs) else "" for i in (_MEAN, _VARIANCE))
    hint = ("train with batch-norm = \"running-statistics\" (the statistics stay fixed), or "
            "re-export the model with its running statistics as initializers")
    for name in (mean, variance):
        merged = _merged_into(graph, name)
        if merged is not None:
            raise GradientError(
                f"the running statistic {name!r} of batch normalization {label!r} is "
                f"{merged}: the exporter merged equal tensors (a freshly initialised model's "
                "running statistics are all zeros and ones, like its BatchNorm weights and "
                "biases) into one initializer and Identity copies of it, so the nodes "
                "cannot each carry their own from step to step",
                hint="run restore-parameters first (train-ready does), or fill the model from "
                     "its checkpoint (reconcile-initializers, --checkpoint): each gives every "
                     "copy an initializer of its own; or train with batch-norm = "
                     "\"running-statistics\"", node=label)
        if not name or name not in graph.initializers or name in graph.input_names:
            raise GradientError(
                f"batch normalization {label!r} reads its running statistics from {name!r}, "
                "which is not an initializer, so they cannot be carried from step to step",
                hint=hint, node=label)
        if readers.get(name, 0) != 1:
            raise GradientError(
                f"the running statistic {name!r} of batch normalization {label!r} is read by "
                f"{readers.get(name, 0)} nodes; each node needs its own", hint=hint, node=label)
        if name in frozen_inputs:
            raise GradientError(f"the running statistic {name!r} of batch normalization "
                                f"{label!r} is also a trainable weight", node=label,
                                hint="leave it out of the trainable option")
    x = inputs[0]
    rank = emit.type_of(x).rank
    if rank is None or rank < 2:
        raise GradientError(f"the rank of the input of batch normalization {label!r} is "
                            "unknown", hint="run infer-shapes first, or declare the input "
                            "shapes", node=label)
    if len(node.outputs) > 1 and any(name and graph.is_used(name) for name in node.outputs[1:]):
        raise GradientError(f"the running statistics batch normalization {label!r} computes "
                            "are used in the model", hint=hint, node=label)
    node.set_attribute(Attribute.from_value("training_mode", 1))
    # ONNX shape inference wants the three outputs of training mode; without them it
    # types nothing downstream, which a model that declares no value_info needs.
    y = node.outputs[0]
    node.set_outputs([y, *(name or emit.names.fresh(f"{label}_statistics_unused")
                           for name in [*node.outputs[1:3], "", ""][:2])])
    momentum = float(node.attribute("momentum", 0.9))
    emit.prefix = f"{label}_running_statistics"
    axes = [0, *range(2, rank)]
    batch_mean = emit.reduce_mean(x, axes, keepdims=True)
    centered = emit.op("Sub", x, batch_mean)
    biased = emit.reduce_mean(emit.op("Mul", centered, centered), axes, keepdims=False)
    count = _count(emit, x, axes)
    unbiased = emit.op("Div", emit.op("Mul", biased, count),
                       emit.op("Sub", count, emit.scalar(1.0, like=x)))
    flat_mean = emit.reshape(batch_mean, [-1])
    new_mean = _moving(emit, mean, flat_mean, momentum)
    new_variance = _moving(emit, variance, unbiased, momentum)
    # While the gradient is built the node reads the batch's statistics as its inputs 3
    # and 4 (its training-mode output does not depend on them): the builder finds them
    # there and differentiates from them and X, instead of computing them again.
    node.set_inputs([*inputs[:_MEAN], flat_mean, biased])
    return RunningStatistics(label, mean, variance, new_mean, new_variance, flat_mean, biased)


def _merged_into(graph: Graph, name: str) -> str | None:
    """How a running statistic shares one initializer with other tensors, if it does.

    ``"an Identity copy of initializer 'w'"`` when an ``Identity`` of an initializer
    computes it; ``"initializer 'w', which N Identity nodes copy"`` when it is an
    initializer others read through copies. ``None`` otherwise (no merge to blame).
    """
    if not name:
        return None
    producer = graph.producer(name)
    if producer is not None and producer.op_type == "Identity" \
            and not normalize_domain(producer.domain) and producer.inputs \
            and producer.inputs[0] in graph.initializers:
        return f"an Identity copy of initializer {producer.inputs[0]!r}"
    if name in graph.initializers:
        copies = [node for node in graph.consumers(name)
                  if node.op_type == "Identity" and not normalize_domain(node.domain)]
        if copies:
            return (f"initializer {name!r}, which {len(copies)} Identity "
                    f"node{'s' * (len(copies) != 1)} copy")
    return None


def _count(emit: Emitter, x: str, axes: list[int]) -> str:
    """The number of values each channel sees (a scalar of ``x``'s type)."""
    shape = emit.type_of(x).static_shape
    if shape is not None:
        total = 1
        for axis in axes:
            total *= shape[axis]
        return emit.scalar(float(total), like=x)
    size = emit.op("Div", emit.op("Size", x), emit.op("Squeeze", emit.shape(x, 1, 2)))
    return emit.cast_like(size, x)


def _moving(emit: Emitter, running: str, batch: str, momentum: float) -> str:
    """``momentum * running + (1 - momentum) * batch`` in ``running``'s type."""
    elem_type = emit.elem_type(running) or onnx.TensorProto.FLOAT
    kept = emit.op("Mul", running, emit.constant(momentum, elem_type))
    added = emit.op("Mul", emit.cast_like(batch, running), emit.constant(1.0 - momentum,
                                                                         elem_type))
    return emit.op("Add", kept, added)
