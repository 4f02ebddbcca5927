"""Real torch 2.13 exports of small Hugging Face models for the ecosystem tests (not a test module).

* ``bert``: ``transformers.BertModel``, a tiny config, random weights, ``dynamo=True``;
* ``bert_legacy``: the same BertModel through the legacy (TorchScript) exporter, whose
  output the exporter does not optimize (Constant and Identity nodes, shape arithmetic);
* ``gpt2``: ``transformers.GPT2Model``, a tiny config, ``dynamo=True``;
* ``legacy_functions``: a custom residual MLP block exported by the legacy (TorchScript)
  exporter with ``export_modules_as_functions``, so the model has local functions.

Exports take seconds, so they are cached in ``tests/.cache`` under a key made of this
file and the torch, transformers and onnx versions; writes are atomic (a temporary folder
renamed into place), so pytest-xdist workers can race without harm.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import onnx

CACHE = Path(__file__).resolve().parent / ".cache"


def _recipes() -> dict[str, Callable[[Path], None]]:
    import torch
    import transformers
    from torch import nn

    torch.manual_seed(0)
    ids = torch.randint(0, 96, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.int64)

    def tiny_bert() -> nn.Module:
        torch.manual_seed(0)
        config = transformers.BertConfig(
            vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=32)
        return transformers.BertModel(config).eval()

    def bert(path: Path) -> None:
        torch.onnx.export(tiny_bert(), (ids, mask), path, dynamo=True,
                          input_names=["input_ids", "attention_mask"])

    class LastHiddenState(nn.Module):  # the TorchScript tracer passes no keywords
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              return_dict=True).last_hidden_state

    def bert_legacy(path: Path) -> None:
        torch.onnx.export(LastHiddenState(tiny_bert()), (ids, mask), path, dynamo=False,
                          input_names=["input_ids", "attention_mask"])

    def gpt2(path: Path) -> None:
        config = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2,
                                         n_head=2, use_cache=False)
        model = transformers.GPT2Model(config).eval()
        torch.onnx.export(model, (ids,), path, dynamo=True, input_names=["input_ids"])

    class Block(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 2 * width)
            self.down = nn.Linear(2 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class Net(nn.Module):
        def __init__(self, width: int = 16) -> None:
            super().__init__()
            self.blocks = nn.Sequential(Block(width), Block(width))
            self.head = nn.Linear(width, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.blocks(x))

    def legacy_functions(path: Path) -> None:
        torch.onnx.export(Net().eval(), (torch.randn(3, 16),), path, dynamo=False,
                          export_modules_as_functions={Block}, input_names=["x"])

    return {"bert": bert, "bert_legacy": bert_legacy, "gpt2": gpt2,
            "legacy_functions": legacy_functions}


def exported_models() -> dict[str, Path]:
    """Export (or reuse) every recipe; return ``{name: path of model.onnx}``."""
    import torch
    import transformers

    versions = f"{torch.__version__} {transformers.__version__} {onnx.__version__}"
    key = hashlib.sha256(Path(__file__).read_bytes() + versions.encode()).hexdigest()[:16]
    root = CACHE / f"ecosystem-exports-{key}"
    if not root.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".ecosystem-exports-", dir=CACHE))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for name, recipe in _recipes().items():
                    (staging / name).mkdir()
                    recipe(staging / name / "model.onnx")
            with contextlib.suppress(OSError):  # another worker may have finished first
                os.replace(staging, root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return {folder.name: folder / "model.onnx" for folder in sorted(root.iterdir())}
