"""Real Hugging Face architectures trained by graphpass.torch.Module in torch's own loop (a
zoo subset; ``benchmarks/zoo_torch_module.py`` runs every case in ``make zoo``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import zoo
from zoo.torch_module import judge_module

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SUBSET = [("bert", "eval"), ("llama", "eval"), ("resnet", "train")]


@pytest.mark.parametrize(("name", "mode"), SUBSET, ids=[f"{n}-{m}" for n, m in SUBSET])
def test_the_wrapped_module_trains_as_torch(name: str, mode: str) -> None:
    outcome = judge_module(zoo.case(name), mode)
    assert outcome.label == "trains", outcome.reason
    assert outcome.exports == 1
    assert outcome.losses[-1] < outcome.losses[0]
