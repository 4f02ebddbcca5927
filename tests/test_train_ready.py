"""train-ready end to end on real torch exports: verified, equal to torch, and trainable.

Two seed stories:

* a model exported with ``export_modules_as_functions`` (ORT training rejects the
  function calls): ``run -p train-ready --verify`` inlines them, and the artifacts
  onnxruntime-training builds from the result train;
* a model exported with ``dynamo=True`` without weights, a checkpoint whose keys carry
  a ``transformer.`` prefix and lack a non-persistent buffer: the run names the buffer
  and writes nothing; given the buffer too, it fills, verifies, writes, and trains.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "ort_training" / "train_artifacts.py"
VOCAB, WIDTH, LENGTH = 24, 16, 6


class Residual(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


class ResidualMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(6, 12)
        self.block1 = Residual(12)
        self.block2 = Residual(12)
        self.out = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.out(self.block2(self.block1(self.inp(x))))


class CausalBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.register_buffer("causal_mask", torch.tril(torch.ones(LENGTH, LENGTH)),
                             persistent=False)

    def forward(self, x):
        scores = (x @ x.transpose(-1, -2)) * (WIDTH ** -0.5)
        scores = scores + (self.causal_mask - 1.0) * 10000.0
        return x + self.proj(torch.softmax(scores, dim=-1) @ x)


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.block = CausalBlock()
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        return self.head(self.block(self.embed(ids)))


class TinyLMForCausalLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = TinyLM()

    def forward(self, ids):
        return self.transformer(ids)


@pytest.fixture(scope="module")
def functions_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MLP exported with its residual blocks as local functions, with a batch."""
    folder = tmp_path_factory.mktemp("functions")
    torch.manual_seed(0)
    model = ResidualMLP().eval()
    x = torch.randn(4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), folder / "model.onnx", dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"],
                          export_modules_as_functions={Residual})
    np.savez(folder / "inputs.npz", x=x.numpy())
    np.savez(folder / "batch.npz", x=x.numpy(), target=np.zeros((4, 3), np.float32))
    np.savez(folder / "torch.npz", y=model(x).detach().numpy())
    return folder


