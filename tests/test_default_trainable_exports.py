"""The default trainable set of real models without torch's export record.

A small text-to-speech-like torch module (embedding, convolution, a bidirectional LSTM,
an RMS normalisation with ``pow(2)``) exported by the legacy exporter, run through
onnxruntime's quantizer as people do (``quant_pre_process``, which lifts every
``Constant`` node into an initializer under its output's name, ``/Constant_3_output_0``;
then ``quantize_dynamic``), and merged with a second export by
``onnx.compose.merge_models``, which prefixes that one's names (``g_onnx::LSTM_52``,
``g_/Constant_output_0``). The lint must not count those constants as weights, and must
say which rule left each out (or made it trainable).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest

import graphpass
from graphpass.torch import default_trainable, records_state

torch = pytest.importorskip("torch")
quantization = pytest.importorskip("onnxruntime.quantization")

pytestmark = pytest.mark.torch

LIFTED = "named like a node's output (.../Constant_N_output_0)"
LEGACY = "named like the legacy exporter's constants"


def _module() -> torch.nn.Module:
    from torch import nn

    class Speech(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(40, 16)
            self.conv = nn.Conv1d(16, 16, 3, padding=1)
            self.lstm = nn.LSTM(16, 16, batch_first=True, bidirectional=True)
            self.proj = nn.Linear(32, 8)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.conv(self.emb(ids).transpose(1, 2)).transpose(1, 2)
            x, _ = self.lstm(torch.relu(x))
            y = self.proj(x)
            return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)

    torch.manual_seed(0)
    return Speech().eval()


def _postnet() -> torch.nn.Module:
    from torch import nn

    class Postnet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 8, batch_first=True)

        def forward(self, mel: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.lstm(mel)[0]).pow(3)

    torch.manual_seed(1)
    return Postnet().eval()


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quantized speech model merged with a post-net (a real quantizer's file)."""
    folder = tmp_path_factory.mktemp("quantized")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_module(), (torch.randint(0, 40, (1, 12)),), str(folder / "tts.onnx"),
                          dynamo=False, opset_version=17, input_names=["ids"],
                          output_names=["mel"])
        torch.onnx.export(_postnet(), (torch.randn(1, 12, 8),), str(folder / "post.onnx"),
                          dynamo=False, opset_version=17, input_names=["mel"],
                          output_names=["wav"])
    quantization.shape_inference.quant_pre_process(
        str(folder / "tts.onnx"), str(folder / "tts.pre.onnx"), skip_symbolic_shape=True)
    quantization.quantize_dynamic(str(folder / "tts.pre.onnx"), str(folder / "tts.q.onnx"),
                                  weight_type=quantization.QuantType.QInt8)
    quantization.shape_inference.quant_pre_process(
        str(folder / "post.onnx"), str(folder / "post.pre.onnx"), skip_symbolic_shape=True)
    first, second = onnx.load(str(folder / "tts.q.onnx")), onnx.load(
        str(folder / "post.pre.onnx"))
    second = onnx.version_converter.convert_version(second, 17)
    for model in (first, second):  # merge_models wants the same opsets and IR
        model.ir_version = 8
        del model.opset_import[:]
        model.opset_import.extend([onnx.helper.make_opsetid("", 17),
                                   onnx.helper.make_opsetid("com.microsoft", 1)])
    merged = onnx.compose.merge_models(first, second, io_map=[("mel", "mel")], prefix2="g_")
    path = folder / "tts.merged.onnx"
    onnx.save(merged, str(path))
    return path


def _lint(path: Path, **options: object) -> graphpass.RunResult:
    return graphpass.PassManager(["lint-gradients"], options={"lint-gradients": options}).run(
        graphpass.load(path))


def test_the_files_have_the_names_the_issue_saw(quantized: Path) -> None:
    names = set(onnx.load(str(quantized)).graph.initializer[i].name
                for i in range(len(onnx.load(str(quantized)).graph.initializer)))
    assert "/Constant_output_0" in names  # the pow(2) exponent, lifted
    assert "/lstm/Expand_1_output_0" in names  # the LSTM's initial state, folded
    assert any(name.startswith("g_onnx::LSTM_") for name in names)
    assert any(name.startswith("g_/Constant") for name in names)


def test_lifted_and_merged_constants_are_not_trained(quantized: Path) -> None:
    graph = graphpass.load(quantized).graph
    assert not records_state(graph)
    trainable, left_out = default_trainable(graph)
    floats = [name for name, tensor in graph.initializers.items()
              if tensor.dtype == onnx.TensorProto.FLOAT]
    lifted = [name for name in floats if "_output_0" in name]
    assert lifted and all(left_out.get(name) == "constant" for name in lifted)
    merged = [name for name in floats if name.startswith("g_onnx::")]
    assert merged and all(left_out.get(name) == "constant" for name in merged)
    assert "proj.bias" in trainable and "g_/Constant_output_0" not in trainable


def test_the_lint_says_which_rule_left_each_weight_out(quantized: Path) -> None:
    result = _lint(quantized)
    [note] = [f for f in result.findings if f.code == "GP423"]
    assert "torch's export record" not in note.message  # there is none
    rules = note.data["rules"]
    assert LIFTED in rules["/Constant_output_0"] and LIFTED in rules["/lstm/Expand_1_output_0"]
    assert any(LEGACY in rules[name] for name in rules if name.startswith("g_onnx::"))
    errors = [f for f in result.findings if f.severity.value == "error"]
    assert not [f for f in errors if f.value and ("_output_0" in f.value or "onnx::" in f.value)]
    weights = [f for f in errors if f.value]  # what is left is about real weights
    assert all("trainable by default" in f.message for f in weights), weights[:1]


def test_an_exponent_is_a_constant_whatever_its_name(quantized: Path, tmp_path: Path) -> None:
    model = onnx.load(str(quantized))
    pow_node = next(n for n in model.graph.node if n.op_type == "Pow")
    exponent = pow_node.input[1]
    renamed = "exponent"  # a tool that names constants its own way
    for tensor in model.graph.initializer:
        if tensor.name == exponent:
            tensor.name = renamed
    for node in model.graph.node:
        node.input[:] = [renamed if name == exponent else name for name in node.input]
    onnx.save(model, str(tmp_path / "renamed.onnx"))
    [note] = [f for f in _lint(tmp_path / "renamed.onnx").findings if f.code == "GP423"]
    assert note.data["left_out"][renamed] == "constant"
    assert note.data["rules"][renamed] == "read only as Pow's exponent"
