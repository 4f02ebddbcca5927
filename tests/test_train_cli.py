"""``graphpass train``: build and train a model, or train a directory; reports, exit codes.

In process (the ``cli`` fixture) on the bundled story model whose blocks are local
functions (``examples/stories/functions``), and on small hand-made models.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")
import onnxruntime as ort

Cli = Callable[..., tuple[int, str, str]]
STORY = Path(__file__).resolve().parent.parent / "examples" / "stories" / "functions"
MODEL, BATCH = STORY / "model.onnx", STORY / "batch.npz"


def _leftover_scratch() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("graphpass-train-*")}


def test_train_a_model_prints_the_loss_per_step_and_saves(cli: Cli, tmp_path: Path) -> None:
    before = _leftover_scratch()
    code, out, err = cli("train", MODEL, "--data", BATCH, "--steps", 4, "--lr", 0.01,
                         "--save", tmp_path / "trained.onnx",
                         "--checkpoint-out", tmp_path / "trained.safetensors")
    assert code == 0, err
    assert out.startswith("built the training graphs (inline-functions, ")
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in lines] == [f"step {i}/4" for i in range(1, 5)]
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines[:4]]
    assert losses[-1] < losses[0]
    assert "trained 4 steps (adamw, lr 0.01)" in out
    assert f"wrote the model with the trained weights: {tmp_path / 'trained.onnx'}" in out
    assert _leftover_scratch() <= before  # the temporary training graphs are gone
    with np.load(BATCH) as data:
        x = data["x"]
    original = ort.InferenceSession(str(MODEL)).run(None, {"x": x})[0]
    trained = ort.InferenceSession(str(tmp_path / "trained.onnx")).run(None, {"x": x})[0]
    assert not np.allclose(original, trained)
    from safetensors.numpy import load_file

    assert load_file(str(tmp_path / "trained.safetensors"))


def test_json_report_and_a_kept_directory_to_train_again(cli: Cli, tmp_path: Path) -> None:
    train = tmp_path / "train"
    code, out, _ = cli("train", MODEL, "--data", BATCH, "--steps", 3, "--format", "json",
                       "--emit-training-graph", train)
    assert code == 0
    report = json.loads(out)
    assert (report["schema"], report["ok"], report["exit_code"]) == ("graphpass-train/1", True, 0)
    assert report["directory"] == str(train) and len(report["losses"]) == 3
    assert report["build"]["schema"] == "graphpass-report/1"
    assert "build-training-graph" in report["build"]["plan"]
    assert "train-ready" not in report["build"]["plan"] and report["build"]["ok"]
    # the directory starts from its initial weights again: the same losses
    code, out, _ = cli("train", train, "--data", BATCH, "--steps", 3, "--format", "json")
    assert code == 0
    again = json.loads(out)
    assert again["losses"] == report["losses"] and again["build"] is None


def test_options_reach_the_training_graph(cli: Cli, tmp_path: Path) -> None:
    code, out, _ = cli("train", MODEL, "--data", BATCH, "--steps", 2, "--format", "json",
                       "-O", "build-training-graph.optimizer=sgd",
                       "-O", "build-training-graph.lr=0.5", "--emit-training-graph",
                       tmp_path / "train")
    assert code == 0
    report = json.loads(out)
    assert (report["optimizer"], report["lr"]) == ("sgd", 0.5)


def _cumsum_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("CumSum", ["h", "axis"], ["y"], name="running_total")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
         numpy_helper.from_array(np.array(1), "axis")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_a_model_that_cannot_be_differentiated_exits_1(cli: Cli, tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(_cumsum_model(), str(model))
    np.savez(tmp_path / "batch.npz", x=np.ones((2, 4), np.float32),
             target=np.zeros((2, 4), np.float32))
    code, out, _ = cli("train", model, "--data", tmp_path / "batch.npz", "--save",
                       tmp_path / "out.onnx")
    assert code == 1
    assert "running_total" in out and "GP401" in out and "step 1" not in out
    assert not (tmp_path / "out.onnx").exists()


def test_a_loss_that_blows_up_exits_1_and_writes_nothing(cli: Cli, tmp_path: Path) -> None:
    code, out, _ = cli("train", MODEL, "--data", BATCH, "--steps", 30, "--lr", 1e30,
                       "--save", tmp_path / "out.onnx", "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert not report["ok"] and "the loss is" in report["error"]
    assert not np.isfinite(report["losses"][-1]) and len(report["losses"]) < 30
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize(("arguments", "message"), [
    (("--steps", "0"), "--steps must be at least 1"),
    (("--lr", "-1"), "--lr must be a positive number"),
    (("--data", "missing.npz"), "--data missing.npz: no such file"),
])
def test_usage_errors_are_one_message(cli: Cli, arguments: tuple[str, ...], message: str,
                                      monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    given = dict(zip(arguments[::2], arguments[1::2], strict=True))
    code, _out, err = cli("train", MODEL, "--data", given.pop("--data", str(BATCH)),
                          *[item for pair in given.items() for item in pair])
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2


def test_a_directory_with_build_options_or_a_bad_batch(cli: Cli, tmp_path: Path) -> None:
    train = tmp_path / "train"
    assert cli("train", MODEL, "--data", BATCH, "--steps", 1, "--emit-training-graph",
               train)[0] == 0
    code, _, err = cli("train", train, "--data", BATCH, "-O", "build-training-graph.lr=1")
    assert code == 2 and "-O build the training graphs of a model" in err
    np.savez(tmp_path / "wrong.npz", inputs=np.zeros((2, 8), np.float32))
    code, out, err = cli("train", train, "--data", tmp_path / "wrong.npz", "--format", "json")
    assert code == 2 and "the batch has no 'x', 'target'" in err
    assert json.loads(out)["error"]["type"] == "TrainingError"
    (tmp_path / "text.npz").write_text("not numpy")
    code, _, err = cli("train", train, "--data", tmp_path / "text.npz")
    assert code == 2 and "cannot read the batch" in err and "Traceback" not in err
    code, _, err = cli("train", tmp_path, "--data", BATCH)
    assert code == 2 and "not a graphpass training-graph directory" in err


def test_save_writes_no_side_file_named_after_the_training_directory(cli: Cli,
                                                                     tmp_path: Path) -> None:
    """Frozen weights kept in the directory's ``frozen.data`` go into the saved model.

    Before, ``--save`` copied that file beside the output under its own name
    (``frozen.data``, then ``frozen.1.data`` for a second model in the same folder).
    """
    import graphpass

    external = tmp_path / "external" / "model.onnx"
    graphpass.save(graphpass.load(MODEL), external, external_data=True, size_threshold=16)
    out = tmp_path / "out"
    for name in ("first", "second"):
        code, _, err = cli("train", external, "--data", BATCH, "--steps", 2, "--save",
                           out / f"{name}.onnx", "-O", 'build-training-graph.frozen=["inp.*"]')
        assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["first.onnx", "second.onnx"]
    with np.load(BATCH) as data:
        x = data["x"]
    original = ort.InferenceSession(str(MODEL)).run(None, {"x": x})[0]
    for name in ("first", "second"):
        trained = graphpass.load(out / f"{name}.onnx")
        # The frozen weights are the original's; the rest trained.
        assert np.array_equal(trained.graph.initializers["inp.weight"].numpy(),
                              graphpass.load(MODEL).graph.initializers["inp.weight"].numpy())
        result = ort.InferenceSession(str(out / f"{name}.onnx")).run(None, {"x": x})[0]
        assert result.shape == original.shape and not np.allclose(result, original)
