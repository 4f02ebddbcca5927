"""The bundled example model and the demo: reproducible, valid, and the demo runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx

import graphpass

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_committed_example_is_what_the_script_makes(tmp_path: Path) -> None:
    generated = tmp_path / "tiny_classifier.onnx"
    subprocess.run([sys.executable, str(EXAMPLES / "make_example.py"), str(generated)],
                   check=True, capture_output=True)
    assert generated.read_bytes() == (EXAMPLES / "tiny_classifier.onnx").read_bytes()
    assert generated.stat().st_size < 10_000


def test_example_is_valid_and_round_trips() -> None:
    path = EXAMPLES / "tiny_classifier.onnx"
    onnx.checker.check_model(onnx.load(path), full_check=True)
    model = graphpass.load(path)
    graphpass.validate(model)
    assert model.to_proto() == onnx.load(path)
    assert model.functions and any(g.parent is not None for g in model.graphs())


def test_demo_runs_and_says_the_model_is_unchanged(tmp_path: Path) -> None:
    completed = subprocess.run([sys.executable, str(EXAMPLES / "demo.py"), str(tmp_path)],
                               capture_output=True, text=True, check=False,
                               env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "byte-identical" in completed.stdout
    assert "identical outputs" in completed.stdout
    assert (tmp_path / "tiny_classifier.onnx").read_bytes() == \
        (EXAMPLES / "tiny_classifier.onnx").read_bytes()
    # Every story's title whole (a rule cut the long ones: "graphpass's own tra…"), and
    # each note once.
    assert not [line for line in completed.stdout.splitlines() if "──" in line and "…" in line]
    for line in ("3. The same model trained without onnxruntime-training: graphpass's own "
                 "training graph.",
                 "4. Weights from a checkpoint whose names don't match, and a buffer nobody "
                 "saved."):
        assert line in " ".join(completed.stdout.split()), line
    assert completed.stdout.count("no onnxruntime-training venv") <= 1
