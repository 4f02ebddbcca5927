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
import subprocess
import sys
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
    """What ``gradient.onnx`` reads besides the batch: the weights and running statistics."""
    from safetensors.numpy import load_file

    return {**load_file(str(directory / "weights.safetensors")),
            **load_file(str(directory / "buffers.safetensors"))}


@pytest.mark.parametrize(("name", "batch_norm"), [
    *((name, "batch-statistics") for name in MODELS), ("convnet", "running-statistics")])
def test_gradient_graph_equals_torch_autograd(name: str, batch_norm: str,
                                              tmp_path: Path) -> None:
    manifest = _build(name, tmp_path / "train", batch_norm=batch_norm)
    recipe = recipes()[name]
    session = _session(tmp_path / "train" / "gradient.onnx")
    feeds = {**recipe.batch(), "target": recipe.target(), **_weights(tmp_path / "train")}
    statistics = manifest["buffers"]  # the running statistics, with batch statistics
    assert [i.name for i in session.get_inputs()] == [*recipe.batch(), "target",
                                                       *manifest["trainable"], *statistics]
    assert [o.name for o in session.get_outputs()] == [
        "loss", *manifest["gradients"], *(f"{name}.new" for name in statistics)]
    loss, *grads = session.run(None, feeds)[:1 + len(manifest["trainable"])]

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


def test_backward_keeps_batch_norm_input_and_clip_mask_only(tmp_path: Path) -> None:
    """What the backward pass reads of a batch norm and a ReLU6 (``Clip``) forward.

    The batch norm's gradient reads the batch statistics the forward pass computed
    (no reduction of its input again in the backward pass); the ``Clip``'s mask is
    computed in the forward pass, so the ``Clip``'s input is read by no later node.
    The gradients themselves equal torch.autograd's in
    :func:`test_gradient_graph_equals_torch_autograd` (``convnet``).
    """
    _build("convnet", tmp_path / "train")
    graph = onnx.load(str(tmp_path / "train" / "gradient.onnx")).graph
    nodes = list(graph.node)
    readers: dict[str, list[int]] = {}
    for index, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(index)
    norms = [(i, n) for i, n in enumerate(nodes) if n.op_type == "BatchNormalization"]
    clips = [(i, n) for i, n in enumerate(nodes) if n.op_type == "Clip"]
    assert norms and clips
    for index, node in norms:
        later = [nodes[i].op_type for i in readers[node.input[0]] if i > index]
        assert later and "ReduceMean" not in later, (node.name, later)
    for index, node in clips:
        assert max(readers[node.input[0]]) <= index, node.name
        masks = [nodes[i].op_type for i in readers[node.input[0]] if i < index]
        assert {"GreaterOrEqual", "LessOrEqual"} <= set(masks), (node.name, masks)


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
    from graphpass.training import initial_values

    values: dict[str, np.ndarray] = initial_values(tmp_path / "train")
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


# ================================= a fresh BatchNorm model from the legacy exporter
def _fresh_resnet() -> object:
    """A freshly initialised tiny ResNet (its running statistics all zeros and ones)."""
    transformers = pytest.importorskip("transformers")

    class Logits(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=pixel_values).logits

    torch.manual_seed(0)
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                       layer_type="basic", num_labels=5)
    return Logits(transformers.ResNetForImageClassification(config)).eval()


PIXELS = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
LOGITS_TARGET = np.random.default_rng(4).standard_normal((2, 5)).astype(np.float32)


def export_fresh_resnet(folder: str) -> None:
    """Export :func:`_fresh_resnet` as the zoo's ``legacy-unfolded`` mode, with its weights."""
    import warnings

    from safetensors.torch import save_model
    from transformers.models.resnet.modeling_resnet import ResNetBasicLayer
    from zoo.exporting import legacy_export

    module = _fresh_resnet()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        legacy_export(module, (torch.from_numpy(PIXELS),), Path(folder) / "model.onnx",
                      {ResNetBasicLayer}, do_constant_folding=False,
                      input_names=["pixel_values"], output_names=["logits"])
    save_model(module, str(Path(folder) / "model.safetensors"))


_EXPORT_APART = ("import sys; sys.path.insert(0, sys.argv[1]); "
                 "from test_training_graph_torch import export_fresh_resnet; "
                 "export_fresh_resnet(sys.argv[2])")


