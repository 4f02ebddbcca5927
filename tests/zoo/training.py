"""Run graphpass and onnxruntime-training on a zoo export (in the onnxruntime-training venv).

:func:`train_ready` runs ``graphpass run MODEL -p train-ready [--checkpoint CK]
--emit-training-artifacts DIR`` and then trains the artifacts for a few AdamW steps,
both in one process of ``.venv-ort-training`` (``ort_runner.py``); it returns what
graphpass reported and what onnxruntime-training computed.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo.cases import ZooError
from zoo.exporting import Export
from zoo.reference import STEPS

__all__ = ["TrainingRun", "ort_training_python", "train_ready"]

_REPO = Path(__file__).resolve().parents[2]
_RUNNER = Path(__file__).resolve().with_name("ort_runner.py")


def ort_training_python() -> str | None:
    """The onnxruntime-training venv's Python (``$GRAPHPASS_ORT_TRAINING_PYTHON`` or
    ``.venv-ort-training``), or ``None`` where there is none."""
    candidate = os.environ.get("GRAPHPASS_ORT_TRAINING_PYTHON") or str(
        _REPO / ".venv-ort-training" / "bin" / "python")
    return candidate if Path(candidate).exists() else None


@dataclass(frozen=True)
class TrainingRun:
    """What one ``train-ready`` run and the training after it gave.

    Attributes:
        exit_code: graphpass's exit code (``None``: the process died, see ``crash``).
        report: graphpass's JSON report (empty when it printed none).
        output: The model graphpass wrote (may not exist).
        artifacts: The artifacts folder.
        trained: Whether onnxruntime-training ran every step.
        training_error: Why it did not (graphpass said ready, training failed).
        losses: The loss of each step.
        gradients: First-step gradient of every trained tensor, by ONNX name.
        weights: Every trained tensor after the first optimizer step, by ONNX name.
        crash: The end of the process's output when it died.
        seconds: Wall seconds of the whole process, and of graphpass alone.
    """

    exit_code: int | None
    report: dict[str, Any]
    output: Path
    artifacts: Path
    trained: bool = False
    training_error: str | None = None
    losses: list[float] = field(default_factory=list)
    gradients: dict[str, np.ndarray] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    crash: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The report's error findings."""
        return [f for f in self.report.get("findings", []) if f.get("severity") == "error"]


def _symbolic_inputs(model: Path) -> bool:
    """Whether some input of ``model`` has a named (dynamic) dimension."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return any(d.dim_param for value in graph.input
               for d in value.type.tensor_type.shape.dim)


def train_ready(exported: Export, workdir: Path, *, options: tuple[str, ...] = (),
                arguments: tuple[str, ...] = (), steps: int = STEPS,
                timeout: float = 900) -> TrainingRun:
    """``graphpass run -p train-ready --emit-training-artifacts`` on an export, then train.

    Args:
        exported: The export (:func:`zoo.export`).
        workdir: An empty folder for graphpass's output, the artifacts and the results.
        options: ``PASS.OPTION=VALUE`` strings given to graphpass as ``-O``.
        arguments: More arguments for ``graphpass run`` (``--disable-pass NAME``).
        steps: AdamW steps to train when graphpass says ready.
        timeout: Seconds before the process is killed.

    Raises:
        ZooError: there is no onnxruntime-training venv.
    """
    python = ort_training_python()
    if python is None:
        raise ZooError("no onnxruntime-training venv (make ort-venv)")
    workdir.mkdir(parents=True, exist_ok=True)
    if _symbolic_inputs(exported.model) and not any(o.startswith(
            "emit-training-artifacts.inputs=") for o in options):
        # a dynamic export (Optimum's): the first-step check runs on the case's own inputs,
        # as a user of such an export gives them (generated ones would have 2 of everything)
        options = (*options, f"emit-training-artifacts.inputs={exported.inputs}")
    output, artifacts, result = workdir / "ready.onnx", workdir / "artifacts", workdir / "result"
    job = {"model": str(exported.model), "output": str(output), "artifacts": str(artifacts),
           "checkpoint": str(exported.checkpoint) if exported.checkpoint else None,
           "batch": str(exported.batch), "steps": steps, "options": list(options),
           "arguments": list(arguments),
           "result": str(result)}
    (workdir / "job.json").write_text(json.dumps(job, indent=1))
    env = {k: v for k, v in os.environ.items() if k != "GRAPHPASS_DISABLE_PLUGINS"}
    done = subprocess.run([python, str(_RUNNER), str(workdir / "job.json")], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    run_file = result / "run.json"
    if not run_file.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-8:]
        return TrainingRun(None, {}, output, artifacts,
                           crash=f"exit {done.returncode}: " + "\n".join(tail)[-2000:])
    run = json.loads(run_file.read_text())
    report_text = (result / "report.json").read_text()
    report = json.loads(report_text) if report_text.strip().startswith("{") else {}
    gradients: dict[str, np.ndarray] = {}
    weights: dict[str, np.ndarray] = {}
    if (result / "training.npz").exists():
        with np.load(result / "training.npz") as data:
            for key in data.files:
                kind, _, name = key.partition("/")
                (gradients if kind == "grad" else weights)[name] = data[key]
    if not report and run["exit_code"] != 0:
        report = {"findings": [], "stderr": run["stderr"]}
    return TrainingRun(
        run["exit_code"], report, output, artifacts, trained=run["trained"],
        training_error=run["training_error"], losses=run["losses"], gradients=gradients,
        weights=weights,
        seconds={"process": run["seconds"], "graphpass": run["graphpass_seconds"]})
