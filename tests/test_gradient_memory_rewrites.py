"""The gradient rewrites that keep large temporaries out of the step, against torch.autograd.

A tied embedding (GPT-2's ``wte`` read by a ``Gather`` and, transposed, by the
``lm_head`` ``MatMul``) gets its gradient as one ``ScatterND`` of the embedding's rows
into the ``lm_head``'s product, that product computed as ``dY^T X`` (no product of the
weight's size transposed after); a square's gradient is one product; a ``ReduceMean``
is divided before it is expanded, and a product with that expanded gradient uses it
unexpanded. The gradients stay those of torch.autograd (repeated indices included).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import graphpass

VOCAB, WIDTH = 11, 6
IDS = np.array([[1, 3, 3, 0, 10], [7, 1, 1, 1, 4]], dtype=np.int64)  # repeats: scatter-add


def _tied_model(path: Path, weight: np.ndarray) -> None:
    nodes = [
        helper.make_node("Gather", ["wte", "ids"], ["embedded"], axis=0),
        helper.make_node("Mul", ["embedded", "embedded"], ["squared"]),
        helper.make_node("Transpose", ["wte"], ["wte_t"], perm=[1, 0]),
        helper.make_node("MatMul", ["squared", "wte_t"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, list(IDS.shape))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [*IDS.shape, VOCAB])],
        [numpy_helper.from_array(weight, "wte")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def tied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray]:
    folder = tmp_path_factory.mktemp("tied")
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((VOCAB, WIDTH)).astype(np.float32)
    target = rng.standard_normal((*IDS.shape, VOCAB)).astype(np.float32)
    _tied_model(folder / "model.onnx", weight)
    result = graphpass.PassManager(
        ["build-training-graph"],
        options={"build-training-graph": {"directory": str(folder / "train"), "loss": "mse"}},
    ).run(graphpass.load(folder / "model.onnx"))
    assert not [f for f in result.findings if f.severity.name == "ERROR"]
    return folder / "train", weight, target


def test_tied_embedding_gradient_equals_torch_autograd(
        tied: tuple[Path, np.ndarray, np.ndarray]) -> None:
    directory, weight, target = tied
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["trainable"] == ["wte"]
    session = ort.InferenceSession(str(directory / "gradient.onnx"),
                                   providers=["CPUExecutionProvider"])
    loss, grad = session.run(None, {"ids": IDS, "target": target, "wte": weight})

    w = torch.tensor(weight, dtype=torch.float64, requires_grad=True)
    embedded = w[torch.from_numpy(IDS)]
    logits = (embedded * embedded) @ w.T
    expected = torch.nn.functional.mse_loss(logits, torch.tensor(target, dtype=torch.float64))
    expected.backward()
    assert w.grad is not None
    reference = w.grad.numpy()
    assert abs(float(loss) - expected.item()) <= 1e-6 * abs(expected.item())
    np.testing.assert_allclose(grad, reference, rtol=1e-5,
                               atol=1e-6 * float(np.abs(reference).max()))


def test_tied_embedding_gradient_makes_no_weight_sized_temporaries(
        tied: tuple[Path, np.ndarray, np.ndarray]) -> None:
    directory, _, _ = tied
    graph = onnx.load(str(directory / "gradient.onnx")).graph
    producers = {out: node for node in graph.node for out in node.output}
    final = producers["wte.grad"]
    # One scatter of the embedding's rows, straight into the lm_head's product.
    assert final.op_type == "ScatterND"
    product = producers[final.input[0]]
    assert product.op_type == "MatMul"
    # dY^T X: the product is the weight's shape itself, not transposed after.
    transposed = [producers[name] for name in product.input if name in producers]
    assert all(node.op_type != "MatMul" for node in transposed)
    ops = [node.op_type for node in graph.node]
    assert "ConstantOfShape" not in {producers[n.input[0]].op_type for n in graph.node
                                     if n.op_type == "ScatterND" and n.input[0] in producers}
    assert not any(node.op_type == "Transpose" and node.input[0] in producers
                   and producers[node.input[0]].op_type == "MatMul" for node in graph.node)
    # The mean's gradient is never expanded to the logits' shape.
    assert "Expand" not in ops
    sums = [node for node in graph.node if node.op_type in ("Add", "Sum")]
    weight_sized = {final.input[0], *(n.output[0] for n in graph.node if n.op_type == "ScatterND")}
    assert not [node for node in sums if weight_sized & set(node.input)]  # no third buffer


def test_the_trainers_default_options_turn_the_memory_pattern_off() -> None:
    from graphpass.training import default_session_options

    options = default_session_options()
    assert options.enable_mem_pattern is False
    assert options.execution_order == ort.ExecutionOrder.PRIORITY_BASED
