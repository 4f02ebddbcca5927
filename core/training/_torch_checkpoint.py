"""The trained weights as a torch checkpoint that ``load_state_dict(strict=True)`` accepts.

:meth:`graphpass.training.Trainer.checkpoint` writes every key of the manifest's
``torch_state`` (worked out by ``build-training-graph``: the torch state the model
holds under its checkpoint keys and every alias of a tied tensor, the keys of the
user's checkpoint that no initializer holds, ``num_batches_tracked``):

* trained weights and running statistics: their current values;
* other initializers (frozen weights, buffers): their values in ``model.onnx``;
* the rest: the values of ``torch_extra.safetensors``, as the checkpoint had them,
  each ``num_batches_tracked`` of a batch normalization that trains with batch
  statistics advanced by the steps taken (one forward pass in ``train()`` mode each,
  as torch counts them).

Such a checkpoint never silently lacks a key of the model's ``state_dict()``: a key
torch's export record lists that nothing holds (a persistent buffer the exporter's
optimizer folded into a constant, with no checkpoint given to carry its value) is an
error naming it (:func:`check_checkpoint`), raised before anything is written, and by
``graphpass train --checkpoint-out`` before the first step.

A directory written before ``torch_state`` existed gives the trained weights and
running statistics under the manifest's ``torch_names``, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from graphpass.files import load
from graphpass.training._errors import TrainingError

if TYPE_CHECKING:
    from graphpass.training._trainer import Trainer

__all__ = ["check_checkpoint", "checkpoint_arrays"]


def check_checkpoint(manifest: dict[str, Any]) -> None:
    """Raise unless a torch checkpoint of this directory can hold every ``state_dict()`` key.

    Raises:
        TrainingError: Keys torch's export record lists that no initializer and no
            checkpoint holds, named.
    """
    state = manifest.get("torch_state") or {}
    missing = list(state.get("missing", []))
    if missing:
        shown = ", ".join(repr(key) for key in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise TrainingError(
            f"cannot write a checkpoint that load_state_dict(strict=True) accepts: the "
            f"model's state_dict() has {shown}{more}, which torch's export record lists but "
            "the model does not hold (the exporter's optimizer removed "
            f"{'them' if len(missing) != 1 else 'it'}: folded into the constants computed "
            "from it, or unused by the exported forward) and no checkpoint gave",
            hint="build the training graphs with the model's state as --checkpoint (a "
                 "graphpass.torch.save_state file, or torch's state_dict() saved as "
                 "safetensors): its values are carried through; or write the trained "
                 "model with --save instead")


def checkpoint_arrays(trainer: Trainer) -> dict[str, np.ndarray]:
    """The checkpoint's arrays by key (copies), in the manifest's order.

    Raises:
        TrainingError: A key cannot be written (:func:`check_checkpoint`).
    """
    manifest = trainer.manifest
    check_checkpoint(manifest)
    state: dict[str, Any] | None = manifest.get("torch_state")
    carried = trainer.carried_arrays()
    if state is None:
        names = manifest.get("torch_names", {})
        arrays: dict[str, np.ndarray] = {}
        for name in (*manifest["trainable"], *manifest.get("buffers", [])):
            key = names.get(name, name)
            if key in arrays:
                raise TrainingError(f"two weights map to the checkpoint key {key!r}",
                                    hint="check the manifest's torch_names")
            arrays[key] = carried[name].copy()
        return arrays
    extra: dict[str, np.ndarray] = {}
    if state.get("file"):
        from safetensors.numpy import load_file

        extra = load_file(str(trainer.directory / state["file"]))
    counters = set(state.get("counters", []))
    model = None
    result: dict[str, np.ndarray] = {}
    for key, name in state["keys"].items():
        if name is None:
            value = np.array(extra[key])
            if key in counters:
                value = np.asarray(value + np.asarray(trainer.steps, dtype=value.dtype))
        elif name in carried:
            value = carried[name].copy()
        else:
            if model is None:
                model = load(trainer.directory / manifest["files"]["model"])
            value = np.array(model.graph.initializers[name].numpy())
        result[key] = value
    return result
