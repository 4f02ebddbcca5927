"""Tied weights saved under the other name: the export keeps one, the checkpoint another."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import graphpass

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.torch


class TiedLM(torch.nn.Module):
    """An embedding and an output head sharing one matrix (GPT-2's wte / lm_head)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.mix = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.embed(ids))))


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TiedLM, np.ndarray]:
    folder = tmp_path_factory.mktemp("tied")
    torch.manual_seed(0)
    model = TiedLM().eval()
    ids = torch.tensor([[1, 2, 3, 9]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (ids,), dynamo=True, optimize=False,
                                    input_names=["ids"], output_names=["logits"])
    program.save(str(folder / "model.onnx"), include_initializers=False)
    return folder, model, ids.numpy()


def _fill(folder: Path, state: dict[str, torch.Tensor]) -> graphpass.RunResult:
    safetensors_torch.save_file({k: v.contiguous() for k, v in state.items()},
                                str(folder / "ckpt.safetensors"))
    return graphpass.PassManager(["reconcile-initializers", "detect-missing-buffers"],
                                 checkpoints=[folder / "ckpt.safetensors"]).run(
        graphpass.load(folder / "model.onnx"))


def test_the_tied_weight_is_filled_from_the_name_the_checkpoint_kept(export) -> None:
    folder, model, ids = export
    # The export kept 'head.weight'; save_pretrained-style checkpoints keep the
    # embedding's name and drop the tied copy.
    state = {k: v for k, v in model.state_dict().items() if k != "head.weight"}
    result = _fill(folder, state)
    assert result.ok, [f.message for f in result.errors]
    [tied] = [f for f in result.findings if f.code == "GP210"]
    assert "head.weight <- embed.weight" in tied.message
    graph = result.model.graph
    assert "embed.weight" not in graph.initializers  # one matrix, still shared
    graphpass.save(result.model, folder / "filled.onnx")
    session = ort.InferenceSession(str(folder / "filled.onnx"))
    (logits,) = session.run(None, {"ids": ids})
    np.testing.assert_allclose(logits, model(torch.from_numpy(ids)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_no_tie_is_guessed_without_a_module_owning_the_key(export) -> None:
    folder, model, _ = export
    state = {k: v for k, v in model.state_dict().items() if k != "head.weight"}
    state["elsewhere.weight"] = state.pop("embed.weight")
    result = _fill(folder, state)
    assert not result.ok
    assert not any(f.code == "GP210" for f in result.findings)
    assert any(f.code == "GP301" and f.value == "head.weight" for f in result.errors)
