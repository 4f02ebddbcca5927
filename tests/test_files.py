"""graphpass.load / graphpass.save: bad files, external data safety, atomic writes.

Every bad input must end in a ``GraphpassError`` subclass whose message says what is
wrong and where; ``load`` never reads external weights; ``save`` writes all or nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data

import graphpass
from graphpass import ExternalDataError, GraphpassError, ModelLoadError, ModelSaveError, Tensor


def _model(weight_values: np.ndarray | None = None) -> onnx.ModelProto:
    weight = numpy_helper.from_array(
        weight_values if weight_values is not None else np.arange(1024, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(weight.dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(weight.dims))], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _save_external(proto: onnx.ModelProto, path: Path, location: str = "weights.bin") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location=location, size_threshold=0)
    return path


def _set_location(path: Path, location: str) -> None:
    proto = onnx.load(path, load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    path.write_bytes(proto.SerializeToString())


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ===================================================================== bad files
def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such file") as caught:
        graphpass.load(tmp_path / "absent.onnx")
    assert "absent.onnx" in str(caught.value)


def test_folder_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="folder"):
        graphpass.load(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty") as caught:
        graphpass.load(path)
    assert caught.value.hint


@pytest.mark.parametrize("content", [
    b"this is a text file, not a model\n",
    bytes(range(256)) * 4,
    b"\x89PNG\r\n\x1a\n" + b"\0" * 64,
], ids=["text", "binary", "png"])
def test_not_an_onnx_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match="not an ONNX model") as caught:
        graphpass.load(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_truncated_file(tmp_path: Path, fraction: float) -> None:
    data = _model().SerializeToString()
    path = tmp_path / "model.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(GraphpassError) as caught:
        graphpass.load(path)
    assert isinstance(caught.value, ModelLoadError | graphpass.InvalidModelError)
    assert str(path) in str(caught.value)


# ================================================================ external data
def test_load_does_not_read_external_data(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    model = graphpass.load(path)
    tensor = model.graph.initializers["w"]
    assert tensor.is_external and tensor.external_path == (tmp_path / "weights.bin").resolve()
    assert tensor.proto is not None and not tensor.proto.HasField("raw_data")
    np.testing.assert_array_equal(tensor.numpy(), np.arange(1024, dtype=np.float32))
    assert model.to_proto() == onnx.load(path, load_external_data=False)


@pytest.mark.parametrize("location", ["../outside.bin", "sub/../../outside.bin"])
def test_external_location_with_dotdot_is_refused(tmp_path: Path, location: str) -> None:
    path = _save_external(_model(), tmp_path / "model" / "m.onnx")
    (tmp_path / "outside.bin").write_bytes((tmp_path / "model" / "weights.bin").read_bytes())
    _set_location(path, location)
    with pytest.raises(ExternalDataError, match="outside the model's folder") as caught:
        graphpass.load(path)
    assert "'w'" in str(caught.value) and str(path) in str(caught.value)


def test_absolute_external_location_is_refused(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    _set_location(path, str((tmp_path / "weights.bin").resolve()))
    with pytest.raises(ExternalDataError, match="absolute path"):
        graphpass.load(path)


def test_symlink_leading_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "model" / "m.onnx")
    outside = tmp_path / "secret.bin"
    os.replace(tmp_path / "model" / "weights.bin", outside)
    (tmp_path / "model" / "weights.bin").symlink_to(outside)
    with pytest.raises(ExternalDataError, match="link leading outside"):
        graphpass.load(path)


def test_symlink_inside_the_folder_is_fine(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    (tmp_path / "store").mkdir()
    os.replace(tmp_path / "weights.bin", tmp_path / "store" / "weights.bin")
    (tmp_path / "weights.bin").symlink_to(tmp_path / "store" / "weights.bin")
    model = graphpass.load(path)
    np.testing.assert_array_equal(model.graph.initializers["w"].numpy(),
                                  np.arange(1024, dtype=np.float32))


def test_unsafe_location_in_an_attribute_tensor_is_refused(tmp_path: Path) -> None:
    constant = numpy_helper.from_array(np.ones(512, np.float32), "c")
    graph = helper.make_graph([helper.make_node("Constant", [], ["y"], value=constant)], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    convert_model_to_external_data(proto, location="../c.bin", size_threshold=0,
                                   convert_attribute=True)
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ExternalDataError, match="outside the model's folder"):
        graphpass.load(path)


def test_missing_external_data_file(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ExternalDataError, match="cannot be read") as caught:
        graphpass.load(path)
    assert "weights.bin" in str(caught.value) and caught.value.hint


def test_too_short_external_data_file(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    data = tmp_path / "weights.bin"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ExternalDataError, match="100 bytes, but a tensor needs") as caught:
        graphpass.load(path)
    assert "truncated" in str(caught.value)


def test_missing_data_can_be_loaded_without_the_check(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    (tmp_path / "weights.bin").unlink()
    model = graphpass.load(path, check_external_data=False)
    tensor = model.graph.initializers["w"]
    assert tensor.data_problem() is not None
    with pytest.raises(ExternalDataError):
        tensor.numpy()
    with pytest.raises(ModelSaveError, match="cannot be read"):
        graphpass.save(model, tmp_path / "out" / "m.onnx")
    assert not (tmp_path / "out").exists() or _files(tmp_path / "out") == []


def test_from_proto_without_a_folder_keeps_external_references(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    proto = onnx.load(path, load_external_data=False)
    model = graphpass.Model.from_proto(proto)
    assert model.to_proto() == proto
    with pytest.raises(ExternalDataError, match="not loaded from a file"):
        model.graph.initializers["w"].numpy()
    with pytest.raises(ModelSaveError, match="not loaded from a file"):
        graphpass.save(model, tmp_path / "out.onnx")
    placed = graphpass.Model.from_proto(proto, base_dir=tmp_path)
    assert placed.graph.initializers["w"].numpy()[5] == 5


# ======================================================================== saving
def test_save_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    before = path.read_bytes()
    with pytest.raises(ModelSaveError, match="overwrite the input"):
        graphpass.save(graphpass.load(path), path)
    assert path.read_bytes() == before
    graphpass.save(graphpass.load(path), path, overwrite_input=True)
    assert onnx.load(path) == _model()


def test_same_file_follows_links_and_spellings(tmp_path: Path) -> None:
    from graphpass.files import same_file

    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    (tmp_path / "link.onnx").symlink_to(model)
    os.link(model, tmp_path / "hard.onnx")
    (tmp_path / "other.onnx").write_bytes(b"x")
    assert same_file(model, tmp_path / "sub" / ".." / "m.onnx")
    assert same_file(tmp_path / "link.onnx", str(model))
    assert same_file(tmp_path / "hard.onnx", model)
    assert same_file(tmp_path / "new.onnx", tmp_path / "new.onnx")  # need not exist yet
    assert not same_file(tmp_path / "other.onnx", model)
    assert not same_file(tmp_path / "new.onnx", model)


def test_save_in_place_keeps_external_data_referenced(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx")
    before = (tmp_path / "weights.bin").stat()
    model = graphpass.load(path)
    graphpass.save(model, path, overwrite_input=True)
    after = (tmp_path / "weights.bin").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert _files(tmp_path) == ["m.onnx", "weights.bin"]
    assert onnx.load(path, load_external_data=False) == model.to_proto()


def test_save_in_place_with_a_new_tensor_rewrites_only_a_new_data_file(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "m.onnx", location="m.onnx.data")
    model = graphpass.load(path)
    model.graph.set_initializer(Tensor.from_array("extra", np.full(2048, 3, np.float32)))
    graphpass.save(model, path, overwrite_input=True)
    loaded = onnx.load(path)  # reads the data through onnx, not graphpass
    arrays = {t.name: numpy_helper.to_array(t) for t in loaded.graph.initializer}
    np.testing.assert_array_equal(arrays["w"], np.arange(1024, dtype=np.float32))
    np.testing.assert_array_equal(arrays["extra"], np.full(2048, 3, np.float32))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".graphpass-tmp")]


def test_save_to_another_folder_copies_the_data_file(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "a" / "m.onnx")
    out = tmp_path / "b" / "m.onnx"
    graphpass.save(graphpass.load(path), out)
    assert _files(out.parent) == ["m.onnx", "weights.bin"]
    assert (out.parent / "weights.bin").read_bytes() == (path.parent / "weights.bin").read_bytes()
    assert onnx.load(out, load_external_data=False) == onnx.load(path, load_external_data=False)


def test_save_in_place_into_a_subfolder_does_not_misplace_data(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    path = _save_external(_model(), tmp_path / "m.onnx", location="data/weights.bin")
    out = tmp_path / "data" / "m.onnx"  # the data file sits here, but under another name
    graphpass.save(graphpass.load(path), out)
    loaded = onnx.load(out)
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]),
                                  np.arange(1024, dtype=np.float32))


def test_attribute_tensor_data_follows_the_model(tmp_path: Path) -> None:
    constant = numpy_helper.from_array(np.arange(512, dtype=np.float32), "c")
    graph = helper.make_graph([helper.make_node("Constant", [], ["y"], value=constant)], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    source = tmp_path / "a" / "m.onnx"
    source.parent.mkdir()
    onnx.save(proto, source, save_as_external_data=True, location="c.bin", size_threshold=0,
              convert_attribute=True)
    stored = onnx.load(source, load_external_data=False).graph.node[0].attribute[0].t
    assert stored.data_location == TensorProto.EXTERNAL
    out = tmp_path / "b" / "m.onnx"
    graphpass.save(graphpass.load(source), out)
    value = onnx.load(out).graph.node[0].attribute[0].t
    np.testing.assert_array_equal(numpy_helper.to_array(value), np.arange(512, dtype=np.float32))


def test_embedded_model_goes_external_and_back(tmp_path: Path) -> None:
    values = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    proto = _model(values)
    model = graphpass.Model.from_proto(proto)
    external = tmp_path / "ext" / "m.onnx"
    graphpass.save(model, external, external_data=True)
    assert _files(external.parent) == ["m.onnx", "m.onnx.data"]
    stored = onnx.load(external, load_external_data=False).graph.initializer[0]
    assert stored.data_location == TensorProto.EXTERNAL
    reloaded = graphpass.load(external)
    np.testing.assert_array_equal(reloaded.graph.initializers["w"].numpy(), values)
    embedded = tmp_path / "emb" / "m.onnx"
    graphpass.save(reloaded, embedded, external_data=False)
    assert _files(embedded.parent) == ["m.onnx"]
    np.testing.assert_array_equal(
        numpy_helper.to_array(onnx.load(embedded).graph.initializer[0]), values)


@pytest.mark.parametrize("dtype, elem_type", [
    (ml_dtypes.bfloat16, TensorProto.BFLOAT16),
    (ml_dtypes.int4, TensorProto.INT4),
    (np.bool_, TensorProto.BOOL),
    (np.float16, TensorProto.FLOAT16),
    (np.dtype(">f4"), TensorProto.FLOAT),
], ids=["bfloat16", "int4", "bool", "float16", "big-endian"])
def test_in_memory_tensors_of_every_storage_stream_correctly(
        tmp_path: Path, dtype: object, elem_type: int) -> None:
    values = (np.arange(3000) % 7 - 3).astype(dtype)
    graph = graphpass.Graph("g", outputs=["w"], initializers=[Tensor.from_array("w", values,
                                                                              elem_type)])
    model = graphpass.Model(graph, opset_imports={"": 21})
    path = tmp_path / "m.onnx"
    graphpass.save(model, path, external_data=True, size_threshold=0)
    stored = onnx.load(path, load_external_data=False).graph.initializer[0]
    assert stored.data_location == TensorProto.EXTERNAL and stored.data_type == elem_type
    reloaded = numpy_helper.to_array(onnx.load(path).graph.initializer[0])
    np.testing.assert_array_equal(reloaded.astype(np.float32), values.astype(np.float32))


def test_string_tensors_stay_embedded(tmp_path: Path) -> None:
    words = np.array(["graph", "pass"] * 600, dtype=object)
    graph = graphpass.Graph("g", outputs=["s"], initializers=[
        Tensor.from_proto(numpy_helper.from_array(words, "s"))])
    path = tmp_path / "m.onnx"
    graphpass.save(graphpass.Model(graph), path, external_data=True, size_threshold=0)
    stored = onnx.load(path, load_external_data=False).graph.initializer[0]
    assert stored.data_location == TensorProto.DEFAULT
    assert list(numpy_helper.to_array(stored)) == list(words)


def test_file_region_tensor_streams_from_another_file(tmp_path: Path) -> None:
    blob = tmp_path / "checkpoint.bin"
    values = np.arange(5000, dtype=np.float32)
    blob.write_bytes(b"HEADER__" + values.tobytes())
    tensor = Tensor.from_file_region("w", TensorProto.FLOAT, [5000], blob, 8, values.nbytes)
    model = graphpass.Model(graphpass.Graph("g", outputs=["w"], initializers=[tensor]))
    out = tmp_path / "out" / "m.onnx"
    graphpass.save(model, out)
    loaded = onnx.load(out)
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), values)


def test_failed_save_leaves_nothing_behind(tmp_path: Path) -> None:
    path = _save_external(_model(), tmp_path / "a" / "m.onnx")
    model = graphpass.load(path)
    model.graph.set_initializer(Tensor.from_array("extra", np.ones(4096, np.float32)))
    out_dir = tmp_path / "b"
    out_dir.mkdir()
    (out_dir / "m.onnx").write_bytes(b"previous output")
    (path.parent / "weights.bin").write_bytes(b"")  # data vanishes after load
    with pytest.raises(ModelSaveError):
        graphpass.save(model, out_dir / "m.onnx")
    assert _files(out_dir) == ["m.onnx"]
    assert (out_dir / "m.onnx").read_bytes() == b"previous output"


def test_save_into_an_unwritable_place_is_a_save_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ModelSaveError, match="cannot create the folder"):
        graphpass.save(graphpass.Model.from_proto(_model()), blocker / "m.onnx")


def test_save_refuses_a_data_location_outside_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelSaveError, match="plain relative path"):
        graphpass.save(graphpass.Model.from_proto(_model()), tmp_path / "m.onnx",
                       external_data=True, location="../w.bin")
