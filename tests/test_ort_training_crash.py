"""onnxruntime-training crashes in a child process; the lint predicts the pooling crash.

onnxruntime-training 1.19.2's CPU ``MaxPoolGrad`` sizes the gradient of MaxPool's input
from the input's shape as inferred when the training session is built (a named,
dynamic dimension reads as 0) and takes only the batch size from the run, then
scatters into it out of bounds: the first training step of Optimum's ResNet export
(height and width dynamic) segfaults, and so does this file's minimal model, a Conv and
a MaxPool over ``x: [2, 2, 8, "W"]``. ``AveragePoolGrad`` takes the whole shape from
inference, the batch dimension included.

* ``tests/ort_training/pool_crash.py``, the reproducer without graphpass, crashes
  onnxruntime-training (``SIGSEGV``), and trains with the width fixed.
* ``lint-gradients`` refuses a MaxPool whose input needs a gradient and has a dynamic
  dimension past the batch one, and an AveragePool with any dynamic dimension
  (``GP403``); it stays silent on the same ResNet-like model with a dynamic batch only,
  which onnxruntime-training trains (``GP700``: one step, gradient checked against
  finite differences), and on the model with its sizes fixed as the advice says.
* Past the lint (judging a frozen weight that the artifacts then train), the real
  crash happens in the child process ``emit-training-artifacts`` runs it in: the run
  exits 1 with one ``GP704`` error naming ``SIGSEGV``, the stage and the inputs, and
  writes nothing (no artifacts, no output, no scratch folders).
* The advice's other way, graphpass's own trainer, differentiates the dynamic model
  at two image sizes: its gradients agree with finite differences.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from _gradcheck import check_gradients, to_double
from onnx import TensorProto, helper, numpy_helper

from graphpass import PassContext, Severity
from graphpass.framework import default_registry
from graphpass.ir import Model
from graphpass.passes.lint_gradients import LintGradients

Dim = int | str


def _weights(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 0.3
             ) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def minimal(dims: list[Dim], pool: str = "MaxPool") -> onnx.ModelProto:
    """``x -> Conv(w) -> MaxPool 2x2 -> Mul(s)``: the smallest model that segfaults.

    ``s`` (a scalar after the pool) gives the lint a weight of its own to judge when
    ``w`` is frozen for it.
    """
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], name="conv"),
             helper.make_node(pool, ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                              name="pool"),
             helper.make_node("Mul", ["p", "s"], ["y"], name="scale")]
    return _model(nodes, dims, {"w": _weights(rng, (2, 2, 3, 3)),
                                "s": np.array([1.5], np.float32)})


def resnet_like(dims: list[Dim]) -> onnx.ModelProto:
    """A ResNet-shaped model: Conv, BatchNorm, Relu, MaxPool 3x3 with pads, a residual
    block, GlobalAveragePool, Flatten and Gemm (the ops of the zoo's ResNet)."""
    rng = np.random.default_rng(1)
    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c0", "g0", "b0", "m0", "v0"], ["n0"]),
        helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], name="pool"),
        helper.make_node("Conv", ["p0", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g1", "b1", "m1", "v1"], ["n1"]),
        helper.make_node("Add", ["n1", "p0"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1),
    ]
    weights = {"w0": _weights(rng, (c, 3, 3, 3)), "w1": _weights(rng, (c, c, 3, 3)),
               "fc": _weights(rng, (5, c)), "fb": np.zeros(5, np.float32)}
    for i in (0, 1):
        weights.update({f"g{i}": np.ones(c, np.float32), f"b{i}": np.zeros(c, np.float32),
                        f"m{i}": np.zeros(c, np.float32), f"v{i}": np.ones(c, np.float32)})
    return _model(nodes, dims, weights)


def _model(nodes: list[onnx.NodeProto], dims: list[Dim],
           weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "pool-crash", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(value, name) for name, value in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    onnx.checker.check_model(model, full_check=True)
    return model


def _lint(proto: onnx.ModelProto, **options: object) -> list[tuple[str, str | None]]:
    model = Model.from_proto(proto)
    result = LintGradients(options).run(model, PassContext(registry=default_registry()))
    return [(f.code, f.node) for f in result.findings if f.severity is Severity.ERROR]


# ----------------------------------------------------------------- the lint, no ORT
@pytest.mark.parametrize("dims", [[2, 2, 8, "W"], ["N", "C", "H", "W"], [2, 2, "H", 8]])
def test_a_maxpool_over_dynamic_sizes_is_refused(dims: list[Dim]) -> None:
    assert _lint(minimal(dims)) == [("GP403", "pool")]


def test_the_resnet_like_model_with_dynamic_height_and_width_is_refused() -> None:
    assert _lint(resnet_like(["batch", 3, "height", "width"])) == [("GP403", "pool")]


@pytest.mark.parametrize("dims", [[2, 3, 16, 16], ["batch", 3, 16, 16]])
def test_fixed_image_sizes_pass_the_lint(dims: list[Dim]) -> None:
    assert _lint(resnet_like(dims)) == []


def test_a_maxpool_whose_input_needs_no_gradient_passes() -> None:
    # Nothing trainable before the pool: ORT builds no MaxPoolGrad.
    assert _lint(minimal([2, 2, 8, "W"]), frozen=["w"]) == []


@pytest.mark.parametrize(("dims", "refused"), [(["N", 2, 8, 8], True), ([2, 2, 8, "W"], True),
                                               ([2, 2, 8, 8], False)])
def test_an_averagepool_is_refused_over_any_dynamic_size(dims: list[Dim], refused: bool) -> None:
    assert _lint(minimal(dims, "AveragePool")) == ([("GP403", "pool")] if refused else [])


def test_the_refusal_says_why_and_what_to_do() -> None:
    model = Model.from_proto(minimal([2, 2, 8, "W"]))
    context = PassContext(registry=default_registry())
    [finding] = [f for f in LintGradients().run(model, context).findings
                 if f.severity is Severity.ERROR]
    assert "MaxPoolGrad" in finding.message and "segmentation fault" in finding.message
    assert finding.hint is not None
    assert "make_dynamic_shape_fixed" in finding.hint and "graphpass train" in finding.hint


# --------------------------------------------------- the real crash, in the ORT venv
REPRODUCER = Path(__file__).resolve().parent / "ort_training" / "pool_crash.py"


@pytest.mark.ort_training
@pytest.mark.parametrize(("arguments", "code"), [
    ([], -signal.SIGSEGV), (["--width", "8"], 0),
    (["--op", "AveragePool", "--width", "8", "--batch", "N"], None),  # SIGFPE or SIGSEGV
    (["--op", "AveragePool", "--width", "8"], 0)])
def test_onnxruntime_training_itself_crashes_on_the_minimal_model(
        arguments: list[str], code: int | None, ort_training_python: str) -> None:
    # The reproducer without graphpass: the dynamic size is the whole difference.
    done = subprocess.run([ort_training_python, str(REPRODUCER), *arguments],
                          capture_output=True, text=True, timeout=300, check=False)
    got = done.returncode
    assert (got < 0 if code is None else got == code), done.stdout[-2000:] + done.stderr[-2000:]
    assert "first step" in done.stdout
    assert ("loss " in done.stdout) == (got == 0)


def _run(graphpass_process, python: str, folder: Path, proto: onnx.ModelProto, x_shape,
         *options: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    onnx.save(proto, folder / "model.onnx")
    x = np.random.default_rng(2).standard_normal(x_shape).astype(np.float32)
    np.savez(folder / "inputs.npz", x=x)
    done = graphpass_process(
        "run", "model.onnx", "-o", "ready.onnx", "-p", "train-ready",
        "--emit-training-artifacts", "artifacts", "-O", "emit-training-artifacts.inputs=inputs.npz",
        "--format", "json", *[a for o in options for a in ("-O", o)], cwd=folder,
        python=python, timeout=600)
    report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    return done, report


def _errors(report: dict) -> list[dict]:
    return [f for f in report.get("findings", []) if f.get("severity") == "error"]


@pytest.mark.ort_training
def test_a_crash_in_the_first_step_is_one_error_and_writes_nothing(
        tmp_path: Path, ort_training_python: str, graphpass_process) -> None:
    # The lint judges w frozen (else GP403 stops the run first); the artifacts train it.
    done, report = _run(graphpass_process, ort_training_python, tmp_path,
                        minimal([2, 2, 8, "W"]), (2, 2, 8, 8),
                        'lint-gradients.frozen=["w"]',
                        'emit-training-artifacts.trainable=["w", "s"]')
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    [error] = _errors(report)
    assert error["code"] == "GP704", error
    assert error["data"]["signal"] == "SIGSEGV" and error["data"]["stage"] == "stepping"
    assert "crashed (SIGSEGV) in its first training step" in error["message"]
    assert "inputs.npz: x [2, 2, 8, 8]" in error["message"]
    assert "graphpass train" in error["hint"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs.npz", "model.onnx"]


@pytest.mark.ort_training
def test_the_resnet_like_model_with_a_dynamic_batch_trains(
        tmp_path: Path, ort_training_python: str, graphpass_process) -> None:
    done, report = _run(graphpass_process, ort_training_python, tmp_path,
                        resnet_like(["batch", 3, 16, 16]), (2, 3, 16, 16))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wrote] = [f for f in report["findings"] if f["code"] == "GP700"]
    assert wrote["data"]["gradient_check"]["relative_error"] < 0.05


@pytest.mark.ort_training
def test_the_advice_fixed_sizes_make_the_refused_model_train(
        tmp_path: Path, ort_training_python: str, graphpass_process) -> None:
    dynamic = tmp_path / "dynamic.onnx"
    onnx.save(resnet_like(["batch", 3, "height", "width"]), dynamic)
    fixed = tmp_path / "model.onnx"
    for name, source in (("height", dynamic), ("width", fixed)):
        subprocess.run([ort_training_python, "-m", "onnxruntime.tools.make_dynamic_shape_fixed",
                        "--dim_param", name, "--dim_value", "16", str(source), str(fixed)],
                       check=True, capture_output=True, timeout=300)
    done, report = _run(graphpass_process, ort_training_python, tmp_path,
                        onnx.load(fixed), (2, 3, 16, 16))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert [f["code"] for f in _errors(report)] == []
    assert any(f["code"] == "GP700" for f in report["findings"])


# ------------------------------------------------------ the own trainer's gradients
@pytest.mark.parametrize("size", [8, 12])
def test_graphpass_s_own_gradient_of_the_dynamic_model_agrees_with_finite_differences(
        size: int) -> None:
    proto = resnet_like(["batch", 3, "height", "width"])
    weights = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    trained = ["w0", "w1", "fc", "g0", "b1"]
    # The weights become inputs, so that finite differences can move them.
    graph = proto.graph
    for name in trained:
        tensor = weights[name]
        graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, tensor.shape))
    kept = [t for t in graph.initializer if t.name not in trained]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    x = np.random.default_rng(size).standard_normal((2, 3, size, size))
    feeds = {"x": x, **{name: weights[name].astype(np.float64) for name in trained}}
    outcome = check_gradients(to_double(proto), feeds, trained, directions=2)
    assert outcome.failures == [] and outcome.passed >= len(trained)
