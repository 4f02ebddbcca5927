"""reconcile-initializers on real torch 2.13 exports: every export kind x key convention x format.

A language model with nested submodules, tied embeddings and a persistent buffer is
exported with placeholder weights six ways (once per session), its trained state
dict is saved under six key conventions in three formats, and after the pass
onnxruntime must give torch's outputs for every combination.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import graphpass
from graphpass.checkpoint import open_checkpoint
from graphpass.cli import main

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
from safetensors.torch import save_file  # noqa: E402
from torch import nn  # noqa: E402

pytestmark = pytest.mark.torch

VOCAB, WIDTH, DEPTH = 50, 16, 2
IDS_SHAPE = (2, 5)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                  nn.Linear(2 * width, width))

    def forward(self, x):
        return x + self.proj(self.norm(x))


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block(WIDTH) for _ in range(DEPTH)])
        self.register_buffer("scale", torch.ones(WIDTH))  # persistent

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return x * self.scale


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = Body()
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.transformer.embed.weight  # tied

    def forward(self, ids):
        return self.lm_head(self.transformer(ids))


def _trained() -> TinyLM:
    torch.manual_seed(7)
    model = TinyLM().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
        model.transformer.scale.copy_(torch.rand(WIDTH) + 0.5)
    return model


def _export(kind: str, path: Path) -> None:
    """Export a model with placeholder weights (fresh initialisation or fake tensors)."""
    torch.manual_seed(123)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "dynamo-fake":
            from torch._subclasses.fake_tensor import FakeTensorMode

            with FakeTensorMode():
                model = TinyLM().eval()
                ids = torch.zeros(IDS_SHAPE, dtype=torch.int64)
                program = torch.onnx.export(model, (ids,), dynamo=True, optimize=False)
            program.save(str(path), include_initializers=False)
            return
        model = TinyLM().eval()
        ids = torch.zeros(IDS_SHAPE, dtype=torch.int64)
        if kind == "dynamo-no-optimize":
            torch.onnx.export(model, (ids,), dynamo=True, optimize=False).save(str(path))
        elif kind == "dynamo-optimize":
            torch.onnx.export(model, (ids,), dynamo=True).save(str(path))
        elif kind == "dynamo-optimize-no-initializers":
            torch.onnx.export(model, (ids,), dynamo=True).save(
                str(path), include_initializers=False)
        elif kind == "legacy-no-params":
            torch.onnx.export(model, (ids,), str(path), dynamo=False, export_params=False)
        elif kind == "legacy-inputs":
            torch.onnx.export(model, (ids,), str(path), dynamo=False,
                              keep_initializers_as_inputs=True)
        else:
            raise AssertionError(kind)


EXPORTS = ["dynamo-no-optimize", "dynamo-fake", "dynamo-optimize",
           "dynamo-optimize-no-initializers", "legacy-no-params", "legacy-inputs"]

CONVENTIONS: dict[str, Callable[[str], str]] = {
    "plain": lambda k: k,
    "ddp": lambda k: f"module.{k}",
    "compile": lambda k: f"_orig_mod.{k}",
    "fsdp": lambda k: "_fsdp_wrapped_module." + re.sub(
        r"(blocks\.\d+\.)", r"\1_fsdp_wrapped_module._checkpoint_wrapped_module.", k),
    "base-prefix-added": lambda k: f"model.{k}",
    "base-prefix-removed": lambda k: k.removeprefix("transformer."),
    "underscores": lambda k: k.replace(".", "_"),
}
FORMATS = ["safetensors", "pt", "sharded"]


@pytest.fixture(scope="session")
def trained() -> tuple[TinyLM, np.ndarray, np.ndarray]:
    model = _trained()
    ids = torch.randint(0, VOCAB, IDS_SHAPE, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model(ids).numpy()
    return model, ids.numpy(), expected


@pytest.fixture(scope="session")
def exports(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("exports")
    paths = {}
    for kind in EXPORTS:
        paths[kind] = folder / f"{kind}.onnx"
        _export(kind, paths[kind])
    return paths


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory, trained) -> dict[tuple[str, str], Path]:
    model = trained[0]
    state = model.state_dict()
    folder = tmp_path_factory.mktemp("checkpoints")
    paths = {}
    for convention, rename in CONVENTIONS.items():
        renamed = {rename(k): v for k, v in state.items()}  # tied tensors stay shared
        copies = {k: v.detach().clone().contiguous() for k, v in renamed.items()}
        path = folder / f"{convention}.safetensors"
        save_file(copies, str(path))
        paths[convention, "safetensors"] = path
        path = folder / f"{convention}.pt"
        wrapped = {"state_dict": renamed, "epoch": 3} if convention in ("ddp", "compile") \
            else renamed
        torch.save(wrapped, path)
        paths[convention, "pt"] = path
        shards = folder / f"{convention}-sharded"
        shards.mkdir()
        keys = sorted(copies)
        weight_map = {}
        for number in range(3):
            name = f"model-{number + 1:05d}-of-00003.safetensors"
            part = keys[number::3]
            save_file({k: copies[k] for k in part}, str(shards / name))
            weight_map.update(dict.fromkeys(part, name))
        index = shards / "model.safetensors.index.json"
        index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
        paths[convention, "sharded"] = index
    return paths


def _run_ort(path: Path, ids: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: ids})[0]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("convention", list(CONVENTIONS))
@pytest.mark.parametrize("kind", EXPORTS)
def test_filled_model_computes_what_torch_computes(kind, convention, fmt, exports, checkpoints,
                                                   trained, tmp_path):
    _, ids, expected = trained
    checkpoint = checkpoints[convention, fmt]
    model = graphpass.load(exports[kind])
    result = graphpass.PassManager(["reconcile-initializers"],
                                   checkpoints=[checkpoint]).run(model)
    codes = {f.code for f in result.findings}
    assert "GP201" not in codes, [f.message for f in result.findings]
    stats = result.records[0].stats
    assert stats["unmatched"] == 0
    out = graphpass.save(result.model, tmp_path / "filled.onnx")
    np.testing.assert_allclose(_run_ort(out, ids), expected, rtol=1e-4, atol=1e-5)
    # Every weight is filled: no graph input besides the token ids remains.
    assert [i.name for i in onnx.load(out, load_external_data=False).graph.input] == \
        [result.model.graph.input_names[0]]
    suffix = ".pt" if fmt == "pt" else ".safetensors"
    for name in stats["table"]:  # regions of the checkpoint file, never copies in memory
        tensor = result.model.graph.initializers[name]
        assert tensor.is_external and tensor.external_path.suffix == suffix


def test_optimized_export_really_is_wrong_when_filled_by_name(exports, checkpoints, trained,
                                                             tmp_path):
    """The trap the pass avoids: filling the optimized export by name alone runs and is wrong."""
    _, ids, expected = trained
    model = graphpass.load(exports["dynamo-optimize"])
    checkpoint = open_checkpoint(checkpoints["plain", "safetensors"])
    naive = model.copy()
    for name in list(naive.graph.initializers):
        if name in checkpoint:
            naive.graph.set_initializer(checkpoint[name].tensor(name))
    wrong = _run_ort(graphpass.save(naive, tmp_path / "naive.onnx"), ids)
    assert not np.allclose(wrong, expected, atol=1e-3)


def test_optimized_export_report_names_folds_and_merges(exports, checkpoints):
    model = graphpass.load(exports["dynamo-optimize"])
    result = graphpass.PassManager(["reconcile-initializers"],
                                   checkpoints=[checkpoints["ddp", "safetensors"]]).run(model)
    stats = result.records[0].stats
    assert stats["matched by"] == {"wrapper-prefix": 7, "folded-transpose": 5,
                                   "merged-split": 3}
    table = stats["table"]
    assert table["transformer.blocks.0.proj.0.weight"]["computes"] == ["val_2"]
    assert table["transformer.blocks.0.proj.0.weight"]["key"] == \
        "module.transformer.blocks.0.proj.0.weight"
    assert table["transformer.scale"]["split_from"] == "transformer.blocks.0.norm.weight"
    assert table["transformer.blocks.1.norm.bias"]["nodes"] == ["node_layer_norm_1"]
    by_code = {f.code: f for f in result.findings}
    assert by_code["GP204"].severity.value == "info"  # from the optimizer's own record
    assert "val_2 = Transpose(transformer.blocks.0.proj.0.weight)" in by_code["GP204"].message
    merged = [f for f in result.findings if f.code == "GP205"]
    assert {f.value for f in merged} == {"transformer.blocks.0.norm.weight",
                                         "transformer.blocks.0.norm.bias"}
    graph = result.model.graph
    transpose = graph.producer("val_2")
    assert transpose is not None and transpose.op_type == "Transpose"
    assert transpose.inputs == ("transformer.blocks.0.proj.0.weight",)
    assert "val_2" not in graph.initializers


def test_legacy_export_report_infers_folds_from_scopes(exports, checkpoints):
    model = graphpass.load(exports["legacy-no-params"])
    result = graphpass.PassManager(["reconcile-initializers"],
                                   checkpoints=[checkpoints["plain", "pt"]]).run(model)
    by_code = {f.code: f for f in result.findings}
    assert by_code["GP204"].severity.value == "warning"  # inferred, not recorded
    assert "onnx::MatMul_41 = Transpose(lm_head.weight)" in by_code["GP204"].message
    assert by_code["GP206"].data["inputs"]  # weight inputs became initializers
    identities = [n for n in result.model.graph if n.op_type == "Identity"]
    assert identities == []  # the exporter's merges (Identity of a shared weight) are gone


def test_keep_inputs_keeps_weight_inputs_with_defaults(exports, checkpoints, trained, tmp_path):
    _, ids, expected = trained
    model = graphpass.load(exports["legacy-inputs"])
    result = graphpass.PassManager(
        ["reconcile-initializers"], options={"reconcile-initializers": {"keep-inputs": True}},
        checkpoints=[checkpoints["plain", "safetensors"]]).run(model)
    graph = result.model.graph
    weight_inputs = [n for n in graph.input_names if n in graph.initializers]
    assert "transformer.embed.weight" in weight_inputs
    assert "transformer.blocks.0.proj.0.weight" in weight_inputs  # the replayed fold's source
    out = graphpass.save(result.model, tmp_path / "with-defaults.onnx")
    np.testing.assert_allclose(_run_ort(out, ids), expected, rtol=1e-4, atol=1e-5)


def test_cli_fills_and_reports(exports, checkpoints, trained, tmp_path, capsys):
    _, ids, expected = trained
    out = tmp_path / "cli.onnx"
    code = main(["run", str(exports["dynamo-optimize"]), "-o", str(out), "-p",
                 "reconcile-initializers", "--checkpoint",
                 str(checkpoints["base-prefix-added", "sharded"]), "--format", "json"])
    assert code == 0, capsys.readouterr()
    report = json.loads(capsys.readouterr().out)
    record = next(p for p in report["passes"] if p["name"] == "reconcile-initializers")
    assert record["stats"]["base prefix"] == "strip 'model.'"
    assert record["stats"]["table"]["lm_head.weight"]["rule"] == "base-prefix"
    np.testing.assert_allclose(_run_ort(out, ids), expected, rtol=1e-4, atol=1e-5)


def test_cli_pipeline_file_section(exports, checkpoints, trained, tmp_path, capsys):
    """[passes.reconcile-initializers] checkpoint = ... is relative to the pipeline file."""
    _, ids, expected = trained
    checkpoint = checkpoints["underscores", "safetensors"]
    folder = checkpoint.parent
    pipeline = folder / "fill.toml"
    pipeline.write_text(
        '[pipeline]\npasses = ["reconcile-initializers"]\n\n'
        f'[passes.reconcile-initializers]\ncheckpoint = "{checkpoint.name}"\nstrict = true\n')
    out = tmp_path / "toml.onnx"
    code = main(["run", str(exports["dynamo-no-optimize"]), "-o", str(out), "-c", str(pipeline)])
    assert code == 0, capsys.readouterr()
    np.testing.assert_allclose(_run_ort(out, ids), expected, rtol=1e-4, atol=1e-5)


def test_undeclared_weights_are_checked_by_shape_inference(exports, trained, tmp_path):
    """include_initializers=False drops the weights' types; a wrong shape is still caught."""
    state = {k: v.detach().clone().contiguous() for k, v in trained[0].state_dict().items()}
    state["transformer.blocks.0.proj.0.weight"] = \
        state["transformer.blocks.0.proj.0.weight"].t().contiguous()
    checkpoint = tmp_path / "transposed.safetensors"
    save_file(state, str(checkpoint))
    model = graphpass.load(exports["dynamo-fake"])
    with pytest.raises(graphpass.PassError) as caught:
        graphpass.PassManager(["reconcile-initializers"], checkpoints=[checkpoint]).run(model)
    message = str(caught.value)
    assert "do not fit the model where it never declared them" in message
    assert "Incompatible dimensions" in message, message


