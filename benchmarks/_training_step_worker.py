"""One trainer's step time and peak memory, in a process of its own (for training_step.py).

Usage::

    python _training_step_worker.py JOB.json

``JOB.json``: ``runner`` (``graphpass``: ``step.onnx`` through ``graphpass.training.Trainer``
on stock onnxruntime; ``ort-training``: onnxruntime-training's artifacts through
``onnxruntime.training.api``, in its venv; ``torch``: the zoo model in eager mode),
``directory`` (the training-graph directory or the artifacts), ``batch`` (``.npz``),
``case`` and ``input_shape`` (for ``torch``), ``steps``, ``warmup``, ``threads``. Prints
one JSON line: ``step_ms`` (median of the timed steps), ``steps_ms`` (all of them),
``peak_mb`` (peak resident memory over what the process held before loading the model,
after its imports)
and ``losses``.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> None:
    """Reset the process's peak resident memory (Linux: ``VmHWM``) to the current one."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def _peak_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _graphpass(job: dict[str, Any], batch: dict[str, np.ndarray]) -> Callable[[], float]:
    import onnxruntime

    from graphpass.training import Trainer

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = job["threads"]
    trainer = Trainer(job["directory"], session_options=options)
    return lambda: trainer.step(batch)


def _ort_training(job: dict[str, Any], batch: dict[str, np.ndarray]) -> Callable[[], float]:
    import onnxruntime
    from onnxruntime.training import api

    onnxruntime.set_default_logger_severity(3)
    artifacts = Path(job["directory"])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = job["threads"]
    state = api.CheckpointState.load_checkpoint(str(artifacts / "checkpoint"))
    module = api.Module(str(artifacts / "training_model.onnx"), state,
                        str(artifacts / "eval_model.onnx"), session_options=options)
    optimizer = api.Optimizer(str(artifacts / "optimizer_model.onnx"), module)
    feeds = [batch[name] for name in module.input_names()]
    module.train()

    def step() -> float:
        loss = module(*feeds)
        optimizer.step()
        module.lazy_reset_grad()
        return float(np.asarray(loss).reshape(-1)[0])

    return step


def _torch(job: dict[str, Any], batch: dict[str, np.ndarray]) -> Callable[[], float]:
    import dataclasses

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import zoo

    torch.set_num_threads(job["threads"])
    case = dataclasses.replace(zoo.case(job["case"]), input_shape=tuple(job["input_shape"]))
    model = case.wrapped()
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.train()
    inputs = [torch.from_numpy(batch[name]) for name in case.input_names]
    target = torch.from_numpy(batch["target"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(*inputs), target)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


RUNNERS = {"graphpass": _graphpass, "ort-training": _ort_training, "torch": _torch}
IMPORTS = {"graphpass": ("onnxruntime", "graphpass.training"),
           "ort-training": ("onnxruntime", "onnxruntime.training.api"),
           "torch": ("torch", "transformers")}
"""What each runner imports, before the memory baseline is taken."""


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    with np.load(job["batch"]) as data:
        batch = {name: data[name] for name in data.files}
    import importlib

    for module in IMPORTS[job["runner"]]:
        importlib.import_module(module)
    _reset_peak()  # imports (and compiling them) may have peaked higher
    before = _rss_mb()
    step = RUNNERS[job["runner"]](job, batch)
    losses = [step() for _ in range(job["warmup"])]
    times = []
    for _ in range(job["steps"]):
        started = time.perf_counter()
        losses.append(step())
        times.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"step_ms": statistics.median(times), "steps_ms": times,
                      "peak_mb": _peak_mb() - before, "losses": losses}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
