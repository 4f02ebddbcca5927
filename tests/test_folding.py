"""What torch's exporters fold, and putting it back (graphpass.torch.folding), on real exports.

Two small torch models cover every folding the exporters do to state: a text model (a
linear layer on a sequence: a folded transpose; a position table read at positions 0..T-1:
a row gather; a class token broadcast to the batch; an embedding tied to the output head)
and a CNN (convolutions whose batch norms are fused in). Each is exported the default ways
(``dynamo=True`` with the optimizer; the legacy exporter with constant folding) and filled
from three checkpoints: the model's own ``state_dict()`` (the export's values), one
fine-tuned since (every tensor changed a little), and none. The oracle is torch: the filled
model's outputs in onnxruntime equal torch's with the checkpoint's weights, and the
trainable set is exactly torch's parameters.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
from safetensors.torch import save_model  # noqa: E402
from torch import nn  # noqa: E402

import graphpass  # noqa: E402
from graphpass.cli import main  # noqa: E402
from graphpass.torch.folding import Broadcast, Rows, Transpose, find_folds  # noqa: E402

pytestmark = pytest.mark.torch

IDS = np.array([[1, 5, 7, 2, 9], [3, 3, 8, 0, 4]], dtype=np.int64)
IMAGES = np.random.default_rng(0).standard_normal((2, 3, 12, 12)).astype(np.float32)


class Text(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.positions = nn.Embedding(16, 8)
        self.register_buffer("position_ids", torch.arange(16).unsqueeze(0), persistent=False)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        hidden = self.embed(ids) + self.positions(self.position_ids[:, :length])
        hidden = torch.cat([self.cls.expand(ids.shape[0], -1, -1), hidden], dim=1)
        return self.head(torch.relu(self.proj(hidden)))


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 4, 3, stride=2)
        self.norm2 = nn.BatchNorm2d(4)
        self.out = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.norm(self.conv(x)))
        x = torch.relu(self.norm2(self.conv2(x)))
        return self.out(x.mean(dim=(2, 3)))


def _built(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    model = cls()
    with torch.no_grad():  # statistics of a trained model, not the fresh ones (all equal)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_()
                module.running_var.uniform_(0.5, 2.0)
                module.weight.normal_(1.0, 0.2)
                module.bias.normal_()
    return model.eval()


def _finetuned(model: nn.Module) -> nn.Module:
    changed = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, tensor in changed.state_dict(keep_vars=True).items():
            if tensor.is_floating_point():
                if name.endswith("running_var"):
                    tensor.mul_(1.1)
                else:
                    tensor.add_(0.05 * tensor.std() * torch.randn(tensor.shape,
                                                                  generator=generator))
    return changed


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every model x exporter, and the checkpoints: the state_dict and a fine-tuned one."""
    folder = tmp_path_factory.mktemp("folding")
    made: dict[str, Path] = {}
    for label, cls, example, name in (("text", Text, IDS, "ids"), ("cnn", Cnn, IMAGES, "x")):
        model = _built(cls)
        arguments = (torch.from_numpy(example),)
        names = {"input_names": [name], "output_names": ["y"]}
        path = folder / f"{label}-dynamo.onnx"
        torch.onnx.export(copy.deepcopy(model), arguments, dynamo=True, **names).save(str(path))
        made[f"{label}-dynamo"] = path
        path = folder / f"{label}-legacy.onnx"
        torch.onnx.export(copy.deepcopy(model), arguments, str(path), dynamo=False, **names)
        made[f"{label}-legacy"] = path
        save_model(model, str(folder / f"{label}-state.safetensors"))
        save_model(_finetuned(model), str(folder / f"{label}-finetuned.safetensors"))
        made[f"{label}-state"] = folder / f"{label}-state.safetensors"
        made[f"{label}-finetuned"] = folder / f"{label}-finetuned.safetensors"
    return made


def _torch_outputs(label: str, checkpoint: str) -> np.ndarray:
    model = _built(Text if label == "text" else Cnn)
    if checkpoint == "finetuned":
        model = _finetuned(model)
    with torch.no_grad():
        return model(torch.from_numpy(IDS if label == "text" else IMAGES)).numpy()


def _ready(path: Path, checkpoint: Path | None, tmp_path: Path, *extra: str
           ) -> tuple[int, dict, Path]:
    out = tmp_path / f"{path.stem}-ready.onnx"
    report = tmp_path / f"{path.stem}-report.json"
    arguments = ["run", str(path), "-o", str(out), "-p", "train-ready", "--format", "json",
                 "--report", str(report), *extra]
    if checkpoint is not None:
        arguments += ["--checkpoint", str(checkpoint)]
    code = main(arguments)
    return code, json.loads(report.read_text()), out


