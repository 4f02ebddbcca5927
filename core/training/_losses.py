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

**An exact loss.** The value ``loss`` is reduced accurately at any output size: the
per-element terms are summed in ``float32`` over blocks of a few thousand values (no
copy of the output when a block size divides its static trailing dimensions), the
partial sums in ``float64``, and the scalar cast back to the loss's type; for
``crossentropy``, the per-row losses are read from the log-probabilities the gradient
needs anyway and averaged in ``float64``. A ``float32`` ``ReduceMean`` over 12.9M
values (GPT-2's logits) is off by 9e-4 relative; this is within 1e-6. The backward
pass starts from a second, plain ``float32`` reduction of the same terms
(:attr:`LossOutput.differentiated`), which it never computes (a mean's gradient does
not read the mean), so the gradients are exactly those of the plain loss and stay
``float32`` and elementwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import onnx

from graphpass.ir import Model
from graphpass.training._builder import GradientError
from graphpass.training._emit import Emitter
from graphpass.training._value_types import ModelTypes, TypeInfo

__all__ = ["BLOCK", "IGNORE_INDEX", "LOSS", "TARGET", "LossKind", "LossOutput", "add_loss"]

LOSS = "loss"
"""The name of the loss value (and of the first output of ``gradient.onnx``)."""

TARGET = "target"
"""The name of the graph input a loss compares against."""

IGNORE_INDEX = -100
"""Labels ``crossentropy`` ignores (torch's default)."""

BLOCK = 4096
"""The preferred number of values summed in ``float32`` before the ``float64`` sum."""

_BLOCKS = (256, 16384)
"""Block sizes allowed when one divides the output's static trailing dimensions."""

LossKind = Literal["mse", "crossentropy", "none"]


@dataclass(frozen=True)
class LossOutput:
    """What :func:`add_loss` added.

    Attributes:
        loss: The loss value (``"loss"``).
        target: The new target input (``None`` for ``none``).
        inputs: The model outputs the loss reads.
        declaration: The loss value's type (a float scalar, or one element).
        differentiated: The value the backward pass starts from: the same loss as a
            plain reduction in the loss's type (``loss`` itself for ``none``). Its
            gradient equals the loss's; its value is never computed by the gradient
            graph.
    """

    loss: str
    target: str | None
    inputs: tuple[str, ...]
    declaration: onnx.ValueInfoProto
    differentiated: str = LOSS


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
        emit.note_type(difference, info)
        squared = emit.op("Mul", difference, difference)
        differentiated = emit.op("ReduceMean", squared, keepdims=0)
        total = _exact_sum(emit, difference, info, square=True)
        count = emit.op("Cast", emit.op("Size", difference), to=onnx.TensorProto.DOUBLE)
        _cast_to(emit, emit.op("Div", total, count), info, LOSS)
        return LossOutput(LOSS, TARGET, (output,), _scalar(info, output), differentiated)
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
    differentiated, log_prob = emit.ops("SoftmaxCrossEntropyLoss", logits, labels, count=2,
                                        reduction="mean", ignore_index=IGNORE_INDEX)
    # The exact loss: each row's -log p(label), read from the log-probabilities the
    # backward pass keeps anyway, averaged over the rows not ignored in float64.
    ignored = emit.op("Equal", labels, emit.constant(np.array(IGNORE_INDEX, np.int64)))
    safe = emit.op("Where", ignored, emit.constant(np.array(0, np.int64)), labels)
    picked = emit.op("GatherElements", log_prob, emit.unsqueeze(safe, [1]), axis=1)
    picked = emit.squeeze(picked, [1])
    if info.elem_type != onnx.TensorProto.DOUBLE:
        picked = emit.op("Cast", picked, to=onnx.TensorProto.DOUBLE)
    kept = emit.op("Cast", emit.op("Not", ignored), to=onnx.TensorProto.DOUBLE)
    total = emit.reduce_sum(emit.op("Mul", picked, kept), None, keepdims=False)
    count = emit.reduce_sum(kept, None, keepdims=False)
    _cast_to(emit, emit.op("Neg", emit.op("Div", total, count)), info, LOSS)
    return LossOutput(LOSS, TARGET, (output,), _scalar(info, output), differentiated)


def block_size(shape: Sequence[int | str | None] | None) -> int | None:
    """The block a reshape ``[-1, block]`` of a value of ``shape`` can use without padding.

    The divisor of the product of the static trailing dimensions closest to
    :data:`BLOCK` within 256 to 16384 values (the whole value when it is static and
    smaller); ``None`` when there is none (then the value is padded to blocks).
    """
    if shape is None:
        return None
    suffix = 1
    static = True
    for dim in reversed(shape):
        if not isinstance(dim, int) or dim <= 0:
            static = False
            break
        suffix *= dim
    if static and suffix <= _BLOCKS[1]:
        return max(suffix, 1)
    low, high = _BLOCKS
    candidates = [d for d in range(low, min(high, suffix) + 1) if suffix % d == 0]
    if not candidates:
        return None
    return min(candidates, key=lambda d: abs(math.log(d / BLOCK)))


def _exact_sum(emit: Emitter, x: str, info: TypeInfo, *, square: bool) -> str:
    """The sum of ``x``'s elements (of their squares), accurate, as a ``float64`` scalar.

    ``float32`` sums over blocks (few thousand values), then a ``float64`` sum of the
    partial sums: no copy of ``x`` when :func:`block_size` finds a block, one padded
    ``float32`` copy otherwise (never a ``float64`` copy of ``x``).
    """
    op_type = "ReduceSumSquare" if square else "ReduceSum"
    if info.elem_type == onnx.TensorProto.DOUBLE:
        return emit.reduce(op_type, x, None, keepdims=False)
    if info.elem_type != onnx.TensorProto.FLOAT:  # half types: blocks summed in float32
        x = emit.op("Cast", x, to=onnx.TensorProto.FLOAT)
    block = block_size(info.shape)
    flat = emit.reshape(x, [-1])
    if block is None:
        block = BLOCK
        missing = emit.op("Mod", emit.op("Sub", emit.ints([block]),
                                         emit.reshape(emit.op("Size", x), [1])),
                          emit.ints([block]))
        flat = emit.op("Pad", flat, emit.op("Concat", emit.ints([0]), missing, axis=0))
    blocks = emit.reshape(flat, [-1, block])
    partial = emit.reduce(op_type, blocks, [1], keepdims=False)
    partial = emit.op("Cast", partial, to=onnx.TensorProto.DOUBLE)
    return emit.reduce_sum(partial, None, keepdims=False)


def _cast_to(emit: Emitter, value: str, info: TypeInfo, name: str) -> None:
    """Write the ``float64`` ``value`` into ``name``, of the loss's type."""
    if info.elem_type == onnx.TensorProto.DOUBLE:
        emit.node("Identity", [value], [name])
    else:
        emit.node("Cast", [value], [name], to=info.elem_type)


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
