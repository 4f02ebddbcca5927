"""Ask onnxruntime-training itself whether it can build training artifacts for a model.

Runs in the onnxruntime-training venv (``.venv-ort-training``), never in the test
venv: that runtime ships its own ``onnxruntime`` module. Prints one JSON object:

    {"ok": true|false, "stage": "generate"|"train"|"load",
     "missing_gradient_op": "M" | null, "node": "M_1" | null,
     "unreachable_weight": "W" | null, "error": "...", "losses": [..], "seconds": 0.12}

Usage::

    python oracle.py MODEL [--requires-grad a,b] [--frozen c,d] [--loss mse|crossentropy|none]
                     [--artifacts DIR] [--train-steps N] [--inputs feeds.npz]
                     [--check-gradient]

With ``--check-gradient`` (a job's ``"check_gradient": true``) and ``--loss none``, the
artifacts are also run for one training step, and ORT's gradient of the first output is
compared with finite differences (``finite_differences.py``): the result gets
``"gradient": {"verdict": "right" | "wrong" | "rough" | "unchecked" | "fails", ...}``
(``fails``: the step itself fails).

Batch mode evaluates many models in one process (starting this venv costs seconds:
it imports torch). ``JOBS`` holds one JSON object per line, with the keys ``id``,
``model`` and optionally ``requires_grad`` / ``frozen`` (lists), ``loss``,
``train_steps``, ``inputs``, ``check_gradient``; the results come out as JSON lines,
each with its ``id``, in job order::

    python oracle.py --batch JOBS.jsonl [--out RESULTS.jsonl]

onnxruntime-training 1.19.2 aborts the whole process on some models (a failed C++
assertion). Batch mode runs the jobs in a worker process and, when the worker dies,
records ``"crashed": true`` with the last lines it wrote to stderr for the job it
was on, then starts a new worker at the next job.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradient_corpus import MAX_IR

from graphpass.plugins.ort_training import _cap_ir_versions
from graphpass.torch import TRAINABLE_TYPES

_MISSING = re.compile(r"The gradient builder has not been registered: ?(\S+) for node (\S*)")
_UNREACHABLE = (
    re.compile(r"Cannot compute the partial derivative for '([^']+)' as it's unreachable"),
    re.compile(r"\) (\S+) couldn't find the consumer node"),
)
_LOG_LINE = re.compile(r"^(\x1b\[[0-9;]*m)?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _csv(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [item for item in text.split(",") if item]


def _quiet_runtime() -> None:
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)


def generate(job: dict[str, Any], artifacts: str) -> dict[str, object]:
    import onnx
    from onnxruntime.training import artifacts as ort_artifacts

    model = onnx.load(job["model"])
    loss = {"mse": ort_artifacts.LossType.MSELoss,
            "crossentropy": ort_artifacts.LossType.CrossEntropyLoss,
            "none": None}[job.get("loss") or "none"]
    requires_grad = job.get("requires_grad")
    if requires_grad is None:
        requires_grad = [t.name for t in model.graph.initializer
                         if t.data_type in TRAINABLE_TYPES]
    frozen = list(job.get("frozen") or [])
    requires_grad = [name for name in requires_grad if name not in frozen]
    optimizer = ort_artifacts.OptimType.AdamW if job.get("train_steps") else None
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        ort_artifacts.generate_artifacts(
            model, requires_grad=requires_grad, frozen_params=frozen, loss=loss,
            optimizer=optimizer, artifact_directory=artifacts)
    if optimizer is not None:
        _cap_ir_versions(Path(artifacts), MAX_IR)
    return {"requires_grad": requires_grad}


def train_steps(artifacts: str, feeds: Mapping[str, Any], steps: int
                ) -> tuple[list[float], list[str]]:
    """Train ``steps`` steps on the artifacts in ``artifacts``, feeding ``feeds`` by name.

    Returns the losses and the training model's input names.
    """
    import numpy as np
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint(os.path.join(artifacts, "checkpoint"))
    module = api.Module(os.path.join(artifacts, "training_model.onnx"), state,
                        os.path.join(artifacts, "eval_model.onnx"))
    optimizer = api.Optimizer(os.path.join(artifacts, "optimizer_model.onnx"), module)
    names = module.input_names()
    batch = [feeds[name] for name in names]
    losses = []
    module.train()
    for _ in range(steps):
        outputs = module(*batch)
        loss = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        losses.append(float(np.asarray(loss).reshape(-1)[0]))
        optimizer.step()
        module.lazy_reset_grad()
    return losses, names


def train(job: dict[str, Any], artifacts: str) -> list[float]:
    import numpy as np

    feeds = dict(np.load(job["inputs"])) if job.get("inputs") else {}
    return train_steps(artifacts, feeds, job["train_steps"])[0]


def gradient(job: dict[str, Any], artifacts: str, requires_grad: list[str]) -> dict[str, Any]:
    """ORT's gradient against finite differences (see ``finite_differences.py``)."""
    import numpy as np
    import onnx
    from finite_differences import check_gradient

    feeds = dict(np.load(job["inputs"])) if job.get("inputs") else {}
    try:
        return check_gradient(onnx.load(job["model"]), artifacts, feeds, requires_grad)
    except Exception as error:  # the step (or a forward run) fails: data for the caller
        return {"verdict": "fails", "why": f"{type(error).__name__}: {error}"[-2000:]}


