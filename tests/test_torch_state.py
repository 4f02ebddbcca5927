"""graphpass.torch: capture_state and save_state against real modules and real exports."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

import graphpass  # noqa: E402
import graphpass.torch as gp_torch  # noqa: E402
from graphpass.checkpoint import open_checkpoint  # noqa: E402
from graphpass.framework._pass_base import PassContext  # noqa: E402
from graphpass.framework._plugin_loading import default_registry  # noqa: E402
from graphpass.passes.detect_missing_buffers import DetectMissingBuffers  # noqa: E402

pytestmark = pytest.mark.torch


class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("gain", torch.linspace(0.5, 2.0, 4), persistent=False)
        self.register_buffer("running", torch.full((4,), 0.25))
        self.offset = torch.arange(4, dtype=torch.float32) / 8  # tensor constant

    def forward(self, h: Any) -> Any:
        return self.linear(h) * self.gain + self.offset + self.running


class Tied(torch.nn.Module):
    """Tied embedding/head, a ModuleList, a root-level constant, a tensor made in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.layers = torch.nn.ModuleList([Inner()])
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("positions", torch.arange(3), persistent=False)
        self.bias_table = torch.tensor([0.1, -0.2, 0.3, 0.0])

    def forward(self, ids: Any) -> Any:
        h = self.layers[0](self.embed(ids + self.positions)) + self.bias_table
        return self.head(h * torch.tensor([1.0, 2.0, 3.0, 4.0]))


IDS = torch.tensor([[1, 2, 3]])


def tied() -> Any:
    torch.manual_seed(0)
    return Tied().eval()


def _export(*args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(*args, verbose=False, **kwargs)


@pytest.fixture(scope="module")
def dynamo_program() -> Any:
    return _export(tied(), (IDS,), dynamo=True, optimize=False)


@pytest.fixture(scope="module")
def fake_program() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        return _export(Tied().eval(), (IDS,), dynamo=True, optimize=False)


def initializer_names(path: Path) -> list[str]:
    return [t.name for t in onnx.load(str(path), load_external_data=False).graph.initializer]


# ================================================================ capture_state
def test_capture_state_has_everything_state_dict_leaves_out():
    module = tied()
    state = gp_torch.capture_state(module)
    assert set(module.state_dict()) < set(state)
    assert set(state) - set(module.state_dict()) == {
        "positions", "bias_table", "layers.0.gain", "layers.0.offset"}
    # no copies: the very tensors the module holds, tied ones under both names
    assert state["head.weight"].data_ptr() == module.embed.weight.data_ptr()
    assert state["embed.weight"].data_ptr() == module.embed.weight.data_ptr()
    assert state["layers.0.gain"].data_ptr() == module.layers[0].gain.data_ptr()
    assert not any(t.requires_grad for t in state.values())


def test_capture_state_covers_every_initializer_of_a_dynamo_export(dynamo_program, tmp_path):
    path = tmp_path / "tied.onnx"
    dynamo_program.save(str(path))
    names = initializer_names(path)
    state = gp_torch.capture_state(tied())
    # Only the tensor created inside forward() is no module attribute.
    assert [n for n in names if n not in state] == ["lifted_tensor_0"]
    exported = {t.name: onnx.numpy_helper.to_array(t)
                for t in onnx.load(str(path)).graph.initializer}
    for name, value in state.items():
        if name in exported:
            np.testing.assert_array_equal(value.numpy(), exported[name])


def test_capture_state_covers_every_initializer_of_a_legacy_export(tmp_path):
    path = tmp_path / "tied.onnx"
    _export(tied(), (IDS,), str(path), dynamo=False, do_constant_folding=False)
    names = initializer_names(path)
    assert names
    state = gp_torch.capture_state(tied())
    assert [n for n in names if n not in state and not n.startswith("onnx::")] == []


def test_capture_state_of_an_exported_program_includes_lifted_constants(dynamo_program):
    state = gp_torch.capture_state(dynamo_program.exported_program)
    assert {"lifted_tensor_0", "positions", "layers.0.gain", "bias_table",
            "head.weight"} <= set(state)
    np.testing.assert_array_equal(state["lifted_tensor_0"].numpy(), [1.0, 2.0, 3.0, 4.0])


def test_capture_state_of_an_onnx_program_uses_its_onnx_names(dynamo_program, tmp_path):
    path = tmp_path / "tied.onnx"
    dynamo_program.save(str(path))
    state = gp_torch.capture_state(dynamo_program)
    assert sorted(state) == sorted(initializer_names(path))


def test_fake_and_meta_tensors_are_refused_by_name(fake_program):
    with torch.device("meta"):
        on_meta = Inner()
    with pytest.raises(graphpass.GraphpassError, match="no values") as caught:
        gp_torch.capture_state(on_meta)
    assert "'linear.weight'" in str(caught.value)
    assert "FakeTensorMode" in caught.value.hint
    assert gp_torch.capture_state(on_meta, skip_unmaterialized=True) == {}

    with pytest.raises(graphpass.GraphpassError, match="no values"):
        gp_torch.capture_state(fake_program)
    real_only = gp_torch.capture_state(fake_program, skip_unmaterialized=True)
    assert list(real_only) == ["lifted_tensor_0"]  # made from Python data: real even here


def test_capture_state_rejects_other_objects():
    with pytest.raises(graphpass.GraphpassError, match="cannot capture the state of a dict"):
        gp_torch.capture_state({"a": torch.zeros(1)})


def test_fake_mode_export_filled_with_capture_state_is_complete(fake_program, tmp_path):
    # The seed story: export under FakeTensorMode, apply_weights(state_dict()) leaves the
    # non-persistent buffers and constants fake (and save() then fails). One call fixes it.
    real = tied()
    program = _export(*_fake_module_and_args(), dynamo=True, optimize=False)
    state = gp_torch.capture_state(real)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # apply_weights warns about aliases it has no use for
        program.apply_weights(state)
    path = tmp_path / "filled.onnx"
    program.save(str(path))
    model = graphpass.load(path)
    assert DetectMissingBuffers().run(
        model, PassContext(registry=default_registry())).findings == []
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, {session.get_inputs()[0].name: IDS.numpy()})
    with torch.no_grad():
        expected = real(IDS).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def _fake_module_and_args() -> tuple[Any, tuple[Any, ...]]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        module = Tied().eval()
    return module, (IDS,)


