"""``benchmarks/real_sizes.py`` on its tiny config, so that the real-size tier cannot rot.

The harness runs as ``make bench`` runs it (its command line, each trainer in a process
of its own), on a 1-layer GPT-2 of hidden size 32 (tied embeddings, an attention mask,
logits as the MSE's input): export, ``graphpass run -p train-ready
--emit-training-graph``, 2 steps of graphpass's ``Trainer``, of torch eager and of
onnxruntime-training (left out, and said so, where ``.venv-ort-training`` is missing).
The three trainers' losses must agree (the same initial weights, batch, loss and
AdamW), and the docs section must be written from the record.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "real_sizes.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("real_sizes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_sizes"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("real-sizes")
    real_sizes = _module()
    runners = "graphpass,torch" + (",ort-training" if real_sizes.ort_training_python() else "")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--models", "gpt2-small", "--runners", runners,
         "--steps", "2", "--warmup", "0", "--cache", str(folder / "cache"), "--json",
         str(folder / "record.json"), "--memory-cap-gb", "4", "--matmul-size", "256"],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data: dict[str, Any] = json.loads((folder / "record.json").read_text())
    return data


def test_the_trainers_losses_agree(record: dict[str, Any]) -> None:
    model = record["models"]["gpt2-small"]
    trainers = model["trainers"]
    torch = trainers["torch"]["losses"]
    assert len(torch) == 2 and torch[1] < torch[0]  # it trains
    compared = ["graphpass"] + (["ort-training"] if "ort-training" in trainers else [])
    for runner in compared:
        assert "error" not in trainers[runner], trainers[runner]
        losses = trainers[runner]["losses"]
        assert len(losses) == 2
        assert losses == pytest.approx(torch, rel=1e-5), runner
        assert trainers[runner]["loss_rel_diff"] < 1e-5
        assert trainers[runner]["step_s"] > 0 and trainers[runner]["peak_mb"] >= 0
    built = model["builds"]["graphpass"]
    assert built["directory_bytes"] > model["export"]["weight_bytes"] > 0
    flops = model["export"]["forward_flops"]
    assert flops.get("mm", 0) + flops.get("addmm", 0) + flops.get("bmm", 0) > 0
    for rate in record["machine"]["matmul_gflops"].values():
        assert rate > 0


def test_the_docs_section_is_made_from_the_record(record: dict[str, Any]) -> None:
    lines = _module().docs_lines(record)
    assert lines[0] == "## Real sizes"
    row = next(line for line in lines if line.startswith("| GPT-2 (tiny) (2 x 8) |"))
    assert row.count("|") == 13
    assert "fails" not in row
