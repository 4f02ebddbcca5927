"""emit-training-artifacts past protobuf's 2 GB, on a small model (the same path).

Past 2 GB of weights the plugin hands ``generate_artifacts`` a path to the model with
its weights in external data, and onnxruntime-training 1.19.2's onnxblock then saves
the model being built to ``temp.onnx`` + ``temp.onnx.data`` at every block, the model
in memory pointing at ``temp.onnx.data`` afterwards. Its MSE (and L1) loss makes a
throwaway ``InputLike`` block for the target, and a block that goes away removes both
files: the next block's check then fails (``Data of TensorProto ... should be stored
in .../temp.onnx.data, but it is not regular file``), which stopped a 1B-parameter
Llama with ``GP701``. The child keeps the files while it builds.

A model over 2 GB is too big for a test; ``emit-training-artifacts.external_data_bytes=0``
takes that path for a small one. On it the artifacts are built, loaded, trained one
step and checked against finite differences (``GP700``), give the same loss and the
same weights as the in-memory path, and then train three steps in the runtime.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphpass.plugins.ort_training import EXTERNAL_DATA_BYTES, EmitTrainingArtifacts

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "ort_training" / "train_artifacts.py"
WIDTH, HIDDEN = 16, 32  # weights of 2 KiB: past onnx's 1 KiB threshold for external data
PICKS = 128  # the constant indices of the last Gather: 1 KiB of int64, external too


def mlp() -> onnx.ModelProto:
    """``x -> MatMul(w1) + b1 -> Relu -> MatMul(w2) + b2 -> Gather(picks)``.

    The weights and the constant ``picks`` (no weight: int64) are large enough to go
    into external data.
    """
    rng = np.random.default_rng(0)
    weights = {"w1": (0.3 * rng.standard_normal((WIDTH, HIDDEN))).astype(np.float32),
               "b1": (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32),
               "w2": (0.3 * rng.standard_normal((HIDDEN, WIDTH))).astype(np.float32),
               "b2": (0.1 * rng.standard_normal(WIDTH)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
             helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
             helper.make_node("MatMul", ["h2", "w2"], ["y0"], name="fc2"),
             helper.make_node("Add", ["y0", "b2"], ["y1"], name="bias2"),
             helper.make_node("Gather", ["y1", "picks"], ["y"], axis=1, name="pick")]
    picks = numpy_helper.from_array(np.arange(PICKS, dtype=np.int64) % WIDTH, "picks")
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, PICKS])],
        [*(numpy_helper.from_array(value, name) for name, value in weights.items()), picks])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _emit(graphpass_process, python: str, folder: Path, *options: str) -> dict:
    done = graphpass_process(
        "run", "model.onnx", "-o", "ready.onnx", "-p", "train-ready",
        "--emit-training-artifacts", "artifacts", "-O", "emit-training-artifacts.inputs=inputs.npz",
        "--format", "json", *[a for o in options for a in ("-O", o)], cwd=folder,
        python=python, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    [wrote] = [f for f in report["findings"] if f["code"] == "GP700"]
    return wrote


def _folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    # the model's weights in external data, as a large export comes
    onnx.save(mlp(), folder / "model.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, WIDTH)).astype(np.float32)
    target = rng.standard_normal((4, PICKS)).astype(np.float32)
    np.savez(folder / "inputs.npz", x=x, target=target)
    np.savez(folder / "batch.npz", x=x, target=target)
    return folder


def _train(python: str, folder: Path) -> list[float]:
    trained = subprocess.run([python, str(TRAIN), str(folder / "artifacts"),
                              str(folder / "batch.npz"), "--steps", "3"],
                             capture_output=True, text=True, check=False, timeout=600)
    result = json.loads(trained.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    return [float(x) for x in result["losses"]]


def test_the_default_threshold_is_under_protobuf_s_limit() -> None:
    assert 0 < EXTERNAL_DATA_BYTES < 2**31
    with pytest.raises(ValueError, match="external_data_bytes"):
        EmitTrainingArtifacts.Options(directory="art", external_data_bytes=-1)


@pytest.mark.ort_training
def test_the_external_data_path_builds_checks_and_trains(tmp_path: Path,
                                                         ort_training_python: str,
                                                         graphpass_process) -> None:
    large = _folder(tmp_path, "large")
    small = _folder(tmp_path, "small")
    by_path = _emit(graphpass_process, ort_training_python, large,
                    "emit-training-artifacts.external_data_bytes=0")
    in_memory = _emit(graphpass_process, ort_training_python, small)

    # one real step ran on the external-data artifacts and its gradient was checked
    check = by_path["data"]["gradient_check"]
    assert check["relative_error"] is not None and check["relative_error"] < 0.05, check
    assert sorted(by_path["data"]["trainable"]) == ["b1", "b2", "w1", "w2"]
    # the same model by either path: the same first loss and gradient
    assert by_path["data"]["loss"] == pytest.approx(in_memory["data"]["loss"], rel=1e-6)
    assert check["analytic"] == pytest.approx(in_memory["data"]["gradient_check"]["analytic"],
                                              rel=1e-5)
    # onnxblock's temp.onnx(.data) and the job folder are gone; only the artifacts stay
    assert not list(large.rglob("temp.onnx*"))
    assert sorted(p.name for p in large.iterdir()) == [
        "artifacts", "batch.npz", "inputs.npz", "model.onnx", "model.onnx.data", "ready.onnx"]
    assert {"checkpoint", "training_model.onnx", "eval_model.onnx",
            "optimizer_model.onnx"} <= {p.name for p in (large / "artifacts").iterdir()}

    # the constant stays in the training model, embedded: no data file to point at
    training = onnx.load(large / "artifacts" / "training_model.onnx", load_external_data=False)
    constants = {t.name: t for t in training.graph.initializer}
    assert "picks" in constants and not constants["picks"].external_data
    assert not [t.name for t in training.graph.initializer if t.external_data]

    losses = _train(ort_training_python, large)
    assert losses[0] == pytest.approx(by_path["data"]["loss"], rel=1e-5)
    assert losses[0] > losses[1] > losses[2]
    assert losses == pytest.approx(_train(ort_training_python, small), rel=1e-5)


def test_a_check_that_does_not_fit_memory_is_skipped_with_its_reason() -> None:
    from graphpass.plugins._training_check import _memory_short

    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc/meminfo: the check always runs")
    assert _memory_short(0) is None  # 1 GiB spare: this machine has that
    reason = _memory_short(1 << 50)  # a PiB of weights
    assert reason is not None
    assert "needs about 2621441.0 GiB of memory" in reason
    assert "1048576.0 GiB of trained weights" in reason and "GiB available" in reason
