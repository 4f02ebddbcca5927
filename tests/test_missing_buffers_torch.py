"""detect-missing-buffers and graphpass.torch on real torch 2.13 exports.

The story: a model is exported without its weights (``include_initializers=False``,
under ``FakeTensorMode``, or ``export_params=False``), then filled from
``state_dict()``. Its non-persistent buffers and tensor constants are not in
``state_dict()``; the pass must name exactly those, and nothing else. Filled from
``graphpass.torch.capture_state`` instead, the model is complete: the pass is silent
and onnxruntime computes what torch computes.

Exports are cached in ``tests/.cache/missing_buffers`` (keyed by this file and the
torch version), so only the first run pays for them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import graphpass  # noqa: E402
import graphpass.torch as gp_torch  # noqa: E402
from graphpass.framework._pass_base import PassContext  # noqa: E402
from graphpass.framework._plugin_loading import default_registry  # noqa: E402
from graphpass.passes.detect_missing_buffers import DetectMissingBuffers  # noqa: E402

pytestmark = pytest.mark.torch

CACHE = Path(__file__).resolve().parent / ".cache" / "missing_buffers"
# The key covers the models and the exports (the text above the helpers), and torch's version.
_KEY = hashlib.sha256(
    Path(__file__).read_text().split("# " + "=" * 70 + " helpers")[0].encode()
    + torch.__version__.encode()).hexdigest()[:12]


# ==================================================================== the models
class Block(torch.nn.Module):
    """A linear layer, a non-persistent buffer, a persistent buffer, a tensor constant."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4), persistent=False)
        self.register_buffer("running", torch.full((4,), 0.25))
        self.offset = torch.arange(4, dtype=torch.float32) / 4  # a plain tensor attribute

    def forward(self, x: Any) -> Any:
        return self.linear(x) * self.scale + self.offset + self.running


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x: Any, mask: Any) -> Any:
        return self.head(torch.relu(self.block(x)) * mask)


