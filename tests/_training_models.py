"""Small torch models for the training-graph tests, exported once and cached (not a test module).

Each recipe builds a module with fixed weights (a seeded initialisation), a batch
and a target, and names the loss it is trained with. :func:`exported` writes the
torch 2.13 export into ``tests/.cache`` under a key made of this file's contents and
the torch version (atomic: a temporary file renamed into place). The exports keep
parameter names (``optimize=False``: torch's optimizer folds transposed weights into
anonymous initializers, which only ``reconcile-initializers`` maps back).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache" / "training"


@dataclass
class Recipe:
    """A module, a batch, a target and the loss that compares them."""

    make: Callable[[], Any]  # () -> torch module (seeded)
    batch: Callable[[], dict[str, np.ndarray]]
    target: Callable[[], np.ndarray]
    loss: str  # mse or crossentropy
    modules_as_functions: bool = False


def _modules() -> dict[str, Recipe]:
    import torch
    from torch import nn
    from torch.nn import functional

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(6, 16)
            self.fc2 = nn.Linear(16, 16)
            self.out = nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = functional.gelu(self.fc1(x))
            hidden = torch.tanh(self.fc2(hidden)) + hidden  # a value used twice
            return self.out(hidden)

    class ConvNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # No bias before a batch norm (as real CNNs): with batch statistics its exact
            # gradient is 0, so AdamW would turn rounding noise into steps.
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2, bias=False)
            self.bn2 = nn.BatchNorm2d(8)
            self.depthwise = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
            self.head = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
            x = functional.relu6(self.bn2(self.conv2(x)))
            x = functional.avg_pool2d(self.depthwise(x), 2) + x[:, :, ::2, ::2]
            return self.head(torch.flatten(functional.adaptive_avg_pool2d(x, 1), 1))

    class Block(nn.Module):
        def __init__(self, width: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(width)
            # No bias: the key bias gets no gradient in exact arithmetic (softmax ignores a
            # constant per query), so AdamW would turn rounding noise into steps.
            self.qkv = nn.Linear(width, 3 * width, bias=False)
            self.proj = nn.Linear(width, width)
            self.ln2 = nn.LayerNorm(width)
            self.fc1 = nn.Linear(width, 4 * width)
            self.fc2 = nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch, length, width = x.shape
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            split = (batch, length, self.heads, width // self.heads)
            q, k, v = (t.reshape(split).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(width // self.heads)
            causal = torch.ones(length, length, dtype=torch.bool).triu(1)
            attention = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
            mixed = (attention @ v).transpose(1, 2).reshape(batch, length, width)
            x = x + self.proj(mixed)
            return x + self.fc2(functional.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class TinyLM(nn.Module):
        def __init__(self, vocab: int = 31, width: int = 16, length: int = 8) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Parameter(torch.randn(length, width) * 0.1)
            self.blocks = nn.ModuleList([Block(width, 2), Block(width, 2)])
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)
            self.head.weight = self.embed.weight  # tied: one weight, two uses

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids) + self.position[: ids.shape[1]]
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    class RMSNorm(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            variance = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(variance + 1e-6))

    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = RMSNorm(12)
            self.gate = nn.Linear(12, 24, bias=False)
            self.up = nn.Linear(12, 24, bias=False)
            self.down = nn.Linear(24, 12, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.norm(x)
            return x + self.down(functional.silu(self.gate(h)) * self.up(h))

    def seeded(factory: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
        def make() -> nn.Module:
            torch.manual_seed(0)
            module = factory()
            with torch.no_grad():
                # Non-trivial statistics and affine weights: the legacy exporter merges
                # initializers of equal value (every fresh LayerNorm's ones and zeros).
                for sub in module.modules():
                    if isinstance(sub, nn.BatchNorm2d):
                        sub.running_mean.uniform_(-0.5, 0.5)
                        sub.running_var.uniform_(0.5, 1.5)
                    if isinstance(sub, (nn.BatchNorm2d, nn.LayerNorm)):
                        sub.weight.uniform_(0.5, 1.5)
                        sub.bias.uniform_(-0.2, 0.2)
            return module.eval()
        return make

    class LastHidden(nn.Module):
        """A Hugging Face model's ``last_hidden_state`` (tiny configs, built offline)."""

        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x).last_hidden_state

    def hugging_face(kind: str) -> Callable[[], nn.Module]:
        def make() -> nn.Module:
            import transformers

            if kind == "gpt2":
                config = transformers.GPT2Config(vocab_size=31, n_embd=16, n_layer=2, n_head=2,
                                                 n_positions=16, use_cache=False)
                model = transformers.GPT2Model(config)
            else:
                config = transformers.LlamaConfig(
                    vocab_size=31, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, intermediate_size=32, max_position_embeddings=16,
                    use_cache=False)
                model = transformers.LlamaModel(config)
            with torch.no_grad():  # away from the initialisation's zeros and ones
                for parameter in model.parameters():
                    parameter.add_(torch.randn_like(parameter) * 0.02)
            return LastHidden(model)
        return make

    rng = np.random.default_rng(1)
    x_mlp = rng.standard_normal((5, 6)).astype(np.float32)
    y_mlp = rng.standard_normal((5, 3)).astype(np.float32)
    x_conv = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    y_conv = rng.standard_normal((2, 4)).astype(np.float32)
    ids = rng.integers(0, 31, size=(2, 8)).astype(np.int64)
    labels = rng.integers(0, 31, size=(2, 8)).astype(np.int64)
    labels[0, :2] = -100  # ignored, as Hugging Face pads labels
    hidden_target = (rng.standard_normal((2, 8, 16)) * 0.1).astype(np.float32)
    x_gated = rng.standard_normal((3, 5, 12)).astype(np.float32)
    y_gated = rng.standard_normal((3, 5, 12)).astype(np.float32)
    return {
        "mlp": Recipe(seeded(MLP), lambda: {"x": x_mlp}, lambda: y_mlp, "mse"),
        "convnet": Recipe(seeded(ConvNet), lambda: {"x": x_conv}, lambda: y_conv, "mse"),
        "tinylm": Recipe(seeded(TinyLM), lambda: {"ids": ids}, lambda: labels, "crossentropy"),
        "gated": Recipe(seeded(Gated), lambda: {"x": x_gated}, lambda: y_gated, "mse"),
        "tinylm-functions": Recipe(seeded(TinyLM), lambda: {"ids": ids}, lambda: labels,
                                   "crossentropy", modules_as_functions=True),
        "hf-gpt2": Recipe(seeded(hugging_face("gpt2")), lambda: {"x": ids},
                          lambda: hidden_target, "mse"),
        "hf-llama": Recipe(seeded(hugging_face("llama")), lambda: {"x": ids},
                           lambda: hidden_target, "mse"),
    }


