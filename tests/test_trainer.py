"""graphpass.training.Trainer: steps as torch's, no copies per step, saving, clear errors.

The oracle is torch: the convolutional net of ``tests/_training_models.py`` (batch norms
in ``train()`` mode, as ``build-training-graph`` trains them by default) takes ten
``torch.optim.AdamW`` steps; the Trainer's weights, running statistics, evaluation and
saved model and checkpoint must agree.
"""

from __future__ import annotations

import json
import shutil
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.training import Trainer, TrainingError

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from _training_models import (  # noqa: E402
    batch_norms_in_train_mode,
    exported,
    recipes,
    torch_loss,
)


def _build(model: graphpass.Model, directory: Path, **options: Any) -> dict[str, Any]:
    result = graphpass.PassManager(["inline-functions", "build-training-graph"], options={
        "build-training-graph": {"directory": str(directory), **options}}).run(model)
    assert result.ok, result.findings
    manifest: dict[str, Any] = json.loads((directory / "manifest.json").read_text())
    return manifest


@pytest.fixture(scope="module")
def convnet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("convnet") / "train"
    _build(graphpass.load(exported("convnet")), directory, lr=1e-2)
    return directory


def _batch(name: str) -> dict[str, np.ndarray]:
    recipe = recipes()[name]
    return {**recipe.batch(), "target": recipe.target()}


def test_ten_steps_equal_torch_adamw_with_batch_statistics(convnet_dir: Path) -> None:
    recipe = recipes()["convnet"]
    trainer = Trainer(convnet_dir)
    assert trainer.lr == 1e-2 and trainer.steps == 0
    module = batch_norms_in_train_mode(recipe.make())
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2)
    for _ in range(10):
        optimizer.zero_grad()
        expected = torch_loss(module, recipe)
        expected.backward()
        optimizer.step()
        loss = trainer.step(_batch("convnet"))
        assert abs(loss - expected.item()) < 1e-5 * max(1.0, abs(expected.item()))
    assert trainer.steps == 10
    state = module.state_dict()
    weights = trainer.weights()
    assert set(weights) == {*trainer.manifest["trainable"], *trainer.manifest["buffers"]}
    assert len(trainer.manifest["buffers"]) == 4  # two batch norms' running mean and var
    for name, value in weights.items():
        assert float(np.abs(value - state[name].numpy()).max()) < 1e-4, name

    # eval: batch norms read the running statistics, as torch's module.eval()
    module.eval()
    with torch.no_grad():
        reference = module(torch.from_numpy(recipe.batch()["x"])).numpy()
    evaluation = trainer.evaluate(_batch("convnet"))
    (output,) = evaluation.outputs.values()
    np.testing.assert_allclose(output, reference, atol=1e-5)
    assert abs(evaluation.loss - float(np.mean((reference - recipe.target()) ** 2))) < 1e-5


def test_accumulated_micro_batches_step_as_torch_accumulates(convnet_dir: Path) -> None:
    """Two micro-batches a step: torch's ``(loss / 2).backward()`` twice, then one step."""
    from torch.nn import functional

    recipe = recipes()["convnet"]
    x, target = recipe.batch()["x"], recipe.target()
    micro = [{"x": x, "target": target}, {"x": x * 1.5, "target": target * 0.5}]
    trainer = Trainer(convnet_dir)
    module = batch_norms_in_train_mode(recipe.make())
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2)
    for _ in range(4):
        optimizer.zero_grad()
        expected = 0.0
        for part in micro:
            loss = functional.mse_loss(module(torch.from_numpy(part["x"])),
                                       torch.from_numpy(part["target"])) / len(micro)
            loss.backward()
            expected += loss.item()
        optimizer.step()
        got = trainer.step(micro)
        assert abs(got - expected) < 1e-5 * max(1.0, abs(expected))
    assert trainer.steps == 4  # one optimizer step per list
    state = module.state_dict()
    for name, value in trainer.weights().items():  # running statistics: once per micro-batch
        assert float(np.abs(value - state[name].numpy()).max()) < 1e-4, name
    assert trainer.held_bytes()["gradients"] == 2 * trainer.held_bytes()["weights"]
    with pytest.raises(TrainingError, match="empty list"):
        trainer.step([])