class Folded(torch.nn.Module):
    """The legacy exporter folds ``(proj.weight * gain).T`` into one unnamed constant."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 4)
        self.proj = torch.nn.Linear(4, 4, bias=False)
        self.register_buffer("gain", torch.linspace(0.5, 2.0, 4), persistent=False)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.head(self.embed(x) @ (self.proj.weight * self.gain).T)


def seeded(cls: Callable[[], Any]) -> Any:
    torch.manual_seed(0)
    return cls().eval()


def net_inputs() -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(2, 4, generator=generator),
            (torch.rand(2, 4, generator=generator) > 0.3).float())


LLAMA_CONFIG = dict(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                    num_attention_heads=2, num_key_value_heads=2, vocab_size=64,
                    max_position_embeddings=32, use_cache=False)
GPT2_CONFIG = dict(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                   use_cache=False)


def llama() -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA_CONFIG)).eval()


def gpt2() -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2_CONFIG)).eval()


TOKENS = torch.tensor([[1, 5, 9, 3, 7, 2, 8, 4]])


# ==================================================================== the exports
def _quiet_export(*args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(*args, verbose=False, **kwargs)


def _dynamo(module_factory: Callable[[], Any], args: tuple[Any, ...], path: Path, *,
            fake: bool = False, optimize: bool = True, kwargs: Mapping[str, Any] | None = None,
            **save: Any) -> None:
    if fake:  # the optimizer cannot fold fake tensors: optimize=False is required
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            program = _quiet_export(module_factory(), args, kwargs=dict(kwargs or {}),
                                    dynamo=True, optimize=False)
    else:
        program = _quiet_export(module_factory(), args, kwargs=dict(kwargs or {}), dynamo=True,
                                optimize=optimize)
    program.save(str(path), **save)


def _legacy(module_factory: Callable[[], Any], args: tuple[Any, ...], path: Path,
            **options: Any) -> None:
    _quiet_export(module_factory(), args, str(path), dynamo=False, **options)


EXPORTS: dict[str, Callable[[Path], None]] = {
    "dynamo-no-initializers": lambda p: _dynamo(lambda: seeded(Net), net_inputs(), p,
                                                include_initializers=False),
    "dynamo-fake": lambda p: _dynamo(lambda: seeded(Net), net_inputs(), p, fake=True,
                                     include_initializers=False),
    "dynamo-inputs": lambda p: _dynamo(lambda: seeded(Net), net_inputs(), p,
                                       include_initializers=False,
                                       keep_initializers_as_inputs=True),
    "dynamo-complete": lambda p: _dynamo(lambda: seeded(Net), net_inputs(), p),
    "legacy-no-params": lambda p: _legacy(lambda: seeded(Net), net_inputs(), p,
                                          export_params=False, input_names=["x", "mask"]),
    "legacy-inputs-no-params": lambda p: _legacy(
        lambda: seeded(Net), net_inputs(), p, export_params=False,
        keep_initializers_as_inputs=True, input_names=["x", "mask"]),
    "legacy-inputs": lambda p: _legacy(lambda: seeded(Net), net_inputs(), p,
                                       keep_initializers_as_inputs=True,
                                       input_names=["x", "mask"]),
    "legacy-folded": lambda p: _legacy(lambda: seeded(Folded), (net_inputs()[0],), p,
                                       export_params=False, input_names=["x"]),
    "legacy-unfolded": lambda p: _legacy(lambda: seeded(Folded), (net_inputs()[0],), p,
                                         export_params=False, do_constant_folding=False,
                                         input_names=["x"]),
    "llama-fake": lambda p: _dynamo(llama, (TOKENS,), p, fake=True,
                                    kwargs={"use_cache": False}, include_initializers=False),
    "gpt2-no-initializers": lambda p: _dynamo(gpt2, (TOKENS,), p, kwargs={"use_cache": False},
                                              optimize=False, include_initializers=False),
    "gpt2-optimized-no-initializers": lambda p: _dynamo(
        gpt2, (TOKENS,), p, kwargs={"use_cache": False}, include_initializers=False),
}


@pytest.fixture(scope="session")
def exported() -> Callable[[str], Path]:
    """Export (once, cached on disk) and return the path of the named export."""

    def get(name: str) -> Path:
        path = CACHE / f"{name}-{_KEY}.onnx"
        if not path.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            scratch = CACHE / f".{name}-{os.getpid()}.onnx"
            EXPORTS[name](scratch)
            os.replace(scratch, path)
            for stale in CACHE.glob(f"{name}-*.onnx"):  # exports of older versions of this file
                if stale != path and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}\.onnx",
                                                  stale.name):
                    stale.unlink(missing_ok=True)
        return path

    return get


# ====================================================================== helpers
def reconcile(model: graphpass.Model, state: Mapping[str, Any], tmp_path: Path,
              name: str = "checkpoint") -> tuple[graphpass.Model, dict[str, Any]]:
    """Fill ``model`` from ``state`` with reconcile-initializers, then detect what is missing.

    Returns the filled model and detect-missing-buffers' findings by name.
    """
    checkpoint = gp_torch.save_state(state, tmp_path / f"{name}.safetensors")
    result = graphpass.PassManager(["reconcile-initializers", "detect-missing-buffers"],
                                   checkpoints=[checkpoint]).run(model)
    assert result.plan == ("reconcile-initializers", "detect-missing-buffers")
    assert result.stopped_after in (None, "detect-missing-buffers")
    found = {f.value: f for f in result.findings if f.pass_name == "detect-missing-buffers"}
    assert result.ok == (not found)
    return result.model, found


def missing(model: graphpass.Model, **options: Any) -> dict[str, Any]:
    result = DetectMissingBuffers(options or None).run(
        model, PassContext(registry=default_registry()))
    assert result.changed is False
    return {finding.value: finding for finding in result.findings}


def run_onnx(model: graphpass.Model, tmp_path: Path, feeds: Mapping[str, Any]) -> list[Any]:
    path = graphpass.save(model, tmp_path / "filled.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: np.asarray(v) for k, v in feeds.items() if k in names})


def net_feeds(model: graphpass.Model) -> dict[str, np.ndarray]:
    x, mask = (t.numpy() for t in net_inputs())
    first, second = (value.name for value in model.graph.inputs[:2])
    return {first: x, second: mask}


def net_expected() -> np.ndarray:
    with torch.no_grad():
        return seeded(Net)(*net_inputs()).numpy()


def assert_computes_like(model: graphpass.Model, language_model: Any, tmp_path: Path) -> None:
    """onnxruntime's logits for :data:`TOKENS` are the torch language model's."""
    (logits,) = run_onnx(model, tmp_path, {"input_ids": TOKENS.numpy()})
    with torch.no_grad():
        expected = language_model(input_ids=TOKENS, use_cache=False).logits.numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


# ===================================================== dynamo=True, no weights saved
@pytest.mark.parametrize("export", ["dynamo-no-initializers", "dynamo-fake"])
def test_dynamo_filled_from_state_dict_names_exactly_the_buffer_and_constant(exported, export,
                                                                             tmp_path):
    model = graphpass.load(exported(export))
    _, found = reconcile(model, seeded(Net).state_dict(), tmp_path)
    assert sorted(found) == ["block.offset", "block.scale"]
    scale, offset = found["block.scale"], found["block.offset"]
    assert scale.code == offset.code == "GP301"
    # torch.export's %b_ placeholder says buffer; the checkpoint lacking it, non-persistent
    assert scale.data["kind"] == "non-persistent buffer"
    assert offset.data["kind"] == "tensor constant"
    assert scale.data["module"] == offset.data["module"] == "block"
    assert [c["op_type"] for c in scale.data["consumers"]] == ["Mul"]
    assert scale.data["fix"] == offset.data["fix"] == "export-state"
    assert "graphpass.torch.save_state" in offset.hint


def test_dynamo_without_a_checkpoint_cannot_tell_persistence(exported):
    model = graphpass.load(exported("dynamo-no-initializers"))
    found = missing(model)
    kinds = {name: finding.data["kind"] for name, finding in found.items()}
    assert kinds == {"block.linear.weight": "parameter", "block.linear.bias": "parameter",
                     "head.weight": "parameter", "head.bias": "parameter",
                     "block.scale": "buffer", "block.running": "buffer",
                     "block.offset": "tensor constant"}
    assert found["head.weight"].data["fix"] == "reconcile"
    assert "x" not in found and "mask" not in found


def test_a_checkpoint_under_other_names_is_pointed_at(exported, tmp_path):
    # The checkpoint of a wrapped model (DataParallel's "module." prefix) nearly matches.
    state = {f"module.{name}": t for name, t in gp_torch.capture_state(seeded(Net)).items()}
    checkpoint = gp_torch.save_state(state, tmp_path / "wrapped.safetensors")
    found = missing(graphpass.load(exported("dynamo-no-initializers")),
                    checkpoints=[str(checkpoint)])
    assert found["block.scale"].data["checkpoint"] == {
        "path": str(checkpoint), "key": "module.block.scale", "exact": False}
    assert found["block.scale"].data["fix"] == "reconcile"
    assert "'module.block.scale'" in found["block.scale"].hint


def test_dynamo_state_kept_as_inputs_are_named_from_torch_metadata(exported, tmp_path):
    model = graphpass.load(exported("dynamo-inputs"))
    # Before filling: every state input, none of the data inputs.
    assert sorted(missing(model)) == ["block.linear.bias", "block.linear.weight",
                                      "block.offset", "block.running", "block.scale",
                                      "head.bias", "head.weight"]
    _, found = reconcile(model, seeded(Net).state_dict(), tmp_path)
    assert sorted(found) == ["block.offset", "block.scale"]
    assert {f.code for f in found.values()} == {"GP303"}
    assert found["block.scale"].data["kind"] == "non-persistent buffer"
    assert found["block.offset"].data["kind"] == "tensor constant"
    assert any("persistent=False" in e for e in found["block.scale"].data["evidence"])


@pytest.mark.parametrize("export", ["dynamo-no-initializers", "dynamo-fake", "dynamo-inputs"])
def test_dynamo_filled_from_capture_state_is_silent_and_matches_torch(exported, export,
                                                                      tmp_path):
    model, found = reconcile(graphpass.load(exported(export)),
                             gp_torch.capture_state(seeded(Net)), tmp_path)
    assert found == {}
    (actual,) = run_onnx(model, tmp_path, net_feeds(model))
    np.testing.assert_allclose(actual, net_expected(), rtol=1e-5, atol=1e-6)


def test_complete_dynamo_export_is_silent(exported):
    assert missing(graphpass.load(exported("dynamo-complete"))) == {}


# ================================================================== dynamo=False
@pytest.mark.parametrize("export", ["legacy-no-params", "legacy-inputs-no-params"])
def test_legacy_state_inputs_are_named_until_filled(exported, export):
    model = graphpass.load(exported(export))
    found = missing(model)
    assert sorted(found) == ["block.linear.bias", "block.linear.weight", "block.running",
                             "head.bias", "head.weight"]
    assert {f.code for f in found.values()} == {"GP303"}
    assert "x" not in found and "mask" not in found


@pytest.mark.parametrize("export", ["legacy-no-params", "legacy-inputs-no-params"])
@pytest.mark.parametrize("source", ["state_dict", "capture_state"])
def test_legacy_bakes_buffers_and_constants_so_state_dict_suffices(exported, export, source,
                                                                    tmp_path):
    # The legacy exporter traces non-persistent buffers and tensor attributes into
    # Constant nodes: state_dict() holds everything the graph still needs.
    net = seeded(Net)
    state = net.state_dict() if source == "state_dict" else gp_torch.capture_state(net)
    model, found = reconcile(graphpass.load(exported(export)), state, tmp_path)
    assert found == {}
    (actual,) = run_onnx(model, tmp_path, net_feeds(model))
    np.testing.assert_allclose(actual, net_expected(), rtol=1e-5, atol=1e-6)


def test_legacy_initializers_kept_as_inputs_is_a_complete_model(exported):
    assert missing(graphpass.load(exported("legacy-inputs"))) == {}


def test_legacy_folded_constant_is_named_with_the_re_export_fix(exported, tmp_path):
    folded = seeded(Folded)
    _, found = reconcile(graphpass.load(exported("legacy-folded")),
                         gp_torch.capture_state(folded), tmp_path)
    (name,) = found
    assert name.startswith("onnx::MatMul_")
    assert found[name].code == "GP303"
    assert found[name].data["kind"] == "folded constant"
    assert found[name].data["fix"] == "re-export"
    assert "do_constant_folding=False" in found[name].hint

    unfolded, found = reconcile(graphpass.load(exported("legacy-unfolded")),
                                folded.state_dict(), tmp_path, "unfolded")
    assert found == {}
    (actual,) = run_onnx(unfolded, tmp_path, {"x": net_inputs()[0].numpy()})
    with torch.no_grad():
        expected = folded(net_inputs()[0]).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


# =========================================================== Hugging Face models
def test_llama_rotary_inv_freq_is_the_one_missing_buffer(exported, tmp_path):
    real = llama()
    assert "model.rotary_emb.inv_freq" not in real.state_dict()
    model = graphpass.load(exported("llama-fake"))
    _, found = reconcile(model, real.state_dict(), tmp_path)
    assert list(found) == ["model.rotary_emb.inv_freq"]
    finding = found["model.rotary_emb.inv_freq"]
    assert finding.data["module"] == "model.rotary_emb"
    assert finding.data["kind"] == "non-persistent buffer"
    assert finding.message.startswith("module 'model.rotary_emb': non-persistent buffer")

    complete, found = reconcile(model, gp_torch.capture_state(real), tmp_path, "full")
    assert found == {}
    assert_computes_like(complete, real, tmp_path)


def test_a_missing_buffer_is_why_the_filled_shapes_were_not_run_and_nothing_else(
        exported, tmp_path):
    # onnxruntime is installed; the filled model cannot run because inv_freq (a
    # non-persistent buffer, so not in state_dict()) is still undefined. The shape note
    # says that, as information: the error is detect-missing-buffers' GP301.
    real = llama()
    checkpoint = gp_torch.save_state(real.state_dict(), tmp_path / "state.safetensors")
    result = graphpass.PassManager(["reconcile-initializers", "detect-missing-buffers"],
                                   checkpoints=[checkpoint]).run(
        graphpass.load(exported("llama-fake")))
    [note] = [f for f in result.findings if f.code == "GP207"]
    assert note.severity.value == "info", note.message
    assert "not installed" not in note.message and "install" not in (note.hint or "")
    assert "'model.rotary_emb.inv_freq'" in note.message
    assert "nothing defines" in note.message and "onnxruntime did not run" in note.message
    assert note.data["not_run"]["undefined"] == ["model.rotary_emb.inv_freq"]
    warnings_ = [f for f in result.findings if f.severity.value == "warning"]
    assert [f.code for f in warnings_] == ["GP201"]  # no inv_freq: said once, as before
    [error] = result.errors
    assert error.code == "GP301" and error.value == "model.rotary_emb.inv_freq"


def test_gpt2_with_tied_weights_has_nothing_missing_after_state_dict(exported, tmp_path):
    # transformers 5.x builds GPT-2's causal mask on the fly: no buffer to lose, and the
    # tied lm_head / wte weight is in state_dict() under both names.
    real = gpt2()
    assert dict(real.named_buffers()) == {}
    model, found = reconcile(graphpass.load(exported("gpt2-no-initializers")),
                             real.state_dict(), tmp_path)
    assert found == {}
    assert_computes_like(model, real, tmp_path)


def test_gpt2_optimized_export_loses_only_folded_constants(exported, tmp_path):
    # optimize=True (the default) folds constants (position embeddings looked up at
    # fixed positions, transposed weights ...) into new initializers, which
    # include_initializers=False drops: no state_dict() checkpoint can fill them, only the
    # export's own tensors (save_state(onnx_program)), or an export without folding.
    real = gpt2()
    state = real.state_dict()
    checkpoint = gp_torch.save_state(state, tmp_path / "gpt2.safetensors")
    found = missing(graphpass.load(exported("gpt2-optimized-no-initializers")),
                    checkpoints=[str(checkpoint)])
    in_checkpoint = {name: f for name, f in found.items() if name in state}
    folded = {name: f for name, f in found.items() if name not in state}
    assert in_checkpoint and folded
    assert {f.data["fix"] for f in in_checkpoint.values()} == {"reconcile"}
    assert {f.data["kind"] for f in folded.values()} == {"folded constant"}
    assert {f.data["fix"] for f in folded.values()} == {"export-state"}
    assert all("optimize=False" in f.hint and "save_state(onnx_program" in f.hint
               for f in folded.values())


# ============================================ a tensor made in a submodule's forward
class _MakesTensors(torch.nn.Module):
    """A submodule that creates a tensor inside ``forward``: no attribute holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x: Any) -> Any:
        return self.fc(x) * torch.tensor([1.0, 2.0, 3.0])