def _run(path: Path, feeds: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: feeds})[0]


def _lint_stats(report: dict) -> dict:
    return next(p for p in report["passes"] if p["name"] == "lint-gradients")["stats"]


# ============================================================= what is folded
def test_the_folds_of_a_dynamo_export_are_found_with_their_recipes(exports):
    folding = find_folds(graphpass.load(exports["text-dynamo"]).graph)
    by_source = {fold.source: fold for fold in folding.folds.values()}
    assert isinstance(by_source["proj.weight"].recipe, Transpose)
    assert by_source["proj.weight"].evidence == "torch's record: aten.linear"
    # without a checkpoint the table is only partly in the file; the token is whole in its
    # expand to the batch, which repeats it: read back, with the expand's rank
    assert by_source["positions.weight"].recipe is None
    token = by_source["cls"].recipe
    assert isinstance(token, Broadcast) and token.source == (1, 1, 8)
    assert by_source["cls"].evidence.startswith("torch's record: the constant is the FX node")
    assert folding.ties == {"head.weight": ["embed.weight"]}


def test_a_checkpoint_with_the_exports_values_establishes_every_recipe_by_value(exports):
    from safetensors.numpy import load_file

    from graphpass.torch.folding import StateValues

    tensors = load_file(str(exports["text-state"]))
    state = StateValues({k: (v.shape, 1) for k, v in tensors.items() if v.dtype == np.float32},
                        tensors.__getitem__)
    folding = find_folds(graphpass.load(exports["text-dynamo"]).graph, checkpoint=state)
    by_source = {fold.source: fold for fold in folding.folds.values()}
    rows = by_source["positions.weight"].recipe
    assert isinstance(rows, Rows) and rows.indices.reshape(-1).tolist() == [0, 1, 2, 3, 4]
    assert by_source["cls"].recipe is not None and by_source["cls"].recipe.kind == "broadcast"
    assert "the checkpoint" in by_source["cls"].evidence


def test_the_batch_norms_fused_into_convolutions_are_found_from_torchs_record(exports):
    folding = find_folds(graphpass.load(exports["cnn-dynamo"]).graph)
    assert sorted(f.scale for f in folding.fused.values()) == ["norm.weight", "norm2.weight"]
    second = next(f for f in folding.fused.values() if f.scale == "norm2.weight")
    assert second.conv_bias == "conv2.bias" and second.epsilon == 1e-5
    assert second.momentum == pytest.approx(0.1)


# ================================================== filled, trained, stale or not
@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
@pytest.mark.parametrize("label", ["text", "cnn"])
@pytest.mark.parametrize("checkpoint", ["state", "finetuned"])
def test_filled_from_a_checkpoint_it_computes_torchs_outputs_and_trains_torchs_parameters(
        exports, tmp_path, exporter, label, checkpoint):
    code, report, out = _ready(exports[f"{label}-{exporter}"],
                               exports[f"{label}-{checkpoint}"], tmp_path)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert code == 0 and not errors, errors
    np.testing.assert_allclose(_run(out, IDS if label == "text" else IMAGES),
                               _torch_outputs(label, checkpoint), rtol=1e-4, atol=1e-5)
    tensors: dict[int, set[str]] = {}  # each torch parameter, by every name torch gives it
    for name, tensor in _built(Text if label == "text" else Cnn).named_parameters(
            remove_duplicate=False):
        tensors.setdefault(id(tensor), set()).add(name)
    held = {i.name for i in onnx.load(str(out)).graph.initializer}
    # every torch parameter is one initializer, under one of its names (tied: one for both)
    assert [len(names & held) for names in tensors.values()] == [1] * len(tensors)
    assert _lint_stats(report)["trainable weights"] == len(tensors)
    codes = {f["code"] for f in report["findings"]}
    if label == "cnn":
        assert "GP212" in codes  # the batch norms are separated again
    else:
        assert "GP204" in codes  # the folded constants are computed from the sources
    if exporter == "dynamo" and checkpoint == "state":
        [recomputed] = [f for f in report["findings"] if f["code"] == "GP204"] or [None]
        if recomputed is not None:
            assert "were stale" not in recomputed["message"]


