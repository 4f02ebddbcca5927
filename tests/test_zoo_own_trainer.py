"""Real Hugging Face exports through graphpass's own trainer, against torch (a zoo subset).

Each case is a tiny ``transformers`` model exported one way (``tests/zoo``), made
train-ready with ``graphpass run -p train-ready --emit-training-graph DIR`` in this venv
(stock onnxruntime; onnxruntime-training is never installed here), and judged by
``zoo.own_training.own_judge``: ``gradient.onnx`` and ``step.onnx`` are checked standard
ONNX, ``gradient.onnx`` gives torch's loss and gradients (relative 1e-3), ten AdamW
steps of ``step.onnx`` give ``torch.optim.AdamW``'s weights (1e-4).
``benchmarks/zoo_own_trainer.py`` runs every case.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import zoo
from zoo.judging import rounding_spread
from zoo.own_training import GRADIENT_RTOL, WEIGHT_ATOL, own_judge
from zoo.reference import torch_reference

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SUBSET = {
    # A legacy export with its layers as functions (inlined), a tied head restored.
    ("gpt2", "legacy-functions"): "functions inlined, tied head",
    # Rotary embeddings, RMSNorm, grouped-query attention, transposes restored.
    ("llama", "dynamo"): "decoder",
    # BatchNorm in training mode in a model that declares no intermediate types.
    ("resnet", "legacy-unfolded"): "batch statistics without value_info",
}


@pytest.mark.parametrize(("name", "mode"), list(SUBSET), ids=[f"{n}-{m}" for n, m in SUBSET])
def test_own_trainer_matches_torch(name: str, mode: str, tmp_path: Path) -> None:
    outcome = own_judge(zoo.case(name), mode, tmp_path)
    assert outcome.label == "trains", outcome.reason
    assert outcome.gradients is not None and not outcome.gradients.untrained
    assert outcome.gradient_error is not None and outcome.gradient_error < GRADIENT_RTOL
    assert outcome.weight_error is not None and outcome.weight_error < WEIGHT_ATOL
    assert outcome.losses[-1] < outcome.losses[0]
    directory = tmp_path / mode / "train"
    manifest = json.loads((directory / "manifest.json").read_text())
    gradient = onnx.load(str(directory / "gradient.onnx"), load_external_data=False)
    # The contract: inputs, target, weights, running statistics; outputs loss, then a
    # gradient per weight, then the new running statistics.
    assert [i.name for i in gradient.graph.input] == [
        *manifest["inputs"], "target", *manifest["trainable"], *manifest["buffers"]]
    assert [o.name for o in gradient.graph.output] == [
        "loss", *(f"{w}.grad" for w in manifest["trainable"]),
        *(f"{b}.new" for b in manifest["buffers"])]
    step = onnx.load(str(directory / "step.onnx"), load_external_data=False)
    for model in (gradient, step):
        assert not model.functions
        assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}


def test_a_ready_run_with_a_parameter_left_out_is_wrong(tmp_path: Path) -> None:
    # llama/dynamo trains; told to train the layers only, graphpass still exits 0, and the
    # embedding, the final norm and the head would never move.
    outcome = own_judge(zoo.case("llama"), "dynamo", tmp_path, arguments=(
        "-O", 'build-training-graph.trainable=["model.model.layers.*"]'))
    assert outcome.label == "wrong"
    assert outcome.left_out == ["model.lm_head.weight", "model.model.embed_tokens.weight",
                                "model.model.norm.weight"]
    assert outcome.reason.startswith("exit 0 with 3 torch parameters outside the trainable set")


@pytest.mark.parametrize("arguments", [(), ("-O", "fix-training-ops.broadcast-dims=false")],
                         ids=["reshaped", "as-exported"])
def test_optimum_s_position_embeddings_train_right_in_the_own_trainer(
        arguments: tuple[str, ...], tmp_path: Path) -> None:
    """GP425's other advice: graphpass's own gradient of Optimum's position embeddings is
    right with or without fix-training-ops' Reshape (onnxruntime-training's is 0.88 off
    without it)."""
    if zoo.optimum_python() is None:
        pytest.skip("Optimum venv not available (make optimum-venv could not build it)")
    outcome = own_judge(zoo.case("bert"), "optimum+state_dict", tmp_path, arguments=arguments)
    assert outcome.label == "trains", outcome.reason
    assert outcome.gradients is not None
    assert outcome.gradients.errors["bert.embeddings.position_embeddings.weight"] < GRADIENT_RTOL


def test_float32_noise_in_the_weights_moves_kinked_gradients_and_not_smooth_ones() -> None:
    # The finetuned MobileNetV2 puts a ReLU6 input within float32 rounding of its kink
    # (its one undecided cell); ResNet's gradients hold under the same noise.
    kinked, smooth = zoo.case("mobilenet_v2"), zoo.case("resnet")
    assert rounding_spread(kinked, "finetuned", torch_reference(kinked, "finetuned")) > (
        10 * GRADIENT_RTOL)
    assert rounding_spread(smooth, "export", torch_reference(smooth, "export")) < (
        GRADIENT_RTOL / 10)
