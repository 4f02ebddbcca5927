"""Real torch 2.13 exports for the round-trip tests, cached on disk (not a test module).

Exporting takes seconds per model, so the files are kept in ``tests/.cache`` under
a key made of this file's contents and the torch/onnx versions: a changed recipe or
a new torch exports again. Writes are atomic (a temporary folder renamed into
place), so two pytest-xdist workers can race without harm.
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
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width: int = 4) -> None:
            super().__init__()
            self.lin = nn.Linear(width, width)
            self.norm = nn.BatchNorm1d(width)
            self.register_buffer("scale", torch.ones(width))
            self.register_buffer("offset", torch.zeros(width), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.norm(self.lin(x))) * self.scale + self.offset

    class Net(nn.Module):
        def __init__(self, width: int = 4) -> None:
            super().__init__()
            self.first = Block(width)
            self.second = Block(width)
            self.head = nn.Linear(width, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.second(self.first(x)))

    class Cond(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            def positive(x: torch.Tensor) -> torch.Tensor:
                return self.lin(x).relu()

            def negative(x: torch.Tensor) -> torch.Tensor:
                return self.lin(x) - 1.0

            return torch.cond(x.sum() > 0, positive, negative, (x,))

    class Scripted(nn.Module):
        def forward(self, x: torch.Tensor, steps: int) -> torch.Tensor:
            for _ in range(steps):
                x = x * 0.5 if bool(x.sum() > 0) else x + 1.0
            return x

    torch.manual_seed(0)
    x = torch.randn(3, 4)

    def dynamo(path: Path) -> None:
        torch.onnx.export(Net().eval(), (x,), path, dynamo=True)

    def dynamo_external(path: Path) -> None:
        wide = torch.randn(3, 256)
        torch.onnx.export(Net(256).eval(), (wide,), path, dynamo=True, external_data=True)

    def dynamo_transformer(path: Path) -> None:
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True).eval()
        torch.onnx.export(layer, (torch.randn(2, 5, 16),), path, dynamo=True)

    def dynamo_cond(path: Path) -> None:
        torch.onnx.export(Cond().eval(), (x,), path, dynamo=True)

    def legacy(path: Path) -> None:
        torch.onnx.export(Net().eval(), (x,), path, dynamo=False)

    def legacy_training(path: Path) -> None:
        torch.onnx.export(Net().train(), (x,), path, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)

    def legacy_functions(path: Path) -> None:
        torch.onnx.export(Net().eval(), (x,), path, dynamo=False, export_modules_as_functions=True)

    def legacy_scripted_loop(path: Path) -> None:
        torch.onnx.export(torch.jit.script(Scripted()), (x, torch.tensor(3)), path, dynamo=False)

    def legacy_with_metadata(path: Path) -> None:
        torch.onnx.export(Net().eval(), (x,), path, dynamo=False, verbose=True,
                          input_names=["features"], output_names=["scores"],
                          dynamic_axes={"features": {0: "batch"}})
        proto = onnx.load(path)
        proto.doc_string = "a small classifier"
        proto.graph.doc_string = "two blocks and a head"
        onnx.helper.set_model_props(proto, {"author": "graphpass tests", "license": "MIT"})
        proto.graph.node[0].doc_string = "first node"
        proto.graph.node[0].metadata_props.add(key="origin", value="added by the test")
        onnx.save(proto, path)

    return {
        "dynamo": dynamo,
        "dynamo_external": dynamo_external,
        "dynamo_transformer": dynamo_transformer,
        "dynamo_cond": dynamo_cond,
        "legacy": legacy,
        "legacy_training": legacy_training,
        "legacy_functions": legacy_functions,
        "legacy_scripted_loop": legacy_scripted_loop,
        "legacy_with_metadata": legacy_with_metadata,
    }


def exported_models() -> dict[str, Path]:
    """Export (or reuse) every recipe; return ``{name: path of model.onnx}``."""
    import torch

    key = hashlib.sha256(Path(__file__).read_bytes()
                         + f"{torch.__version__} {onnx.__version__}".encode()).hexdigest()[:16]
    root = CACHE / f"roundtrip-torch-{key}"
    if not root.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".roundtrip-torch-", dir=CACHE))
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