def evaluate(job: dict[str, Any]) -> dict[str, object]:
    """Run generate_artifacts (and optionally a few training steps) for one job."""
    result: dict[str, object] = {"ok": False, "stage": "generate", "missing_gradient_op": None,
                                 "node": None, "unreachable_weight": None, "error": None}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        artifacts = job.get("artifacts") or scratch
        os.makedirs(artifacts, exist_ok=True)
        try:
            result.update(generate(job, artifacts))
            if job.get("check_gradient"):
                result["gradient"] = gradient(job, artifacts, result["requires_grad"])
            if job.get("train_steps"):
                result["stage"] = "train"
                result["losses"] = train(job, artifacts)
            result["ok"] = True
        except Exception as error:  # report every failure as data, the caller decides
            text = f"{type(error).__name__}: {error}"
            result["error"] = text[-4000:]
            match = _MISSING.search(text)
            if match:
                result["missing_gradient_op"] = match.group(1)
                result["node"] = match.group(2)
            for pattern in _UNREACHABLE:
                found = pattern.search(text)
                if found:
                    result["unreachable_weight"] = found.group(1)
                    break
            result["traceback"] = traceback.format_exc()[-4000:]
    result["seconds"] = round(time.perf_counter() - started, 4)
    return result


def _job_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"model": args.model, "requires_grad": _csv(args.requires_grad),
            "frozen": _csv(args.frozen), "loss": args.loss, "artifacts": args.artifacts,
            "train_steps": args.train_steps, "inputs": args.inputs,
            "check_gradient": args.check_gradient}


def _read_jobs(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def work(jobs_path: str, start: int, results_path: str) -> int:
    """Evaluate jobs from index ``start`` on, appending one JSON line per job."""
    _quiet_runtime()
    jobs = _read_jobs(jobs_path)
    with open(results_path, "a", encoding="utf-8") as out:
        for job in jobs[start:]:
            sys.stderr.write(f"@@job {job.get('id')}\n")
            sys.stderr.flush()
            result = evaluate(job)
            result.pop("traceback", None)
            result["id"] = job.get("id")
            out.write(json.dumps(result) + "\n")
            out.flush()
    return 0


def _crash_message(stderr_path: str) -> str:
    with open(stderr_path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    tail = text.rsplit("@@job", 1)[-1].splitlines()[1:]
    lines = [line for line in tail if line.strip() and not _LOG_LINE.match(line)]
    return "\n".join(lines[-5:])[-2000:]


def supervise(jobs_path: str, out_path: str | None) -> int:
    """Run the jobs in worker processes, restarting after a job that kills the worker."""
    jobs = _read_jobs(jobs_path)
    with tempfile.TemporaryDirectory() as scratch:
        results_path = os.path.join(scratch, "results.jsonl")
        open(results_path, "w").close()
        done = 0
        while done < len(jobs):
            stderr_path = os.path.join(scratch, f"stderr-{done}.txt")
            with open(stderr_path, "w", encoding="utf-8") as stderr:
                code = subprocess.call(
                    [sys.executable, os.path.abspath(__file__), "--worker", jobs_path,
                     "--start", str(done), "--results", results_path],
                    stdout=stderr, stderr=subprocess.STDOUT)  # aborts print to stdout
            with open(results_path, encoding="utf-8") as handle:
                done = sum(1 for line in handle if line.strip())
            if done < len(jobs):
                crashed = {"id": jobs[done].get("id"), "ok": False, "stage": "generate",
                           "crashed": True, "exit_code": code,
                           "missing_gradient_op": None, "node": None,
                           "unreachable_weight": None, "error": _crash_message(stderr_path)}
                with open(results_path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(crashed) + "\n")
                done += 1
        with open(results_path, encoding="utf-8") as handle:
            lines = handle.read()
    if out_path:
        with open(out_path, "w", encoding="utf-8") as handle:
            handle.write(lines)
    else:
        sys.stdout.write(lines)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?")
    parser.add_argument("--requires-grad")
    parser.add_argument("--frozen")
    parser.add_argument("--loss", default="none", choices=["mse", "crossentropy", "none"])
    parser.add_argument("--artifacts")
    parser.add_argument("--train-steps", type=int, default=0)
    parser.add_argument("--inputs")
    parser.add_argument("--check-gradient", action="store_true")
    parser.add_argument("--batch", help="a JSON-lines file of jobs")
    parser.add_argument("--out", help="batch mode: write the results here (default stdout)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--results", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return work(args.worker, args.start, args.results)
    if args.batch:
        return supervise(args.batch, args.out)
    if not args.model:
        parser.error("give a MODEL, or --batch JOBS.jsonl")
    _quiet_runtime()
    print(json.dumps(evaluate(_job_from_args(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
