"""Run ``graphpass run -p train-ready --emit-training-artifacts`` and train, in one process.

A script for the onnxruntime-training venv (``.venv-ort-training``, where the
``ort-training`` plugin is active); it imports neither torch nor transformers. The zoo
calls it through :func:`zoo.training.train_ready` with one job (a JSON file)::

    python ort_runner.py JOB.json

``JOB.json``: ``model``, ``output`` (the model graphpass writes), ``artifacts`` (its
``--emit-training-artifacts`` folder), ``checkpoint`` (or null), ``batch`` (an ``.npz``
holding every training-model input by name: the model's inputs and ``target``),
``steps``, ``options`` (``-O PASS.OPTION=VALUE`` strings), ``arguments`` (more command
line arguments, such as ``--disable-pass NAME``), ``result`` (a folder).

It writes into ``result``:

* ``report.json``: graphpass's JSON report, and ``run.json``: ``{"exit_code", "stderr",
  "trained": bool, "training_error", "losses", "trainable", "seconds"}``;
* ``training.npz``: ``grad/NAME``, the first step's gradient of every parameter the
  checkpoint state trains (``Parameter.grad``), and ``weight/NAME``, its value after
  the first optimizer step.

onnxruntime-training can abort the process (a failed C++ assertion); the caller then
finds no ``run.json`` and reports the crash.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _run_graphpass(job: dict[str, Any]) -> tuple[int, str, str]:
    from graphpass.cli import main

    arguments = ["run", job["model"], "-o", job["output"], "-p", "train-ready",
                 "--emit-training-artifacts", job["artifacts"], "--format", "json"]
    if job.get("checkpoint"):
        arguments += ["--checkpoint", job["checkpoint"]]
    for option in job.get("options") or []:
        arguments += ["-O", option]
    arguments += job.get("arguments") or []
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(arguments)
    return code, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def _quiet_native() -> Any:
    """Silence file descriptor 2 (training sessions log every graph transformer)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def train(artifacts: Path, batch: dict[str, np.ndarray], steps: int
          ) -> tuple[list[float], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``steps`` AdamW steps on ``artifacts``, the same batch each step.

    Returns:
        The losses, the first step's gradient of every trained parameter, and every
        trained parameter's value after the first optimizer step.
    """
    import onnxruntime
    from onnxruntime.training import api

    onnxruntime.set_default_logger_severity(3)
    with _quiet_native():
        state = api.CheckpointState.load_checkpoint(str(artifacts / "checkpoint"))
        module = api.Module(str(artifacts / "training_model.onnx"), state,
                            str(artifacts / "eval_model.onnx"))
        optimizer = api.Optimizer(str(artifacts / "optimizer_model.onnx"), module)
    feeds = [batch[name] for name in module.input_names()]
    module.train()
    losses: list[float] = []
    gradients: dict[str, np.ndarray] = {}
    weights: dict[str, np.ndarray] = {}
    for step in range(steps):
        outputs = module(*feeds)
        loss = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        losses.append(float(np.asarray(loss).reshape(-1)[0]))
        if step == 0:
            for name, parameter in state.parameters:
                if parameter.requires_grad:
                    gradients[name] = np.array(parameter.grad, copy=True)
        optimizer.step()
        module.lazy_reset_grad()
        if step == 0:
            weights = {name: np.array(parameter.data, copy=True)
                       for name, parameter in state.parameters if parameter.requires_grad}
    return losses, gradients, weights


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    result = Path(job["result"])
    result.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    code, report, stderr = _run_graphpass(job)
    (result / "report.json").write_text(report)
    run: dict[str, Any] = {"exit_code": code, "stderr": stderr[-4000:], "trained": False,
                           "training_error": None, "losses": [],
                           "graphpass_seconds": round(time.perf_counter() - started, 3)}
    if code == 0:
        with np.load(job["batch"]) as data:
            batch = {name: data[name] for name in data.files}
        try:
            losses, gradients, weights = train(Path(job["artifacts"]), batch, job["steps"])
        except Exception as error:  # a training failure is the finding we look for
            run["training_error"] = f"{type(error).__name__}: {error}"[-4000:]
        else:
            run.update(trained=True, losses=losses, trainable=sorted(gradients))
            np.savez(result / "training.npz",
                     **{f"grad/{name}": value for name, value in gradients.items()},
                     **{f"weight/{name}": value for name, value in weights.items()})
    run["seconds"] = round(time.perf_counter() - started, 3)
    (result / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
