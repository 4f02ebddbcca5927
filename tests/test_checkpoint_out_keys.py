"""A checkpoint written for torch never silently lacks a key of the model's ``state_dict()``.

Either every key is written (``load_state_dict(strict=True)`` accepts the file), or
``--checkpoint-out`` is an error naming the keys it cannot write, before the first step.
Real exports: the legacy exporter's (no record: frozen weights are state too) and
torch.export's (a persistent buffer its optimizer folded into a constant).
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("safetensors")

from safetensors.numpy import load_file  # noqa: E402

Process = Callable[..., subprocess.CompletedProcess[str]]


def _export(module: Any, x: Any, path: Path, **options: Any) -> None:
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), input_names=["x"], output_names=["y"],
                          **options)


def _strict_load(module: Any, path: Path) -> None:
    module.load_state_dict({k: torch.from_numpy(v) for k, v in load_file(str(path)).items()},
                           strict=True)


def test_frozen_weights_of_a_legacy_export_are_written(graphpass_process: Process,
                                                       tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                                 torch.nn.Linear(8, 2)).eval()
    x = torch.randn(6, 4)
    _export(module, x, tmp_path / "net.onnx", dynamo=False)
    np.savez(tmp_path / "batch.npz", x=x.numpy(), target=np.zeros((6, 2), np.float32))
    done = graphpass_process("train", tmp_path / "net.onnx", "--data", tmp_path / "batch.npz",
                             "--steps", 2, "-O", 'build-training-graph.frozen=["2.*"]',
                             "-O", "build-training-graph.batch-norm=running-statistics",
                             "--checkpoint-out", tmp_path / "trained.safetensors")
    assert done.returncode == 0, done.stdout + done.stderr
    written = load_file(str(tmp_path / "trained.safetensors"))
    assert set(written) == set(module.state_dict())
    np.testing.assert_array_equal(written["2.weight"], module[2].weight.detach().numpy())
    np.testing.assert_array_equal(written["1.running_mean"], module[1].running_mean.numpy())
    _strict_load(module, tmp_path / "trained.safetensors")


class _Table(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("table", torch.randn(16, 4))  # persistent: a state_dict() key

    def forward(self, x: Any) -> Any:
        return self.lin(x) + self.table[: x.shape[0]]  # the optimizer folds the rows read


def test_a_key_that_cannot_be_written_is_an_error_naming_it(graphpass_process: Process,
                                                            tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = _Table().eval()
    x = torch.randn(8, 4)
    _export(module, x, tmp_path / "table.onnx", dynamo=True)
    np.savez(tmp_path / "batch.npz", x=x.numpy(), target=np.zeros((8, 4), np.float32))
    out = tmp_path / "trained.safetensors"
    done = graphpass_process("train", tmp_path / "table.onnx", "--data",
                             tmp_path / "batch.npz", "--steps", 2, "--checkpoint-out", out)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'table'" in done.stderr and "--checkpoint" in done.stderr
    assert "Traceback" not in done.stderr
    assert "step 1/2" not in done.stdout  # refused before training, not after
    assert not out.exists()

    from safetensors.torch import save_file  # the hint: the model's state as --checkpoint

    save_file(module.state_dict(), str(tmp_path / "state.safetensors"))
    done = graphpass_process("train", tmp_path / "table.onnx", "--checkpoint",
                             tmp_path / "state.safetensors", "--data", tmp_path / "batch.npz",
                             "--steps", 2, "--checkpoint-out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    _strict_load(_Table(), out)
