"""Whether onnxruntime-training's gradient of a model is right: finite differences.

Runs in the onnxruntime-training venv (``oracle.py`` calls :func:`check_gradient` for a
job with ``"check_gradient": true``). The gradient is the one ORT computes in one
training step (``Module`` in train mode, the parameter's ``grad``); the finite
differences come from the same training model's loss, the trainable weights moved in
its checkpoint state: the function ORT differentiates (``BatchNormalization`` with batch
statistics, as ORT trains it), in the model's own precision (float32 mostly).

Along each of three random directions ``v`` of the trainable weights, with steps
``h`` and ``h / 10``:

* ``g . v`` (the analytic slope) against the central difference
  ``(L(w + h v) - L(w - h v)) / 2h``;
* the one-sided differences ``(L(w + h v) - L(w)) / h`` and ``(L(w) - L(w - h v)) / h``
  must agree with each other (else the direction crosses a kink: ``Relu`` at 0, a tie
  of ``Max``, a step of ``Floor``) and the central differences at both steps with each
  other (else the loss is too rough at float32 precision along ``v``).

A direction is ``right`` when ``g . v`` matches a central difference, ``wrong`` when the
loss is smooth along ``v`` (both checks above hold) and ``g . v`` matches neither, and
``rough`` otherwise. The verdict of a case: ``wrong`` if any direction is wrong,
``right`` if all three are right (``zero`` when, besides, the loss does not change
along any of them: nothing was checked), else ``rough``.

A builder can be right at one point and wrong at another (a ``Clip`` whose bounds no
value of the test's data reaches, a ``ScatterElements`` with ``reduction = "max"``
whose updates all win), so every case not already ``wrong`` is checked at random points
too: the weights and the float inputs drawn from a standard normal, other inputs kept,
until six points where the loss depends on the weight (at most sixteen points). A case
``wrong`` at one of them is ``wrong``; a ``zero`` case otherwise takes the verdict of
the first random point where the loss depends on the weight.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

DIRECTIONS = 3
RANDOM_POINTS = 16
"""At most this many random points a case."""
RANDOM_CHECKS = 6
"""A case not found wrong is checked at this many random points where its loss depends on
the weight (or at most :data:`RANDOM_POINTS`)."""
TOLERANCE = 0.05
"""Relative tolerance between two slopes (analytic or finite differences)."""
STEP = 1e-2
"""The larger step, relative to the size (RMS) of the weights (at least 0.1)."""
RANDOM_OPS = frozenset({"Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform",
                        "RandomUniformLike", "Multinomial", "Bernoulli"})
_EPSILON = {np.dtype(np.float32): 1.2e-7, np.dtype(np.float16): 1e-3,
            np.dtype(np.float64): 2.3e-16}


class _Training:
    """The training model of some artifacts: its loss and gradients at given weights."""

    def __init__(self, artifacts: str, feeds: Mapping[str, Any], weights: Sequence[str]):
        from onnxruntime.training import api

        self.state = api.CheckpointState.load_checkpoint(os.path.join(artifacts, "checkpoint"))
        self.module = api.Module(os.path.join(artifacts, "training_model.onnx"), self.state,
                                 os.path.join(artifacts, "eval_model.onnx"))
        self.module.train()
        self.weights = list(weights)
        self.feeds = dict(feeds)
        self.start = {name: np.array(self.state.parameters[name].data, copy=True)
                      for name in self.weights}

    def batch(self) -> list[Any]:
        return [self.feeds[name] for name in self.module.input_names()]

    def loss(self, weights: Mapping[str, np.ndarray]) -> float:
        for name, value in weights.items():
            self.state.parameters[name] = np.asarray(value, dtype=self.start[name].dtype)
        outputs = self.module(*self.batch())
        self.module.lazy_reset_grad()
        value = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        if hasattr(value, "numpy"):  # an OrtValue
            value = value.numpy()
        return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])

    def gradients(self, weights: Mapping[str, np.ndarray]) -> tuple[float, dict[str, Any]]:
        self.module.lazy_reset_grad()
        for name, value in weights.items():
            self.state.parameters[name] = np.asarray(value, dtype=self.start[name].dtype)
        outputs = self.module(*self.batch())
        value = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        if hasattr(value, "numpy"):
            value = value.numpy()
        grads = {name: np.array(self.state.parameters[name].grad, dtype=np.float64)
                 for name in self.weights}
        self.module.lazy_reset_grad()
        return float(np.asarray(value, dtype=np.float64).reshape(-1)[0]), grads


def _agree(a: float, b: float, noise: float) -> bool:
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b)) + noise


def _directions(training: _Training, point: Mapping[str, np.ndarray], seed: int
                ) -> dict[str, Any]:
    """The verdict at ``point`` (weights by name), and each direction's slopes."""
    weights = training.weights
    loss, grads = training.gradients(point)
    result: dict[str, Any] = {"loss": loss, "directions": []}
    shapes = {name: [list(grads[name].shape), list(point[name].shape)] for name in weights}
    if any(grads[name].shape != point[name].shape for name in weights):
        return {**result, "shapes": shapes, "verdict": "wrong",
                "why": "a gradient of another shape than its weight"}
    if not np.isfinite(loss) or not all(np.all(np.isfinite(g)) for g in grads.values()):
        return {**result, "verdict": "unchecked", "why": "not finite"}
    base = {name: np.asarray(value, dtype=np.float64) for name, value in point.items()}
    zero = training.loss(base)
    epsilon = max(_EPSILON.get(value.dtype, 1e-3) for value in training.start.values())
    size = float(np.sqrt(np.mean(np.concatenate([v.reshape(-1) ** 2 for v in base.values()]))))
    step = STEP * max(size, 0.1)
    rng = np.random.default_rng(seed)
    verdicts = []
    flat = True
    for _ in range(DIRECTIONS):
        direction = {name: rng.standard_normal(value.shape) for name, value in base.items()}
        analytic = float(sum(float(np.sum(grads[n] * direction[n])) for n in weights))
        slopes = []
        smooth = True
        for h in (step, step / 10):
            ahead = training.loss({n: base[n] + h * direction[n] for n in weights})
            behind = training.loss({n: base[n] - h * direction[n] for n in weights})
            noise = 8 * epsilon * (abs(zero) + abs(ahead) + abs(behind) + 1) / h
            slopes.append((ahead - behind) / (2 * h))
            smooth = smooth and _agree((ahead - zero) / h, (zero - behind) / h, noise)
            flat = flat and ahead == zero == behind
        noise_fine = 8 * epsilon * (abs(zero) + 1) * 10 / step
        if not all(np.isfinite(slopes)):
            verdict = "rough"
        elif any(_agree(analytic, slope, noise_fine) for slope in slopes):
            verdict = "right"
        elif smooth and _agree(slopes[0], slopes[1], noise_fine):
            verdict = "wrong"
        else:
            verdict = "rough"
        verdicts.append(verdict)
        result["directions"].append({"analytic": analytic, "central": slopes[0],
                                     "central_fine": slopes[1], "verdict": verdict})
    if "wrong" in verdicts:
        return {**result, "verdict": "wrong", "why": "finite differences disagree"}
    if all(v == "right" for v in verdicts):
        if flat and all(not np.any(g) for g in grads.values()):
            return {**result, "verdict": "zero", "why": "the loss does not depend on the weight"}
        return {**result, "verdict": "right", "why": ""}
    return {**result, "verdict": "rough", "why": "the loss is not smooth along a direction"}