def test_staleness_is_decided_per_constant(exports, tmp_path):
    """Only the constants computed from a tensor the checkpoint changed are stale."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(exports["text-state"]))
    tensors["proj.weight"] = tensors["proj.weight"] + 0.5
    checkpoint = tmp_path / "one-changed.safetensors"
    save_file(tensors, str(checkpoint))
    model = graphpass.load(exports["text-dynamo"])
    result = graphpass.PassManager(["reconcile-initializers"], checkpoints=[checkpoint]).run(model)
    [recomputed] = [f for f in result.findings if f.code == "GP204"]
    stale = {name for name, entry in recomputed.data["folds"].items() if entry["stale"]}
    sources = {recomputed.data["folds"][name]["source"] for name in stale}
    assert sources == {"proj.weight"}


def test_without_a_checkpoint_what_the_file_lacks_is_refused_with_advice(exports, tmp_path):
    code, report, out = _ready(exports["text-dynamo"], None, tmp_path)
    assert code == 1 and not out.exists()
    lost = [f for f in report["findings"] if f["code"] == "GP251"]
    assert {p for f in lost for p in f["data"]["parameters"]} == {"positions.weight"}
    assert all("optimize=False" in f["hint"] for f in lost)


def test_a_parameter_outside_the_trainable_set_is_an_error(exports, tmp_path):
    """With restore-parameters switched off, the folded transpose's parameter is named."""
    code, report, _ = _ready(exports["text-dynamo"], exports["text-state"], tmp_path,
                             "--disable-pass", "reconcile-initializers",
                             "--disable-pass", "restore-parameters")
    assert code == 1
    [left_out] = [f for f in report["findings"] if f["code"] == "GP426"]
    assert "proj.weight" in left_out["data"]["parameters"]
    assert "folded it into" in left_out["data"]["where"]["proj.weight"]


def test_a_tie_is_one_initializer_reported_once_and_not_as_unused(exports, tmp_path):
    code, report, out = _ready(exports["text-dynamo"], exports["text-state"], tmp_path)
    assert code == 0
    codes = [f["code"] for f in report["findings"]]
    assert "GP253" not in codes and "GP202" not in codes
    [tied] = [f for f in report["findings"] if f["code"] == "GP255"]
    assert tied["data"]["ties"] == {"head.weight": ["embed.weight"]}
    ready = onnx.load(str(out))
    names = {i.name for i in ready.graph.initializer}
    assert "head.weight" in names and "embed.weight" not in names  # one tensor, trained once


def test_the_legacy_exporters_tied_copy_stays_tied_when_filled(exports, tmp_path):
    """The folded ``Transpose(embed.weight)`` of the head reads the embedding, not a new key."""
    code, _, out = _ready(exports["text-legacy"], exports["text-finetuned"], tmp_path)
    assert code == 0
    ready = onnx.load(str(out))
    transposes = [n for n in ready.graph.node if n.op_type == "Transpose"
                  and n.input[0] == "embed.weight"]
    assert transposes  # the head reads the embedding through a Transpose
    assert "head.weight" not in {i.name for i in ready.graph.initializer}


def test_a_checkpoint_that_gives_tied_names_different_values_is_warned_about(exports,
                                                                            tmp_path):
    """The model keeps the tie (one tensor); the checkpoint's second value is not used."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(exports["text-state"]))
    tensors["head.weight"] = tensors["embed.weight"] + 1.0  # untied: two values
    checkpoint = tmp_path / "untied.safetensors"
    save_file(tensors, str(checkpoint))
    model = graphpass.load(exports["text-dynamo"])
    result = graphpass.PassManager(["reconcile-initializers"], checkpoints=[checkpoint]).run(model)
    [untied] = [f for f in result.findings if f.code == "GP215"]
    assert untied.severity.value == "warning"
    assert untied.data["differing"] == {"embed.weight": {
        "key": "embed.weight", "tied_to": "head.weight", "tied_key": "head.weight"}}
    assert "embed.weight" not in result.model.graph.initializers  # still one tensor


def test_the_advice_is_worded_for_the_tool_that_wrote_the_file(exports, tmp_path):
    """torch's exporters by their records; Optimum by the Hugging Face config beside its file."""
    import shutil

    from graphpass.torch import producer, unfolded_export_advice

    assert producer(graphpass.load(exports["text-dynamo"]).graph) == "torch-dynamo"
    legacy = graphpass.load(exports["text-legacy"]).graph
    assert producer(legacy) == "torch-legacy"
    assert "do_constant_folding=False" in unfolded_export_advice(legacy)
    folder = tmp_path / "optimum-export"
    folder.mkdir()
    shutil.copy(exports["text-legacy"], folder / "model.onnx")
    (folder / "config.json").write_text(json.dumps({"model_type": "bert",
                                                    "transformers_version": "4.57.1"}))
    optimum = graphpass.load(folder / "model.onnx").graph
    assert producer(optimum) == "optimum"
    assert "optimum-cli export onnx --no-constant-folding" in unfolded_export_advice(optimum)
