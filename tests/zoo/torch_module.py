"""The zoo through ``graphpass.torch.Module``, in torch's own loop, against torch eager.

Each case's model (inside its ``ZooWrapper``) is wrapped by ``graphpass.torch.Module``
(the dynamo exporter, graphpass's defaults) and trained beside a deep copy run by torch
eager, on the same batches, with ``torch.optim.AdamW`` and gradient clipping:

* the outputs of the first call equal torch's (relative :data:`OUTPUT_RTOL`);
* the first step's parameter gradients equal ``torch.autograd``'s (each tensor's largest
  error relative to its largest gradient, below :data:`GRADIENT_RTOL`), and the
  parameters without a gradient are the same on both sides;
* ten steps give torch's losses (relative :data:`LOSS_RTOL`), and in ``train`` mode
  torch's running statistics (relative :data:`STATISTICS_RTOL`).

Where outputs, losses or running statistics differ from torch's float32 run, the
judge asks whether float32 can decide them at all. Two float64 runs give the truth and
its sensitivity: torch's model in float64, and the same with every weight moved by a
float32 rounding (relative 2**-24, seeded). Float32 *cannot follow* a quantity when
float32-sized noise moves it by more than half its tolerance: torch's own float32 run
is that far from float64, or the shaken float64 run is. The case is then
``undecided`` if graphpass's run is within :data:`NOISE_FACTOR` times that noise of
float64, and ``wrong`` otherwise. Batch statistics over two values (MobileNet's and
EfficientNet's last layers at 32 pixels, two images: one value a channel per image)
are such quantities: the batch norm's output is the sign of a difference of two
nearly equal values, and the parameters before it get rounding noise for gradients,
which AdamW turns into full steps.

Modes: ``eval`` (the model in ``eval()`` mode: no dropout, batch norms with running
statistics) for every case, and ``train`` (``train()`` mode: batch statistics, running
statistics updated and compared) for the convolutional ones, their dropout modules in
``eval()`` mode (onnxruntime's random stream is not torch's).
"""

from __future__ import annotations

import copy
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any

from _torch_beside import step_both, wrapped_copy

from zoo.cases import Case
from zoo.reference import float64_defaults

__all__ = ["GRADIENT_RTOL", "LOSS_RTOL", "MODES", "NOISE_FACTOR", "OUTPUT_RTOL",
           "STATISTICS_RTOL", "ModuleOutcome", "judge_module", "modes_of"]

OUTPUT_RTOL = 1e-4
GRADIENT_RTOL = 1e-3
LOSS_RTOL = 1e-4
STATISTICS_RTOL = 1e-3
NOISE_FACTOR = 4.0
"""How much further from float64 than float32-sized noise graphpass may be, where float32
cannot follow (two float32 implementations summing in other orders differ by a few times
either's own rounding)."""
STEPS = 10
MODES = ("eval", "train")


def modes_of(case: Case) -> tuple[str, ...]:
    """The modes a case runs in."""
    return MODES if case.family == "cnn" else ("eval",)


@dataclass
class ModuleOutcome:
    """A verdict: ``trains``, ``wrong`` (with what differs) or ``refused`` (with the error)."""

    case: str
    mode: str
    label: str
    reason: str = ""
    output_error: float | None = None
    gradient_error: float | None = None
    loss_error: float | None = None
    statistics_error: float | None = None
    exports: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)


def _relative(a: Any, b: Any) -> float:
    scale = max(float(b.abs().max()), 1e-12)
    return float((a - b).abs().max()) / scale


def _gradients(model: Any) -> dict[str, Any]:
    """Each parameter's gradient (``None`` where it has none), by name."""
    return {name: None if parameter.grad is None else parameter.grad.clone()
            for name, parameter in model.named_parameters()}


def _gradient_error(gradients: dict[str, Any], reference: dict[str, Any]) -> float:
    """Each tensor's largest gradient error, relative to its largest gradient (at least a
    thousandth of the model's largest: a bias whose gradient is rounding noise, 1e-10,
    is judged against the gradients that move the model)."""
    largest = max((float(g.abs().max()) for g in reference.values() if g is not None),
                  default=0.0)
    errors = []
    for a, b in zip(reference.values(), gradients.values(), strict=True):
        if a is not None and b is not None and largest > 0:
            scale = max(float(a.abs().max()), 1e-3 * largest)
            errors.append(float((b - a).abs().max()) / scale)
    return max(errors, default=0.0)


def _one_sided(gradients: dict[str, Any], reference: dict[str, Any]) -> str | None:
    """The first parameter with a gradient on one side only, if any."""
    for (name, a), b in zip(reference.items(), gradients.values(), strict=True):
        if (a is None) != (b is None):
            return name
    return None