def test_the_in_place_optimizer_computes_what_step_onnx_computes(tmp_path: Path) -> None:
    """The trainer's numpy update and ``step.onnx`` agree bit for bit (AdamW and SGD)."""
    from graphpass.training import initial_values

    for optimizer, extra in (("adamw", {}), ("sgd", {"momentum": 0.9, "weight_decay": 0.01,
                                                     "nesterov": True})):
        directory = tmp_path / optimizer
        manifest = _build(graphpass.load(exported("mlp")), directory, lr=1e-2,
                          optimizer=optimizer, **extra)
        trainer = Trainer(directory)
        session = ort.InferenceSession(str(directory / "step.onnx"))
        values = initial_values(directory)
        for _ in range(3):
            feeds = {**_batch("mlp"), "lr": np.array(1e-2, np.float32),
                     **{n: values[n] for n in manifest["step"]["inputs"] if n in values}}
            outputs = dict(zip(manifest["step"]["outputs"], session.run(None, feeds),
                               strict=True))
            values = {source: outputs[updated] for source, updated in manifest["step"]["carry"]}
            trainer.step(_batch("mlp"))
        for name, array in trainer.carried_arrays().items():
            assert np.array_equal(array, values[name]), (optimizer, name)


def test_save_writes_the_trained_model_and_a_torch_checkpoint(convnet_dir: Path,
                                                             tmp_path: Path) -> None:
    recipe = recipes()["convnet"]
    trainer = Trainer(convnet_dir)
    for _ in range(3):
        trainer.step(_batch("convnet"))
    x = recipe.batch()["x"]
    expected = trainer.evaluate(_batch("convnet")).outputs
    saved = trainer.save(tmp_path / "out" / "trained.onnx")
    onnx.checker.check_model(str(saved), full_check=True)
    session = ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"])
    (found,) = session.run(None, {"x": x})
    np.testing.assert_allclose(found, next(iter(expected.values())), atol=1e-6)
    original = onnx.load(str(exported("convnet")))
    assert [n.op_type for n in onnx.load(str(saved)).graph.node] == [
        n.op_type for n in original.graph.node]  # the model as it was, weights trained

    from safetensors.torch import load_file

    checkpoint = trainer.save_checkpoint(tmp_path / "trained.safetensors")
    module = recipe.make()
    missing, unexpected = module.load_state_dict(load_file(str(checkpoint)), strict=False)
    assert not unexpected
    assert set(missing) <= {n for n in module.state_dict() if n.endswith("num_batches_tracked")}
    with torch.no_grad():
        np.testing.assert_allclose(module(torch.from_numpy(x)).numpy(), found, atol=1e-5)
    assert not [p for p in tmp_path.rglob(".*")]  # atomic writes leave nothing behind


def test_the_checkpoint_uses_the_keys_reconcile_matched(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    model = graphpass.load(exported("mlp"))
    keys = {name: f"net.{name}" for name in model.graph.initializers}
    rng = np.random.default_rng(0)
    checkpoint = tmp_path / "wrapper.safetensors"
    save_file({keys[name]: rng.standard_normal(t.shape).astype(np.float32)
               for name, t in model.graph.initializers.items()}, str(checkpoint))
    result = graphpass.PassManager(
        ["reconcile-initializers", "build-training-graph"], checkpoints=[checkpoint],
        options={"build-training-graph": {"directory": str(tmp_path / "train")}}).run(model)
    assert result.ok, result.findings
    trainer = Trainer(tmp_path / "train")
    assert trainer.manifest["torch_names"] == keys
    trainer.step(_batch("mlp"))
    written = load_file(str(trainer.save_checkpoint(tmp_path / "out.safetensors")))
    assert sorted(written) == sorted(keys.values())
    weights = trainer.weights()
    for name, key in keys.items():
        np.testing.assert_array_equal(written[key], weights[name])


def _wide_mlp(width: int = 256, layers: int = 3) -> graphpass.Model:
    rng = np.random.default_rng(0)
    nodes, weights, x = [], [], "x"
    for i in range(layers):
        weights.append(numpy_helper.from_array(
            (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Tanh", [f"m{i}"], [f"h{i}"])]
        x = f"h{i}"
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["n", width])], weights)
    return graphpass.Model.from_proto(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9))


