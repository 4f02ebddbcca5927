"""Losses appended to a model's forward graph, in standard ONNX.

* ``mse``: the mean squared error of a model output against a new graph input
  ``target`` of the same shape and type (``torch.nn.MSELoss()``);
* ``crossentropy``: softmax cross entropy of the logits (classes on the last axis)
  against integer labels ``target`` (the logits' shape without the last axis),
  ignoring label -100 and averaging over the rest: ``torch.nn.CrossEntropyLoss()`` on
  ``logits.reshape(-1, classes)`` and ``labels.reshape(-1)``, as Hugging Face models
  compute it;
* ``none``: the model output already is the loss (a scalar, or one element).

The loss is the value ``loss``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import onnx

from graphpass.ir import Model
from graphpass.training._emit import Emitter
from graphpass.training.builder import GradientError
from graphpass.training.value_types import ModelTypes, TypeInfo

__all__ = ["IGNORE_INDEX", "LOSS", "TARGET", "LossKind", "LossOutput", "add_loss"]

LOSS = "loss"
"""The name of the loss value (and of the first output of ``gradient.onnx``)."""

TARGET = "target"
"""The name of the graph input a loss compares against."""

IGNORE_INDEX = -100
"""Labels ``crossentropy`` ignores (torch's default)."""

LossKind = Literal["mse", "crossentropy", "none"]


@dataclass(frozen=True)
class LossOutput:
    """What :func:`add_loss` added.

    Attributes:
        loss: The loss value (``"loss"``).
        target: The new target input (``None`` for ``none``).
        inputs: The model outputs the loss reads.
        declaration: The loss value's type (a float scalar, or one element).
    """

    loss: str
    target: str | None
    inputs: tuple[str, ...]
    declaration: onnx.ValueInfoProto


def _declaration(name: str, info: TypeInfo, what: str) -> onnx.ValueInfoProto:
    if info.elem_type is None or info.shape is None:
        raise GradientError(f"the type or shape of {what} is unknown, so the {TARGET!r} input "
                            "cannot be declared", hint="run infer-shapes first, or declare "
                            "the model's output shapes")
    dims = [d if isinstance(d, (int, str)) and d != "" else f"{name}_d{i}"
            for i, d in enumerate(info.shape)]
    return onnx.helper.make_tensor_value_info(name, info.elem_type, dims)


def add_loss(model: Model, kind: LossKind, loss_inputs: Sequence[str], emit: Emitter,
             types: ModelTypes) -> LossOutput:
    """Append the loss ``kind`` to ``model``'s main graph (in place).

    Args:
        model: The model (``loss`` and ``target`` must be free names).
        kind: ``mse``, ``crossentropy`` or ``none``.
        loss_inputs: The outputs the loss reads (default: the first graph output).
        emit: Emits the loss nodes into the main graph.
        types: Types of the model's values (before the loss).

    Raises:
        GradientError: An output is not in the model, has no float type, or a ``none``
            loss is not a scalar.
    """
    graph = model.graph
    chosen = list(loss_inputs) or list(graph.output_names[:1])
    if not chosen:
        raise GradientError("the model has no output to compute a loss from")
    if len(chosen) != 1:
        raise GradientError(f"the {kind} loss reads one output, not {len(chosen)} "
                            f"({', '.join(chosen)})", hint="name one in loss-inputs")
    output = chosen[0]
    if output not in graph.values or not graph.is_defined(output):
        raise GradientError(f"loss input {output!r} is not a value of the model",
                            hint="graph outputs: " + ", ".join(graph.output_names))
    info = types.of(graph, output)
    emit.prefix = LOSS
    if kind == "none":
        size = None if info.static_shape is None else _product(info.static_shape)
        if size is not None and size != 1:
            raise GradientError(f"with loss = none the output {output!r} is the loss, but it "
                                f"has shape {list(info.static_shape or ())}, not one element",
                                hint="choose loss = mse or crossentropy, or name the loss "
                                     "output in loss-inputs")
        loss = emit.op("ReduceSum", output, keepdims=0) if info.rank != 0 else output
        emit.node("Identity", [loss], [LOSS])
        return LossOutput(LOSS, None, (output,), _scalar(info, output))
    if kind == "mse":
        graph.add_input(_declaration(TARGET, info, f"output {output!r}"))
        difference = emit.op("Sub", output, TARGET)
        squared = emit.op("Mul", difference, difference)
        emit.node("ReduceMean", [squared], [LOSS], keepdims=0)
        return LossOutput(LOSS, TARGET, (output,), _scalar(info, output))
    if info.shape is None or not info.shape:
        raise GradientError(f"the crossentropy loss needs logits with a class axis; the rank "
                            f"of {output!r} is unknown or 0", hint="run infer-shapes first")
    label_info = TypeInfo(onnx.TensorProto.INT64, tuple(info.shape[:-1]))
    graph.add_input(_declaration(TARGET, label_info, f"output {output!r}"))
    classes = emit.shape(output, -1) if not isinstance(info.shape[-1], int) \
        else emit.ints([info.shape[-1]])
    logits = output
    labels = TARGET
    if len(info.shape) != 2:
        logits = emit.reshape(output, emit.op("Concat", emit.ints([-1]), classes, axis=0))
        labels = emit.reshape(TARGET, [-1])
    emit.node("SoftmaxCrossEntropyLoss", [logits, labels], [LOSS], reduction="mean",
              ignore_index=IGNORE_INDEX)
    return LossOutput(LOSS, TARGET, (output,), _scalar(info, output))


def _scalar(info: TypeInfo, output: str) -> onnx.ValueInfoProto:
    if info.elem_type is None:
        raise GradientError(f"the element type of {output!r} is unknown",
                            hint="run infer-shapes first")
    return onnx.helper.make_tensor_value_info(LOSS, info.elem_type, [])


def _product(dims: Sequence[int]) -> int:
    total = 1
    for dim in dims:
        total *= dim
    return total