class _TwoLayers(nn.Module):
    def __init__(self, zero_bias: bool):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.out = nn.Linear(3, 2)
        if zero_bias:
            nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        offsets = torch.arange(2, dtype=torch.float32) * 0.5  # an exporter-made constant
        return self.out(torch.relu(self.fc(x))) + offsets


def _export_two_layers(tmp_path: Path, zero_bias: bool) -> tuple[Path, Path, np.ndarray]:
    torch.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_TwoLayers(zero_bias).eval(), (torch.zeros(2, 4),),
                          dynamo=True).save(str(tmp_path / "two.onnx"))
    trained = _TwoLayers(zero_bias=False).eval()
    checkpoint = tmp_path / "two.safetensors"
    save_file({k: v.contiguous() for k, v in trained.state_dict().items()}, str(checkpoint))
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return tmp_path / "two.onnx", checkpoint, trained(x).numpy()


def test_exporter_constants_are_left_alone(tmp_path):
    model_path, checkpoint, expected = _export_two_layers(tmp_path, zero_bias=False)
    model = graphpass.load(model_path)
    weights = {"fc.weight", "fc.bias", "out.weight", "out.bias"}
    constants = [n for n in model.graph.initializers if n not in weights]
    assert constants  # the folded arange * 0.5
    result = graphpass.PassManager(["reconcile-initializers"], checkpoints=[checkpoint]).run(model)
    assert "GP201" not in {f.code for f in result.findings}
    assert all(not result.model.graph.initializers[n].is_external for n in constants)
    out = graphpass.save(result.model, tmp_path / "filled.onnx")
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1)).numpy()
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_weight_the_optimizer_dropped_is_an_error(tmp_path):
    """A zero placeholder bias makes torch's optimizer drop it: filled by name, it would be lost."""
    model_path, checkpoint, _ = _export_two_layers(tmp_path, zero_bias=True)
    model = graphpass.load(model_path)
    assert "fc.bias" not in model.graph.initializers  # the trap, as torch 2.13 sets it
    with pytest.raises(graphpass.PassError) as caught:
        graphpass.PassManager(["reconcile-initializers"], checkpoints=[checkpoint]).run(model)
    message = str(caught.value)
    assert "reading the weight 'fc.bias'" in message and "optimize=False" in message
