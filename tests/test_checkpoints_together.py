"""Checkpoints given together (``--checkpoint A --checkpoint B``) may share keys that agree.

The tutorial's way: the original ``state_dict()`` checkpoint lacks a non-persistent buffer,
the hint says to save the module's full state (``graphpass.torch.save_state``) and fill
from it; a user passes it beside the original. Both give every parameter under the same
key with the same values: no conflict. The same key with different values is refused,
naming the key and both files.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import graphpass.torch  # noqa: E402
from graphpass.checkpoint import Checkpoint, open_checkpoint  # noqa: E402
from graphpass.errors import CheckpointError  # noqa: E402

Process = Callable[..., subprocess.CompletedProcess[str]]


class _Masked(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4, 4)
        self.register_buffer("mask", torch.tril(torch.ones(4, 4)), persistent=False)

    def forward(self, x: Any) -> Any:
        return self.head(x) * self.mask


def _setup(folder: Path) -> tuple[Any, Path]:
    torch.manual_seed(0)
    module = _Masked().eval()
    path = folder / "masked.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(4, 4),), str(path), dynamo=True,
                          optimize=False, input_names=["x"])
    from safetensors.torch import save_file

    save_file(module.state_dict(), str(folder / "original.safetensors"))
    graphpass.torch.save_state(module, folder / "state.safetensors")
    return module, path


def test_the_original_checkpoint_and_the_full_state_together(graphpass_process: Process,
                                                            tmp_path: Path) -> None:
    module, path = _setup(tmp_path)
    done = graphpass_process("run", path, "--checkpoint", tmp_path / "original.safetensors",
                             "--checkpoint", tmp_path / "state.safetensors", "-p",
                             "train-ready", "-o", tmp_path / "ready.onnx")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "appears twice" not in done.stdout + done.stderr

    with torch.no_grad():  # a state that disagrees with the original on one key
        module.head.bias.add_(1.0)
    graphpass.torch.save_state(module, tmp_path / "other.safetensors")
    done = graphpass_process("run", path, "--checkpoint", tmp_path / "original.safetensors",
                             "--checkpoint", tmp_path / "other.safetensors", "-p",
                             "train-ready", "-o", tmp_path / "ready2.onnx")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'head.bias'" in done.stderr and "'head.weight'" not in done.stderr
    assert "original.safetensors" in done.stderr and "other.safetensors" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ready2.onnx").exists()


def test_shards_still_give_every_key_once(tmp_path: Path) -> None:
    _setup(tmp_path)
    parts = [open_checkpoint(tmp_path / "original.safetensors"),
             open_checkpoint(tmp_path / "state.safetensors")]
    with pytest.raises(CheckpointError, match="appears twice"):
        Checkpoint.combine(parts, path=tmp_path)
    combined = Checkpoint.combine(parts, path=tmp_path, overlap=True)
    assert sorted(combined) == ["head.bias", "head.weight", "mask"]
