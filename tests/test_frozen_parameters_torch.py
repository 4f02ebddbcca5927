"""Parameters torch freezes (``requires_grad=False``) stay frozen in graphpass's training.

A sinusoidal position table held as a frozen ``nn.Parameter`` (as RoFormer and Whisper's
encoder hold theirs) is exported by ``torch.onnx.export(dynamo=True)`` as a PARAMETER,
and a plain ``state_dict()`` does not say it is frozen either. A checkpoint written by
``graphpass.torch.save_state`` records it (``graphpass.frozen``), and the trainable
selection keeps it fixed; with a plain ``state_dict()`` the user names it with
``lint-gradients.frozen``. Either way, three steps of ``step.onnx`` must move the
weights as ``torch.optim.AdamW`` does, and leave the table where it was.
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
safetensors_torch = pytest.importorskip("safetensors.torch")

from _frozen_position import IDS, PositionModel  # noqa: E402

import graphpass  # noqa: E402
import graphpass.torch as gp_torch  # noqa: E402
from graphpass.checkpoint import open_checkpoint  # noqa: E402
from graphpass.cli import main  # noqa: E402
from graphpass.training import initial_values  # noqa: E402

pytestmark = pytest.mark.torch

LR = 1e-2
STEPS = 3
TARGET = np.random.default_rng(3).standard_normal((2, 6, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dynamo export (``optimize=False``, no weights in the file, as the zoo's
    ``dynamo-state-dict`` and ``dynamo-full-state`` modes make it)."""
    folder = tmp_path_factory.mktemp("frozen")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(PositionModel(), (torch.from_numpy(IDS),), dynamo=True,
                                    optimize=False, verbose=False, input_names=["ids"])
    program.save(str(folder / "model.onnx"), include_initializers=False)
    return folder / "model.onnx"


def _emit(model: Path, checkpoint: Path, directory: Path, *options: str
          ) -> list[dict[str, Any]]:
    report = directory.parent / f"{directory.name}.json"
    code = main(["run", str(model), "-o", str(directory.parent / f"{directory.name}.onnx"),
                 "-p", "train-ready", "--checkpoint", str(checkpoint),
                 "--emit-training-graph", str(directory), "--format", "json",
                 "--report", str(report), *options])
    findings: list[dict[str, Any]] = json.loads(report.read_text())["findings"]
    assert code == 0, findings
    return findings


def _torch_adamw() -> dict[str, np.ndarray]:
    module = PositionModel()
    optimizer = torch.optim.AdamW(module.parameters(), lr=LR)
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(module(torch.from_numpy(IDS)),
                                            torch.from_numpy(TARGET))
        loss.backward()
        optimizer.step()
    return {key: value.detach().numpy() for key, value in module.state_dict().items()}


def _own_steps(directory: Path) -> dict[str, np.ndarray]:
    manifest = json.loads((directory / "manifest.json").read_text())
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(directory / manifest["files"]["step"]), options,
                                   providers=["CPUExecutionProvider"])
    values: dict[str, np.ndarray] = initial_values(directory)
    step = manifest["step"]
    for _ in range(STEPS):
        feeds = {"ids": IDS, "target": TARGET, "lr": np.array(LR, np.float32),
                 **{name: values[name] for name in step["inputs"] if name in values}}
        outputs = dict(zip(step["outputs"], session.run(None, feeds), strict=True))
        for source, updated in step["carry"]:
            values[source] = outputs[updated]
    return values


def _trains_like_torch(directory: Path) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    assert "position" not in manifest["trainable"]
    assert "position" in manifest["frozen"]
    assert sorted(manifest["trainable"]) == ["embed.weight", "proj.bias", "proj.weight"]
    values = _own_steps(directory)
    expected = _torch_adamw()
    for weight in manifest["trainable"]:
        difference = float(np.abs(values[weight] - expected[weight]).max())
        assert difference < 1e-5, (weight, difference)
    moved = float(np.abs(expected["embed.weight"]
                         - PositionModel().state_dict()["embed.weight"].numpy()).max())
    assert moved > 1e-3  # the steps did move the trained weights