def test_the_trainer_holds_one_copy_of_what_a_step_carries(tmp_path: Path) -> None:
    """Weights, gradients and both AdamW moments once each, as torch holds them."""
    manifest = _build(_wide_mlp(), tmp_path / "train")
    from safetensors.numpy import load_file

    weights = load_file(str(tmp_path / "train" / "weights.safetensors"))
    one_copy = sum(weights[w].nbytes for w in manifest["trainable"])
    assert one_copy == 3 * 256 * 256 * 4
    rng = np.random.default_rng(1)
    batch = {"x": rng.standard_normal((8, 256)).astype(np.float32),
             "target": rng.standard_normal((8, 256)).astype(np.float32)}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        trainer = Trainer(tmp_path / "train")
        trainer.step(batch)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            trainer.step(batch)
        grown = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    accounted = trainer.held_bytes()
    assert accounted["weights"] == one_copy
    assert accounted["optimizer_state"] == 2 * one_copy  # exp_avg and exp_avg_sq
    assert accounted["gradients"] == one_copy
    # Everything numpy holds for the trainer (tracemalloc sees numpy's allocations): one
    # copy of the weights, of the gradients and of each moment, the optimizer's scratch
    # blocks, and small things; a second buffer of any weight would be a third more.
    assert 4 * one_copy <= held - accounted["scratch"] < 4 * one_copy + one_copy / 3, held
    assert grown < one_copy / 20, grown  # no step copies a weight
    arrays = trainer.carried_arrays()
    bound = trainer.values
    for name in manifest["trainable"]:  # the session reads the trainer's own arrays
        assert bound[name].data_ptr() == arrays[name].ctypes.data
    trainer.step(batch)
    assert {n: a.ctypes.data for n, a in trainer.carried_arrays().items()} == {
        n: a.ctypes.data for n, a in arrays.items()}


def test_the_learning_rate_can_change_between_steps(tmp_path: Path) -> None:
    recipe = recipes()["mlp"]
    _build(graphpass.load(exported("mlp")), tmp_path / "train", lr=1e-2)
    trainer = Trainer(tmp_path / "train", lr=5e-3)
    module = recipe.make()
    optimizer = torch.optim.AdamW(module.parameters(), lr=5e-3)
    for index in range(6):
        if index == 3:
            trainer.lr = 2e-2
            optimizer.param_groups[0]["lr"] = 2e-2
        optimizer.zero_grad()
        torch_loss(module, recipe).backward()
        optimizer.step()
        trainer.step(_batch("mlp"))
    state = module.state_dict()
    for name, value in trainer.weights().items():
        assert float(np.abs(value - state[name].numpy()).max()) < 1e-5, name
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(TrainingError, match="positive"):
            trainer.lr = bad


# ====================================================================== errors
def test_a_folder_that_is_not_a_training_directory(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="no such folder") as caught:
        Trainer(tmp_path / "nothing")
    assert "emit-training-graph" in (caught.value.hint or "")
    with pytest.raises(TrainingError, match="not a graphpass training-graph directory"):
        Trainer(tmp_path)


