"""The torch oracle for graphpass's own trainer: ``torch.optim.AdamW`` steps on a zoo case.

:func:`torch_adamw` trains the torch model of an oracle (:mod:`zoo.subjects`; by default
the model the zoo exports, :meth:`zoo.cases.Case.wrapped`), in float32, eval mode with
every BatchNorm module in train mode (batch statistics, as :mod:`zoo.reference` and
``build-training-graph``'s default), on the case's batch and
loss (``mse_loss`` of the first output against the case's target), for
:data:`OWN_STEPS` steps of ``torch.optim.AdamW`` with ``build-training-graph``'s
defaults (:data:`TORCH_ADAMW`: torch's own). It keeps the loss of each step and every
parameter after the last step, under the canonical names of ``named_parameters()``,
and the same steps computed in float64 (the model cast to double).

The float64 run tells which weights float32 can decide at all, and a second float32 run on
one thread (another order of summation, so other rounding) how far float32 alone moves
them. AdamW divides by
``sqrt(v) + eps`` with ``eps = 1e-8``, so a gradient that is zero in exact arithmetic
(an attention key's bias: softmax ignores a shift per query; the bias of a
BatchNorm followed by a convolution and another BatchNorm) but ``1e-10`` of rounding
noise in float32 moves its weight by up to ``lr`` a step in a direction the noise
picks: torch's own float32 run then ends up to ``OWN_STEPS * lr`` away from
float64's. Cached like the zoo's other references (:mod:`zoo.cache`).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.cases import Case
from zoo.cases import case as case_named
from zoo.reference import float64_defaults
from zoo.subjects import oracle_entry, subject

__all__ = ["OWN_STEPS", "TORCH_ADAMW", "AdamWReference", "adamw_in_optimum_venv",
           "torch_adamw"]

OWN_STEPS = 10
"""AdamW steps of the own-trainer check (in torch and with ``step.onnx``)."""
TORCH_ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
"""``torch.optim.AdamW``'s defaults, which ``build-training-graph`` uses too."""


@dataclass(frozen=True)
class AdamWReference:
    """What :data:`OWN_STEPS` steps of ``torch.optim.AdamW`` give.

    Attributes:
        losses: The loss of each step (before its update).
        weights: Canonical parameter name -> its value after the last step.
        weights64: The same, computed in float64.
        trained: The parameters the loss reaches (the others keep their values).
        weights_one_thread: The float32 run again on one thread: float32 rounding in
            another order of summation.
    """

    losses: list[float]
    weights: dict[str, np.ndarray]
    weights64: dict[str, np.ndarray]
    trained: list[str]
    weights_one_thread: dict[str, np.ndarray]


def torch_adamw(case: Case, oracle: str = "export") -> AdamWReference:
    """``torch.optim.AdamW`` on ``case``'s model of ``oracle`` (:data:`zoo.ORACLES`; cached)."""
    folder = oracle_entry(case, "adamw-torch", oracle, "adamw_reference.py",
                          lambda scratch: _compute(case, oracle, {}, scratch),
                          "zoo.adamw_reference:adamw_in_optimum_venv")
    meta = json.loads((folder / "adamw.json").read_text())
    with np.load(folder / "adamw.npz") as data:
        weights = {name: data[name] for name in data.files}
    with np.load(folder / "adamw64.npz") as data:
        weights64 = {name: data[name] for name in data.files}
    with np.load(folder / "adamw1.npz") as data:
        one_thread = {name: data[name] for name in data.files}
    return AdamWReference(meta["losses"], weights, weights64, meta["trained"], one_thread)


def adamw_in_optimum_venv(name: str, pretrained: str, inputs: str, folder: str) -> None:
    """The ``optimum`` oracle's steps for case ``name`` into ``folder`` (in the Optimum venv)."""
    _compute(case_named(name), "optimum",
             {"pretrained": Path(pretrained), "inputs": Path(inputs)}, Path(folder))


def _compute(case: Case, oracle: str, where: dict[str, Path], folder: Path) -> None:
    import torch

    losses, trained, weights = _train(case, oracle, where, double=False)
    _, _, weights64 = _train(case, oracle, where, double=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, _, one_thread = _train(case, oracle, where, double=False)
    finally:
        torch.set_num_threads(threads)
    np.savez(folder / "adamw.npz", **weights)
    np.savez(folder / "adamw64.npz", **weights64)
    np.savez(folder / "adamw1.npz", **one_thread)
    (folder / "adamw.json").write_text(json.dumps(
        {"losses": losses, "trained": trained, "adamw": TORCH_ADAMW}, indent=1) + "\n")


def _train(case: Case, oracle: str, where: dict[str, Path], *, double: bool
           ) -> tuple[list[float], list[str], dict[str, np.ndarray]]:
    import torch

    model = subject(case, oracle, **where)
    wrapper = model.module
    inputs = [torch.from_numpy(v) for v in model.inputs.values()]
    with torch.no_grad():
        output = model.call(*inputs)
    target = torch.from_numpy(case.target(tuple(output.shape)))
    if double:
        wrapper.double()
        inputs = [v.double() if v.is_floating_point() else v for v in inputs]
        target = target.double()
    for module in wrapper.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.train()
    parameters = dict(wrapper.named_parameters())
    optimizer = torch.optim.AdamW(parameters.values(), **TORCH_ADAMW)  # type: ignore[arg-type]
    losses: list[float] = []
    trained: set[str] = set()
    for _ in range(OWN_STEPS):
        optimizer.zero_grad(set_to_none=True)
        with float64_defaults() if double else nullcontext():
            loss = torch.nn.functional.mse_loss(model.call(*inputs), target)
        loss.backward()
        trained.update(name for name, p in parameters.items() if p.grad is not None)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, sorted(trained), {name: p.detach().numpy().copy()
                                     for name, p in parameters.items()}