@pytest.fixture(scope="module")
def fresh_resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The zoo's ``legacy-unfolded`` export of a fresh ResNet, and its ``state_dict()``.

    Exported in a process of its own: the legacy exporter with modules as functions
    once crashed a pytest worker (a segfault inside ``torch.onnx.export(dynamo=False)``
    after other tests had run there), as :func:`zoo.exporting._build_apart` says.
    """
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("fresh-resnet")
    here = Path(__file__).resolve().parent
    for _ in range(3):  # torch's legacy exporter dies of a signal now and then, not always
        done = subprocess.run([sys.executable, "-c", _EXPORT_APART, str(here), str(folder)],
                              capture_output=True, text=True, check=False)
        if done.returncode >= 0:
            break
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "model.onnx", folder / "model.safetensors"


def _emit(model: Path, directory: Path, *checkpoint: str) -> list[dict[str, object]]:
    from graphpass.cli import main

    report = directory.parent / f"{directory.name}.json"
    main(["run", str(model), "-o", str(directory.parent / f"{directory.name}.onnx"),
          "-p", "train-ready", *checkpoint, "--emit-training-graph", str(directory),
          "--format", "json", "--report", str(report)])
    found: list[dict[str, object]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "code" in node and "message" in node:
                found.append(node)
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(report.read_text()))
    return found


def test_merged_fresh_running_statistics_are_split_and_train_like_torch(
        fresh_resnet: tuple[Path, Path], tmp_path: Path) -> None:
    model, _ = fresh_resnet
    proto = onnx.load(str(model))
    identities = [n for n in proto.graph.node if n.op_type == "Identity"]
    assert identities  # the exporter merged equal tensors, read through Identity copies
    findings = _emit(model, tmp_path / "train")
    assert [f["code"] for f in findings if f["severity"] == "error"] == []
    [split] = [f for f in findings if f["code"] == "GP256"]  # restore-parameters split them
    assert any(name.endswith("running_mean") for name in split["data"]["split"])
    _trains_like_torch(tmp_path)


def test_without_restore_parameters_the_merged_statistics_are_named(
        fresh_resnet: tuple[Path, Path], tmp_path: Path) -> None:
    model, _ = fresh_resnet
    result = graphpass.PassManager(["inline-functions", "build-training-graph"], options={
        "build-training-graph": {"directory": str(tmp_path / "train")}}).run(
            graphpass.load(model))
    [refused] = [f for f in result.findings if f.code == "GP851"]
    assert "running_mean" in refused.message and "Identity copy of initializer" in \
        refused.message
    assert "restore-parameters" in (refused.hint or "") and "--checkpoint" in (refused.hint or "")
    assert not (tmp_path / "train").exists()


def test_filled_from_its_checkpoint_it_trains_with_batch_statistics_like_torch(
        fresh_resnet: tuple[Path, Path], tmp_path: Path) -> None:
    model, checkpoint = fresh_resnet
    findings = _emit(model, tmp_path / "train", "--checkpoint", str(checkpoint))
    assert [f["code"] for f in findings if f["severity"] == "error"] == []
    _trains_like_torch(tmp_path)


def _trains_like_torch(tmp_path: Path) -> None:
    directory = tmp_path / "train"
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["batch_norm"] == "batch-statistics"
    batch_norms = [n for n in graphpass.load(tmp_path / "train.onnx").graph
                   if n.op_type == "BatchNormalization"]
    assert len(manifest["running_statistics"]) == len(batch_norms) == 6
    session = _session(directory / "gradient.onnx")
    loss, *grads = session.run(None, {"pixel_values": PIXELS, "target": LOGITS_TARGET,
                                      **_weights(directory)})[:1 + len(manifest["trainable"])]
    module = batch_norms_in_train_mode(_fresh_resnet())
    expected = torch.nn.functional.mse_loss(module(torch.from_numpy(PIXELS)),
                                            torch.from_numpy(LOGITS_TARGET))
    expected.backward()
    assert abs(float(loss) - expected.item()) <= 1e-5 * max(1.0, abs(expected.item()))
    state = module.state_dict(keep_vars=True)
    assert set(manifest["trainable"]) == {name for name, p in module.named_parameters()}
    for weight, grad in zip(manifest["trainable"], grads, strict=True):
        reference = state[weight].grad.numpy()
        scale = max(float(np.abs(reference).max()), 1e-6)
        assert float(np.abs(grad - reference).max()) / scale < 1e-3, weight
