"""Checkpoint loaders: formats chosen by content, lazy file-region entries, clear errors."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from safetensors.numpy import save_file as save_numpy

import graphpass
from graphpass.checkpoint import (
    Checkpoint,
    CheckpointEntry,
    CheckpointLoader,
    NumpyLoader,
    SafetensorsLoader,
    ShardedLoader,
    TorchLoader,
    builtin_loaders,
    open_checkpoint,
)
from graphpass.framework import Registry, default_registry

torch = pytest.importorskip("torch")
from safetensors.torch import save_file as save_torch  # noqa: E402
from safetensors.torch import save_model  # noqa: E402

F = onnx.TensorProto


def _state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        "encoder.weight": torch.randn(4, 3, generator=generator),
        "encoder.bias": torch.randn(4, generator=generator),
        "half": torch.randn(2, 2, generator=generator).half(),
        "brain": torch.randn(3, generator=generator).bfloat16(),
        "steps": torch.arange(5, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
    }


def _as_numpy(tensor: torch.Tensor) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _check_values(checkpoint: Checkpoint, state: dict[str, torch.Tensor]) -> None:
    assert set(checkpoint) == set(state)
    for key, tensor in state.items():
        entry = checkpoint[key]
        assert entry.shape == tuple(tensor.shape)
        np.testing.assert_array_equal(entry.tensor(key).numpy(), _as_numpy(tensor))


# ============================================================== safetensors
def test_safetensors_entries_are_file_regions_with_onnx_types(tmp_path):
    state = _state()
    path = tmp_path / "w.safetensors"
    save_torch(state, str(path), metadata={"format": "pt"})
    checkpoint = open_checkpoint(path)
    assert checkpoint.format == "safetensors"
    assert checkpoint.metadata == {"format": "pt"}
    assert {k: e.dtype for k, e in checkpoint.items()} == {
        "encoder.weight": F.FLOAT, "encoder.bias": F.FLOAT, "half": F.FLOAT16,
        "brain": F.BFLOAT16, "steps": F.INT64, "mask": F.BOOL}
    _check_values(checkpoint, state)
    tensor = checkpoint["encoder.weight"].tensor("layer.weight")
    assert tensor.name == "layer.weight"
    assert tensor.is_external and tensor.external_path == path
    raw = path.read_bytes()
    offset = tensor.external_offset
    assert raw[offset:offset + tensor.nbytes] == state["encoder.weight"].numpy().tobytes()
    assert checkpoint.nbytes == sum(t.numel() * t.element_size() for t in state.values())


def test_safetensors_tied_weights_metadata_gives_an_alias(tmp_path):
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(5, 3)
    model.head = torch.nn.Linear(3, 5, bias=False)
    model.head.weight = model.embed.weight
    path = tmp_path / "tied.safetensors"
    save_model(model, str(path))  # stores the tensor once, names the other in metadata
    checkpoint = open_checkpoint(path)
    assert set(checkpoint) == {"embed.weight", "head.weight"}
    assert checkpoint["embed.weight"].storage == checkpoint["head.weight"].storage
    kept, removed = sorted(checkpoint, key=lambda k: k in checkpoint.metadata)
    assert checkpoint.aliases(kept) == [removed]
    assert checkpoint.nbytes == 5 * 3 * 4


def test_format_is_chosen_by_content_not_suffix(tmp_path):
    state = _state()
    safetensors_named_bin = tmp_path / "pytorch_model.bin"
    save_torch(state, str(safetensors_named_bin))
    assert open_checkpoint(safetensors_named_bin).format == "safetensors"
    torch_named_safetensors = tmp_path / "model.safetensors"
    torch.save(state, torch_named_safetensors)
    assert open_checkpoint(torch_named_safetensors).format == "torch"
    npz_named_pt = tmp_path / "weights.pt"
    with open(npz_named_pt, "wb") as handle:
        np.savez(handle, a=np.ones(2, np.float32))
    assert open_checkpoint(npz_named_pt).format == "numpy"


# ==================================================================== torch
def test_torch_zip_entries_are_file_regions(tmp_path):
    state = _state()
    path = tmp_path / "w.pt"
    torch.save(state, path)
    checkpoint = open_checkpoint(path)
    assert checkpoint.format == "torch"
    assert all(entry.is_file_region for entry in checkpoint.values())
    _check_values(checkpoint, state)


@pytest.mark.parametrize("wrapper", ["state_dict", "model_state_dict", "model"])
def test_torch_state_dict_is_unwrapped(tmp_path, wrapper):
    state = _state()
    path = tmp_path / "w.pt"
    torch.save({wrapper: state, "epoch": 4, "optimizer": {"lr": 0.1}}, path)
    _check_values(open_checkpoint(path), state)


def test_torch_views_share_data_and_strided_views_load_on_demand(tmp_path):
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    state = {"base": base, "tied": base, "row": base[1], "transposed": base.t()}
    path = tmp_path / "views.pt"
    torch.save(state, path)
    checkpoint = open_checkpoint(path)
    assert checkpoint["base"].storage == checkpoint["tied"].storage
    assert checkpoint["row"].is_file_region  # contiguous slice: a region at an offset
    assert not checkpoint["transposed"].is_file_region
    _check_values(checkpoint, state)


def test_torch_legacy_format_loads_on_demand(tmp_path):
    state = _state()
    path = tmp_path / "legacy.pt"
    torch.save(state, path, _use_new_zipfile_serialization=False)
    checkpoint = open_checkpoint(path)
    assert checkpoint.format == "torch"
    assert not checkpoint["encoder.weight"].is_file_region
    _check_values(checkpoint, state)


def test_torch_non_tensor_values_are_skipped_and_said(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"weight": torch.ones(2), "note": "hello", "count": 3}, path)
    checkpoint = open_checkpoint(path)
    assert list(checkpoint) == ["weight"]
    assert set(checkpoint.skipped) == {"note", "count"}


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_torch_pickle_that_weights_only_refuses_is_an_error_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "payload": _RunsCode(marker)}, path)
    with pytest.raises(graphpass.CheckpointError) as caught:
        open_checkpoint(path)
    message = str(caught.value)
    assert "weights_only" in message and "system" in message
    assert "never loads such pickles" in message
    assert caught.value.where == str(path)
    assert not marker.exists()


def test_torch_whole_module_pickle_is_refused_naming_the_class(tmp_path):
    path = tmp_path / "module.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(graphpass.CheckpointError, match=r"torch\.nn\.modules\.linear\.Linear"):
        open_checkpoint(path)


# ==================================================================== numpy
def test_npz_stored_members_are_file_regions(tmp_path):
    arrays = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
              "b": np.arange(4, dtype=np.int64),
              "fortran": np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3))}
    path = tmp_path / "w.npz"
    np.savez(path, **arrays)
    checkpoint = open_checkpoint(path)
    assert checkpoint.format == "numpy"
    assert checkpoint["a.weight"].is_file_region and checkpoint["b"].is_file_region
    assert not checkpoint["fortran"].is_file_region  # column-major: read on demand
    for key, array in arrays.items():
        np.testing.assert_array_equal(checkpoint[key].tensor(key).numpy(), array)


def test_npz_compressed_members_load_on_demand(tmp_path):
    path = tmp_path / "w.npz"
    np.savez_compressed(path, x=np.linspace(0, 1, 7, dtype=np.float32))
    entry = open_checkpoint(path)["x"]
    assert not entry.is_file_region
    np.testing.assert_array_equal(entry.numpy(), np.linspace(0, 1, 7, dtype=np.float32))


# ================================================================== sharded
def _write_shards(folder: Path, state: dict[str, np.ndarray], index_name: str | None
                  ) -> dict[str, str]:
    keys = sorted(state)
    weight_map = {}
    for number in range(3):
        name = f"model-{number + 1:05d}-of-00003.safetensors"
        part = keys[number::3]
        save_numpy({k: state[k] for k in part}, str(folder / name))
        weight_map.update(dict.fromkeys(part, name))
    if index_name:
        (folder / index_name).write_text(json.dumps({"metadata": {"total_size": "1"},
                                                     "weight_map": weight_map}))
    return weight_map


def _numpy_state() -> dict[str, np.ndarray]:
    return {f"layers.{i}.weight": np.full((2, i + 1), i, np.float32) for i in range(7)}


def test_sharded_index_joins_every_shard(tmp_path):
    state = _numpy_state()
    _write_shards(tmp_path, state, "model.safetensors.index.json")
    checkpoint = open_checkpoint(tmp_path / "model.safetensors.index.json")
    assert checkpoint.format == "sharded safetensors"
    assert len(checkpoint.files) == 3
    assert checkpoint.metadata["total_size"] == "1"
    for key, array in state.items():
        assert checkpoint[key].is_file_region
        np.testing.assert_array_equal(checkpoint[key].numpy(), array)
    assert open_checkpoint(tmp_path).keys() == checkpoint.keys()  # the folder, via its index


def test_sharded_folder_without_index(tmp_path):
    state = _numpy_state()
    _write_shards(tmp_path, state, None)
    checkpoint = open_checkpoint(tmp_path)
    assert set(checkpoint) == set(state)


def test_sharded_torch_bin_index(tmp_path):
    index = {"weight_map": {}}
    for number in range(2):
        name = f"pytorch_model-{number + 1:05d}-of-00002.bin"
        torch.save({f"w{number}": torch.full((2,), float(number))}, tmp_path / name)
        index["weight_map"][f"w{number}"] = name
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    checkpoint = open_checkpoint(tmp_path / "pytorch_model.bin.index.json")
    assert checkpoint.format == "sharded torch"
    np.testing.assert_array_equal(checkpoint["w1"].numpy(), [1.0, 1.0])


def test_sharded_missing_shard_is_an_error(tmp_path):
    _write_shards(tmp_path, _numpy_state(), "model.safetensors.index.json")
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(graphpass.CheckpointError, match=r"model-00002-of-00003\.safetensors.*"
                                                        r"missing"):
        open_checkpoint(tmp_path / "model.safetensors.index.json")


def test_sharded_index_naming_an_absent_key_is_an_error(tmp_path):
    weight_map = _write_shards(tmp_path, _numpy_state(), None)
    weight_map["ghost.weight"] = "model-00001-of-00003.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": weight_map}))
    with pytest.raises(graphpass.CheckpointError, match=r"'ghost\.weight'.*no such tensor"):
        open_checkpoint(tmp_path)


def test_sharded_duplicate_key_across_shards_is_an_error(tmp_path):
    save_numpy({"w": np.ones(2, np.float32)}, str(tmp_path / "a.safetensors"))
    save_numpy({"w": np.zeros(2, np.float32)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(graphpass.CheckpointError, match="'w' appears twice"):
        open_checkpoint(tmp_path)


# =================================================================== errors
def test_missing_path(tmp_path):
    with pytest.raises(graphpass.CheckpointError, match="no such checkpoint"):
        open_checkpoint(tmp_path / "nope.safetensors")


def test_unknown_format_lists_the_loaders(tmp_path):
    path = tmp_path / "weights.dat"
    path.write_bytes(b"\x00\x01garbage that is no checkpoint")
    with pytest.raises(graphpass.CheckpointError) as caught:
        open_checkpoint(path)
    assert "unknown checkpoint format" in caught.value.message
    for name in ("safetensors", "torch", "numpy", "sharded"):
        assert name in caught.value.hint


def test_a_pipe_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "weights.safetensors"
    os.mkfifo(path)  # reading it would block forever
    with pytest.raises(graphpass.CheckpointError, match="not a regular file"):
        open_checkpoint(path)


def test_plain_pickle_is_not_unpickled(tmp_path):
    path = tmp_path / "weights.pkl"
    path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    with pytest.raises(graphpass.CheckpointError, match="Python pickle"):
        open_checkpoint(path)


def test_empty_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"")
    with pytest.raises(graphpass.CheckpointError, match="empty") as caught:
        open_checkpoint(path)
    assert "truncated or corrupt" in caught.value.hint


@pytest.mark.parametrize("fmt", ["safetensors", "pt", "npz"])
def test_truncated_checkpoints_are_clear_errors(tmp_path, fmt):
    path = tmp_path / f"w.{fmt}"
    if fmt == "safetensors":
        save_torch(_state(), str(path))
    elif fmt == "pt":
        torch.save(_state(), path)
    else:
        np.savez(path, a=np.ones(1000, np.float32))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(graphpass.CheckpointError) as caught:
        open_checkpoint(path)
    text = str(caught.value)
    assert "truncated or corrupt" in text or "cannot read" in text, text


def test_corrupt_safetensors_header(tmp_path):
    path = tmp_path / "w.safetensors"
    save_torch(_state(), str(path))
    data = bytearray(path.read_bytes())
    data[9:14] = b"!!!!!"  # break the JSON header
    path.write_bytes(bytes(data))
    with pytest.raises(graphpass.CheckpointError, match="not a valid safetensors file"):
        open_checkpoint(path)


def test_torch_checkpoint_without_tensors(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"epoch": 3}, path)
    with pytest.raises(graphpass.CheckpointError, match="no tensors"):
        open_checkpoint(path)


# ================================================================ registry
def test_builtin_loaders_are_registered_through_the_hook():
    registry = default_registry()
    assert {"safetensors", "torch", "numpy", "sharded"} <= set(registry.checkpoint_loaders)
    assert registry.plugin_of("checkpoint_loaders", "safetensors") == "builtin"
    assert [type(loader) for loader in builtin_loaders()] == [
        SafetensorsLoader, TorchLoader, NumpyLoader, ShardedLoader]


class _TextLoader(CheckpointLoader):
    """A plugin-style loader: lines of ``key: v1 v2 ...`` (float32 vectors)."""

    name = "text-vectors"
    description = "text vectors (*.vec)"

    def can_load(self, path: Path) -> bool:
        return path.read_bytes()[:4] == b"VEC\n"

    def load(self, path: Path) -> Checkpoint:
        entries = []
        for line in path.read_text().splitlines()[1:]:
            key, values = line.split(":")
            array = np.array([float(v) for v in values.split()], np.float32)
            entries.append(CheckpointEntry.from_loader(key, F.FLOAT, array.shape,
                                                       lambda array=array: array, file=path))
        return Checkpoint(entries, path=path, format=self.name)


class _BrokenSniffer(CheckpointLoader):
    name = "broken"
    description = "raises while sniffing"

    def can_load(self, path: Path) -> bool:
        raise RuntimeError("boom")


def test_plugin_loader_is_used_and_a_broken_sniffer_is_skipped(tmp_path):
    path = tmp_path / "w.vec"
    path.write_text("VEC\nbias: 1 2 3\n")
    checkpoint = open_checkpoint(path, [_BrokenSniffer(), *builtin_loaders(), _TextLoader()])
    assert checkpoint.format == "text-vectors"
    np.testing.assert_array_equal(checkpoint["bias"].tensor("b").numpy(), [1, 2, 3])


def test_entry_whose_loaded_data_disagrees_with_its_header(tmp_path):
    entry = CheckpointEntry.from_loader("w", F.FLOAT, (3,), lambda: np.ones(4, np.float32),
                                        file=tmp_path / "x")
    with pytest.raises(graphpass.CheckpointError, match="holds float32\\[4\\]"):
        entry.tensor()


def test_zip_that_is_neither_torch_nor_numpy(tmp_path):
    path = tmp_path / "w.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(graphpass.CheckpointError, match="unknown checkpoint format"):
        open_checkpoint(path)


def test_a_sharded_index_opens_its_shards_with_the_loaders_it_was_handed(tmp_path):
    (tmp_path / "a.vec").write_text("VEC\nbias: 1 2 3\n")
    (tmp_path / "b.vec").write_text("VEC\nscale: 4 5\n")
    index = tmp_path / "vectors.index.json"
    index.write_text(json.dumps({"weight_map": {"bias": "a.vec", "scale": "b.vec"}}))
    with pytest.raises(graphpass.CheckpointError, match="unknown checkpoint format"):
        open_checkpoint(index)  # the registry's loaders do not read *.vec shards
    checkpoint = open_checkpoint(index, [*builtin_loaders(), _TextLoader()])
    assert checkpoint.format == "sharded text-vectors"
    np.testing.assert_array_equal(checkpoint["scale"].numpy(), [4, 5])
    registry = Registry()
    for loader in [ShardedLoader(), _TextLoader()]:
        registry.add("checkpoint_loaders", loader.name, loader, "tests")
    assert open_checkpoint(index, registry=registry).keys() == checkpoint.keys()
