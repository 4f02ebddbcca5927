"""Training data in every form: the same samples give the same batches and the same losses.

A ResNet of the zoo (BatchNorm, a static batch of 2) is trained by ``graphpass train``
for 3 epochs on 200 samples whose target is a fixed linear function of the image's
channel means (something to learn), with 40 held-out samples evaluated at the end of
each epoch (AdamW, a cosine schedule): through a folder of ``.npz`` batches, a stacked ``.npz`` with
``--batch-size``, a ``datasets`` ``save_to_disk`` folder and Parquet files, the losses
of every step and evaluation are the same floats, and the evaluation loss falls.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from graphpass.training import DataError, open_batches

Cli = Callable[..., tuple[int, str, str]]
SAMPLES, HELD_OUT, BATCH = 200, 40, 2


def _samples(count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((count, 3, 32, 32), dtype=np.float32)
    weights = np.random.default_rng(99).standard_normal((3, 5)).astype(np.float32)
    return {"pixel_values": x, "target": ((x.mean(axis=(2, 3)) * 32) @ weights)}


# ============================================================== writing the forms
def write_npz_folder(folder: Path, arrays: dict[str, np.ndarray], batch: int) -> Path:
    folder.mkdir(parents=True)
    count = len(next(iter(arrays.values())))
    for index, start in enumerate(range(0, count, batch)):
        np.savez(folder / f"batch-{index:04d}.npz",
                 **{k: v[start:start + batch] for k, v in arrays.items()})
    return folder


def write_datasets(folder: Path, arrays: dict[str, np.ndarray]) -> Path:
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({k: list(v) for k, v in arrays.items()})
    dataset.save_to_disk(str(folder))
    return folder


def _arrow_table(arrays: dict[str, np.ndarray]) -> object:
    pa = pytest.importorskip("pyarrow")
    columns = {}
    for name, value in arrays.items():
        column = pa.array(value.reshape(-1))
        for size in reversed(value.shape[1:]):
            column = pa.FixedSizeListArray.from_arrays(column, size)
        columns[name] = column
    return pa.table(columns)


def write_parquet(folder: Path, arrays: dict[str, np.ndarray]) -> Path:
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    half = len(arrays["target"]) // 2  # two files, several row groups each
    for part, rows in enumerate((slice(0, half), slice(half, None))):
        pq.write_table(_arrow_table({k: v[rows] for k, v in arrays.items()}),  # type: ignore[arg-type]
                       folder / f"part-{part}.parquet", row_group_size=32)
    return folder


def write_arrow(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    import pyarrow as pa

    table = _arrow_table(arrays)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The same 200 training samples in each form, as ``--data`` arguments."""
    root = tmp_path_factory.mktemp("forms")
    train = _samples(SAMPLES, 0)
    np.savez(root / "stacked.npz", **train)
    return {
        "npz folder": [str(write_npz_folder(root / "batches", train, BATCH))],
        "stacked npz": [str(root / "stacked.npz"), "--batch-size", str(BATCH)],
        "datasets": [str(write_datasets(root / "dataset", train)), "--batch-size", str(BATCH)],
        "parquet": [str(write_parquet(root / "parquet", train)), "--batch-size", str(BATCH)],
    }


def test_every_form_gives_the_same_batches(forms: dict[str, list[str]],
                                           tmp_path: Path) -> None:
    expected = _samples(SAMPLES, 0)
    arrow = write_arrow(tmp_path / "samples.arrow", expected)
    opened = {"arrow": open_batches(arrow, batch_size=BATCH, shuffle=True, seed=3)}
    for name, arguments in forms.items():
        size = BATCH if "--batch-size" in arguments else None
        opened[name] = open_batches(arguments[0], batch_size=size, shuffle=size is not None,
                                    seed=3)
    order = opened["stacked npz"].order(1)
    for name, batches in opened.items():
        assert len(batches) == SAMPLES // BATCH, name
        for index, batch in enumerate(batches.epoch(1)):
            rows = (order[index * BATCH:(index + 1) * BATCH] if batches.shuffle
                    else np.arange(index * BATCH, (index + 1) * BATCH))
            for key, value in expected.items():
                assert batch[key].dtype == value.dtype, (name, key)
                np.testing.assert_array_equal(batch[key], value[rows], err_msg=name)
    # each epoch its own order, the same for the same seed
    assert not np.array_equal(order, opened["stacked npz"].order(2))
    np.testing.assert_array_equal(order, open_batches(forms["stacked npz"][0], batch_size=2,
                                                      shuffle=True, seed=3).order(1))


