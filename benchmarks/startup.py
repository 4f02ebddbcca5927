"""Benchmark: how long the command line takes to start, against the imports it cannot avoid.

Each command runs in a fresh process (``python -m graphpass ...``), several times; the
best and the median CPU seconds of the process (user + system: on a shared machine wall
time mostly measures the neighbours) are reported, beside three floors measured the
same way: the interpreter alone (``python -c pass``), ``import numpy`` and ``import
onnx`` (which loads numpy and ml_dtypes). ``--version`` and ``--help`` import neither
onnx nor numpy, so they should cost about the interpreter; ``passes`` and ``plan`` load
the plugins, whose passes work on the IR, which needs onnx: ``import onnx`` is their
floor, and the ratio to it says what graphpass adds. Which heavy modules each command
imported is read from ``python -X importtime``.

Usage::

    .venv/bin/python benchmarks/startup.py [--rounds 7] [--docs]

``--docs`` writes the table into docs/benchmarks.md (section ``startup``).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

from _bench import write_docs_section

HEAVY = ("onnx", "numpy", "onnx_ir", "networkx", "onnxruntime", "torch")
"""Modules whose import the table reports for each command (onnx_ir and networkx: the
ecosystem passes and the planner import them when used, not to list passes)."""

FLOORS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "import onnx": ["-c", "import onnx"],
}
COMMANDS: dict[str, list[str]] = {
    "graphpass --version": ["-m", "graphpass", "--version"],
    "graphpass --help": ["-m", "graphpass", "--help"],
    "graphpass passes": ["-m", "graphpass", "passes"],
    "graphpass plan -p train-ready": ["-m", "graphpass", "plan", "-p", "train-ready"],
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _seconds(arguments: list[str], rounds: int) -> list[float]:
    """CPU seconds (user + system) of each run."""
    times = []
    for _ in range(rounds):
        start = _children_cpu()
        subprocess.run([sys.executable, *arguments], capture_output=True, check=True)
        times.append(_children_cpu() - start)
    return times


def _imported(arguments: list[str]) -> list[str]:
    """The :data:`HEAVY` modules a run imports, from ``-X importtime``."""
    done = subprocess.run([sys.executable, "-X", "importtime", *arguments],
                          capture_output=True, text=True, check=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    return [name for name in HEAVY if name in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each command")
    parser.add_argument("--docs", action="store_true",
                        help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    rows: dict[str, tuple[float, float, list[str]]] = {}
    for label, arguments in {**FLOORS, **COMMANDS}.items():
        times = _seconds(arguments, args.rounds)
        rows[label] = (min(times), statistics.median(times), _imported(arguments))
        print(f"{label:<32} best {rows[label][0]:6.3f} s  median {rows[label][1]:6.3f} s  "
              f"imports {', '.join(rows[label][2]) or 'none of ' + '/'.join(HEAVY)}",
              flush=True)
    interpreter, onnx = rows["python -c pass"][0], rows["import onnx"][0]
    lines = [
        "## Starting the command line",
        "",
        f"`benchmarks/startup.py`: each command in a fresh process, best and median of "
        f"{args.rounds} runs, CPU seconds of the process, against the imports it cannot "
        "avoid. `--version` and `--help` import neither onnx nor numpy; `passes` and `plan` "
        "load the plugins, whose passes need onnx (the floor they are compared with), and "
        "`plan` networkx (the plan is a graph of passes); neither loads the trainer, "
        "autodiff or the training-graph writer, which `graphpass.training` and "
        "`build-training-graph` import on first use. The machine is shared: compare rows "
        "of one run, not runs.",
        "",
        "| command | best s | median s | best / python | best / import onnx | heavy imports |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, (best, median, heavy) in rows.items():
        lines.append(f"| `{label}` | {best:.3f} | {median:.3f} | {best / interpreter:.1f} | "
                     f"{best / onnx:.2f} | {', '.join(heavy) or 'none'} |")
    print()
    print("\n".join(lines[6:]))
    if args.docs:
        write_docs_section("startup", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
