"""docs/tutorial-torch-to-ort-training.md runs as written, in the onnxruntime-training venv."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "tutorial-torch-to-ort-training.md"
RUNNER = ROOT / "tests" / "_docs_runner.py"

pytestmark = [pytest.mark.torch, pytest.mark.ort_training]


def test_the_tutorial_runs_as_written(ort_training_python: str, tmp_path: Path) -> None:
    done = subprocess.run([ort_training_python, str(RUNNER), str(PAGE), str(tmp_path)],
                          capture_output=True, text=True, check=False, timeout=1200)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    assert result["ran"] == 10  # 6 python blocks and 4 commands: every block ran
    # What the page says it leaves behind.
    assert not onnx.load(tmp_path / "tinylm-ready.onnx").functions
    assert {p.name for p in (tmp_path / "artifacts").iterdir()} == {
        "checkpoint", "training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"}
