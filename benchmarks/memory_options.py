"""Gradient accumulation and activation recomputation at real size: memory saved, time cost.

Issue 23 asks what the two options people use to fit a real model on a small machine
save and cost. For one model of ``benchmarks/real_sizes.py`` (default the ~1B Llama
shape, its cached export and training directory), each case in a process of its own,
graphpass's ``Trainer``, AdamW, 2 threads, 1 warm-up and 2 timed steps:

* ``kept``: the tier's directory, one micro-batch (the tier's batch);
* ``recompute``: the same export built with ``-O build-training-graph.recompute=elementwise``;
* ``one-step xN``: an export at N times the batch, trained as one step;
* ``accumulate xN``: the tier's directory, ``Trainer.step`` over N micro-batches (the
  same N x batch samples, the same update).

Peak memory is measured as in ``real_sizes.py`` (``VmHWM`` over the resident memory
after the imports). Usage::

    .venv/bin/python benchmarks/memory_options.py [--model llama-1b] [--micro 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import real_sizes as rs

HERE = Path(__file__).resolve()


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import onnxruntime  # noqa: F401  (imported before the baseline, as the tier does)

    from graphpass.training import Trainer, default_session_options

    with np.load(job["batch"]) as data:
        batch = {name: data[name] for name in data.files}
    rs._reset_peak()
    before = rs._rss_bytes()
    options = default_session_options()
    options.intra_op_num_threads = rs.THREADS
    options.inter_op_num_threads = 1
    trainer = Trainer(job["directory"], lr=rs.LR, session_options=options)
    micro = int(job["micro"])
    rows = next(iter(batch.values())).shape[0] // micro
    parts = [{k: v[i * rows:(i + 1) * rows] for k, v in batch.items()} for i in range(micro)]
    losses, times = [], []
    for _ in range(3):
        started = time.perf_counter()
        losses.append(float(trainer.step(parts if micro > 1 else batch)))
        times.append(time.perf_counter() - started)
    return {"step_s": statistics.median(times[1:]), "losses": losses,
            "peak_mb": (rs._peak_bytes() - before) / rs.MB}


def _stacked_batch(spec: rs.Spec, micro: int, folder: Path, output_shape: tuple[int, ...]) -> Path:
    """``micro`` different batches of ``spec``'s shape, stacked, and their target."""
    import numpy as np

    big = replace(spec, input_shape=(spec.input_shape[0] * micro, *spec.input_shape[1:]))
    batch = rs.batch_of(big, (output_shape[0] * micro, *output_shape[1:]))
    path = folder / f"batch-x{micro}.npz"
    np.savez(path, **batch)
    return path


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        print(json.dumps(_worker(json.loads(Path(sys.argv[2]).read_text()))), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-1b", choices=sorted(rs.FULL))
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--memory-cap-gb", type=float, default=22.0)
    parser.add_argument("--json", default=str(rs.RESULTS.with_name("memory_options.json")))
    args = parser.parse_args()
    cap = int(args.memory_cap_gb * rs.GB)
    spec = rs.FULL[args.model]
    root = rs.CACHE / "full" / args.model
    if not (root / "graphpass" / "manifest.json").exists():
        print(f"run benchmarks/real_sizes.py --models {args.model} first", file=sys.stderr)
        return 2
    big = replace(spec, input_shape=(spec.input_shape[0] * args.micro, *spec.input_shape[1:]))
    exported = rs.ensure_export(big, root / f"export-x{args.micro}", cap)
    if "error" in exported:
        print(exported["error"], file=sys.stderr)
        return 1
    directories = {"recompute": root / "graphpass-recompute",
                   f"one-step x{args.micro}": root / f"graphpass-x{args.micro}"}
    builds = {}
    for name, (folder, options) in {
            "recompute": (root / "export", ["-O", "build-training-graph.recompute=elementwise"]),
            f"one-step x{args.micro}": (root / f"export-x{args.micro}", [])}.items():
        out = directories[name]
        ready = out.parent / f"{out.name}-ready"
        ready.mkdir(parents=True, exist_ok=True)
        child = rs.run_child([sys.executable, "-m", "graphpass", "run",
                              str(folder / "model.onnx"), "-o", str(ready / "ready.onnx"),
                              "-p", "train-ready", "--emit-training-graph", str(out),
                              *options], cap)
        builds[name] = {"seconds": child.seconds, "peak_mb": child.peak_bytes / rs.MB,
                        "ok": child.returncode == 0}
        rs._log(f"{name}: built in {child.seconds:.1f} s ({child.returncode})")
    with __import__("numpy").load(root / "export" / "batch.npz") as data:
        target_shape = tuple(data["target"].shape)
    stacked = _stacked_batch(spec, args.micro, root, target_shape)
    cases = {"kept": (root / "graphpass", root / "export" / "batch.npz", 1),
             "recompute": (directories["recompute"], root / "export" / "batch.npz", 1),
             f"one-step x{args.micro}": (directories[f"one-step x{args.micro}"], stacked, 1),
             f"accumulate x{args.micro}": (root / "graphpass", stacked, args.micro)}
    record: dict[str, Any] = {"model": args.model, "micro": args.micro, "builds": builds,
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "cases": {}}
    for name, (directory, batch, micro) in cases.items():
        job = root / f"memory-options-{name.replace(' ', '-')}.json"
        job.write_text(json.dumps({"directory": str(directory), "batch": str(batch),
                                   "micro": micro}))
        child = rs.run_child([sys.executable, str(HERE), "--worker", str(job)], cap)
        result = child.result() if child.returncode == 0 else {"error": rs._failure(child)}
        record["cases"][name] = result
        rs._log(f"{name}: {result}")
    Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    print("| case | step | peak memory | losses |\n|---|---|---|---|")
    for name, result in record["cases"].items():
        if "error" in result:
            print(f"| {name} | {result['error']} | | |")
        else:
            print(f"| {name} | {result['step_s']:.2f} s | {result['peak_mb']:,.0f} MB | "
                  + ", ".join(f"{v:.6g}" for v in result["losses"]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