def recipes() -> dict[str, Recipe]:
    """The recipes by name (imports torch)."""
    return _modules()


def _key() -> str:
    import torch

    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(torch.__version__.encode())
    return digest.hexdigest()[:16]


def exported(name: str) -> Path:
    """The cached export of recipe ``name`` (exported on first use)."""
    import torch

    path = CACHE / f"{name}-{_key()}.onnx"
    if path.exists():
        return path
    recipe = recipes()[name]
    module = recipe.make()
    args = tuple(torch.from_numpy(v) for v in recipe.batch().values())
    names = list(recipe.batch())
    CACHE.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=CACHE, suffix=".onnx.tmp")
    os.close(handle)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if recipe.modules_as_functions:  # the seed case: a submodule as a local function
            torch.onnx.export(module, args, temporary, dynamo=False, input_names=names,
                              export_modules_as_functions={type(module.blocks[0])},
                              opset_version=18, do_constant_folding=False)
        else:
            torch.onnx.export(module, args, temporary, dynamo=True, optimize=False,
                              input_names=names)
    os.replace(temporary, path)
    return path


def torch_gradients(name: str) -> tuple[float, dict[str, np.ndarray]]:
    """The loss and each parameter's gradient, by ``torch.autograd``, for the recipe's batch."""
    from torch.nn import functional

    recipe = recipes()[name]
    module = recipe.make()
    module.zero_grad()
    loss = torch_loss(module, recipe)
    loss.backward()
    grads = {key: p.grad.numpy().copy() for key, p in module.named_parameters()
             if p.grad is not None}
    del functional
    return float(loss), grads


def batch_norms_in_train_mode(module: Any) -> Any:
    """``module`` with its batch norms in ``train()`` mode, the rest as it was (eval).

    What ``build-training-graph`` trains with ``batch-norm = "batch-statistics"`` (its
    default): batch statistics, running statistics updated; no dropout.
    """
    import torch

    for sub in module.modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
            sub.train()
    return module


def torch_loss(module: Any, recipe: Recipe) -> Any:
    """The recipe's loss of ``module`` on its batch (a torch scalar)."""
    import torch
    from torch.nn import functional

    output = module(*(torch.from_numpy(v) for v in recipe.batch().values()))
    target = torch.from_numpy(recipe.target())
    if recipe.loss == "mse":
        return functional.mse_loss(output, target)
    return functional.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
