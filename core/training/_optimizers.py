"""Optimizer updates in standard ONNX: SGD and AdamW exactly as ``torch.optim`` computes them.

:func:`add_update` appends one step of an optimizer to a graph that already computes
the gradients. It reads the learning rate ``lr`` (a float scalar input, so that a
schedule can change it every step) and the step count ``step`` (an ``int64`` scalar
input: the steps taken so far, 0 at first) and each weight's state, and produces
the new weights, the new state and ``step + 1``. The hyperparameters are constants.

AdamW follows ``torch.optim.AdamW`` (``amsgrad=False``, ``maximize=False``, the
single-tensor implementation) operation by operation: decoupled weight decay
``w *= 1 - lr * weight_decay``, ``m = lerp(m, g, 1 - beta1)``,
``v = beta2 v + (1 - beta2) g^2``, bias corrections ``1 - beta^t`` computed in float64
(torch computes them as Python floats), ``w -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)``.
SGD follows ``torch.optim.SGD``: weight decay added to the gradient, a momentum buffer
that starts as the first gradient, dampening and Nesterov momentum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import onnx

from graphpass.training._emit import Emitter

__all__ = ["LR", "STEP", "AdamW", "Optimizer", "StateSlot", "Update", "add_update"]

LR = "lr"
"""The learning-rate input of ``step.onnx``."""

STEP = "step"
"""The step-count input of ``step.onnx`` (steps taken so far)."""


@dataclass(frozen=True)
class SGD:
    """``torch.optim.SGD`` hyperparameters (the learning rate is an input)."""

    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    kind: Literal["sgd"] = "sgd"

    @property
    def state(self) -> tuple[str, ...]:
        """The state each weight keeps."""
        return ("momentum_buffer",) if self.momentum else ()


@dataclass(frozen=True)
class AdamW:
    """``torch.optim.AdamW`` hyperparameters (the learning rate is an input)."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    kind: Literal["adamw"] = "adamw"

    @property
    def state(self) -> tuple[str, ...]:
        """The state each weight keeps."""
        return ("exp_avg", "exp_avg_sq")


Optimizer = SGD | AdamW


@dataclass(frozen=True)
class StateSlot:
    """One state tensor of one weight: read as ``input``, written as ``output``.

    Attributes:
        weight: The weight it belongs to.
        kind: ``exp_avg``, ``exp_avg_sq``, ``momentum_buffer``.
        input: The graph input holding its current value.
        output: The graph output holding its value after the step.
    """

    weight: str
    kind: str
    input: str
    output: str


@dataclass(frozen=True)
class Update:
    """What :func:`add_update` added.

    Attributes:
        weights: For each weight, the output holding its value after the step.
        state: The state slots, by kind then weight.
        step_output: The output holding ``step + 1``.
    """

    weights: dict[str, str]
    state: list[StateSlot]
    step_output: str


class _Scalars:
    """Per-step scalars, computed once in float64 and cast once per weight type."""

    def __init__(self, emit: Emitter, optimizer: Optimizer, step_input: str, lr_input: str):
        self.emit = emit
        e = emit
        self.count = e.op("Add", step_input, e.constant(np.array(1, dtype=np.int64)))
        self.lr64 = e.op("Cast", lr_input, to=onnx.TensorProto.DOUBLE)
        self.t64 = e.op("Cast", self.count, to=onnx.TensorProto.DOUBLE)
        self._values: dict[str, str] = {}
        self._cast: dict[tuple[str, int], str] = {}
        self.optimizer = optimizer

    def double(self, name: str) -> str:
        """A float64 scalar by name (computed on first use)."""
        if name in self._values:
            return self._values[name]
        e, o = self.emit, self.optimizer
        one = e.constant(np.array(1.0))
        if name == "decay" and isinstance(o, AdamW):  # 1 - lr * weight_decay
            value = e.op("Sub", one, e.op("Mul", self.lr64,
                                          e.constant(np.array(o.weight_decay))))
        elif name == "step_size" and isinstance(o, AdamW):  # lr / (1 - beta1^t)
            bias1 = e.op("Sub", one, e.op("Pow", e.constant(np.array(o.beta1)), self.t64))
            value = e.op("Div", self.lr64, bias1)
        elif name == "bias2_sqrt" and isinstance(o, AdamW):  # sqrt(1 - beta2^t)
            value = e.op("Sqrt", e.op("Sub", one, e.op("Pow", e.constant(np.array(o.beta2)),
                                                        self.t64)))
        elif name == "neg_lr":
            value = e.op("Neg", self.lr64)
        else:  # pragma: no cover - a programming error
            raise KeyError(name)
        self._values[name] = value
        return str(value)

    def typed(self, name: str, elem_type: int) -> str:
        """The float64 scalar ``name`` cast to ``elem_type``."""
        key = (name, elem_type)
        if key not in self._cast:
            value = self.double(name)
            self._cast[key] = value if elem_type == onnx.TensorProto.DOUBLE else \
                self.emit.op("Cast", value, to=elem_type)
        return self._cast[key]