def test_an_incomplete_or_old_directory(convnet_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(convnet_dir, broken)
    (broken / "weights.safetensors").unlink()
    with pytest.raises(TrainingError, match=r"has no weights\.safetensors"):
        Trainer(broken)
    old = tmp_path / "old"
    shutil.copytree(convnet_dir, old)
    manifest = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps({**manifest, "version": 1}))
    with pytest.raises(TrainingError, match="format version 1") as caught:
        Trainer(old)
    assert "rebuild" in (caught.value.hint or "")


def test_a_bad_batch_is_named(convnet_dir: Path) -> None:
    trainer = Trainer(convnet_dir)
    batch = _batch("convnet")
    with pytest.raises(TrainingError, match="the batch has no 'target'") as caught:
        trainer.step({"x": batch["x"]})
    assert caught.value.hint == "a step takes x, target"
    with pytest.raises(TrainingError, match="'labels', which the model does not take"):
        trainer.step({**batch, "labels": batch["target"]})
    with pytest.raises(TrainingError, match=r"'x' has shape \[2, 3, 12\]"):
        trainer.step({**batch, "x": batch["x"][..., 0]})
    with pytest.raises(TrainingError, match="'x' holds complex64"):
        trainer.step({**batch, "x": batch["x"].astype(np.complex64)})
    assert trainer.steps == 0  # nothing ran
    trainer.step({**batch, "x": batch["x"].astype(np.float64)})  # converted: same kind
    assert trainer.steps == 1


def test_a_runtime_failure_is_one_message(tmp_path: Path) -> None:
    _build(_wide_mlp(width=4, layers=1), tmp_path / "train")
    trainer = Trainer(tmp_path / "train")
    with pytest.raises(TrainingError, match="onnxruntime could not run the step"):
        trainer.step({"x": np.zeros((5, 4), np.float32),
                      "target": np.zeros((3, 4), np.float32)})


def test_without_onnxruntime_the_error_says_what_to_install(
        convnet_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime fails
    with pytest.raises(TrainingError, match="needs onnxruntime") as caught:
        Trainer(convnet_dir)
    assert "pip install graphpass[runtime]" in (caught.value.hint or "")


def test_session_options_with_only_threads_keep_the_memory_settings(convnet_dir: Path) -> None:
    """A user's ``SessionOptions`` whose only change is the thread count (issue 31, item 8)
    keeps graphpass's memory-critical settings: the session runs in the graph's order
    without onnxruntime's memory pattern (GPT-2 small: 1.17x torch's peak memory with
    the pattern, 0.95x without). The user's object is not changed."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    trainer = Trainer(convnet_dir, session_options=options)
    for session in (trainer._session, _eval_session(trainer)):
        got = session.get_session_options()  # what the session runs with
        assert got.intra_op_num_threads == 1
        assert got.execution_order == ort.ExecutionOrder.PRIORITY_BASED
        assert got.enable_mem_pattern is False
    assert trainer.session_options.enable_mem_pattern is False
    assert options.enable_mem_pattern is True  # the user's object as it was
    assert options.execution_order == ort.ExecutionOrder.DEFAULT
    # the user's other settings are theirs
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    got = Trainer(convnet_dir, session_options=options).session_options
    assert got.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert got.enable_mem_pattern is False
    # memory_settings=False: the options exactly as given
    got = Trainer(convnet_dir, session_options=options, memory_settings=False).session_options
    assert got.enable_mem_pattern is True and got.intra_op_num_threads == 1
    # threads= on graphpass's defaults, or on options of one's own
    for given in (None, options):
        got = Trainer(convnet_dir, session_options=given, threads=2).session_options
        assert got.intra_op_num_threads == 2 and got.enable_mem_pattern is False
    assert options.intra_op_num_threads == 1
    with pytest.raises(TrainingError, match="threads must be a whole number of at least 1"):
        Trainer(convnet_dir, threads=0)


def _eval_session(trainer: Trainer) -> Any:
    trainer.evaluate(_batch("convnet"))
    return trainer._eval_session
