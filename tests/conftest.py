"""Shared fixtures for the graphpass test suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def ort_training_python() -> str:
    """The Python of the onnxruntime-training venv (built by `make ort-venv`), or skip."""
    candidate = os.environ.get("GRAPHPASS_ORT_TRAINING_PYTHON") or str(
        REPO / ".venv-ort-training" / "bin" / "python")
    if not candidate or not Path(candidate).exists():
        pytest.skip("onnxruntime-training venv not available (make ort-venv could not build it)")
    probe = subprocess.run([candidate, "-c", "import onnxruntime.training.artifacts"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"onnxruntime-training does not import: {probe.stderr.strip()[-300:]}")
    return candidate


@pytest.fixture(scope="session")
def python_exe() -> str:
    """The Python running the tests."""
    return sys.executable
