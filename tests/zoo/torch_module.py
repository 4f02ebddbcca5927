"""The zoo through ``graphpass.torch.Module``, in torch's own loop, against torch eager.

Each case's model (inside its ``ZooWrapper``) is wrapped by ``graphpass.torch.Module``
(the dynamo exporter, graphpass's defaults) and trained beside a deep copy run by torch
eager, on the same batches, with ``torch.optim.AdamW`` and gradient clipping:

* the outputs of the first call equal torch's (relative :data:`OUTPUT_RTOL`);
* the first step's parameter gradients equal ``torch.autograd``'s (each tensor's largest
  error relative to its largest gradient, below :data:`GRADIENT_RTOL`), and the
  parameters without a gradient are the same on both sides;
* ten steps give torch's losses (relative :data:`LOSS_RTOL`); where they do not but stay
  within twice the distance of torch's own float32 losses from its float64 ones, the
  case is ``undecided``: float32 cannot follow the trajectory (MobileNetV2's batch
  statistics over two images, through ReLU6 kinks).

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

__all__ = ["GRADIENT_RTOL", "LOSS_RTOL", "MODES", "OUTPUT_RTOL", "ModuleOutcome",
           "judge_module", "modes_of"]

OUTPUT_RTOL = 1e-4
GRADIENT_RTOL = 1e-3
LOSS_RTOL = 1e-4
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


def _gradient_error(reference: Any, model: Any, outcome: ModuleOutcome) -> float:
    """Each tensor's largest gradient error, relative to its largest gradient (at least a
    thousandth of the model's largest: a bias whose gradient is rounding noise, 1e-10,
    is judged against the gradients that move the model)."""
    pairs = list(zip(reference.named_parameters(), model.parameters(), strict=True))
    largest = max((float(a.grad.abs().max()) for (_, a), _ in pairs if a.grad is not None),
                  default=0.0)
    errors = []
    for (name, a), b in pairs:
        if (a.grad is None) != (b.grad is None):
            outcome.label, outcome.reason = "wrong", f"{name}: a gradient on one side only"
        elif a.grad is not None and largest > 0:
            scale = max(float(a.grad.abs().max()), 1e-3 * largest)
            errors.append(float((b.grad - a.grad).abs().max()) / scale)
    return max(errors, default=0.0)


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
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    opt_exact = torch.optim.AdamW(exact.parameters(), lr=1e-3)
    exact_inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    losses_ref: list[float] = []
    losses_exact: list[float] = []
    for step in range(STEPS):
        if step:
            out, out_ref = wrapped(*inputs), reference(*inputs)
        loss_ref = torch.nn.functional.mse_loss(out_ref, target)
        loss = torch.nn.functional.mse_loss(out, target)
        loss_exact = torch.nn.functional.mse_loss(exact(*exact_inputs), target.double())
        loss_ref.backward()
        loss.backward()
        loss_exact.backward()
        step_both((opt_exact,), clip=1.0)
        losses_exact.append(loss_exact.item())
        if step == 0:
            outcome.gradient_error = _gradient_error(reference, model, outcome)
        step_both((opt_ref, opt), clip=1.0)
        losses_ref.append(loss_ref.item())
        outcome.losses.append(loss.item())
    outcome.loss_error = _loss_error(outcome.losses, losses_ref)
    torch_drift = _loss_error(losses_ref, losses_exact)  # torch float32 against float64
    own_drift = _loss_error(outcome.losses, losses_exact)
    buffers = [(a, b) for (name, a), b in zip(reference.named_buffers(), model.buffers(),
                                              strict=True)
               if "running" in name]
    if buffers:
        outcome.statistics_error = max(_relative(b, a) for a, b in buffers)
    outcome.exports = wrapped.exports
    outcome.seconds = time.perf_counter() - start
    failed = [what for what, value, limit in (
        ("outputs", outcome.output_error, OUTPUT_RTOL),
        ("gradients", outcome.gradient_error, GRADIENT_RTOL),
        ("losses", outcome.loss_error, LOSS_RTOL),
        ("running statistics", outcome.statistics_error, LOSS_RTOL * 10))
        if value is not None and value > limit]
    if failed and outcome.label == "trains":
        if failed[0] == "losses" and own_drift <= 2 * torch_drift:
            outcome.label = "undecided"
            outcome.reason = (f"float32 cannot follow: torch's float32 losses are "
                              f"{torch_drift:.1e} from its float64 ones, graphpass's "
                              f"{own_drift:.1e}")
        else:
            outcome.label = "wrong"
            outcome.reason = "differs from torch: " + ", ".join(failed)
    return outcome


def _loss_error(losses: list[float], reference: list[float]) -> float:
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=True))
