"""Distinct parameters the legacy exporter merged by value train apart, as in torch.

The seed's export as a user writes it: a ``Block`` (``Linear`` + ``LayerNorm``) used
twice, ``torch.onnx.export(..., dynamo=False, export_modules_as_functions={Block})`` and
the exporter's defaults (eval mode, constant folding). Exporting in eval mode, the legacy
exporter deduplicates initializers by value: a fresh LayerNorm's weight is all ones and
its bias all zeros, so the file holds ``block2.ln.weight = Identity(block1.ln.weight)``
(and the same for the bias). torch trains four tensors; so must ``graphpass train``, the
``Trainer`` from Python, and the checkpoint written for torch must load with
``strict=True``. A real tie (one ``Parameter`` object) is exported once, with no
``Identity``, and stays one tensor.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("safetensors")

import graphpass  # noqa: E402
from graphpass.training import Trainer  # noqa: E402

Process = Callable[..., subprocess.CompletedProcess[str]]
STEPS = 20
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
"""``torch.optim.AdamW``'s defaults, which ``build-training-graph`` uses too."""
LAYER_NORMS = ["block1.ln.weight", "block1.ln.bias", "block2.ln.weight", "block2.ln.bias"]


def _net(tie: bool = False) -> Any:
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(16, 16)
            self.ln = nn.LayerNorm(16)

        def forward(self, x: Any) -> Any:
            return x + torch.tanh(self.ln(self.linear(x)))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block1 = Block()
            self.block2 = Block()
            self.head = nn.Linear(16, 2)
            if tie:  # one Parameter object under two names: a real tie
                self.block2.ln.weight = self.block1.ln.weight

        def forward(self, x: Any) -> Any:
            return self.head(self.block2(self.block1(x)))

    torch.manual_seed(0)
    return Net(), Block


def _export(folder: Path, tie: bool = False) -> tuple[Any, Path, Path]:
    """The fresh module, its export as the seed writes it, and a batch (``.npz``)."""
    net, block = _net(tie)
    x = torch.randn(8, 16)
    target = np.random.default_rng(0).standard_normal((8, 2)).astype(np.float32)
    path = folder / ("tied.onnx" if tie else "seed.onnx")
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], export_modules_as_functions={block})
    batch = folder / "batch.npz"
    np.savez(batch, x=x.numpy(), target=target)
    return net, path, batch


def _torch_adamw(net: Any, batch: Path) -> tuple[list[float], dict[str, np.ndarray]]:
    """``STEPS`` steps of torch's own AdamW (mse against ``target``) on a copy of ``net``."""
    module = copy.deepcopy(net)
    with np.load(batch) as data:
        x, target = torch.from_numpy(data["x"]), torch.from_numpy(data["target"])
    optimizer = torch.optim.AdamW(module.parameters(), **ADAMW)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(module(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def test_the_legacy_export_merges_the_fresh_layer_norms(tmp_path: Path) -> None:
    _, path, _ = _export(tmp_path)
    proto = onnx.load(str(path))
    merged = {n.output[0]: n.input[0] for n in proto.graph.node if n.op_type == "Identity"}
    assert merged == {"block2.ln.weight": "block1.ln.weight",
                      "block2.ln.bias": "block1.ln.bias"}
    assert proto.functions  # the blocks, as functions


def _check_trained(net: Any, checkpoint: dict[str, np.ndarray], losses: list[float],
                   batch: Path) -> None:
    expected_losses, expected = _torch_adamw(net, batch)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
    assert set(checkpoint) == set(net.state_dict())
    for key, value in expected.items():
        np.testing.assert_allclose(checkpoint[key], value, atol=1e-5, err_msg=key)
    # four tensors, trained apart: the two blocks' LayerNorms went different ways
    assert not np.array_equal(checkpoint["block1.ln.weight"], checkpoint["block2.ln.weight"])
    assert not np.array_equal(checkpoint["block1.ln.bias"], checkpoint["block2.ln.bias"])
    module = copy.deepcopy(net)
    module.load_state_dict({k: torch.from_numpy(v) for k, v in checkpoint.items()},
                           strict=True)


def test_graphpass_train_trains_the_four_layer_norm_tensors_as_torch_does(
        graphpass_process: Process, tmp_path: Path) -> None:
    net, path, batch = _export(tmp_path)
    done = graphpass_process("train", path, "--data", batch, "--steps", STEPS, "--format",
                             "json", "--checkpoint-out", tmp_path / "trained.safetensors",
                             "--emit-training-graph", tmp_path / "train")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    codes = {f["code"] for f in report["build"]["findings"]}
    assert "GP256" in codes and "GP254" not in codes
    manifest = json.loads((tmp_path / "train" / "manifest.json").read_text())
    assert set(LAYER_NORMS) <= set(manifest["trainable"])

    from safetensors.numpy import load_file

    _check_trained(net, load_file(str(tmp_path / "trained.safetensors")), report["losses"],
                   batch)


def test_the_trainer_from_python_trains_them_apart(tmp_path: Path) -> None:
    net, path, batch = _export(tmp_path)
    result = graphpass.PassManager(["train-ready", "build-training-graph"], options={
        "build-training-graph": {"directory": str(tmp_path / "train")}}).run(
            graphpass.load(path))
    assert result.ok, result.findings
    trainer = Trainer(tmp_path / "train")
    with np.load(batch) as data:
        arrays = {name: data[name] for name in data.files}
    losses = [trainer.step(arrays) for _ in range(STEPS)]
    _check_trained(net, trainer.checkpoint(), losses, batch)


def test_train_ready_gives_each_merged_parameter_its_own_initializer(tmp_path: Path) -> None:
    _, path, _ = _export(tmp_path)
    result = graphpass.PassManager(["train-ready"]).run(graphpass.load(path))
    graph = result.model.graph
    assert set(LAYER_NORMS) <= set(graph.initializers)
    assert not [n for n in graph if n.op_type == "Identity"]
    np.testing.assert_array_equal(graph.initializers["block2.ln.weight"].numpy(),
                                  np.ones(16, np.float32))
    (split,) = [f for f in result.findings if f.code == "GP256"]
    assert split.data["split"] == {"block2.ln.weight": "block1.ln.weight",
                                   "block2.ln.bias": "block1.ln.bias"}
    # with merges = false they are reported, and train as one tensor
    kept = graphpass.PassManager(["train-ready"], options={
        "restore-parameters": {"merges": False}}).run(graphpass.load(path))
    (merged,) = [f for f in kept.findings if f.code == "GP254"]
    assert "--checkpoint" in (merged.hint or "")
    assert "block2.ln.weight" not in kept.model.graph.initializers


def test_a_real_tie_stays_one_tensor(graphpass_process: Process, tmp_path: Path) -> None:
    net, path, batch = _export(tmp_path, tie=True)
    proto = onnx.load(str(path))
    assert {n.output[0] for n in proto.graph.node if n.op_type == "Identity"} == \
        {"block2.ln.bias"}  # the tied weight is exported once; the equal bias is merged
    done = graphpass_process("train", path, "--data", batch, "--steps", STEPS, "--format",
                             "json", "--emit-training-graph", tmp_path / "train")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    manifest = json.loads((tmp_path / "train" / "manifest.json").read_text())
    assert "block2.ln.weight" not in manifest["trainable"]  # one tensor: block1.ln.weight
    assert {"block1.ln.weight", "block1.ln.bias", "block2.ln.bias"} <= \
        set(manifest["trainable"])
    expected_losses, _ = _torch_adamw(net, batch)
    np.testing.assert_allclose(report["losses"], expected_losses, rtol=1e-5)
