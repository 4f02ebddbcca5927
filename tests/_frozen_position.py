"""A model with a frozen sinusoidal position table (RoFormer's and Whisper's encoder's way).

Shared by ``tests/test_frozen_parameters_torch.py`` (the table stays frozen in training)
and ``tests/test_frozen_folded_parameters_torch.py`` (the exporter folds it away).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["IDS", "PositionModel"]

IDS = np.array([[1, 5, 2, 7, 3, 9], [4, 4, 8, 0, 6, 10]], dtype=np.int64)
"""Token ids, two rows of six."""


def _sinusoidal(positions: int, width: int) -> Any:
    position = torch.arange(positions, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(1e4) / width))
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table


class PositionModel(torch.nn.Module):
    """Token embeddings plus a frozen sinusoidal position table, then a projection."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(11, 8)
        self.position = torch.nn.Parameter(_sinusoidal(16, 8), requires_grad=False)
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, ids: Any) -> Any:
        hidden = self.embed(ids) + self.position[: ids.shape[1]]
        return self.proj(torch.tanh(hidden))
