"""One training step: graphpass's own trainer vs onnxruntime-training 1.19.2 vs torch eager.

The same model, batch, loss (MSE against a target) and optimizer (AdamW), three trainers,
in one run:

* **graphpass**: ``graphpass run -p train-ready --emit-training-graph DIR``, then
  ``step.onnx`` through ``graphpass.training.Trainer`` on stock onnxruntime (this venv);
* **onnxruntime-training**: ``graphpass run -p train-ready --emit-training-artifacts DIR``
  in ``.venv-ort-training`` (``generate_artifacts``), then ``onnxruntime.training.api``'s
  ``Module`` and ``Optimizer`` (a forward-backward run, an optimizer run, a gradient
  reset per step);
* **torch**: the model in eager mode, ``torch.optim.AdamW``.

The models are zoo architectures (``tests/zoo``: tiny Hugging Face BERT and ResNet,
exported with ``dynamo=True``, weights filled from the full state) at a batch size
that makes a step do real work. Each trainer runs in a process of its own
(``_training_step_worker.py``), one thread each, warm-up steps first; the step time is
the median of the timed steps and the memory the peak resident memory over what the
process held after its imports. The ratios go into the ``training-step`` section of
``docs/benchmarks.md`` (goal: step time within 1.5x of onnxruntime-training, memory
within 2x).

Usage::

    .venv/bin/python benchmarks/training_step.py [--steps 30] [--warmup 5] [--no-docs]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import zoo  # noqa: E402
from _bench import write_docs_section  # noqa: E402

WORKER = Path(__file__).resolve().with_name("_training_step_worker.py")
MODELS = {"bert": (16, 64), "resnet": (16, 3, 64, 64)}
"""Zoo case -> the input shape of the benchmark's batch."""
RUNNERS = ("graphpass", "ort-training", "torch")


def _case(name: str) -> zoo.Case:
    shape = MODELS[name]
    return dataclasses.replace(zoo.case(name), name=f"{name}-step-bench", input_shape=shape)


def _graphpass(python: str, flag: str, exported: zoo.Export, folder: Path) -> None:
    command = [python, "-m", "graphpass", "run", str(exported.model), "-o",
               str(folder / "ready.onnx"), "-p", "train-ready", flag, str(folder / "train"),
               "--format", "json"]
    if exported.checkpoint is not None:
        command += ["--checkpoint", str(exported.checkpoint)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


def _measure(python: str, job: dict[str, Any], folder: Path) -> dict[str, Any]:
    path = folder / f"{job['runner']}.json"
    path.write_text(json.dumps(job))
    done = subprocess.run([python, str(WORKER), str(path)], capture_output=True, text=True,
                          check=False, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{job['runner']} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(names: list[str], steps: int, warmup: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Every trainer on every model: ``{model: {runner: measurement}}``."""
    ort_python = zoo.ort_training_python()
    if ort_python is None:
        raise SystemExit("no onnxruntime-training venv (make ort-venv)")
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="graphpass-step-") as scratch:
        for name in names:
            case = _case(name)
            exported = zoo.export(case, "dynamo-full-state")
            ours, theirs = Path(scratch) / name / "graphpass", Path(scratch) / name / "ort"
            ours.mkdir(parents=True)
            theirs.mkdir(parents=True)
            _graphpass(sys.executable, "--emit-training-graph", exported, ours)
            _graphpass(ort_python, "--emit-training-artifacts", exported, theirs)
            common = {"batch": str(exported.batch), "case": name,
                      "input_shape": list(case.input_shape), "steps": steps,
                      "warmup": warmup, "threads": 1}
            results[name] = {
                "graphpass": _measure(sys.executable, {**common, "runner": "graphpass",
                                                       "directory": str(ours / "train")},
                                      ours),
                "ort-training": _measure(ort_python, {**common, "runner": "ort-training",
                                                      "directory": str(theirs / "train")},
                                         theirs),
                "torch": _measure(sys.executable, {**common, "runner": "torch",
                                                   "directory": ""}, ours),
            }
            for runner, measured in results[name].items():
                print(f"{name:<8} {runner:<14} {measured['step_ms']:8.2f} ms a step  "
                      f"{measured['peak_mb']:8.1f} MB peak", flush=True)
    return results


def docs_lines(results: dict[str, dict[str, dict[str, Any]]], steps: int) -> list[str]:
    """The ``training-step`` section of docs/benchmarks.md."""
    lines = [
        "## One training step: graphpass's trainer vs onnxruntime-training vs torch", "",
        "`benchmarks/training_step.py`: the same model, batch, MSE loss and AdamW, three "
        "trainers, one run: **graphpass** (`--emit-training-graph`, then `step.onnx` "
        "through `graphpass.training.Trainer` on stock onnxruntime), **ORT-training** "
        "(onnxruntime-training 1.19.2's artifacts from `--emit-training-artifacts`, run by "
        "`onnxruntime.training.api`) and **torch** eager. Zoo models exported with "
        "`dynamo=True`; each trainer in its own process, one thread, 5 warm-up steps, the "
        f"median of {steps} timed steps; memory: peak resident memory over what the process "
        "held after importing its runtime. Goal: step time within 1.5x of "
        "onnxruntime-training, memory within 2x.", "",
        "| model (batch) | graphpass step | ORT-training step | torch step | graphpass / "
        "ORT-training | graphpass / torch | graphpass memory | ORT-training memory | torch "
        "memory | memory graphpass / ORT-training |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for name, measured in results.items():
        ours, theirs, torch = (measured[r] for r in RUNNERS)
        lines.append(
            f"| {name} {tuple(MODELS[name])} | {ours['step_ms']:.1f} ms | "
            f"{theirs['step_ms']:.1f} ms | {torch['step_ms']:.1f} ms | "
            f"**{ours['step_ms'] / theirs['step_ms']:.2f}x** | "
            f"{ours['step_ms'] / torch['step_ms']:.2f}x | {ours['peak_mb']:.0f} MB | "
            f"{theirs['peak_mb']:.0f} MB | {torch['peak_mb']:.0f} MB | "
            f"**{ours['peak_mb'] / max(theirs['peak_mb'], 1e-9):.2f}x** |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-docs", action="store_true",
                        help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    results = run(names, args.steps, args.warmup)
    for name, measured in results.items():
        ours, theirs, torch = (measured[r] for r in RUNNERS)
        print(f"{name}: step {ours['step_ms'] / theirs['step_ms']:.2f}x ORT-training, "
              f"{ours['step_ms'] / torch['step_ms']:.2f}x torch; memory "
              f"{ours['peak_mb'] / max(theirs['peak_mb'], 1e-9):.2f}x ORT-training")
    if not args.no_docs:
        write_docs_section("training-step", docs_lines(results, args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