@pytest.mark.torch
@pytest.mark.slow
def test_three_epochs_in_every_form_give_the_same_falling_losses(
        forms: dict[str, list[str]], tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    import zoo

    exported = zoo.export(zoo.case("resnet"), "dynamo-full-state")
    directory = tmp_path / "train"
    subprocess.run([sys.executable, "-m", "graphpass", "run", str(exported.model), "-o",
                    str(tmp_path / "ready.onnx"), "-p", "train-ready", "--checkpoint",
                    str(exported.checkpoint), "--emit-training-graph", str(directory)],
                   check=True, capture_output=True)
    held_out = tmp_path / "eval.npz"
    np.savez(held_out, **_samples(HELD_OUT, 1))
    reports = {}
    for name, arguments in forms.items():
        done = subprocess.run(
            [sys.executable, "-m", "graphpass", "train", str(directory), "--data", *arguments,
             "--epochs", "3", "--lr", "0.003", "--schedule", "cosine",
             "--eval-data", str(held_out),
             "--batch-size", str(BATCH), "--format", "json"],
            capture_output=True, text=True, check=False)
        assert done.returncode == 0, (name, done.stderr[-2000:])
        reports[name] = json.loads(done.stdout)
    first = reports["stacked npz"]
    assert len(first["losses"]) == 3 * SAMPLES // BATCH
    evaluations = [e["loss"] for e in first["evaluations"]]
    assert [e["epoch"] for e in first["evaluations"]] == [1, 2, 3]
    assert evaluations[0] > evaluations[1] > evaluations[2], evaluations
    for name, report in reports.items():
        assert report["losses"] == first["losses"], name
        assert [e["loss"] for e in report["evaluations"]] == evaluations, name


# ====================================================================== streaming
def test_a_stacked_npz_is_memory_mapped_not_loaded(tmp_path: Path) -> None:
    rows = 2000
    big = np.random.default_rng(0).standard_normal((rows, 4096), dtype=np.float32)  # 32 MB
    np.savez(tmp_path / "big.npz", x=big, target=big[:, :3])
    del big
    tracemalloc.start()
    try:
        batches = open_batches(tmp_path / "big.npz", batch_size=16, shuffle=True)
        for batch in batches.epoch(0):
            assert batch["x"].shape[1:] == (4096,)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, peak  # a few batches' worth, never the 32 MB


def test_parquet_is_read_a_row_group_at_a_time(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    arrays = {"x": np.arange(4000 * 256, dtype=np.float32).reshape(4000, 256),
              "target": np.arange(4000, dtype=np.float32)}
    pq.write_table(_arrow_table(arrays), tmp_path / "rows.parquet",  # type: ignore[arg-type]
                   row_group_size=100)
    batches = open_batches(tmp_path / "rows.parquet", batch_size=50)
    read = [batch["target"] for batch in batches.epoch(0)]
    np.testing.assert_array_equal(np.concatenate(read), arrays["target"])
    source = batches._source
    assert len(source._groups) <= 4


# ========================================================================= errors
def test_a_datasets_folder_without_a_column_asked_for_is_a_clear_error(tmp_path: Path) -> None:
    folder = write_datasets(tmp_path / "ds", {"x": np.zeros((4, 2), np.float32)})
    with pytest.raises(DataError, match=r"the dataset has no column 'target' \(it has x\)") \
            as caught:
        open_batches(folder, batch_size=2, columns=["x", "target"])
    assert "name the columns" in (caught.value.hint or "") and str(folder) in str(caught.value)


def test_bad_data_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file or folder"):
        open_batches(tmp_path / "nothing.npz")
    np.savez(tmp_path / "a.npz", x=np.zeros((4, 2), np.float32), target=np.zeros(3, np.float32))
    with pytest.raises(DataError, match="the same number of samples"):
        open_batches(tmp_path / "a.npz", batch_size=2)
    with pytest.raises(DataError, match="no array 'y'"):
        open_batches(tmp_path / "a.npz", batch_size=2, columns=["y"])
    arrow = write_arrow(tmp_path / "t.arrow", {"x": np.zeros((4, 2), np.float32)})
    with pytest.raises(DataError, match="holds samples, not batches: give a batch size"):
        open_batches(arrow)
    with pytest.raises(DataError, match=r"no column 'target' \(it has x\)") as caught:
        open_batches(arrow, batch_size=2, columns=["x", "target"])
    assert "name the columns" in (caught.value.hint or "")
    with pytest.raises(DataError, match="mixes forms"):
        open_batches([tmp_path / "a.npz", arrow], batch_size=2)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": pa.array([[1.0, 2.0], [3.0]]), "target": [0.0, 1.0]}),
                   tmp_path / "ragged.parquet")
    with pytest.raises(DataError, match="arrays of different shapes"):
        list(open_batches(tmp_path / "ragged.parquet", batch_size=2).epoch(0))


def test_a_missing_extra_says_what_to_install(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    write_arrow(tmp_path / "t.arrow", {"x": np.zeros((4, 2), np.float32)})
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(DataError, match="needs pyarrow") as caught:
        open_batches(tmp_path / "t.arrow", batch_size=2)
    assert caught.value.hint == "pip install 'graphpass[data]'"
    monkeypatch.setitem(sys.modules, "datasets", None)
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "state.json").write_text("{}")
    with pytest.raises(DataError, match="needs the datasets library") as caught:
        open_batches(tmp_path / "ds", batch_size=2)
    assert caught.value.hint == "pip install 'graphpass[data]'"


def test_a_short_last_batch_on_a_static_export_names_the_input(cli: Cli,
                                                                tmp_path: Path) -> None:
    """41 samples in batches of 2 for a model whose batch dimension the export fixed."""
    pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "static",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                ir_version=9), str(tmp_path / "static.onnx"))
    np.savez(tmp_path / "data.npz", x=np.ones((41, 4), np.float32),
             target=np.zeros((41, 3), np.float32))
    code, _out, err = cli("train", tmp_path / "static.onnx", "--data", tmp_path / "data.npz",
                          "--batch-size", 2)
    assert code == 2 and "Traceback" not in err
    assert ("the last batch of the training data is 1 sample (41 samples in batches of 2), "
            "and the model's input 'x' has dimension 0 fixed at 2") in err
    assert "--drop-last" in err and "dynamic_shapes" in err
    code, out, err = cli("train", tmp_path / "static.onnx", "--data", tmp_path / "data.npz",
                         "--batch-size", 2, "--drop-last", "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)["losses"]) == 20
