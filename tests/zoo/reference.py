"""The torch oracle of a zoo case: outputs, first-step gradients, weights after AdamW steps.

Computed on the torch model of an oracle (:mod:`zoo.subjects`): by default the model the
zoo exports (:meth:`zoo.cases.Case.wrapped`), under the names its exports give
(``model.bert.embeddings.word_embeddings.weight``); ``finetuned``, the same with the
``+finetuned`` checkpoint's weights; ``optimum``, the Hugging Face model Optimum
exported (computed in the Optimum venv, names without the ``model.`` prefix):

* ``outputs``: the first output in eval mode (what the exported model computes);
* ``loss`` and ``gradients``: ``torch.autograd`` of ``mse_loss(output, target)`` on the
  case's batch, in eval mode with every BatchNorm module in train mode (batch
  statistics: what onnxruntime-training computes for ``BatchNormalization``), computed
  in float64 (the model cast to double), so that the float32 rounding of torch and of
  onnxruntime are measured against the same exact-enough value; ``gradients32`` are
  torch's own float32 gradients, which show how well-conditioned the case is;
* ``losses``: :data:`STEPS` steps of AdamW as onnxruntime-training 1.19.2 does them
  (:func:`adamw_step`), same batch each step; ``initial`` and ``weights``: the
  parameters before and after the first step.

Parameters are keyed by their canonical name (``named_parameters()``); ``aliases`` maps
every name a tensor has (tied weights, ALBERT's shared layers are one tensor) to it.
The result is cached (:mod:`zoo.cache`), per case and oracle.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.cases import Case, ZooError
from zoo.cases import case as case_named
from zoo.subjects import Subject, oracle_entry, subject

__all__ = ["ADAMW", "SENSITIVITY_DELTA", "STEPS", "Reference", "adamw_step",
           "compute_in_optimum_venv", "gradient_sensitivity", "torch_reference"]

STEPS = 3
"""AdamW steps the zoo trains (in torch and in onnxruntime-training)."""
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-6, "weight_decay": 0.0}
"""onnxruntime-training 1.19.2's AdamW defaults (``onnxblock.optim.AdamW``, ``Optimizer``)."""