def test_save_state_records_the_parameters_torch_does_not_train(tmp_path: Path) -> None:
    module = PositionModel()
    gp_torch.save_state(module, tmp_path / "state.safetensors")
    checkpoint = open_checkpoint(tmp_path / "state.safetensors")
    assert gp_torch.recorded_frozen(checkpoint.metadata) == {"position"}
    assert "graphpass.frozen" not in checkpoint  # metadata, not a tensor or an alias
    # a mapping of tensors cannot say: no record
    gp_torch.save_state(module.state_dict(), tmp_path / "plain.safetensors")
    assert gp_torch.recorded_frozen(open_checkpoint(tmp_path / "plain.safetensors").metadata) \
        is None
    # an exported program keeps requires_grad: the same record
    program = torch.export.export(module, (torch.from_numpy(IDS),))
    gp_torch.save_state(program, tmp_path / "program.safetensors")
    assert gp_torch.recorded_frozen(
        open_checkpoint(tmp_path / "program.safetensors").metadata) == {"position"}
    # so does the ONNXProgram of a dynamo export, through its exported program
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_program = torch.onnx.export(module, (torch.from_numpy(IDS),), dynamo=True,
                                         optimize=False, verbose=False)
    gp_torch.save_state(onnx_program, tmp_path / "onnx.safetensors")
    assert gp_torch.recorded_frozen(
        open_checkpoint(tmp_path / "onnx.safetensors").metadata) == {"position"}


def test_a_malformed_record_is_a_clear_error(tmp_path: Path) -> None:
    from graphpass.errors import CheckpointError

    with pytest.raises(CheckpointError, match="not a JSON list of names") as raised:
        gp_torch.recorded_frozen({"graphpass.frozen": "position"}, where="x.safetensors")
    assert raised.value.hint and "save_state" in raised.value.hint


def test_save_state_checkpoint_keeps_frozen_parameters_fixed(exported: Path,
                                                             tmp_path: Path) -> None:
    gp_torch.save_state(PositionModel(), tmp_path / "state.safetensors")
    findings = _emit(exported, tmp_path / "state.safetensors", tmp_path / "train")
    [record] = [f for f in findings if f["code"] == "GP427"]
    assert record["severity"] == "info" and record["data"]["frozen"] == ["position"]
    assert not [f for f in findings if f["code"] == "GP426"]
    _trains_like_torch(tmp_path / "train")


def test_plain_state_dict_needs_the_frozen_option(exported: Path, tmp_path: Path) -> None:
    safetensors_torch.save_model(PositionModel(), str(tmp_path / "plain.safetensors"))
    findings = _emit(exported, tmp_path / "plain.safetensors", tmp_path / "train",
                     "-O", 'lint-gradients.frozen=["position"]')
    assert not [f for f in findings if f["code"] in ("GP426", "GP427")]
    _trains_like_torch(tmp_path / "train")
    # without the option, nothing says torch froze it: it trains (what the docs warn of)
    _emit(exported, tmp_path / "plain.safetensors", tmp_path / "unsaid")
    manifest = json.loads((tmp_path / "unsaid" / "manifest.json").read_text())
    assert "position" in manifest["trainable"]
    values, expected = _own_steps(tmp_path / "unsaid"), _torch_adamw()  # and drifts from torch
    assert float(np.abs(values["position"] - expected["position"]).max()) > 1e-3
    assert float(np.abs(values["proj.weight"] - expected["proj.weight"]).max()) > 1e-5


def test_an_explicit_trainable_option_wins_over_the_record(exported: Path,
                                                           tmp_path: Path) -> None:
    gp_torch.save_state(PositionModel(), tmp_path / "state.safetensors")
    findings = _emit(exported, tmp_path / "state.safetensors", tmp_path / "train",
                     "-O", 'lint-gradients.trainable=["*"]')
    assert not [f for f in findings if f["code"] == "GP427"]
    manifest = json.loads((tmp_path / "train" / "manifest.json").read_text())
    assert "position" in manifest["trainable"]


def test_build_training_graphs_from_python_uses_the_record(exported: Path,
                                                           tmp_path: Path) -> None:
    from graphpass.checkpoint import ReconcileResult
    from graphpass.training.rules import trainable_weights

    gp_torch.save_state(PositionModel(), tmp_path / "state.safetensors")
    result = graphpass.PassManager(["inline-functions", "reconcile-initializers"],
                                   checkpoints=[tmp_path / "state.safetensors"]).run(
        graphpass.load(exported))
    reconciled = result.analysis(ReconcileResult)
    assert reconciled is not None and reconciled.frozen == ("position",)
    weights = trainable_weights(result.model.graph, codes={"no-match": "X", "not-float": "X"},
                                trainer="test", reconciled=reconciled)
    assert "position" in weights.frozen and "position" not in weights.trainable
    assert weights.selection.recorded == ("position",)
