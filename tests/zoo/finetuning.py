"""A zoo model "fine-tuned" after its export: every floating-point tensor moved a little.

The ``+finetuned`` modes (:mod:`zoo.exporting`) fill an export made from the case's model
with the checkpoint of :func:`finetune`'s copy of it, the situation of a model exported
once and trained since; their torch oracle (:mod:`zoo.reference`) is the same copy. Every
floating-point tensor of the ``state_dict()`` (parameters and persistent buffers) gets
seeded noise of :data:`FINETUNE_SCALE` of its own scale (its root mean square), so that
no value the exporter folded into a constant is still right; running variances are
scaled instead (``exp`` of the noise), so they stay positive. Tensors that are one
(tied weights, ALBERT's shared layers) are perturbed once and stay one. Non-persistent
buffers (RoPE's ``inv_freq``) are not in a checkpoint and are left alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FINETUNE_SCALE", "FINETUNE_SEED", "finetune"]

FINETUNE_SCALE = 0.05
"""The noise, as a fraction of each tensor's root mean square."""
FINETUNE_SEED = 1234
"""Seed of the noise (with the case's own seed added)."""


def finetune(model: Any, seed: int = 0) -> Any:
    """Perturb every floating-point tensor of ``model.state_dict()`` in place; return it.

    Args:
        model: A torch module (a Hugging Face model, or the zoo's wrapper around one).
        seed: Added to :data:`FINETUNE_SEED` (the case's seed, so cases differ).
    """
    import torch

    generator = torch.Generator().manual_seed(FINETUNE_SEED + seed)
    persistent = set(model.state_dict(keep_vars=True))
    tensors = [*model.named_parameters(remove_duplicate=False),
               *((name, b) for name, b in model.named_buffers(remove_duplicate=False)
                 if name in persistent)]
    seen: set[int] = set()
    with torch.no_grad():
        for name, tensor in tensors:
            if not tensor.is_floating_point() or tensor.data_ptr() in seen:
                continue
            seen.add(tensor.data_ptr())
            noise = torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
            if name.endswith("running_var"):
                tensor.mul_(torch.exp(FINETUNE_SCALE * noise))
                continue
            scale = float(tensor.double().pow(2).mean().sqrt()) or 1.0
            tensor.add_(FINETUNE_SCALE * scale * noise)
    return model
