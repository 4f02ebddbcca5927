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

A directory written before ``torch_state`` existed gives the trained weights and
running statistics under the manifest's ``torch_names``, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from graphpass.files import load
from graphpass.training._errors import TrainingError

if TYPE_CHECKING:
    from graphpass.training.trainer import Trainer

__all__ = ["checkpoint_arrays"]


def checkpoint_arrays(trainer: Trainer) -> dict[str, np.ndarray]:
    """The checkpoint's arrays by key (copies), in the manifest's order."""
    manifest = trainer.manifest
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
