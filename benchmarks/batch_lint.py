"""Benchmark: `graphpass lint` over a folder of 50 models, -j 1 against -j 2 and Dask.

The folder holds 46 generated models (``graphpass.testing.models``: MLPs with three
512-wide layers (2.3 MB of weights), chains of 400 operators, function calls, If
branches) and the real torch 2.13 exports of the
test suite's cache (``tests/.cache``, when the tests have made it), 50 in all. Each
configuration runs the command line in a fresh process, as CI would:

* ``-j 1``: every model in that process, one after the other;
* ``-j 2``: a pool of two worker processes;
* ``dask``: ``--executor dask`` on a ``distributed.LocalCluster`` of two worker
  processes (one thread each) started beforehand; its start-up is reported apart.

Parallel runs are about wall time, so wall seconds are reported (best of
``--repeats``), with the machine's load average: on a machine whose CPUs are busy with
other work, no executor can be faster. The summary gives each one's speed-up over
``-j 1``; the Dask figure includes the command importing ``distributed`` (about a
second). The reports of the three must be equal (``--no-timing`` JSON), or the benchmark
fails.

Usage::

    .venv/bin/python benchmarks/batch_lint.py [--repeats 2] [--passes check] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPORTS = ROOT / "tests" / ".cache"


def make_folder(root: Path) -> int:
    """Write the 50 models into ``root``; return how many torch exports it holds."""
    import graphpass
    from graphpass.testing import models

    exports = sorted(p.parent for p in EXPORTS.glob("roundtrip-torch-*/*/model.onnx"))[:4]
    generated = 50 - len(exports)
    for index in range(generated):
        kind = index % 4
        model = (models.mlp((128, 512, 512, 512, 10), seed=index) if kind == 0 else
                 models.chain(*["Relu", "Neg", "Abs", "Sigmoid"] * 100) if kind == 1 else
                 models.with_function() if kind == 2 else models.with_if())
        path = root / f"group{index % 5}" / f"model_{index:02d}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        graphpass.save(model, path)
    for folder in exports:
        shutil.copytree(folder, root / "torch" / folder.name)
    return len(exports)


def lint(folder: Path, passes: str, *extra: str) -> tuple[float, str]:
    """Wall seconds of ``graphpass lint FOLDER ...`` in a fresh process, and its report."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "graphpass", "lint", str(folder), "-p", passes,
                           "--format", "json", "--no-timing", *extra],
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"graphpass lint {' '.join(extra)} failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--passes", default="check")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    import distributed

    with tempfile.TemporaryDirectory(prefix="graphpass-batch-bench-") as tmp:
        folder = Path(tmp) / "models"
        exports = make_folder(folder)
        times: dict[str, float] = {}
        reports: dict[str, str] = {}
        for label, extra in (("-j 1", ()), ("-j 2", ("-j", "2"))):
            runs = [lint(folder, args.passes, *extra) for _ in range(args.repeats)]
            times[label] = min(seconds for seconds, _ in runs)
            reports[label] = runs[0][1]
        start = time.perf_counter()
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster:
            startup = time.perf_counter() - start
            extra = ("--executor", "dask", "--scheduler", cluster.scheduler_address)
            lint(folder, args.passes, *extra)  # the workers import graphpass once
            runs = [lint(folder, args.passes, *extra) for _ in range(args.repeats)]
        times["dask"] = min(seconds for seconds, _ in runs)
        reports["dask"] = runs[0][1]
    if len({json.dumps(json.loads(r), sort_keys=True) for r in reports.values()}) != 1:
        print("the reports differ between executors", file=sys.stderr)
        return 1
    summary = json.loads(reports["-j 1"])["summary"]
    lines = [
        "## Lint over 50 models: -j 1, -j 2, Dask",
        "",
        f"`graphpass lint models/ -p {args.passes}` over 50 models ({50 - exports} generated, "
        f"{exports} real torch exports; {summary['error']} error findings), wall seconds of "
        f"the whole command in a fresh process, best of {args.repeats}; "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} (a speed-up needs idle CPUs). The Dask cluster (two worker "
        f"processes) was started beforehand, in {startup:.1f} s. Every executor gave the same "
        "report.",
        "",
        "| executor | seconds | speed-up over -j 1 |",
        "| --- | ---: | ---: |",
    ]
    for label, seconds in times.items():
        lines.append(f"| `{label}` | {seconds:.2f} | {times['-j 1'] / seconds:.2f}x |")
    print("\n".join(lines))
    if args.write_docs:
        from _bench import write_docs_section

        write_docs_section("batch-lint", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
