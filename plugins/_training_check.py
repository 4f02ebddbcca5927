"""One real training step on written artifacts, and its gradient against finite differences.

``generate_artifacts`` succeeding and the runtime loading the artifacts do not mean a
model trains: onnxruntime-training 1.19.2 can still fail in the first step (a ViT whose
broadcast ``Where`` input was trainable: ``SplitTraining ... Sum of sizes in 'split' was
0``), or compute gradients that are wrong. :func:`check_training` runs one step on
generated inputs (as ``--verify`` makes them) and a random target, and then compares
the step's gradient with the loss's change along a random direction ``d`` of the
trainable weights: ``(L(w + d) - L(w - d)) / 2`` against ``g . d``, two more forward
runs. The perturbation is 0.1 % of each weight's size, in float32; the check
tolerates 5 % (it exists for gradients that are wrong, not for rounding). When the two
disagree, two more runs at a tenth of the step tell a wrong gradient (both finite
differences agree with each other, not with ``g . d``; or ``g . d`` is ten times
steeper than both) from a loss too rough to check at float32 precision (the finite
differences disagree with each other, and nothing is claimed).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from graphpass.framework import VerifyOptions, make_inputs, run_model
from graphpass.ir import Model

__all__ = ["FD_TOLERANCE", "StepInputs", "StepOutcome", "check_training", "run_step",
           "step_inputs"]

FD_TOLERANCE: Final = 0.05
"""Largest relative difference between ``g . d`` and the finite difference."""
_STEP: Final = 1e-3
_DWARF: Final = 10.0
"""``g . d`` this many times larger than both finite differences is wrong however rough
the loss: no change of the loss along ``d`` is anywhere near that steep."""
_RANDOM_OPS: Final = frozenset({"Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform",
                                "RandomUniformLike", "Multinomial", "Bernoulli"})
_NODE: Final = (re.compile(r"node\. Name:'([^']+)'"), re.compile(r"for node (\S+)"),
                re.compile(r"in node \(([^)]+)\)"))


@dataclass(frozen=True)
class StepOutcome:
    """What one training step and the finite-difference check found.

    Attributes:
        loss: The first step's loss (``None`` when the step failed).
        error: The runtime's message when the step failed (one line).
        node: The node it names (a gradient node's forward node when it can tell).
        analytic: ``g . d`` (``None`` when not checked).
        numeric: ``(L(w + d) - L(w - d)) / 2`` (``None`` when not checked).
        skipped: Why the gradient was not checked, if it was not.
        weight: When the gradient is wrong: a weight whose own part of the check fails
            (found by halving the set of weights, two forward runs a halving).
        weight_error: The relative error of that weight's part.
    """

    loss: float | None = None
    error: str | None = None
    node: str | None = None
    analytic: float | None = None
    numeric: float | None = None
    skipped: str | None = None
    weight: str | None = None
    weight_error: float | None = None

    @property
    def relative_error(self) -> float | None:
        """``|numeric - analytic|`` relative to the larger of the two."""
        if self.analytic is None or self.numeric is None:
            return None
        return _relative(self.numeric, self.analytic)

    @property
    def gradient_wrong(self) -> bool:
        """Whether the finite difference disagrees with the gradient."""
        error = self.relative_error
        return error is not None and error > FD_TOLERANCE


@dataclass(frozen=True)
class StepInputs:
    """What the step needs of the forward model, made before any training code runs.

    Attributes:
        feeds: The model's inputs (given, or generated as ``--verify`` makes them).
        given: Every array of the inputs file (the loss's inputs too, e.g. ``target``).
        outputs: The forward model's outputs on ``feeds`` (a random target takes the
            first one's shape).
        random_ops: The random operators of the model (their gradient is not checked).
    """

    feeds: dict[str, np.ndarray[Any, Any]]
    given: dict[str, np.ndarray[Any, Any]]
    outputs: dict[str, np.ndarray[Any, Any]]
    random_ops: tuple[str, ...] = ()


def step_inputs(model: Model, *, inputs: Path | None = None,
                seed: int = 0) -> StepInputs | StepOutcome:
    """The inputs of the first step on ``model`` (stock inference only, no training code).

    Returns:
        The inputs, or a skipped :class:`StepOutcome` when the inputs file is unusable.
    """
    try:
        feeds = make_inputs(model, VerifyOptions(inputs=inputs, seed=seed))
    except Exception as error:  # bad inputs file: the caller reports it
        return StepOutcome(skipped=f"no inputs: {error}")
    forward = run_model(model, feeds, backend="onnxruntime")
    random_ops = sorted({n.op_type for g in model.graphs() for n in g if n.op_type in _RANDOM_OPS})
    return StepInputs(dict(feeds), _given(inputs), dict(forward.outputs or {}),
                      tuple(random_ops))


def check_training(directory: Path, model: Model, *, inputs: Path | None = None,
                   gradients: bool = True, seed: int = 0) -> StepOutcome:
    """Run one training step on the artifacts in ``directory``; check its gradient.

    In this process: a crash of onnxruntime-training ends it.
    ``graphpass.plugins.ort_training`` runs :func:`run_step` in a child process instead.

    Args:
        directory: The artifacts (``checkpoint``, ``training_model.onnx`` ...).
        model: The forward model the artifacts were made from (to make inputs).
        inputs: An ``.npz`` with the model's inputs (and the loss's, e.g. ``target``);
            generated when ``None``.
        gradients: Also compare the gradient with finite differences.
        seed: The seed of generated inputs and of the direction.
    """
    prepared = step_inputs(model, inputs=inputs, seed=seed)
    if isinstance(prepared, StepOutcome):
        return prepared
    return run_step(directory, prepared, gradients=gradients, seed=seed)


def run_step(directory: Path, prepared: StepInputs, *, gradients: bool = True,
             seed: int = 0, on_checking: Callable[[], None] | None = None) -> StepOutcome:
    """One training step on the artifacts in ``directory``, and the gradient check.

    This is the part that runs onnxruntime-training's native training code.

    Args:
        directory: The artifacts (``checkpoint``, ``training_model.onnx`` ...).
        prepared: The step's inputs (:func:`step_inputs`).
        gradients: Also compare the gradient with finite differences.
        seed: The seed of the random target and of the direction.
        on_checking: Called once the step ran, before the finite-difference runs.
    """
    from onnxruntime.training import api

    try:
        state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
        module = api.Module(str(directory / "training_model.onnx"), state,
                            str(directory / "eval_model.onnx"))
        batch = _batch(directory, module.input_names(), prepared.feeds, prepared.given,
                       prepared.outputs, seed)
        module.train()
        loss = _loss(module(*batch))
    except Exception as error:  # the runtime's own exception types
        text = str(error)
        return StepOutcome(error=_first_line(text), node=_node(text))
    if not gradients:
        return StepOutcome(loss, skipped="not asked for")
    if prepared.random_ops:
        return StepOutcome(loss, skipped=f"the model is random ({', '.join(prepared.random_ops)})")
    if on_checking is not None:
        on_checking()
    trained = [(name, p) for name, p in state.parameters if p.requires_grad]
    short = _memory_short(sum(p.data.nbytes for _, p in trained))
    if short:
        return StepOutcome(loss, skipped=short)
    start = {name: np.array(p.data, copy=True) for name, p in trained}
    rng = np.random.default_rng(seed + 1)
    direction = {name: _direction(rng, value) for name, value in start.items()}
    # g . d a weight, in float64, one weight at a time (no float64 copy of the gradient)
    partials = {name: float(np.dot(np.asarray(p.grad, dtype=np.float64).ravel(),
                                   direction[name].astype(np.float64).ravel()))
                for name, p in trained}
    module.lazy_reset_grad()
    probe = _Probe(module, state, batch, start, direction, partials)
    try:
        analytic, numeric = probe.along(list(start))
        outcome = StepOutcome(loss, analytic=analytic, numeric=numeric)
        if outcome.gradient_wrong:
            _, finer = probe.along(list(start), 0.1)
            dwarfed = abs(analytic) > _DWARF * max(abs(numeric), abs(finer * 10))
            if _relative(numeric, finer * 10) > FD_TOLERANCE and not dwarfed:
                return StepOutcome(loss, skipped=(
                    "the loss is too rough along a random direction to check at float32 "
                    f"precision (finite differences {numeric:.4g} at the step, "
                    f"{finer * 10:.4g} at a tenth of it; g . d = {analytic:.4g})"))
            weight, error = probe.localize(list(start))
            outcome = StepOutcome(loss, analytic=analytic, numeric=numeric, weight=weight,
                                  weight_error=error)
    except Exception as error:  # the runtime's own exception types
        text = str(error)
        return StepOutcome(loss, error=_first_line(text), node=_node(text))
    finally:
        for name, value in start.items():
            state.parameters[name] = value
    return outcome


@dataclass
class _Probe:
    """Finite differences along the direction, restricted to some of the weights."""

    module: Any
    state: Any
    batch: list[Any]
    start: dict[str, Any]
    direction: dict[str, Any]
    partials: dict[str, float]
    budget: int = 12

    def along(self, names: list[str], scale: float = 1.0) -> tuple[float, float]:
        """``g . d`` and ``(L(w + d) - L(w - d)) / 2`` with ``d`` zero outside ``names``."""
        chosen = set(names)
        analytic = float(sum(self.partials[n] for n in names))
        losses = []
        for sign in (scale, -scale):
            for name, value in self.start.items():
                moved = value + sign * self.direction[name] if name in chosen else value
                self.state.parameters[name] = np.asarray(moved, dtype=value.dtype)
            losses.append(_loss(self.module(*self.batch)))
            self.module.lazy_reset_grad()
        return analytic * scale, (losses[0] - losses[1]) / 2

    def localize(self, names: list[str]) -> tuple[str | None, float | None]:
        """A weight whose part of the check fails, by halving (within the budget)."""
        error: float | None = None
        while len(names) > 1 and self.budget > 0:
            half = names[: len(names) // 2]
            self.budget -= 1
            analytic, numeric = self.along(half)
            first = StepOutcome(analytic=analytic, numeric=numeric)
            if first.gradient_wrong:
                names, error = half, first.relative_error
            else:
                names = names[len(names) // 2:]
        if len(names) == 1 and self.budget > 0:
            analytic, numeric = self.along(names)
            error = StepOutcome(analytic=analytic, numeric=numeric).relative_error
        return (names[0] if len(names) == 1 else None), error


def _memory_short(weight_bytes: int) -> str | None:
    """Why the finite-difference check does not fit this machine's memory, if it does not.

    The check keeps two copies of the trained weights (the weights before it and the
    direction) beside the runtime's weights and gradients. Known only where
    ``/proc/meminfo`` says what is available (Linux); elsewhere it is run.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo if ":" in line)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    needed = int(_CHECK_COPIES * weight_bytes) + _CHECK_SPARE
    if available >= needed:
        return None
    return (f"the finite-difference check needs about {needed / 2**30:.1f} GiB of memory "
            f"(two copies of {weight_bytes / 2**30:.1f} GiB of trained weights, and the "
            f"forward runs), more than the {available / 2**30:.1f} GiB available")