class _Lifting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _MakesTensors()

    def forward(self, x: Any) -> Any:
        return self.inner(x) + torch.tensor([0.5, 0.25, 0.125])


def test_a_tensor_made_in_a_submodules_forward_is_a_lifted_constant_and_its_fix_works(
        tmp_path):
    """torch.export names it ``inner.lifted_tensor_0``: lifted, judged by the last part.

    Seen failing before: the pattern was matched against the whole dotted name, so it
    was called a tensor constant, with the advice to save the module's state, which
    does not hold it.
    """
    torch.manual_seed(0)
    module = _Lifting()
    x = torch.randn(2, 3)
    program = _quiet_export(module, (x,), dynamo=True, optimize=False)
    path = tmp_path / "no_initializers.onnx"
    program.save(str(path), include_initializers=False)
    model = graphpass.load(path)
    found = missing(model)
    lifted = {name: f for name, f in found.items() if "lifted_tensor" in name}
    assert sorted(lifted) == ["inner.lifted_tensor_0", "lifted_tensor_1"]
    for finding in lifted.values():
        assert finding.data["kind"] == "lifted constant"
        assert "save_state(onnx_program" in finding.hint
        assert "save_state(model" not in finding.hint
    assert lifted["inner.lifted_tensor_0"].data["module"] == "inner"
    assert "inner.lifted_tensor_0" not in gp_torch.capture_state(module)  # the old advice
    # The advice: the export's own tensors fill every gap, and onnxruntime computes torch's.
    checkpoint = gp_torch.save_state(program, tmp_path / "export.safetensors")
    result = graphpass.PassManager(["reconcile-initializers", "detect-missing-buffers"],
                                   checkpoints=[checkpoint]).run(model)
    assert result.ok and not [f for f in result.findings if f.code == "GP301"]
    filled = result.model
    (actual,) = run_onnx(filled, tmp_path, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(actual, module(x).numpy(), rtol=1e-6, atol=1e-6)


# ============================================================ onnxruntime-training
@pytest.mark.ort_training
def test_ort_training_accepts_a_buffer_input_and_asks_for_it_every_step(
        exported, ort_training_python, tmp_path):
    # The model ORT training takes without complaint, and this pass refuses.
    model, found = reconcile(graphpass.load(exported("dynamo-inputs")),
                             seeded(Net).state_dict(), tmp_path)
    assert sorted(found) == ["block.offset", "block.scale"]
    path = tmp_path / "buffer_as_input.onnx"
    import onnx

    onnx.save(model.to_proto(), path)  # graphpass.save would embed the same; keep it simple
    x, mask = (t.numpy() for t in net_inputs())
    np.savez(tmp_path / "feeds.npz", x=x, mask=mask, target=np.zeros((2, 3), np.float32))
    oracle = Path(__file__).resolve().parent / "ort_training" / "oracle.py"
    done = subprocess.run(
        [ort_training_python, str(oracle), str(path), "--loss", "mse", "--train-steps", "1",
         "--inputs", str(tmp_path / "feeds.npz")],
        capture_output=True, text=True, timeout=600, check=False)
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdict["ok"] is False
    assert verdict["stage"] == "train"  # artifacts were generated: the model was accepted
    assert "block.scale" in verdict["error"] or "block.offset" in verdict["error"]
