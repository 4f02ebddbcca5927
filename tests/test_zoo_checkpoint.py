"""``graphpass train --checkpoint-out`` loads with ``strict=True`` into the Hugging Face model.

A zoo subset (``benchmarks/zoo_checkpoint.py`` runs all 14 architectures): each case is
trained three steps by ``graphpass train MODEL --checkpoint CK`` and the checkpoint
written is loaded into a fresh Hugging Face model with ``load_state_dict(strict=True)``;
torch's outputs then equal the trained ONNX model's on onnxruntime. The cases cover a
tied head (GPT-2: ``lm_head.weight`` and ``transformer.wte.weight`` both written), BatchNorm
(ResNet: running statistics trained, ``num_batches_tracked`` advanced by the steps) and a
non-persistent buffer the checkpoint has but ``state_dict()`` lacks (Llama's
``inv_freq``, left out); and the ``dynamo-state-dict`` export, whose checkpoint
(``safetensors.torch.save_model``) holds one name per tied tensor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import zoo
from zoo.checkpoint_roundtrip import STEPS, roundtrip

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.mark.parametrize(("name", "mode"), [("gpt2", "dynamo-full-state"),
                                            ("resnet", "dynamo-full-state"),
                                            ("llama", "dynamo-full-state"),
                                            ("gpt2", "dynamo-state-dict")])
def test_the_checkpoint_loads_strictly_and_gives_the_onnx_outputs(name: str, mode: str,
                                                                  tmp_path: Path) -> None:
    outcome = roundtrip(zoo.case(name), tmp_path, mode)
    assert outcome.ok, outcome.reason
    if name == "gpt2":
        assert outcome.aliases == ["transformer.wte.weight"]
    if name == "resnet":
        assert len(outcome.counters) == 6 and set(outcome.counters.values()) == {STEPS}
    assert outcome.output_error is not None and outcome.output_error < 1e-4
