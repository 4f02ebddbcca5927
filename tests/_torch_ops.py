"""One torch function as a module, and its ``torch.onnx.export(dynamo=True)``: the torch
oracle of the operator tests (``Resize``, pools, ``DFT``). Imported after
``pytest.importorskip("torch")``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import onnx
import torch


class Op(torch.nn.Module):
    """``function`` as a module."""

    def __init__(self, function: Callable[[Any], Any]) -> None:
        super().__init__()
        self.function = function

    def forward(self, x: Any) -> Any:
        return self.function(x)


def export_op(module: Any, x: Any) -> onnx.ModelProto:
    """``module`` exported on ``x`` by the dynamo exporter, its warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, (x,), dynamo=True, verbose=False)
    return program.model_proto
