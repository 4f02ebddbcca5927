"""The training-graph directory: contract, atomic writes, shared external data, the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.errors import ModelSaveError
from graphpass.training import _directory as directory_module

ort = pytest.importorskip("onnxruntime")


def _model(frozen_size: int = 4) -> onnx.ModelProto:
    """y = tanh(x @ w + b) * f, with w and b trainable and f a frozen buffer."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Add", ["h", "b"], ["z"]),
         helper.make_node("Tanh", ["z"], ["t"]),
         helper.make_node("ReduceSum", ["f"], ["fs"], keepdims=1),
         helper.make_node("Mul", ["t", "fs"], ["y"])],
        "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2) / 10, "w"),
         numpy_helper.from_array(np.array([0.1, -0.2], np.float32), "b"),
         numpy_helper.from_array(np.full(frozen_size, 0.25, np.float32), "f")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _run(model: graphpass.Model, directory: Path, **options: object) -> graphpass.RunResult:
    return graphpass.PassManager(["build-training-graph"], options={
        "build-training-graph": {"directory": str(directory), "frozen": ["f"], **options}},
        stop_on_error=False).run(model)


def _io(path: Path) -> tuple[list[str], list[str]]:
    proto = onnx.load(str(path), load_external_data=False)
    return [i.name for i in proto.graph.input], [o.name for o in proto.graph.output]


def test_directory_follows_the_contract(tmp_path: Path) -> None:
    result = _run(graphpass.Model.from_proto(_model()), tmp_path / "train")
    assert [f.code for f in result.findings] == ["GP850"]
    train = tmp_path / "train"
    assert sorted(p.name for p in train.iterdir()) == [
        "buffers.safetensors", "eval.onnx", "gradient.onnx", "manifest.json", "model.onnx",
        "step.onnx", "weights.safetensors"]
    assert _io(train / "gradient.onnx") == (["x", "target", "w", "b"],
                                            ["loss", "w.grad", "b.grad"])
    assert _io(train / "step.onnx") == (
        ["x", "target", "w", "b", "w.exp_avg", "b.exp_avg", "w.exp_avg_sq", "b.exp_avg_sq",
         "step", "lr"],
        ["loss", "w.new", "b.new", "w.exp_avg.new", "b.exp_avg.new", "w.exp_avg_sq.new",
         "b.exp_avg_sq.new", "step.new"])
    assert _io(train / "eval.onnx") == (["x", "target", "w", "b"], ["loss", "y"])
    proto = onnx.load(str(train / "gradient.onnx"))
    assert [t.name for t in proto.graph.initializer] == ["f"]  # frozen stays inside
    manifest = json.loads((train / "manifest.json").read_text())
    assert manifest["trainable"] == ["w", "b"] and manifest["frozen"] == ["f"]
    assert manifest["step"]["carry"][-1] == ["step", "step.new"]
    from safetensors.numpy import load_file

    assert sorted(load_file(str(train / "weights.safetensors"))) == ["b", "w"]
    state = directory_module.initial_values(train)
    assert state["step"].shape == () and int(state["step"]) == 0
    assert not np.any(state["w.exp_avg_sq"]) and state["w.exp_avg_sq"].shape == (3, 2)
    assert np.array_equal(state["w"], np.arange(6, dtype=np.float32).reshape(3, 2) / 10)


def test_the_forward_model_keeps_its_trainable_weights_in_the_safetensors_file(
        tmp_path: Path) -> None:
    _run(graphpass.Model.from_proto(_model()), tmp_path / "train")
    train = tmp_path / "train"
    proto = onnx.load(str(train / "model.onnx"), load_external_data=False)
    locations = {t.name: {e.key: e.value for e in t.external_data}.get("location")
                 for t in proto.graph.initializer}
    assert locations == {"w": "weights.safetensors", "b": "weights.safetensors", "f": None}
    assert [n.op_type for n in proto.graph.node] == [n.op_type for n in _model().graph.node]
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    expected = ort.InferenceSession(_model().SerializeToString()).run(None, {"x": x})[0]
    found = ort.InferenceSession(str(train / "model.onnx")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(found, expected)


def test_the_eval_graph_computes_the_models_outputs(tmp_path: Path) -> None:
    _run(graphpass.Model.from_proto(_model()), tmp_path / "train")
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    original = ort.InferenceSession(_model().SerializeToString()).run(None, {"x": x})[0]
    from safetensors.numpy import load_file

    weights = load_file(str(tmp_path / "train" / "weights.safetensors"))
    session = ort.InferenceSession(str(tmp_path / "train" / "eval.onnx"))
    loss, y = session.run(None, {"x": x, "target": np.zeros_like(original), **weights})
    np.testing.assert_allclose(y, original, rtol=1e-6)
    np.testing.assert_allclose(loss, np.mean(original**2), rtol=1e-5)


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".graphpass-" in p.name)


