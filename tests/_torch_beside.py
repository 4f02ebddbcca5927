"""Training a torch module beside its ``graphpass.torch.Module`` copy, step for step.

The torch side is the module run by torch eager; the graphpass side is a deep copy of it
wrapped by :class:`graphpass.torch.Module`. Both take the same batches and the same
optimizer steps, so their outputs, gradients, losses and weights can be compared.
Used by ``tests/test_torch_module.py``, ``tests/test_resize_pool_gradients_torch.py``
and the zoo (``tests/zoo/torch_module.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

__all__ = ["gradient_mismatches", "step_both", "wrapped_copy"]


def wrapped_copy(reference: Any, **options: Any) -> tuple[Any, Any]:
    """A deep copy of ``reference`` and that copy wrapped by ``graphpass.torch.Module``."""
    import graphpass.torch

    model = copy.deepcopy(reference)
    return model, graphpass.torch.Module(model, **options)


def step_both(optimizers: Sequence[Any], *, clip: float | None = None) -> None:
    """One step of each optimizer (each side's), gradients then cleared.

    Args:
        optimizers: The torch side's optimizer and the graphpass side's (or any number).
        clip: Clip the gradient norm of each optimizer's parameters to this first.
    """
    import torch

    for optimizer in optimizers:
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(
                [p for group in optimizer.param_groups for p in group["params"]], clip)
        optimizer.step()
        optimizer.zero_grad()


def gradient_mismatches(reference: Any, model: Any, *, rtol: float = 0.0,
                        atol: float = 1e-5) -> list[str]:
    """The parameters whose gradients differ between ``reference`` and its copy ``model``.

    A parameter differs where one side has a gradient and the other has none, or where
    the two are not ``torch.allclose`` within ``rtol`` and ``atol``.
    """
    import torch

    mismatches = []
    for (name, a), b in zip(reference.named_parameters(), model.parameters(), strict=True):
        if (a.grad is None) != (b.grad is None):
            mismatches.append(f"{name}: a gradient on one side only")
        elif a.grad is not None and not torch.allclose(a.grad, b.grad, rtol=rtol, atol=atol):
            mismatches.append(f"{name}: largest difference "
                              f"{(a.grad - b.grad).abs().max().item():.3g}")
    return mismatches
