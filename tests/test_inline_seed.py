"""The seed case: a torch model exported with ``export_modules_as_functions`` trains in
onnxruntime-training only after ``inline-functions``.

torch's legacy exporter turns every ``Block`` into a call of a model-local function
``Block`` (its scale becomes an attribute reference). onnxruntime-training 1.19.2 has
no gradient for such a call (``The gradient builder has not been registered: Block
for node /b1/Block``); once inlined, the model trains, and its inference outputs are
torch's.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from _inline_support import PROVENANCE, check, run_ort

import graphpass
from graphpass.framework import PassContext, PassResult, default_registry
from graphpass.passes.inline_functions import InlineFunctions

torch = pytest.importorskip("torch")

ORACLE = Path(__file__).resolve().parent / "ort_training" / "oracle.py"


class Block(torch.nn.Module):
    """A residual block: exported as one local function per call."""

    def __init__(self, width: int, scale: float):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(self.linear(x), 0.1) * self.scale + x


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b1 = Block(8, 0.5)
        self.b2 = Block(8, 2.0)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.b2(self.b1(x)))


@dataclass
class Seed:
    before: Path
    after: Path
    x: np.ndarray
    expected: np.ndarray
    result: PassResult


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Seed:
    folder = tmp_path_factory.mktemp("seed")
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(4, 8)
    before = folder / "exported.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), str(before), dynamo=False, opset_version=17,
                          export_modules_as_functions={Block}, input_names=["x"],
                          output_names=["y"])
    model = graphpass.load(before)
    result = InlineFunctions().run(model, PassContext(registry=default_registry()))
    after = folder / "inlined.onnx"
    graphpass.save(model, after)
    with torch.no_grad():
        expected = net(x).numpy()
    return Seed(before, after, x.numpy(), expected, result)


def test_export_calls_a_local_function(seed: Seed) -> None:
    exported = onnx.load(seed.before)
    (function,) = exported.functions
    assert function.name == "Block"
    assert [n.op_type for n in exported.graph.node] == ["Block", "Block", "Gemm"]
    assert function.attribute  # the scale is an attribute reference


def test_inlined_model_computes_what_torch_computes(seed: Seed) -> None:
    inlined = onnx.load(seed.after)
    check(inlined)
    assert not inlined.functions
    assert "Block" not in {n.op_type for n in inlined.graph.node}
    (output,) = run_ort(inlined, {"x": seed.x})
    np.testing.assert_allclose(output, seed.expected, rtol=1e-5, atol=1e-6)
    (before,) = run_ort(onnx.load(seed.before), {"x": seed.x})
    np.testing.assert_allclose(output, before, rtol=1e-6, atol=1e-7)


def test_inlined_nodes_name_their_module(seed: Seed) -> None:
    inlined = onnx.load(seed.after)
    stacks = {n.name: {e.key: e.value for e in n.metadata_props}.get(PROVENANCE)
              for n in inlined.graph.node}
    label = f"{Block.__module__}::Block"
    assert stacks["/b1/Block/Gemm_0"] == f"{label}@/b1/Block"
    assert stacks["/b2/Block/Add_4"] == f"{label}@/b2/Block"
    assert stacks["/head/Gemm"] is None
    assert seed.result.stats["calls inlined"] == 2
    assert [(f.code, f.data["calls"]) for f in seed.result.findings] == [("GP101", 2)]


def test_onnxruntime_training_fails_before_and_trains_after(
        seed: Seed, ort_training_python: str, tmp_path: Path) -> None:
    feeds = tmp_path / "feeds.npz"
    rng = np.random.default_rng(0)
    np.savez(feeds, x=seed.x, target=rng.standard_normal((4, 3)).astype(np.float32))
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(job) for job in [
        {"id": "before", "model": str(seed.before), "loss": "mse"},
        {"id": "after", "model": str(seed.after), "loss": "mse", "train_steps": 5,
         "inputs": str(feeds)},
    ]) + "\n")
    results = tmp_path / "results.jsonl"
    subprocess.run([ort_training_python, str(ORACLE), "--batch", str(jobs), "--out",
                    str(results)], check=True, capture_output=True, timeout=600)
    before, after = (json.loads(line) for line in results.read_text().splitlines())
    assert before["id"] == "before" and not before["ok"]
    assert before["missing_gradient_op"] == "Block"
    assert before["node"] == "/b1/Block"
    assert after["ok"], after["error"]
    losses = after["losses"]
    assert len(losses) == 5 and losses[-1] < losses[0]


class MLP(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


class Attention(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(self.width, dim=-1)
        return torch.softmax(q @ k.transpose(-1, -2) / self.width**0.5, dim=-1) @ v


class Layer(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.attn = Attention(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.mlp(x)


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(16) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_nested_module_functions(tmp_path: Path) -> None:
    """Layer -> Attention, MLP: functions calling functions, as torch nests modules."""
    torch.manual_seed(0)
    net = Tiny().eval()
    x = torch.randn(2, 5, 16)
    path = tmp_path / "nested.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), str(path), dynamo=False, opset_version=17,
                          export_modules_as_functions={Layer, MLP, Attention},
                          input_names=["x"], output_names=["y"])
    exported = onnx.load(path)
    layer = next(f for f in exported.functions if f.name == "Layer")
    assert {n.op_type for n in layer.node} == {"Attention", "MLP", "Add"}
    model = graphpass.Model.from_proto(exported)
    result = InlineFunctions().run(model, PassContext(registry=default_registry()))
    inlined = model.to_proto()
    check(inlined)
    assert not inlined.functions
    assert result.stats["functions removed"] == 3
    with torch.no_grad():
        expected = net(x).numpy()
    (output,) = run_ort(inlined, {"x": x.numpy()})
    np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-5)
    stacks = {e.value for n in inlined.graph.node for e in n.metadata_props
              if e.key == PROVENANCE}
    module = Layer.__module__
    assert f"{module}::Layer@/layers.2/Layer > {module}::MLP@MLP_2" in stacks


def test_dynamo_export_has_no_local_functions() -> None:
    """torch's dynamo exporter inlines modules itself: the pass has nothing to do there."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(Net().eval(), (torch.randn(4, 8),), dynamo=True,
                                    verbose=False)
    proto = program.model_proto
    assert not proto.functions
    model = graphpass.Model.from_proto(proto)
    result = InlineFunctions().run(model, PassContext(registry=default_registry()))
    assert not result.changed
