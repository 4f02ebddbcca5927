"""The seed case, end to end: a model exported with its blocks as functions trains here.

A torch language model whose transformer blocks are exported with
``export_modules_as_functions`` (calls of model-local functions, which
onnxruntime-training cannot differentiate) is made train-ready with its training
graphs, ``graphpass run -p train-ready --emit-training-graph DIR``, then trained with
``graphpass train DIR``, as a user would type it, on this Python, where
onnxruntime-training is not installed (and never is: it ships its own ``onnxruntime``).
Ten AdamW steps must give torch's losses and torch's weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from _training_models import exported, recipes, torch_loss  # noqa: E402

Process = Callable[..., subprocess.CompletedProcess[str]]
LR = 1e-2
STEPS = 10


def test_onnxruntime_training_is_not_installed_here() -> None:
    probe = subprocess.run([sys.executable, "-c", "import onnxruntime.training"],
                           capture_output=True, text=True, check=False)
    assert probe.returncode != 0, "this venv must not have onnxruntime-training"
    assert "onnxruntime.training" in probe.stderr


def test_a_model_with_functions_trains_end_to_end(graphpass_process: Process,
                                                  tmp_path: Path) -> None:
    model = exported("tinylm-functions")
    assert onnx.load(str(model), load_external_data=False).functions  # the blocks
    recipe = recipes()["tinylm-functions"]
    train = tmp_path / "train"
    done = graphpass_process(
        "run", model, "-o", tmp_path / "ready.onnx", "-p", "train-ready",
        "--emit-training-graph", train, "-O", "build-training-graph.loss=crossentropy",
        "-O", f"build-training-graph.lr={LR}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GP850" in done.stdout
    np.savez(tmp_path / "batch.npz", **recipe.batch(), target=recipe.target())
    done = graphpass_process("train", train, "--data", tmp_path / "batch.npz", "--steps",
                             STEPS, "--format", "json", "--checkpoint-out",
                             tmp_path / "trained.safetensors")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    module = recipe.make()
    optimizer = torch.optim.AdamW(module.parameters(), lr=LR)
    expected = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch_loss(module, recipe)
        loss.backward()
        optimizer.step()
        expected.append(loss.item())
    np.testing.assert_allclose(report["losses"], expected, rtol=1e-4)
    assert report["losses"][-1] < report["losses"][0]

    from safetensors.numpy import load_file

    trained = load_file(str(tmp_path / "trained.safetensors"))
    state = module.state_dict(keep_vars=True)
    assert {id(state[key]) for key in trained} == {id(p) for p in module.parameters()}
    for key, value in trained.items():
        difference = float(np.abs(value - state[key].detach().numpy()).max())
        assert difference < 1e-4, (key, difference)
