"""The loss of ``gradient.onnx`` and ``eval.onnx`` is exact at millions of values.

onnxruntime's ``float32`` ``ReduceMean`` over a few million values drifts by 1e-4
relative; the training graphs' loss must equal ``float64``'s within 1e-6 for every loss
kind (``mse`` with a block size that divides the output and with a padded one,
``crossentropy`` with ignored labels), while the gradients stay those of
``torch.autograd``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.training._losses import block_size

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

K = 4


def _linear(rows: int | str, classes: int,
            seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``y = x @ w + b`` with ``x`` of shape ``[rows, K]`` (a name: a dynamic axis)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((K, classes)) * 0.7).astype(np.float32)
    b = (rng.standard_normal(classes) * 0.5 + 1.0).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, classes])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), {"w": w, "b": b}


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


CASES = {
    # name: (rows as declared, rows, classes, loss); rows * classes = 3M
    "mse-blocks": (3000, 3000, 1000, "mse"),
    "mse-padded": ("batch", 176471, 17, "mse"),
    "crossentropy": (1000000, 1000000, 3, "crossentropy"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_loss_of_millions_of_values_is_float64s(case: str, tmp_path: Path) -> None:
    declared, rows, classes, loss = CASES[case]
    proto, weights = _linear(declared, classes, seed=1)
    directory = tmp_path / "train"
    result = graphpass.PassManager(["build-training-graph"], options={
        "build-training-graph": {"directory": str(directory), "loss": loss}}).run(
            graphpass.Model.from_proto(proto))
    assert not [f for f in result.findings if f.severity.name == "ERROR"]
    manifest = json.loads((directory / "manifest.json").read_text())
    rng = np.random.default_rng(2)
    x = rng.standard_normal((rows, K)).astype(np.float32)
    if loss == "mse":
        target = np.zeros((rows, classes), np.float32)
    else:
        target = rng.integers(0, classes, rows).astype(np.int64)
        target[::5] = -100

    wt = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
          for k, v in weights.items()}
    y64 = torch.tensor(x, dtype=torch.float64) @ wt["w"] + wt["b"]
    if loss == "mse":
        reference_loss = torch.nn.functional.mse_loss(
            y64, torch.tensor(target, dtype=torch.float64))
    else:
        reference_loss = torch.nn.functional.cross_entropy(y64, torch.tensor(target))
    reference_loss.backward()
    expected = float(reference_loss.detach())

    feeds = {"x": x, "target": target, **weights}
    gradient_loss, *grads = _session(directory / "gradient.onnx").run(None, feeds)
    eval_loss = _session(directory / "eval.onnx").run(["loss"], feeds)[0]
    for found in (gradient_loss, eval_loss):
        assert found.dtype == np.float32 and found.shape == ()
        assert abs(float(found) - expected) <= 1e-6 * abs(expected), (float(found), expected)
    graph = onnx.load(str(directory / "gradient.onnx")).graph
    producers = {name: node.op_type for node in graph.node for name in node.output}
    to_double = [producers.get(node.input[0]) for node in graph.node
                 if node.op_type == "Cast" and node.attribute[0].i == TensorProto.DOUBLE]
    if loss == "mse":  # float64 reads block sums and the count, never the whole output
        assert to_double and set(to_double) <= {"ReduceSumSquare", "Size"}, to_double
    else:  # one value per row
        assert to_double and set(to_double) <= {"Squeeze", "Not"}, to_double
    if loss == "mse":  # the oracle is sharp: onnxruntime's float32 ReduceMean is far off
        plain = _float32_mean(np.square(x @ weights["w"] + weights["b"]))
        assert abs(plain - expected) > 1e-5 * expected, (plain, expected)
    for name, grad in zip(manifest["trainable"], grads, strict=True):
        reference = wt[name].grad.numpy()  # float64 autograd; both float32 sums within 1e-4
        scale = float(np.abs(reference).max())
        np.testing.assert_allclose(grad, reference, rtol=0, atol=1e-4 * scale, err_msg=name)


def _float32_mean(values: np.ndarray) -> float:
    """onnxruntime's ``ReduceMean`` of ``values`` in ``float32`` (what the loss was)."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["v"], ["m"], keepdims=0)], "mean",
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, list(values.shape))],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return float(session.run(None, {"v": values.astype(np.float32)})[0])


def test_block_sizes_divide_the_static_trailing_dimensions() -> None:
    assert block_size([4, 64, 50257]) == 3712  # 128 x 29: no padding of GPT-2's logits
    assert block_size(["batch", 64, 50257]) == 3466  # 2 x 1733
    assert block_size(["batch", 768]) == 768
    assert block_size([8, 2]) == 16  # the whole (small) value
    assert block_size(["batch", 17]) is None  # padded
    assert block_size(None) is None