@pytest.fixture(scope="module")
def checkpoint_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TinyLM exported without weights, its prefixed state_dict, and its buffers."""
    from safetensors.torch import save_file

    import graphpass.torch

    folder = tmp_path_factory.mktemp("checkpoint")
    torch.manual_seed(1)
    wrapper = TinyLMForCausalLM().eval()
    ids = torch.randint(0, VOCAB, (2, LENGTH))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(wrapper.transformer, (ids,), dynamo=True, opset_version=18,
                                    input_names=["ids"], output_names=["logits"],
                                    optimize=False, verbose=False)
    program.save(str(folder / "model.onnx"), include_initializers=False)
    state = wrapper.state_dict()
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "trained.safetensors"))
    full = graphpass.torch.capture_state(wrapper)
    save_file({k: v.contiguous() for k, v in full.items() if k not in state},
              str(folder / "buffers.safetensors"))
    np.savez(folder / "inputs.npz", ids=ids.numpy())
    np.savez(folder / "batch.npz", ids=ids.numpy(),
             target=np.zeros((2, LENGTH, VOCAB), np.float32))
    np.savez(folder / "torch.npz", logits=wrapper(ids).detach().numpy())
    return folder


def _outputs(model: Path, inputs: Path) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    with np.load(inputs) as data:
        feeds = {name: data[name] for name in data.files}
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _assert_equals_torch(model: Path, folder: Path) -> None:
    got = _outputs(model, folder / "inputs.npz")
    with np.load(folder / "torch.npz") as expected:
        for name in expected.files:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------- stories
def test_functions_export_is_inlined_verified_and_equal_to_torch(functions_export: Path,
                                                                 graphpass_process) -> None:
    folder = functions_export
    done = graphpass_process("run", "model.onnx", "-o", "ready.onnx", "-p", "train-ready",
                             "--verify", "--verify-inputs", "inputs.npz", "--format", "json",
                             cwd=folder, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [p["name"] for p in report["passes"]] == [
        "inline-functions", "detect-missing-buffers", "restore-parameters", "fix-training-ops",
        "lint-gradients",
        "remove-unused", "check"]
    assert any(f["code"] == "GP600" for f in report["findings"])
    assert not [f for f in report["findings"] if f["severity"] != "info"]
    ready = onnx.load(folder / "ready.onnx")
    assert not ready.functions
    assert {n.domain for n in ready.graph.node} <= {""}
    _assert_equals_torch(folder / "ready.onnx", folder)


def test_missing_buffer_stops_the_run_then_the_buffer_fills_it(checkpoint_export: Path,
                                                               graphpass_process) -> None:
    folder = checkpoint_export
    done = graphpass_process("run", "model.onnx", "-o", "ready.onnx", "-p", "train-ready",
                             "--checkpoint", "trained.safetensors", "--verify", cwd=folder,
                             timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "block.causal_mask" in done.stdout and "non-persistent buffer" in done.stdout
    assert "strip 'transformer.'" in done.stdout
    assert not (folder / "ready.onnx").exists()

    done = graphpass_process("run", "model.onnx", "-o", "ready.onnx", "-p", "train-ready",
                             "--checkpoint", "trained.safetensors", "buffers.safetensors",
                             "--verify", "--verify-inputs", "inputs.npz", "--format", "json",
                             cwd=folder, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [verified] = [f for f in report["findings"] if f["code"] == "GP600"]
    assert "reconcile-initializers" in verified["message"]
    _assert_equals_torch(folder / "ready.onnx", folder)


def test_the_same_run_from_a_pipeline_file(checkpoint_export: Path, tmp_path: Path,
                                           graphpass_process) -> None:
    folder = checkpoint_export
    config = folder / "train.toml"
    config.write_text(
        '[pipeline]\npreset = "train-ready"\n'
        'checkpoints = ["trained.safetensors", "buffers.safetensors"]\n\n'
        '[instrument]\nverify = { inputs = "inputs.npz" }\n')
    # Relative paths in the file are relative to the file, not to where we run.
    done = graphpass_process("run", folder / "model.onnx", "-o", tmp_path / "ready.onnx",
                             "-c", config, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified" in done.stdout
    _assert_equals_torch(tmp_path / "ready.onnx", folder)


# -------------------------------------------------------- onnxruntime-training
def _emit_and_train(graphpass_process, python: str, folder: Path, *args: str) -> list[float]:
    artifacts = folder / "artifacts"
    done = graphpass_process("run", "model.onnx", "-o", "trainable.onnx", "-p", "train-ready",
                             "--emit-training-artifacts", str(artifacts), *args, cwd=folder,
                             python=python, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GP700" in done.stdout
    optimizer = onnx.load(artifacts / "optimizer_model.onnx")
    assert optimizer.ir_version <= 10  # what onnxruntime-training 1.19.2 accepts
    trained = subprocess.run([python, str(TRAIN), str(artifacts), str(folder / "batch.npz"),
                              "--steps", "3"], capture_output=True, text=True, check=False,
                             timeout=600)
    result = json.loads(trained.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    return [float(x) for x in result["losses"]]


@pytest.mark.ort_training
def test_emitted_artifacts_of_the_functions_export_train(functions_export: Path,
                                                         ort_training_python: str,
                                                         graphpass_process) -> None:
    losses = _emit_and_train(graphpass_process, ort_training_python, functions_export)
    assert losses[0] > losses[1] > losses[2]


@pytest.mark.ort_training
def test_emitted_artifacts_of_the_checkpoint_export_train(checkpoint_export: Path,
                                                          ort_training_python: str,
                                                          graphpass_process) -> None:
    losses = _emit_and_train(graphpass_process, ort_training_python, checkpoint_export,
                             "--checkpoint", "trained.safetensors", "buffers.safetensors")
    assert losses[0] > losses[1] > losses[2]


def test_torch_buffers_are_not_trained_by_default(checkpoint_export: Path) -> None:
    import graphpass
    from graphpass.torch import default_trainable, state_kinds

    folder = checkpoint_export
    model = graphpass.load(folder / "model.onnx")
    filled = graphpass.PassManager(
        ["reconcile-initializers"],
        checkpoints=[folder / "trained.safetensors", folder / "buffers.safetensors"]).run(model)
    graph = filled.model.graph
    # Saved without initializers, the kinds come from the traced placeholders.
    kinds = state_kinds(graph)
    assert kinds["block.causal_mask"] == "buffer"
    assert kinds["embed.weight"] == kinds["head.bias"] == "parameter"
    trainable, left_out = default_trainable(graph)
    assert "block.causal_mask" not in trainable and left_out == {"block.causal_mask": "buffer"}
    linted = graphpass.PassManager(["lint-gradients"]).run(filled.model)
    [note] = [f for f in linted.findings if f.code == "GP423"]
    assert "block.causal_mask" in note.message and linted.ok
    everything = graphpass.PassManager(
        ["lint-gradients"], options={"lint-gradients": {"trainable": ["*"]}}).run(filled.model)
    assert not any(f.code == "GP423" for f in everything.findings)


@pytest.mark.ort_training
def test_graphpass_installs_beside_onnxruntime_training(ort_training_python: str) -> None:
    # graphpass is installed in that venv (make ort-venv); a hard dependency on
    # onnxruntime would have installed its module over onnxruntime-training's.
    probe = (
        "import importlib.metadata as m, json\n"
        "def has(name):\n"
        "    try:\n"
        "        m.distribution(name)\n"
        "        return True\n"
        "    except m.PackageNotFoundError:\n"
        "        return False\n"
        "import onnxruntime.training, graphpass\n"
        "print(json.dumps({'training': has('onnxruntime-training'), 'plain': has('onnxruntime'),"
        " 'requires': m.requires('graphpass')}))\n")
    done = subprocess.run([ort_training_python, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["training"] and not found["plain"]
    assert not [r for r in found["requires"] if r.startswith("onnxruntime") and "extra" not in r]


def test_parameters_the_legacy_exporter_merged_by_value_are_split(tmp_path: Path, cli) -> None:
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)

        def forward(self, x):
            return x + self.norm(self.linear(x))

    model = torch.nn.Sequential(Block(), Block()).eval()  # fresh norms: equal values
    path = tmp_path / "fresh.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 8),), str(path), dynamo=False,
                          export_modules_as_functions={Block})
    code, out, _ = cli("run", path, "-p", "train-ready", "-o", tmp_path / "ready.onnx",
                       "--format", "json")
    assert code == 0
    findings = json.loads(out)["findings"]
    assert "GP254" not in {f["code"] for f in findings}
    [split] = [f for f in findings if f["code"] == "GP256"]
    assert split["severity"] == "info"
    assert split["data"]["split"] == {"1.norm.weight": "0.norm.weight",
                                      "1.norm.bias": "0.norm.bias"}
    code, out, _ = cli("run", path, "-p", "train-ready", "-o", tmp_path / "kept.onnx",
                       "--format", "json", "-O", "restore-parameters.merges=false")
    assert code == 0
    [merged] = [f for f in json.loads(out)["findings"] if f["code"] == "GP254"]
    assert merged["severity"] == "warning"
    assert merged["data"]["merged"] == split["data"]["split"]
    assert "--checkpoint" in merged["hint"]