def test_apply_weights_with_state_dict_alone_leaves_fake_tensors(tmp_path):
    program = _export(*_fake_module_and_args(), dynamo=True, optimize=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program.apply_weights(tied().state_dict())
    left_fake = [name for name, value in program.model.graph.initializers.items()
                 if type(value.const_value.raw).__name__ == "FakeTensor"]
    assert sorted(left_fake) == ["bias_table", "layers.0.gain", "layers.0.offset", "positions"]


# =================================================================== save_state
def test_save_state_round_trips_tied_shared_and_non_contiguous_tensors(tmp_path):
    module = tied()
    module.transposed = module.layers[0].linear.weight.detach().T  # a view: shares, strided
    path = gp_torch.save_state(module, tmp_path / "sub" / "state.safetensors")
    assert path == tmp_path / "sub" / "state.safetensors"
    loaded = safetensors_torch.load_file(str(path))
    expected = gp_torch.capture_state(module)
    assert sorted(loaded) == sorted(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(loaded[name], tensor.contiguous(), rtol=0, atol=0)
    assert [p.name for p in path.parent.iterdir()] == ["state.safetensors"]  # no temp files


def test_saved_state_is_a_checkpoint_graphpass_reads(tmp_path):
    path = gp_torch.save_state(tied(), tmp_path / "state.safetensors")
    checkpoint = open_checkpoint(path)
    assert "layers.0.gain" in checkpoint
    assert tuple(checkpoint["layers.0.gain"].shape) == (4,)
    np.testing.assert_array_equal(checkpoint["layers.0.gain"].numpy(),
                                  np.linspace(0.5, 2.0, 4, dtype=np.float32))


def test_save_state_takes_a_mapping_and_checks_it(tmp_path):
    state = {"a": torch.ones(2, 3).T, "b": torch.zeros(1)}
    path = gp_torch.save_state(state, tmp_path / "s.safetensors")
    assert safetensors_torch.load_file(str(path))["a"].shape == (3, 2)
    with pytest.raises(graphpass.GraphpassError, match="not tensors: 'n'"):
        gp_torch.save_state({"n": 3}, tmp_path / "bad.safetensors")
    with pytest.raises(graphpass.GraphpassError, match="no values"):
        gp_torch.save_state({"m": torch.empty(2, device="meta")}, tmp_path / "m.safetensors")
    assert not (tmp_path / "bad.safetensors").exists()


def test_save_state_cannot_write_into_a_folder_path(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()
    with pytest.raises(graphpass.CheckpointError, match="cannot write"):
        gp_torch.save_state(tied(), target)
    assert list(target.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_without_torch_the_error_says_what_to_install():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import graphpass.torch\n"
        "try:\n"
        "    graphpass.torch.capture_state(object())\n"
        "except graphpass.GraphpassError as error:\n"
        "    print('GraphpassError:', error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert "GraphpassError: graphpass.torch needs PyTorch" in done.stdout
    assert "pip install" in done.stdout