def _failing_check(monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    original: Callable[..., None] = directory_module._checked

    def check(path: Path, allowed: set[str]) -> None:
        if path.name == failing:
            raise ModelSaveError(f"{path.name} fails the ONNX checker: simulated")
        original(path, allowed)

    monkeypatch.setattr(directory_module, "_checked", check)


def test_a_failed_write_leaves_no_directory(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _failing_check(monkeypatch, "eval.onnx")  # after every file was written
    result = _run(graphpass.Model.from_proto(_model()), tmp_path / "train")
    assert [f.code for f in result.findings] == ["GP855"]
    assert not (tmp_path / "train").exists()
    assert _leftovers(tmp_path) == []


def test_an_earlier_directory_is_replaced_only_when_the_new_one_is_complete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    train = tmp_path / "train"
    _run(graphpass.Model.from_proto(_model()), train, optimizer="sgd")
    before = {p.name: p.read_bytes() for p in train.iterdir()}
    with monkeypatch.context() as patch:
        _failing_check(patch, "step.onnx")
        result = _run(graphpass.Model.from_proto(_model()), train)
    assert [f.code for f in result.findings] == ["GP855"]
    assert {p.name: p.read_bytes() for p in train.iterdir()} == before
    assert _leftovers(tmp_path) == []
    _run(graphpass.Model.from_proto(_model()), train)  # adamw this time
    assert json.loads((train / "manifest.json").read_text())["optimizer"]["kind"] == "adamw"
    assert _leftovers(tmp_path) == []


def test_a_folder_that_is_not_a_training_directory_is_never_touched(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    result = _run(graphpass.Model.from_proto(_model()), folder)
    assert [f.code for f in result.findings] == ["GP855"]
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_large_frozen_weights_are_written_once_and_shared(tmp_path: Path) -> None:
    source = tmp_path / "model.onnx"
    graphpass.save(graphpass.Model.from_proto(_model(frozen_size=50_000)), source,
                   external_data=True)
    _run(graphpass.load(source), tmp_path / "train")
    train = tmp_path / "train"
    data = [p.name for p in train.iterdir() if p.name.endswith(".data")]
    assert len(data) == 1  # frozen.data, or the source's data file copied whole
    assert (train / data[0]).stat().st_size >= 200_000
    for file in ("gradient.onnx", "step.onnx", "eval.onnx", "model.onnx"):
        proto = onnx.load(str(train / file), load_external_data=False)
        (frozen,) = [t for t in proto.graph.initializer if t.name == "f"]
        location = {e.key: e.value for e in frozen.external_data}["location"]
        assert location == data[0], file
        onnx.checker.check_model(str(train / file), full_check=True)
    session = ort.InferenceSession(str(train / "gradient.onnx"))
    from safetensors.numpy import load_file

    x = np.ones((2, 3), np.float32)
    loss, *_ = session.run(None, {"x": x, "target": np.zeros((2, 2), np.float32),
                                  **load_file(str(train / "weights.safetensors"))})
    assert np.isfinite(loss)


def test_cli_writes_the_directory_and_names_what_it_cannot_differentiate(
        tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    source = tmp_path / "model.onnx"
    onnx.save(_model(), str(source))
    code, out, _ = cli("run", source, "-o", tmp_path / "ready.onnx", "-p", "train-ready",
                       "--emit-training-graph", tmp_path / "train")
    assert code == 0, out
    assert (tmp_path / "train" / "step.onnx").exists()
    assert "GP850" in out

    broken = _model()
    broken.graph.node[2].op_type = "Hardmax"  # no builder: on the path of w and b
    broken.graph.node[2].name = "the_hardmax"
    onnx.save(broken, str(source))
    code, out, _ = cli("run", source, "-o", tmp_path / "ready2.onnx", "-p", "train-ready",
                       "--emit-training-graph", tmp_path / "train2")
    assert code == 1
    assert "the_hardmax" in out and "GP401" in out  # lint-gradients, graphpass rules
    assert not (tmp_path / "train2").exists()


def test_a_model_that_computes_its_loss_trains_with_loss_none(tmp_path: Path) -> None:
    proto = _model()
    proto.graph.node.append(helper.make_node("ReduceMean", ["y"], ["loss"], keepdims=0))
    del proto.graph.output[:]
    proto.graph.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    result = _run(graphpass.Model.from_proto(proto), tmp_path / "train", loss="none",
                  **{"loss-inputs": ["loss"]})
    assert [f.code for f in result.findings] == ["GP850"]
    assert _io(tmp_path / "train" / "gradient.onnx") == (["x", "w", "b"],
                                                         ["loss", "w.grad", "b.grad"])
    from safetensors.numpy import load_file

    x = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "train" / "gradient.onnx"))
    loss, w_grad, _ = session.run(None, {"x": x, **load_file(
        str(tmp_path / "train" / "weights.safetensors"))})
    expected = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    h = x @ (np.arange(6, dtype=np.float32).reshape(3, 2) / 10) + np.array([0.1, -0.2])
    dz = (1 - np.tanh(h) ** 2) * 1.0 / h.size  # d mean(tanh(z) * sum(f)) / dz, sum(f) = 1
    np.testing.assert_allclose(w_grad, x.T @ dz, rtol=1e-5, atol=1e-7)
