"""Parameters the exporter folded whose shape the file no longer records (issue 30).

PoolFormer's blocks normalise with ``GroupNorm(1, C)`` and scale with
``layer_scale.unsqueeze(-1).unsqueeze(-1) * x``. The default dynamo export's optimizer
folds every one of those parameters into a ``[C, 1, 1]`` constant and drops the parameter:
the file holds its values, but not its shape, and fresh values (ones, zeros, ``1e-5``)
say nothing about where each element came from. torch's records do: the fold is named
after FX ``unsqueeze`` nodes, or is read only by ``aten.group_norm``, whose weight and bias
are 1-D. ``restore-parameters`` gives each parameter back in torch's shape, and the block
trains with no checkpoint, with torch.autograd's first-step gradients.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from graphpass.cli import main  # noqa: E402
from graphpass.training import Trainer, initial_values  # noqa: E402

pytestmark = pytest.mark.torch

X = np.random.default_rng(7).standard_normal((2, 3, 6, 6)).astype(np.float32)
TARGET = np.random.default_rng(8).standard_normal((2, 4)).astype(np.float32)


class Block(torch.nn.Module):
    """A PoolFormer block at a fresh initialisation: GroupNorm(1, C), pooling, layer scale."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.GroupNorm(1, 8)
        self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.layer_scale = torch.nn.Parameter(1e-5 * torch.ones(8))
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: Any) -> Any:
        h = self.conv(x)
        normed = self.norm(h)
        h = h + self.layer_scale.unsqueeze(-1).unsqueeze(-1) * self.pool(normed)
        return self.head(h.mean((2, 3)))


class Ambiguous(torch.nn.Module):
    """A ``[8, 1]`` scale unsqueezed to ``[1, 8, 1]``: ``[8, 1]`` or ``[1, 8]``, unknown."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.scale = torch.nn.Parameter(torch.randn(8, 1))

    def forward(self, x: Any) -> Any:
        return (self.conv(x).flatten(2) * self.scale.unsqueeze(0)).mean(2)


def _export(module: torch.nn.Module, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, (torch.from_numpy(X),), dynamo=True,
                                    verbose=False, input_names=["x"])
    program.save(str(path))
    return path


def _run(model: Path, directory: Path) -> tuple[int, list[dict[str, Any]]]:
    report = directory.parent / f"{directory.name}.json"
    code = main(["run", str(model), "-o", str(directory.parent / f"{directory.name}.onnx"),
                 "-p", "train-ready", "--emit-training-graph", str(directory),
                 "--format", "json", "--report", str(report)])
    return code, json.loads(report.read_text())["findings"]


def test_group_norm_and_layer_scale_train_with_no_checkpoint(tmp_path: Path) -> None:
    model = _export(Block(), tmp_path / "block.onnx")
    held = {i.name for i in onnx.load(str(model)).graph.initializer}
    assert not {"norm.weight", "norm.bias", "layer_scale"} & held  # folded, shapes gone

    code, findings = _run(model, tmp_path / "train")
    assert code == 0, [f for f in findings if f["severity"] == "error"]
    [restored] = [f for f in findings if f["code"] == "GP250"]
    assert sorted(set(restored["data"]["restored"].values())) == [
        "layer_scale", "norm.bias", "norm.weight"]

    directory = tmp_path / "train"
    manifest = json.loads((directory / "manifest.json").read_text())
    module = Block()
    loss = torch.nn.functional.mse_loss(module(torch.from_numpy(X)), torch.from_numpy(TARGET))
    loss.backward()
    expected = {name: p.grad.numpy() for name, p in module.named_parameters()}
    assert sorted(manifest["trainable"]) == sorted(expected)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(directory / manifest["files"]["gradient"]), options,
                                   providers=["CPUExecutionProvider"])
    values = initial_values(directory)
    feeds = {"x": X, "target": TARGET, **{name: values[name] for name in manifest["trainable"]}}
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds),
                       strict=True))
    assert abs(float(outputs["loss"]) - float(loss.detach())) <= 1e-5 * abs(float(loss.detach()))
    largest = max(float(np.abs(g).max()) for g in expected.values())
    for name, gradient in expected.items():
        got = outputs[f"{name}.grad"]
        assert got.shape == gradient.shape, name  # torch's shape: [8], not [8, 1, 1]
        assert float(np.abs(gradient).max()) > 1e-6 * largest, name  # not rounding noise
        np.testing.assert_allclose(got, gradient, rtol=1e-4, atol=1e-7 * largest,
                                   err_msg=name)

    # the checkpoint written back for torch holds every key, in torch's shapes
    state = Trainer(directory).checkpoint()
    assert {k: v.shape for k, v in state.items()} == {
        k: tuple(v.shape) for k, v in module.state_dict().items()}


def test_an_ambiguous_shape_is_still_refused(tmp_path: Path) -> None:
    code, findings = _run(_export(Ambiguous(), tmp_path / "ambiguous.onnx"), tmp_path / "t")
    assert code == 1
    assert [f["data"]["parameters"] for f in findings if f["code"] == "GP251"] == [["scale"]]
