"""Trainer.fit, the saved state, schedules and metrics, from Python, on a small MLP.

The oracle of the loop is the trainer's own ``step``: ``fit`` must take exactly the
steps, learning rates and batches a hand-written loop takes, and a state saved and
loaded must continue exactly.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.errors import ModelSaveError
from graphpass.training import (
    Schedule,
    Trainer,
    TrainingError,
    open_batches,
    plot_metrics,
    read_metrics,
)

pytest.importorskip("onnxruntime")


def _mlp(width: int = 8) -> graphpass.Model:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", width])],
        [numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) / 3,
                                 "w")])
    return graphpass.Model.from_proto(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9))


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fit") / "train"
    result = graphpass.PassManager(["inline-functions", "build-training-graph"], options={
        "build-training-graph": {"directory": str(folder), "lr": 0.05}}).run(_mlp())
    assert result.ok, result.findings
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "samples.npz"
    x = np.random.default_rng(1).standard_normal((22, 8), dtype=np.float32)
    np.savez(path, x=x, target=np.tanh(x[:, ::-1]))
    return path


def test_fit_takes_the_steps_a_hand_written_loop_takes(directory: Path, data: Path) -> None:
    batches = open_batches(data, batch_size=4, shuffle=True, seed=2)  # 6 batches, the last 2
    schedule = Schedule(0.05, "cosine", warmup=3, total=12)
    by_hand = Trainer(directory)
    losses = []
    for epoch in range(2):
        for batch in batches.epoch(epoch):
            by_hand.lr = schedule.at(by_hand.steps)
            losses.append(by_hand.step(batch))
    fitted = Trainer(directory)
    records: list[dict[str, object]] = []
    result = fitted.fit(batches, epochs=2, schedule="cosine", warmup=3, callback=records.append)
    assert result.losses == losses and result.steps == 12 and result.epochs == 2
    assert [r["lr"] for r in records] == [pytest.approx(schedule.at(i)) for i in range(12)]
    for name, value in by_hand.carried_arrays().items():
        np.testing.assert_array_equal(value, fitted.carried_arrays()[name])


def test_schedules() -> None:
    warm = Schedule(1.0, "linear", warmup=2, total=6)
    assert [warm.at(t) for t in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    cosine = Schedule(1.0, "cosine", total=4)
    assert cosine.at(0) == 1.0 and cosine.at(2) == pytest.approx(0.5)
    assert all(cosine.at(t) > 0 for t in range(4))
    assert Schedule(0.1).at(1000) == 0.1
    with pytest.raises(TrainingError, match="needs the run's length"):
        Schedule(1.0, "linear")
    with pytest.raises(TrainingError, match="not shorter than the run"):
        Schedule(1.0, "cosine", warmup=5, total=5)


def test_carried_arrays_are_live(directory: Path) -> None:
    trainer = Trainer(directory)
    arrays = trainer.carried_arrays()
    assert set(arrays) == {source for source, _ in trainer.manifest["step"]["carry"]}
    arrays["w"][...] = 0.0
    arrays["step"][...] = 7
    assert trainer.steps == 7 and not trainer.weights()["w"].any()


def test_save_and_load_state_continue_exactly(directory: Path, tmp_path: Path) -> None:
    batch = {"x": np.ones((3, 8), np.float32), "target": np.zeros((3, 8), np.float32)}
    trainer = Trainer(directory)
    for _ in range(3):
        trainer.step(batch)
    trainer.lr = 0.02
    snapshot = trainer.save_state(tmp_path / "state", run={"note": "hello"})
    assert sorted(p.name for p in snapshot.iterdir()) == [
        ".graphpass-snapshot", "arrays.safetensors", "trainer.json"]
    expected = [trainer.step(batch) for _ in range(2)]
    again = Trainer(directory)
    saved = again.load_state(tmp_path / "state")
    assert (saved.steps, saved.lr, saved.run, again.steps, again.lr) == (
        3, 0.02, {"note": "hello"}, 3, 0.02)
    assert [again.step(batch) for _ in range(2)] == expected
    assert Trainer(directory).resume(tmp_path / "nothing") is None
    with pytest.raises(TrainingError, match="no trainer state was saved here"):
        Trainer(directory).load_state(tmp_path / "nothing")


def test_a_state_of_another_model_is_refused(directory: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    result = graphpass.PassManager(["inline-functions", "build-training-graph"], options={
        "build-training-graph": {"directory": str(other)}}).run(_mlp(width=4))
    assert result.ok
    Trainer(other).save_state(tmp_path / "state")
    trainer = Trainer(directory)
    with pytest.raises(TrainingError, match=r"does not fit this model.*another shape"):
        trainer.load_state(tmp_path / "state")
    assert trainer.steps == 0


def test_a_folder_with_other_files_is_not_written(directory: Path, tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ModelSaveError, match="holds other files"):
        Trainer(directory).save_state(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_accumulate_passes_groups_of_batches_to_step(directory: Path, data: Path) -> None:
    batches = open_batches(data, batch_size=4)
    result = Trainer(directory).fit(batches, epochs=1, accumulate=4)
    assert result.steps == 2  # 6 batches: a step of 4, then the 2 left


def test_metrics_log_drops_the_steps_after_the_resumed_state(directory: Path, data: Path,
                                                             tmp_path: Path) -> None:
    batches = open_batches(data, batch_size=4)
    log, state = tmp_path / "metrics.jsonl", tmp_path / "state"
    first = Trainer(directory)
    first.fit(batches, steps=9, eval_batches=batches, eval_every=4, log=log, state_dir=state,
              save_every=4, callback=lambda r: r["step"] < 6)  # stops at 6, saves it
    with open(log, "a") as handle:
        handle.write('{"step": 7, "loss"')  # a torn line, as a kill leaves
    Trainer(directory).fit(batches, steps=9, eval_batches=batches, eval_every=4, log=log,
                           state_dir=state, save_every=4, resume=True)
    records = read_metrics(log)
    assert [r["step"] for r in records if not r.get("eval")] == list(range(1, 10))
    assert [r["step"] for r in records if r.get("eval")] == [4, 6, 8, 9]  # 6: the end of epoch 1
    assert all(math.isfinite(r["loss"]) for r in records)
    picture = plot_metrics(log, tmp_path / "loss.png")
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_plotting_without_matplotlib_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(TrainingError, match="needs matplotlib") as caught:
        plot_metrics([{"step": 1, "loss": 1.0}], tmp_path / "loss.png")
    assert caught.value.hint == "pip install 'graphpass[plot]'"


def test_fit_arguments_are_checked(directory: Path, data: Path) -> None:
    trainer = Trainer(directory)
    batches = open_batches(data, batch_size=4)
    with pytest.raises(TrainingError, match="either epochs or steps"):
        trainer.fit(batches)
    with pytest.raises(TrainingError, match="not both"):
        trainer.fit(batches, epochs=1, steps=2)
    with pytest.raises(TrainingError, match="needs a state folder"):
        trainer.fit(batches, epochs=1, save_every=2)
    result = trainer.fit([{"x": np.ones((2, 8), np.float32),
                           "target": np.zeros((2, 8), np.float32)}] * 3, epochs=2)
    assert result.steps == 6 and json.dumps(result.losses)
