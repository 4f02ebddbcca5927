"""Training graphs of real torch exports against ``torch.autograd`` and ``torch.optim``.

For each model of ``tests/_training_models.py`` (an MLP with a value used twice, a
convolutional net with batch norm, grouped, strided, dilated and depthwise
convolutions and pooling, a two-block transformer language model with tied
embeddings and a causal mask, a gated RMSNorm block, the transformer exported
with its blocks as local functions, and tiny Hugging Face GPT-2 and Llama models),
``build-training-graph`` writes the directory; stock onnxruntime runs
``gradient.onnx``, whose loss and gradients must equal torch's for the same batch and
loss, and ten runs of ``step.onnx`` must move the weights as ``torch.optim.AdamW`` (or
``SGD``) does. Batch normalizations train with batch statistics (the default), as torch
with the batch norms in ``train()`` mode: the running statistics after ten steps must
equal torch's too; with ``batch-norm = "running-statistics"`` as torch in ``eval()``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import graphpass

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from _training_models import (  # noqa: E402
    batch_norms_in_train_mode,
    exported,
    recipes,
    torch_loss,
)

MODELS = ["mlp", "convnet", "tinylm", "gated", "tinylm-functions", "hf-gpt2", "hf-llama"]


def _build(name: str, directory: Path, **options: object) -> dict[str, object]:
    recipe = recipes()[name]
    model = graphpass.load(exported(name))
    result = graphpass.PassManager(
        ["inline-functions", "build-training-graph"],
        options={"build-training-graph": {"directory": str(directory), "loss": recipe.loss,
                                          **options}}).run(model)
    errors = [f for f in result.findings if f.severity.name == "ERROR"]
    assert not errors, errors
    return json.loads((directory / "manifest.json").read_text())


def _session(path: Path) -> object:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _weights(directory: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(directory / "weights.safetensors"))


@pytest.mark.parametrize(("name", "batch_norm"), [
    *((name, "batch-statistics") for name in MODELS), ("convnet", "running-statistics")])
def test_gradient_graph_equals_torch_autograd(name: str, batch_norm: str,
                                              tmp_path: Path) -> None:
    manifest = _build(name, tmp_path / "train", batch_norm=batch_norm)
    recipe = recipes()[name]
    session = _session(tmp_path / "train" / "gradient.onnx")
    feeds = {**recipe.batch(), "target": recipe.target(), **_weights(tmp_path / "train")}
    assert [i.name for i in session.get_inputs()] == [*recipe.batch(), "target",
                                                       *manifest["trainable"]]
    assert [o.name for o in session.get_outputs()] == ["loss", *manifest["gradients"]]
    loss, *grads = session.run(None, feeds)

    module = recipe.make()
    if batch_norm == "batch-statistics":
        batch_norms_in_train_mode(module)
    expected = torch_loss(module, recipe)
    expected.backward()
    state = module.state_dict(keep_vars=True)
    expected_loss = expected.item()
    assert abs(float(loss) - expected_loss) <= 1e-5 * max(1.0, abs(expected_loss))
    trained = set(manifest["trainable"])
    params = {id(p) for p in module.parameters()}
    assert {id(state[n]) for n in trained} == params  # every parameter, under its export name
    for weight, grad in zip(manifest["trainable"], grads, strict=True):
        reference = state[weight].grad.numpy()
        scale = max(float(np.abs(reference).max()), 1e-6)
        assert float(np.abs(grad - reference).max()) / scale < 1e-3, weight


@pytest.mark.parametrize("name", MODELS)
def test_every_file_is_standard_onnx(name: str, tmp_path: Path) -> None:
    _build(name, tmp_path / "train")
    for file in ("gradient.onnx", "step.onnx", "eval.onnx"):
        path = tmp_path / "train" / file
        onnx.checker.check_model(str(path), full_check=True)
        proto = onnx.load(str(path))
        assert {node.domain for node in proto.graph.node} <= {""}, file
        assert not proto.functions, file


def _torch_steps(name: str, optimizer: str, steps: int, lr: float,
                 batch_norm: str = "batch-statistics") -> dict[str, np.ndarray]:
    recipe = recipes()[name]
    module = recipe.make()
    if batch_norm == "batch-statistics":
        batch_norms_in_train_mode(module)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(module.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9, weight_decay=0.01,
                              nesterov=True)
    for _ in range(steps):
        opt.zero_grad()
        torch_loss(module, recipe).backward()
        opt.step()
    return {key: value.detach().numpy() for key, value in module.state_dict().items()}


@pytest.mark.parametrize(("name", "optimizer", "batch_norm"), [
    ("mlp", "adamw", "batch-statistics"), ("convnet", "adamw", "batch-statistics"),
    ("convnet", "sgd", "running-statistics"), ("tinylm", "adamw", "batch-statistics"),
    ("gated", "sgd", "batch-statistics")])
def test_ten_steps_equal_torch_optim(name: str, optimizer: str, batch_norm: str,
                                     tmp_path: Path) -> None:
    lr = 1e-2
    options: dict[str, object] = {"optimizer": optimizer, "batch_norm": batch_norm}
    if optimizer == "sgd":
        options.update(momentum=0.9, weight_decay=0.01, nesterov=True)
    manifest = _build(name, tmp_path / "train", **options)
    recipe = recipes()[name]
    session = _session(tmp_path / "train" / "step.onnx")
    from safetensors.numpy import load_file

    values: dict[str, np.ndarray] = {
        name: value for file in ("weights", "optimizer_state", "buffers")
        for name, value in load_file(str(tmp_path / "train" / f"{file}.safetensors")).items()}
    step = manifest["step"]
    for _ in range(10):
        feeds = {**recipe.batch(), "target": recipe.target(), "lr": np.array(lr, np.float32),
                 **{name: values[name] for name in step["inputs"] if name in values}}
        outputs = dict(zip(step["outputs"], session.run(None, feeds), strict=True))
        for source, updated in step["carry"]:
            values[source] = outputs[updated]
    assert values["step"].shape == () and int(values["step"]) == 10, values["step"]
    expected = _torch_steps(name, optimizer, 10, lr, batch_norm)
    assert len(manifest["buffers"]) == (4 if name == "convnet" and batch_norm ==
                                        "batch-statistics" else 0)
    for weight in [*manifest["trainable"], *manifest["buffers"]]:
        difference = float(np.abs(values[weight] - expected[weight]).max())
        assert difference < 1e-4, (weight, difference)
    if batch_norm == "batch-statistics" and name == "convnet":  # they moved, as torch's
        initial = recipes()[name].make().state_dict()
        assert all(float(np.abs(values[b] - initial[b].numpy()).max()) > 1e-2
                   for b in manifest["buffers"])
