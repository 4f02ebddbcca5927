"""Losslessness on real corpora: ONNX's node tests, its shipped models, torch 2.13 exports.

For every model: ``Model.from_proto(p).to_proto() == p`` (protobuf equality), the
model is structurally valid (no false alarms from ``graphpass.validate``), and a
save/load through a file, with and without external data, keeps it. Each test walks
its whole corpus and reports every failure at once.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import onnx
import onnxruntime
import pytest
from _roundtrip_support import assert_same_model, file_round_trips, graphs_of, ir_round_trip

import graphpass
from graphpass.files._validate import find_problems

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


@pytest.fixture(scope="module")
def node_test_models() -> list[tuple[str, onnx.ModelProto]]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        cases = collect_testcases()
    return [(case.name, case.model) for case in cases]


def _has_tensors(proto: onnx.ModelProto) -> bool:
    return any(len(graph.initializer) for graph in graphs_of(proto))


def test_every_onnx_node_test_model_round_trips(
        node_test_models: list[tuple[str, onnx.ModelProto]]) -> None:
    assert len(node_test_models) > 1500
    failures = []
    for name, proto in node_test_models:
        try:
            model = graphpass.Model.from_proto(proto)
            if model.to_proto() != proto:
                failures.append(f"{name}: to_proto() differs")
            problems = find_problems(model)
            if problems:
                failures.append(f"{name}: validate: {problems[0]}")
        except Exception as error:  # collect, report all at once
            failures.append(f"{name}: {type(error).__name__}: {error}")
    assert failures == []


def test_every_onnx_node_test_model_round_trips_through_a_file(
        node_test_models: list[tuple[str, onnx.ModelProto]], tmp_path: Path) -> None:
    failures = []
    for index, (name, proto) in enumerate(node_test_models):
        path = tmp_path / f"{index}.onnx"
        try:
            graphpass.save(graphpass.Model.from_proto(proto), path)
            if onnx.load(path) != proto:
                failures.append(f"{name}: the saved file differs")
            elif graphpass.load(path).to_proto() != proto:
                failures.append(f"{name}: load() differs")
        except Exception as error:
            failures.append(f"{name}: {type(error).__name__}: {error}")
        path.unlink(missing_ok=True)
    assert failures == []


def _model_file_failures(label: str, path: Path, folder: Path, *,
                         save_without_tensors: bool) -> list[str]:
    """The failures of one model file: IR round trip, load, validate, save and load again.

    Saving goes through files embedded and with external data; for a model without
    initializers only if ``save_without_tensors``.
    """
    failures = []
    try:
        proto = onnx.load(path, load_external_data=False)
        if ir_round_trip(proto, path.parent) != proto:
            failures.append(f"{label}: to_proto() differs")
        model = graphpass.load(path)
        if model.to_proto() != proto:
            failures.append(f"{label}: graphpass.load differs")
        problems = find_problems(model)
        if problems:
            failures.append(f"{label}: validate: {problems[0]}")
        if save_without_tensors or _has_tensors(proto):
            file_round_trips(proto, folder, path.parent)
    except Exception as error:
        failures.append(f"{label}: {type(error).__name__}: {error}")
    return failures


def _shipped_models() -> list[Path]:
    return sorted(ONNX_DATA.rglob("*.onnx"))


def test_every_model_shipped_with_onnx_round_trips(tmp_path: Path) -> None:
    paths = _shipped_models()
    assert len(paths) > 100
    failures = []
    for index, path in enumerate(paths):
        failures += _model_file_failures(str(path.relative_to(ONNX_DATA)), path,
                                         tmp_path / str(index), save_without_tensors=False)
    assert failures == []


# ----------------------------------------------------------------- torch exports
@pytest.fixture(scope="module")
def torch_models() -> dict[str, Path]:
    pytest.importorskip("torch")
    from _roundtrip_torch_models import exported_models

    return exported_models()


def test_torch_exports_cover_what_they_should(torch_models: dict[str, Path]) -> None:
    protos = {name: onnx.load(path, load_external_data=False) for name, path in
              torch_models.items()}
    assert protos["legacy_functions"].functions, "export_modules_as_functions made no function"
    assert any(n.op_type == "If" for n in protos["dynamo_cond"].graph.node)
    assert any(n.op_type == "Loop" for n in protos["legacy_scripted_loop"].graph.node)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL
               for t in protos["dynamo_external"].graph.initializer)
    assert protos["legacy_with_metadata"].metadata_props
    assert any(n.metadata_props for n in protos["dynamo"].graph.node)


def test_torch_exports_round_trip(torch_models: dict[str, Path], tmp_path: Path) -> None:
    failures = []
    for name, path in torch_models.items():
        failures += _model_file_failures(name, path, tmp_path / name, save_without_tensors=True)
    assert failures == []


def test_torch_export_still_runs_the_same_after_a_round_trip(
        torch_models: dict[str, Path], tmp_path: Path) -> None:
    import numpy as np

    source = torch_models["dynamo_transformer"]
    out = tmp_path / "out.onnx"
    # The default threshold keeps small tensors embedded: onnxruntime cannot read a
    # shape input (Reshape's, say) from external data.
    graphpass.save(graphpass.load(source), out, external_data=True)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL
               for t in onnx.load(out, load_external_data=False).graph.initializer)
    feeds = {"src": np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)}
    before = onnxruntime.InferenceSession(str(source)).run(None, feeds)
    after = onnxruntime.InferenceSession(str(out)).run(None, feeds)
    assert len(before) == len(after)
    for want, got in zip(before, after, strict=True):
        np.testing.assert_array_equal(got, want)


def test_external_data_copied_to_another_folder_and_kept_in_place(
        torch_models: dict[str, Path], tmp_path: Path) -> None:
    """Saved elsewhere the data file is copied; saved next to it, it is referenced."""
    source_dir = tmp_path / "source"
    shutil.copytree(torch_models["dynamo_external"].parent, source_dir)
    source = source_dir / "model.onnx"
    proto = onnx.load(source, load_external_data=False)
    data_files = sorted(p.name for p in source_dir.iterdir() if p.name != "model.onnx")
    assert data_files, "the export has no external data file"
    model = graphpass.load(source)

    elsewhere = tmp_path / "elsewhere" / "model.onnx"
    graphpass.save(model, elsewhere)
    assert onnx.load(elsewhere, load_external_data=False) == proto
    for name in data_files:
        assert (elsewhere.parent / name).read_bytes() == (source_dir / name).read_bytes()

    before = {p.name: p.stat().st_mtime_ns for p in source_dir.iterdir()}
    beside = source_dir / "copy.onnx"
    graphpass.save(model, beside)
    assert onnx.load(beside, load_external_data=False) == proto
    assert sorted(p.name for p in source_dir.iterdir()) == sorted([*before, "copy.onnx"])
    assert {p.name: p.stat().st_mtime_ns for p in source_dir.iterdir()
            if p.name != "copy.onnx"} == before  # data referenced, not rewritten
    assert_same_model(proto, source_dir, onnx.load(beside, load_external_data=False),
                      source_dir)
    os.remove(beside)