def check_gradient(model: onnx.ModelProto, artifacts: str, feeds: Mapping[str, Any],
                   weights: Sequence[str], *, seed: int = 0) -> dict[str, Any]:
    """ORT's gradient of the training model's loss against finite differences.

    Returns ``{"verdict": "right" | "wrong" | "zero" | "rough" | "unchecked", "why": ...,
    "at": where the verdict was found, "directions": [{"analytic", "central",
    "central_fine", "verdict"}...]}``. A gradient of another shape than its weight is
    ``wrong`` without finite differences.
    """
    random_ops = sorted({node.op_type for node in model.graph.node
                         if node.op_type in RANDOM_OPS})
    if random_ops:
        return {"verdict": "unchecked", "why": f"random: {', '.join(random_ops)}"}
    training = _Training(artifacts, feeds, weights)
    result = {**_directions(training, training.start, seed), "at": "the test's data"}
    if result["verdict"] in ("wrong", "unchecked"):
        return result
    informative = 0  # random points where the loss depends on the weight
    for attempt in range(1, 1 + RANDOM_POINTS):
        rng = np.random.default_rng(seed + attempt)
        training.feeds = {name: rng.standard_normal(np.shape(value)).astype(value.dtype)
                          if np.issubdtype(np.asarray(value).dtype, np.floating) else value
                          for name, value in feeds.items()}
        point = {name: rng.standard_normal(value.shape).astype(value.dtype)
                 for name, value in training.start.items()}
        again = {**_directions(training, point, seed), "at": f"random point {attempt}"}
        if again["verdict"] == "wrong":
            return {**again, "at_test_data": result}
        if again["verdict"] in ("right", "rough"):
            if result["verdict"] == "zero":  # the test's data checked nothing
                result = {**again, "at_test_data": result}
            informative += 1
            if informative >= RANDOM_CHECKS:
                break
    return result