def judge_module(case: Case, mode: str) -> ModuleOutcome:
    """Train ``case`` through ``graphpass.torch.Module`` and torch eager side by side."""
    import torch

    import graphpass

    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    reference = case.wrapped()
    reference.train(mode == "train")
    for module in reference.modules():  # MobileNetV2's classifier dropout: random streams
        if isinstance(module, torch.nn.Dropout):  # differ (tests/test_torch_module.py
            module.eval()  # checks dropout by its statistics)
    model, wrapped = wrapped_copy(reference)
    exact = copy.deepcopy(reference).double()  # torch in float64: the trajectory itself
    shaken = _shaken(exact)  # and where float32-sized noise in the weights moves it
    inputs = [torch.from_numpy(value) for value in case.inputs().values()]
    outcome = ModuleOutcome(case.name, mode, "trains")
    try:
        out = wrapped(*inputs)
    except graphpass.GraphpassError as error:
        outcome.label, outcome.reason = "refused", str(error).splitlines()[0]
        return outcome
    except Exception:
        outcome.label, outcome.reason = "crash", traceback.format_exc(limit=3)[-600:]
        return outcome
    out_ref = reference(*inputs)
    outcome.output_error = _relative(out.detach(), out_ref.detach())
    target = torch.from_numpy(case.target(tuple(out_ref.shape)))
    float64 = (exact, shaken)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3)
                  for m in (reference, wrapped, *float64)]
    exact_inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    outputs = {"torch": out_ref.detach(), "graphpass": out.detach()}
    losses: dict[str, list[float]] = {"torch": [], "graphpass": [], "exact": [], "shaken": []}
    for step in range(STEPS):
        if step:
            out, out_ref = wrapped(*inputs), reference(*inputs)
        with float64_defaults():
            out_exact, out_shaken = (m(*exact_inputs) for m in float64)
        if step == 0:
            outputs.update(exact=out_exact.detach(), shaken=out_shaken.detach())
        for side, value, goal in (("torch", out_ref, target), ("graphpass", out, target),
                                  ("exact", out_exact, target.double()),
                                  ("shaken", out_shaken, target.double())):
            loss = torch.nn.functional.mse_loss(value, goal)
            try:
                loss.backward()
            except RuntimeError as error:  # torch eager's own model cannot train so
                if side == "graphpass":
                    raise
                outcome.label = "torch failure"
                outcome.reason = (f"torch eager fails at step {step + 1}: "
                                  f"{str(error).splitlines()[0][:200]}")
                return outcome
            losses[side].append(loss.item())
        if step == 0:
            gradients = {side: _gradients(m) for side, m in (
                ("torch", reference), ("graphpass", model), ("exact", exact),
                ("shaken", shaken))}
            outcome.gradient_error = _gradient_error(gradients["graphpass"],
                                                     gradients["torch"])
            one_sided = _one_sided(gradients["graphpass"], gradients["torch"])
            if one_sided is not None:
                outcome.label = "wrong"
                outcome.reason = f"{one_sided}: a gradient on one side only"
        step_both(optimizers, clip=1.0)
    outcome.losses = losses["graphpass"]
    outcome.loss_error = _loss_error(losses["graphpass"], losses["torch"])
    statistics = {side: _running_statistics(m)
                  for side, m in (("torch", reference), ("graphpass", model),
                                  ("exact", exact), ("shaken", shaken))}
    if statistics["torch"]:
        outcome.statistics_error = _statistics_error(statistics["graphpass"],
                                                     statistics["torch"])
    outcome.exports = wrapped.exports
    outcome.seconds = time.perf_counter() - start
    checks = (("outputs", outcome.output_error, OUTPUT_RTOL, outputs, _relative),
              ("gradients", outcome.gradient_error, GRADIENT_RTOL, gradients,
               _gradient_error),
              ("losses", outcome.loss_error, LOSS_RTOL, losses, _loss_error),
              ("running statistics", outcome.statistics_error, STATISTICS_RTOL, statistics,
               _statistics_error))
    failed = [(what, limit, runs, error) for what, value, limit, runs, error in checks
              if value is not None and value > limit]
    if failed and outcome.label == "trains":
        followed = [_cannot_follow(what, limit, runs, error)
                    for what, limit, runs, error in failed]
        if all(reason is not None for reason in followed):
            outcome.label = "undecided"
            outcome.reason = "float32 cannot follow " + "; ".join(
                reason for reason in followed if reason)
        else:
            outcome.label = "wrong"
            outcome.reason = "differs from torch: " + ", ".join(what for what, *_ in failed)
    return outcome


def _shaken(exact: Any) -> Any:
    """A copy of the float64 model with each weight moved by a float32 rounding, seeded."""
    import torch

    shaken = copy.deepcopy(exact)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in (*shaken.parameters(), *shaken.buffers()):
            if tensor.is_floating_point():
                noise = torch.rand(tensor.shape, generator=generator, dtype=tensor.dtype)
                tensor.mul_(1 + (2 * noise - 1) * 2.0**-24)
    return shaken


def _running_statistics(model: Any) -> list[Any]:
    return [buffer for name, buffer in model.named_buffers() if "running" in name]


def _statistics_error(statistics: list[Any], reference: list[Any]) -> float:
    return max(_relative(a, b) for a, b in zip(statistics, reference, strict=True))


def _cannot_follow(what: str, limit: float, runs: dict[str, Any], error: Any) -> str | None:
    """Why float32 cannot decide ``what`` against torch's float32 run, or ``None`` if it can.

    ``runs`` holds each side's value of it: ``torch`` and ``graphpass`` (float32),
    ``exact`` and ``shaken`` (float64). ``error(value, reference)`` is its relative error.
    """
    noise = max(error(runs["torch"], runs["exact"]), error(runs["shaken"], runs["exact"]))
    own = error(runs["graphpass"], runs["exact"])
    if noise <= limit / 2 or own > NOISE_FACTOR * noise:
        return None
    return (f"the {what}: float32-sized noise moves them {noise:.1e} from float64 "
            f"(tolerance {limit:.0e}); graphpass is {own:.1e} from it")


def _loss_error(losses: list[float], reference: list[float]) -> float:
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=True))