def _adamw(emit: Emitter, scalars: _Scalars, optimizer: AdamW, weight: str, grad: str,
           state: dict[str, str], elem_type: int) -> tuple[str, dict[str, str]]:
    e = emit

    def constant(value: float) -> str:
        return e.constant(np.array(value), elem_type)

    decayed = weight
    if optimizer.weight_decay:
        decayed = e.op("Mul", weight, scalars.typed("decay", elem_type))
    m, v = state["exp_avg"], state["exp_avg_sq"]
    new_m = e.op("Add", m, e.op("Mul", e.op("Sub", grad, m), constant(1.0 - optimizer.beta1)))
    new_v = e.op("Add", e.op("Mul", v, constant(optimizer.beta2)),
                 e.op("Mul", e.op("Mul", grad, grad), constant(1.0 - optimizer.beta2)))
    denominator = e.op("Add", e.op("Div", e.op("Sqrt", new_v),
                                   scalars.typed("bias2_sqrt", elem_type)),
                       constant(optimizer.eps))
    step = e.op("Mul", scalars.typed("step_size", elem_type), e.op("Div", new_m, denominator))
    return e.op("Sub", decayed, step), {"exp_avg": new_m, "exp_avg_sq": new_v}


def _sgd(emit: Emitter, scalars: _Scalars, optimizer: SGD, weight: str, grad: str,
         state: dict[str, str], elem_type: int, step_input: str) -> tuple[str, dict[str, str]]:
    e = emit

    def constant(value: float) -> str:
        return e.constant(np.array(value), elem_type)

    direction = grad
    if optimizer.weight_decay:
        direction = e.op("Add", grad, e.op("Mul", weight, constant(optimizer.weight_decay)))
    new_state: dict[str, str] = {}
    if optimizer.momentum:
        buffer = state["momentum_buffer"]
        later = e.op("Add", e.op("Mul", buffer, constant(optimizer.momentum)),
                     e.op("Mul", direction, constant(1.0 - optimizer.dampening)))
        first = e.op("Equal", step_input, e.constant(np.array(0, dtype=np.int64)))
        new_buffer = e.op("Where", first, direction, later)  # torch starts it as the gradient
        new_state["momentum_buffer"] = new_buffer
        if optimizer.nesterov:
            direction = e.op("Add", direction, e.op("Mul", new_buffer,
                                                    constant(optimizer.momentum)))
        else:
            direction = new_buffer
    updated = e.op("Add", weight, e.op("Mul", direction, scalars.typed("neg_lr", elem_type)))
    return str(updated), new_state


def add_update(emit: Emitter, optimizer: Optimizer, weights: Sequence[str],
               gradients: Sequence[str], elem_types: Sequence[int],
               state_inputs: dict[tuple[str, str], str], step_input: str = STEP,
               lr_input: str = LR) -> Update:
    """Append one optimizer step for ``weights`` given their ``gradients``.

    Args:
        emit: Emits into the graph that computes the gradients.
        optimizer: The optimizer and its hyperparameters.
        weights: The weights (graph inputs), in order.
        gradients: Their gradients, in the same order.
        elem_types: Their element types.
        state_inputs: The graph input of each ``(weight, state kind)``.
        step_input: The step-count input (``int64`` scalar, steps taken so far).
        lr_input: The learning-rate input (``float`` scalar).

    Returns:
        The value names of the new weights, the new state, and the new step count
        (the caller makes them graph outputs under the names it chooses).
    """
    emit.prefix = "optimizer"
    scalars = _Scalars(emit, optimizer, step_input, lr_input)
    new_weights: dict[str, str] = {}
    slots: dict[str, list[StateSlot]] = {kind: [] for kind in optimizer.state}
    for weight, grad, elem_type in zip(weights, gradients, elem_types, strict=True):
        emit.prefix = f"{weight}_update"
        state = {kind: state_inputs[(weight, kind)] for kind in optimizer.state}
        if isinstance(optimizer, AdamW):
            new_weight, new_state = _adamw(emit, scalars, optimizer, weight, grad, state,
                                           elem_type)
        else:
            new_weight, new_state = _sgd(emit, scalars, optimizer, weight, grad, state,
                                         elem_type, step_input)
        new_weights[weight] = new_weight
        for kind, value in new_state.items():
            slots[kind].append(StateSlot(weight, kind, state[kind], value))
    return Update(new_weights, [slot for kind in optimizer.state for slot in slots[kind]],
                  str(scalars.count))
