"""A frozen parameter that survives only as the exporter's fold is no refusal (issue 30).

Whisper's encoder holds its sinusoidal position table as a frozen ``nn.Parameter``
(``requires_grad=False``) and reads it at constant positions: the default dynamo export's
optimizer folds the rows read into a constant, and the file no longer holds the table.
Named frozen (``lint-gradients.frozen``, as a user of a file without a checkpoint must),
``restore-parameters`` does not refuse it (``GP257``, info); the rest trains with torch's
first-step gradients, and a torch checkpoint written back says it cannot hold the key.
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

from _frozen_position import IDS, PositionModel  # noqa: E402

from graphpass.cli import main  # noqa: E402
from graphpass.training import Trainer, TrainingError, initial_values  # noqa: E402

pytestmark = pytest.mark.torch

TARGET = np.random.default_rng(5).standard_normal((2, 6, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default dynamo export (optimizer on, weights inside): the table is folded."""
    folder = tmp_path_factory.mktemp("folded-frozen")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(PositionModel(), (torch.from_numpy(IDS),), dynamo=True,
                                    verbose=False, input_names=["ids"])
    program.save(str(folder / "model.onnx"))
    return folder / "model.onnx"


def _run(model: Path, directory: Path, *options: str) -> tuple[int, list[dict[str, Any]]]:
    report = directory.parent / f"{directory.name}.json"
    code = main(["run", str(model), "-o", str(directory.parent / f"{directory.name}.onnx"),
                 "-p", "train-ready", "--emit-training-graph", str(directory),
                 "--format", "json", "--report", str(report), *options])
    return code, json.loads(report.read_text())["findings"]


def test_the_export_folds_the_table(exported: Path) -> None:
    import onnx

    names = {i.name for i in onnx.load(str(exported)).graph.initializer}
    assert "position" not in names  # only the fold of the rows read is left


def test_a_frozen_folded_parameter_is_not_refused(exported: Path, tmp_path: Path) -> None:
    # not named frozen: refused, as before (training would miss a parameter torch trains)
    code, findings = _run(exported, tmp_path / "unsaid")
    assert code == 1
    assert [f["data"]["parameters"] for f in findings if f["code"] == "GP251"] == [["position"]]

    code, findings = _run(exported, tmp_path / "train", "-O",
                          'lint-gradients.frozen=["position"]')
    assert code == 0, [f for f in findings if f["severity"] == "error"]
    [kept] = [f for f in findings if f["code"] == "GP257"]
    assert kept["severity"] == "info" and kept["data"]["parameters"] == ["position"]
    assert "--checkpoint" in kept["hint"]
    assert not [f for f in findings if f["code"] in ("GP251", "GP426")]

    directory = tmp_path / "train"
    manifest = json.loads((directory / "manifest.json").read_text())
    assert sorted(manifest["trainable"]) == ["embed.weight", "proj.bias", "proj.weight"]
    # first-step gradients equal torch.autograd's
    module = PositionModel()
    loss = torch.nn.functional.mse_loss(module(torch.from_numpy(IDS)), torch.from_numpy(TARGET))
    loss.backward()
    expected = {name: p.grad.numpy() for name, p in module.named_parameters()
                if p.grad is not None}
    assert sorted(expected) == sorted(manifest["trainable"])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(directory / manifest["files"]["gradient"]), options,
                                   providers=["CPUExecutionProvider"])
    values = initial_values(directory)
    feeds = {"ids": IDS, "target": TARGET,
             **{name: values[name] for name in manifest["trainable"]}}
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds),
                       strict=True))
    assert abs(float(outputs["loss"]) - float(loss.detach())) < 1e-5
    for name, gradient in expected.items():
        got = outputs[f"{name}.grad"]
        assert got.shape == gradient.shape
        assert float(np.abs(got - gradient).max()) <= 1e-5 * max(
            1.0, float(np.abs(gradient).max())), name

    # a checkpoint written for torch cannot hold 'position': said, not silently left out
    trainer = Trainer(directory)
    with pytest.raises(TrainingError, match="'position'") as raised:
        trainer.save_checkpoint(tmp_path / "ck.safetensors")
    assert raised.value.hint and "--checkpoint" in raised.value.hint
    assert not (tmp_path / "ck.safetensors").exists()