_CHECK_COPIES: Final = 2.5
_CHECK_SPARE: Final = 1 << 30


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def _given(inputs: Path | None) -> dict[str, np.ndarray[Any, Any]]:
    if inputs is None:
        return {}
    with np.load(inputs) as data:
        return {name: data[name] for name in data.files}


def _batch(directory: Path, names: list[str], feeds: dict[str, Any], given: dict[str, Any],
           outputs: dict[str, Any] | None, seed: int) -> list[Any]:
    """The training model's inputs: the model's, then the loss's (a random target)."""
    import onnx

    declared = {value.name: value for value in
                onnx.load(str(directory / "training_model.onnx"),
                          load_external_data=False).graph.input}
    rng = np.random.default_rng(seed + 2)
    first_output = next(iter(outputs.values())) if outputs else None
    batch = []
    for name in names:
        if name in feeds:
            batch.append(feeds[name])
        elif name in given:
            batch.append(given[name])
        else:
            batch.append(_target(declared.get(name), first_output, rng))
    return batch


def _target(declared: Any, output: Any, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    from onnx import helper

    tensor = declared.type.tensor_type if declared is not None else None
    dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type) if tensor is not None \
        else np.dtype(np.float32)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim] \
        if tensor is not None and tensor.HasField("shape") else None
    if output is not None and (dims is None or len(dims) == np.ndim(output)):
        shape = tuple(np.shape(output))
    else:
        shape = tuple(d if d else 2 for d in dims or ())
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def _direction(rng: np.random.Generator, value: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    size = float(np.sqrt(np.mean(np.square(value, dtype=np.float64)))) if value.size else 0.0
    scale = _STEP * (size if size > 0 else 1.0)
    return np.asarray(scale * rng.standard_normal(value.shape), dtype=value.dtype)


def _loss(outputs: Any) -> float:
    value = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
    return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])


def _node(text: str) -> str | None:
    for pattern in _NODE:
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    message = lines[-1] if lines else text
    marker = "Status Message: "
    return (message.split(marker, 1)[1] if marker in message else message)[:500]