def adamw_step(parameter: Any, state: dict[str, Any], step: int) -> None:
    """One AdamW update of ``parameter`` from its ``.grad``, as onnxruntime-training does it.

    ``generate_artifacts``' AdamW is ``AdamWOptimizer`` with ``adam_mode=1``, the
    Hugging Face variant: ``eps`` is added to ``sqrt(v)`` before the bias correction,
    which is folded into the step size (``lr * sqrt(1 - beta2**t) / (1 - beta1**t)``).
    ``torch.optim.AdamW`` adds ``eps`` after correcting ``v``, so its steps differ for
    small gradients (by up to half the step size in these models).
    """
    import torch

    beta1, beta2 = ADAMW["betas"]
    grad = parameter.grad
    if "m" not in state:
        state["m"], state["v"] = torch.zeros_like(parameter), torch.zeros_like(parameter)
    state["m"].mul_(beta1).add_(grad, alpha=1 - beta1)
    state["v"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    size = ADAMW["lr"] * (1 - beta2 ** step) ** 0.5 / (1 - beta1 ** step)
    with torch.no_grad():
        parameter.addcdiv_(state["m"], state["v"].sqrt().add_(ADAMW["eps"]), value=-size)


@dataclass(frozen=True)
class Reference:
    """What torch computes for a case.

    Attributes:
        outputs: The first output, eval mode.
        loss: The first step's loss (BatchNorm with batch statistics).
        gradients: Canonical parameter name -> its first-step gradient, in float64
            (parameters the loss does not reach are absent; see ``unused``).
        gradients32: The same computed by torch in float32.
        losses: The loss at each of the AdamW steps.
        initial: Canonical parameter name -> its value before training.
        weights: Canonical parameter name -> its value after the first AdamW step.
        aliases: Every name of every parameter -> the canonical name.
        unused: Parameters that get no gradient from the loss.
        buffers: Every buffer name (all aliases) -> ``persistent`` or ``non-persistent``.
        prefix: The wrapper's prefix on every name (``model.``).
    """

    outputs: np.ndarray
    loss: float
    gradients: dict[str, np.ndarray]
    gradients32: dict[str, np.ndarray]
    losses: list[float]
    initial: dict[str, np.ndarray]
    weights: dict[str, np.ndarray]
    aliases: dict[str, str]
    unused: list[str]
    buffers: dict[str, str]
    prefix: str


def torch_reference(case: Case, oracle: str = "export") -> Reference:
    """The torch oracle for ``case`` (cached): ``oracle`` is one of :data:`zoo.ORACLES`."""
    folder = oracle_entry(case, "reference", oracle, "reference.py",
                          lambda scratch: _compute(lambda: subject(case, oracle), scratch),
                          "zoo.reference:compute_in_optimum_venv")
    meta = json.loads((folder / "reference.json").read_text())
    with np.load(folder / "reference.npz") as data:
        arrays = {name: data[name] for name in data.files}
    return Reference(
        outputs=arrays["outputs"], loss=meta["loss"],
        gradients={name: arrays[f"grad64/{name}"] for name in meta["gradients"]},
        gradients32={name: arrays[f"grad/{name}"] for name in meta["gradients"]},
        losses=meta["losses"],
        initial={name: arrays[f"initial/{name}"] for name in meta["parameters"]},
        weights={name: arrays[f"weight/{name}"] for name in meta["parameters"]},
        aliases=meta["aliases"], unused=meta["unused"], buffers=meta["buffers"],
        prefix=meta["prefix"])


def compute_in_optimum_venv(name: str, pretrained: str, inputs: str, folder: str) -> None:
    """The ``optimum`` oracle of case ``name`` into ``folder`` (run in the Optimum venv)."""
    _compute(lambda: subject(case_named(name), "optimum", pretrained=Path(pretrained),
                             inputs=Path(inputs)), Path(folder))


def _compute(make: Callable[[], Subject], folder: Path) -> None:
    import torch

    model = make()
    wrapper = model.module
    inputs = [torch.from_numpy(v) for v in model.inputs.values()]
    with torch.no_grad():
        outputs = model.call(*inputs)
    target = torch.from_numpy(model.case.target(tuple(outputs.shape)))
    _batch_statistics(wrapper)
    parameters = dict(wrapper.named_parameters())
    initial = {name: p.detach().numpy().copy() for name, p in parameters.items()}
    aliases = _aliases(wrapper)
    states: dict[str, dict[str, Any]] = {name: {} for name in parameters}
    losses: list[float] = []
    gradients: dict[str, Any] = {}
    weights: dict[str, Any] = {}
    for step in range(1, STEPS + 1):
        for parameter in parameters.values():
            parameter.grad = None
        loss = torch.nn.functional.mse_loss(model.call(*inputs), target)
        loss.backward()
        losses.append(float(loss.detach()))
        if step == 1:
            gradients = {name: p.grad.detach().numpy().copy()
                         for name, p in parameters.items() if p.grad is not None}
        for name, parameter in parameters.items():
            if parameter.grad is not None:
                adamw_step(parameter, states[name], step)
        if step == 1:
            weights = {name: p.detach().numpy().copy() for name, p in parameters.items()}
    arrays = {"outputs": outputs.numpy()}
    arrays.update({f"grad/{name}": grad for name, grad in gradients.items()})
    arrays.update({f"grad64/{name}": grad for name, grad in _gradients64(make).items()})
    arrays.update({f"weight/{name}": value for name, value in weights.items()})
    arrays.update({f"initial/{name}": value for name, value in initial.items()})
    np.savez(folder / "reference.npz", **arrays)
    persistent = set(wrapper.state_dict())
    buffers = {name: "persistent" if name in persistent else "non-persistent"
               for name, _ in wrapper.named_buffers(remove_duplicate=False)}
    meta = {"loss": losses[0], "losses": losses, "parameters": list(parameters),
            "gradients": list(gradients), "aliases": aliases,
            "unused": [name for name in parameters if name not in gradients],
            "buffers": buffers, "prefix": model.prefix}
    (folder / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")


SENSITIVITY_DELTA = 1e-6
"""The weight changes of :func:`gradient_sensitivity`, relative: 16 float32 ulps, less
than the rounding a float32 forward pass accumulates (about 1e-5 relative by the last
layers of the zoo's CNNs)."""


def gradient_sensitivity(case: Case, oracle: str, seeds: int = 2) -> dict[str, np.ndarray]:
    """torch's float64 gradients after the weights moved by float32 noise, per seed.

    Each parameter is multiplied by ``1 + SENSITIVITY_DELTA * noise`` (seeded normal
    noise) before the float64 gradients are computed as for :func:`torch_reference`.
    Where those move by more than a tolerance, the exact gradients at the case's
    weights are not decided to that tolerance by float32 arithmetic: a ReLU6 or ReLU
    input within rounding of its kink lets a gradient through in one run and not in
    the other. Computed in this process (the ``export`` and ``finetuned`` oracles).

    Returns:
        Per seed, the gradients by canonical parameter name.
    """
    if oracle not in ("export", "finetuned"):
        raise ZooError(f"the sensitivity probe runs the export and finetuned oracles, "
                       f"not {oracle!r}")
    return {f"seed {seed}": _gradients64(lambda: subject(case, oracle), moved=seed)
            for seed in range(seeds)}


@contextmanager
def float64_defaults() -> Iterator[None]:
    """torch's default dtype float64 while a model cast to double runs (not while it is built).

    Tensors a ``forward`` creates without a dtype then follow the model's precision: XGLM
    fills its attention mask with ``torch.full((), torch.finfo(weights.dtype).min)``, which
    overflows float32, the default, when the weights are float64.
    """
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _gradients64(make: Callable[[], Subject], moved: int | None = None
                 ) -> dict[str, np.ndarray]:
    """The first-step gradients in float64 (at weights moved by seed ``moved``, if given)."""
    import torch

    model = make()
    model.module.double()
    if moved is not None:
        generator = torch.Generator().manual_seed(moved)
        with torch.no_grad():
            for parameter in model.module.parameters():
                noise = torch.randn(parameter.shape, generator=generator,
                                    dtype=parameter.dtype)
                parameter.mul_(1 + SENSITIVITY_DELTA * noise)
    inputs = [torch.from_numpy(v) for v in model.inputs.values()]
    inputs = [v.double() if v.is_floating_point() else v for v in inputs]
    _batch_statistics(model.module)
    with float64_defaults():
        output = model.call(*inputs)
        target = torch.from_numpy(model.case.target(tuple(output.shape))).double()
        torch.nn.functional.mse_loss(output, target).backward()
    return {name: p.grad.numpy() for name, p in model.module.named_parameters()
            if p.grad is not None}


def _batch_statistics(module: Any) -> None:
    """Every BatchNorm module in train mode (what onnxruntime-training computes)."""
    import torch

    for inner in module.modules():
        if isinstance(inner, torch.nn.modules.batchnorm._BatchNorm):
            inner.train()


def _aliases(module: Any) -> dict[str, str]:
    canonical: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        aliases[name] = canonical.setdefault(id(parameter), name)
    return aliases
