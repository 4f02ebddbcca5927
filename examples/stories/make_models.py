"""Regenerate the bundled example models of the demo (needs torch; the demo does not).

    .venv/bin/python examples/stories/make_models.py

Writes, next to this file:

* ``functions/model.onnx``: a small MLP whose residual blocks were exported as
  model-local functions (``export_modules_as_functions``), which onnxruntime-training
  cannot differentiate.
* ``checkpoint/model.onnx``: a tiny causal language model exported with
  ``dynamo=True`` without its weights (``include_initializers=False``).
* ``checkpoint/trained.safetensors``: the trained ``state_dict()`` of the wrapper
  model, so every key carries a ``transformer.`` prefix and the non-persistent
  ``causal_mask`` buffer is missing (as with any ``state_dict()``).
* ``checkpoint/full_state.safetensors``: ``graphpass.torch.save_state`` of the same
  model: every parameter, buffer and constant, under the exporter's names.
* ``checkpoint/batch.npz`` / ``checkpoint/expected.npz``: a fixed input batch and
  torch's outputs for it, to compare against.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

import graphpass.torch

HERE = Path(__file__).resolve().parent
VOCAB, WIDTH, LENGTH = 32, 16, 8


class ResidualBlock(nn.Module):
    """relu(fc(x)) + x: exported as a model-local function."""

    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) + x


class Regressor(nn.Module):
    """An MLP with two residual blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.block1 = ResidualBlock(16)
        self.block2 = ResidualBlock(16)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.block2(self.block1(self.inp(x))))


class CausalBlock(nn.Module):
    """Single-head causal self-attention with a residual projection."""

    def __init__(self, width: int, length: int):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.scale = 1.0 / math.sqrt(width)
        # Not in state_dict(): rebuilt at construction time, as GPT-2's causal "bias".
        self.register_buffer("causal_mask", torch.tril(torch.ones(length, length)),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = (x @ x.transpose(-1, -2)) * self.scale
        # An additive mask: 0 where a position may attend, -10000 where it may not.
        scores = scores + (self.causal_mask - 1.0) * 10000.0
        return x + self.proj(torch.softmax(scores, dim=-1) @ x)


class TinyLM(nn.Module):
    """Embedding, one causal block, a head: the model that gets exported."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.block = CausalBlock(WIDTH, LENGTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(ids)))


class TinyLMForCausalLM(nn.Module):
    """The wrapper training code saves: its keys start with ``transformer.``."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = TinyLM()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.transformer(ids)


def make_functions_model() -> None:
    torch.manual_seed(0)
    model = Regressor().eval()
    folder = HERE / "functions"
    folder.mkdir(exist_ok=True)
    x = torch.randn(2, 8)
    torch.onnx.export(model, (x,), folder / "model.onnx", dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"],
                      export_modules_as_functions={ResidualBlock})
    np.savez(folder / "batch.npz", x=x.numpy(), target=np.zeros((2, 4), np.float32))
    np.savez(folder / "expected.npz", y=model(x).detach().numpy())


def make_checkpoint_model() -> None:
    torch.manual_seed(1)
    wrapper = TinyLMForCausalLM().eval()
    folder = HERE / "checkpoint"
    folder.mkdir(exist_ok=True)
    ids = torch.randint(0, VOCAB, (2, LENGTH))
    program = torch.onnx.export(wrapper.transformer, (ids,), dynamo=True, opset_version=18,
                                input_names=["ids"], output_names=["logits"], optimize=False)
    program.save(str(folder / "model.onnx"), include_initializers=False)
    save_file({k: v.contiguous() for k, v in wrapper.state_dict().items()},
              str(folder / "trained.safetensors"))
    graphpass.torch.save_state(wrapper.transformer, folder / "full_state.safetensors")
    np.savez(folder / "batch.npz", ids=ids.numpy())
    np.savez(folder / "expected.npz", logits=wrapper(ids).detach().numpy())


if __name__ == "__main__":
    make_functions_model()
    make_checkpoint_model()
    for path in sorted(HERE.rglob("*")):
        if path.is_file() and path.suffix != ".py":
            print(f"{path.relative_to(HERE)}: {path.stat().st_size} bytes")
