"""torch tensors in and out of onnxruntime sessions, without copies.

Inputs are bound by address: onnxruntime reads a contiguous CPU tensor where torch
keeps it. Outputs onnxruntime allocates are handed to torch through DLPack, so the
tensor torch sees is onnxruntime's buffer; outputs whose shape is known up front
(gradients, shaped like their parameter) are written straight into a tensor torch
allocated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.utils.dlpack

__all__ = ["bind_input", "bind_output_into", "to_torch"]

_NUMPY_TYPES: dict[torch.dtype, type[np.generic]] = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


def _numpy_type(tensor: torch.Tensor) -> type[np.generic]:
    found = _NUMPY_TYPES.get(tensor.dtype)
    if found is None:
        raise TypeError(f"onnxruntime cannot read a torch {tensor.dtype} tensor here")
    return found


def bind_input(binding: Any, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Bind ``tensor`` as input ``name``; return the tensor to keep alive until the run ends."""
    held = tensor.detach()
    if not held.is_contiguous():
        held = held.contiguous()
    if held.numel() == 0:
        binding.bind_cpu_input(name, held.numpy())
        return held
    binding.bind_input(name, "cpu", 0, _numpy_type(held), list(held.shape), held.data_ptr())
    return held


def bind_output_into(binding: Any, name: str, tensor: torch.Tensor) -> None:
    """Have onnxruntime write output ``name`` into ``tensor`` (contiguous, right shape)."""
    binding.bind_output(name, "cpu", 0, _numpy_type(tensor), list(tensor.shape),
                        tensor.data_ptr())


def to_torch(value: Any) -> torch.Tensor:
    """An ``OrtValue`` onnxruntime allocated, as a torch tensor sharing its memory."""
    tensor: torch.Tensor = torch.utils.dlpack.from_dlpack(value._ortvalue)
    return tensor
