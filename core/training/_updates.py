"""The optimizer step in place: what ``step.onnx`` computes, on numpy arrays, in blocks.

:class:`~graphpass.training.Trainer` runs ``gradient.onnx`` (gradients into buffers it
preallocated) and then updates each weight and its state here, in place, so that the
weights and the optimizer state are held once (a session that computes new weights
needs a second buffer for each of them: double the weights and both AdamW moments).

The arithmetic is :mod:`graphpass.training._optimizers`' operation by operation, in the
weight's own type (float32 for float32 weights), with the per-step scalars computed in
float64 and rounded once, as ``step.onnx`` computes them; IEEE arithmetic makes the two
agree bit for bit. Each weight is updated in blocks of :data:`BLOCK` values, so that the
temporaries stay in the cache: a few passes over a block that is already there instead
of a few passes over the whole weight in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

__all__ = ["BLOCK", "apply_update"]

BLOCK: Final = 1 << 15
"""Values updated at a time (128 KiB of float32: a block and its temporaries fit in L2)."""


def apply_update(optimizer: Mapping[str, Any], weight: np.ndarray, grad: np.ndarray,
                 state: Mapping[str, np.ndarray], *, lr: float, step: int,
                 scratch: np.ndarray) -> None:
    """Update ``weight`` and its ``state`` in place from ``grad``: one optimizer step.

    Args:
        optimizer: The manifest's ``optimizer`` entry (``kind`` and hyperparameters).
        weight: The weight (C-contiguous, written in place).
        grad: Its gradient (same shape and type; read only, except as noted below).
        state: Its state by kind (``exp_avg``, ``exp_avg_sq``, ``momentum_buffer``).
        lr: The learning rate.
        step: Steps taken before this one (0 at the first step).
        scratch: A float array of at least ``2 * BLOCK`` values of the weight's type.
    """
    with np.errstate(all="ignore"):  # a loss that blew up is the caller's to report
        _apply(optimizer, weight, grad, state, lr, step, scratch)


def _apply(optimizer: Mapping[str, Any], weight: np.ndarray, grad: np.ndarray,
           state: Mapping[str, np.ndarray], lr: float, step: int, scratch: np.ndarray) -> None:
    flat_w, flat_g = weight.reshape(-1), grad.reshape(-1)
    flats = {kind: value.reshape(-1) for kind, value in state.items()}
    dtype = weight.dtype.type
    lr64 = float(np.float32(lr))  # step.onnx's lr is a float input, cast to double
    if optimizer["kind"] == "adamw":
        scalars = _adamw_scalars(optimizer, lr64, step, dtype)
        for start in range(0, flat_w.size, BLOCK):
            end = min(start + BLOCK, flat_w.size)
            _adamw_block(flat_w[start:end], flat_g[start:end], flats["exp_avg"][start:end],
                         flats["exp_avg_sq"][start:end], scalars,
                         scratch[:end - start], scratch[BLOCK:BLOCK + end - start])
    else:
        scalars = _sgd_scalars(optimizer, lr64, dtype)
        buffer = flats.get("momentum_buffer")
        for start in range(0, flat_w.size, BLOCK):
            end = min(start + BLOCK, flat_w.size)
            _sgd_block(flat_w[start:end], flat_g[start:end],
                       None if buffer is None else buffer[start:end], scalars, step == 0,
                       scratch[:end - start])


def _adamw_scalars(optimizer: Mapping[str, Any], lr64: float, step: int,
                   dtype: Any) -> dict[str, Any]:
    t = float(step + 1)
    beta1, beta2 = float(optimizer["beta1"]), float(optimizer["beta2"])
    decay = float(optimizer["weight_decay"])
    return {
        "decay": dtype(1.0 - lr64 * decay) if decay else None,
        "one_minus_beta1": dtype(1.0 - beta1),
        "beta2": dtype(beta2),
        "one_minus_beta2": dtype(1.0 - beta2),
        "bias2_sqrt": dtype(np.sqrt(1.0 - np.power(beta2, t))),
        "eps": dtype(optimizer["eps"]),
        "step_size": dtype(lr64 / (1.0 - np.power(beta1, t))),
    }


def _adamw_block(w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
                 s: Mapping[str, Any], a: np.ndarray, b: np.ndarray) -> None:
    # m = m + (g - m) * (1 - beta1)
    np.subtract(g, m, out=a)
    a *= s["one_minus_beta1"]
    m += a
    # v = v * beta2 + (g * g) * (1 - beta2)
    np.multiply(g, g, out=a)
    a *= s["one_minus_beta2"]
    v *= s["beta2"]
    v += a
    # w = w * decay - step_size * (m / (sqrt(v) / bias2_sqrt + eps))
    np.sqrt(v, out=a)
    a /= s["bias2_sqrt"]
    a += s["eps"]
    np.divide(m, a, out=b)
    b *= s["step_size"]
    if s["decay"] is not None:
        w *= s["decay"]
    w -= b


def _sgd_scalars(optimizer: Mapping[str, Any], lr64: float, dtype: Any) -> dict[str, Any]:
    momentum = float(optimizer.get("momentum", 0.0))
    return {
        "weight_decay": dtype(optimizer.get("weight_decay", 0.0)),
        "decays": bool(optimizer.get("weight_decay", 0.0)),
        "momentum": dtype(momentum),
        "one_minus_dampening": dtype(1.0 - float(optimizer.get("dampening", 0.0))),
        "nesterov": bool(optimizer.get("nesterov", False)),
        "neg_lr": dtype(-lr64),
    }


def _sgd_block(w: np.ndarray, g: np.ndarray, buffer: np.ndarray | None, s: Mapping[str, Any],
               first: bool, a: np.ndarray) -> None:
    # direction = g + w * weight_decay
    if s["decays"]:
        np.multiply(w, s["weight_decay"], out=a)
        a += g
    else:
        a[...] = g
    if buffer is not None:
        if first:  # torch starts the buffer as the first direction
            buffer[...] = a
        else:  # buffer * momentum + direction * (1 - dampening)
            buffer *= s["momentum"]
            buffer += a * s["one_minus_dampening"]
        if s["nesterov"]:
            a += buffer * s["momentum"]
        else:
            a[...] = buffer
    # w = w + direction * -lr
    a *= s["neg_lr"]
    w += a
