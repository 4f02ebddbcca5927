"""Benchmark: how close graphpass comes to protobuf's own cost, in time and in memory.

The table of issue 15, measured side by side in one run:

* load + ``inline-functions`` + save of a chain of calls (``benchmarks/inline.py``'s
  models: 20 functions of 10 nodes with attribute defaults), against onnx's C++
  inliner (``onnx.load`` -> ``onnx.inliner.inline_local_functions`` -> ``onnx.save``);
  goal: within 2x, and linear (at most 4.4x the time for 4x the calls);
* load + save of the 100k-node chain of ``benchmarks/roundtrip.py``, against protobuf
  (``onnx.load`` + ``onnx.save``) and onnx_ir (``onnx_ir.load`` + ``onnx_ir.save``);
  goal: within 3x of protobuf's time, peak RSS within 2x of protobuf's;
* the whole ``train-ready`` pipeline (no checkpoint) on that model: load, run, save,
  as ``graphpass run -p train-ready`` does them (the passes work on the loaded model,
  not on a copy); goal: within 5x of protobuf's load + save.

Every measurement runs in a fresh process; the configurations take turns, and each
is the best of ``--repeats`` runs (CPU seconds of the worker: on a shared machine
wall time mostly measures the neighbours). Peak RSS is the worker's high-water mark
(``VmHWM``), imports included; the RSS after the imports is shown beside it.

``--before PYTHON`` adds a "before" column: the same workers run by another
interpreter, one whose ``graphpass`` is an older checkout (``git worktree add
/tmp/before <commit>`` and a venv with ``pip install --no-deps -e /tmp/before``).

Usage::

    .venv/bin/python benchmarks/limits.py [--repeats 3] [--before PYTHON] [--growth]
                                          [--write-docs]

``--growth`` also measures inlining at 5k, 20k and 50k calls and load + save at
10k, 100k and 1M nodes, and prints the log-log slope between sizes (1.0 is linear).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
from _bench import Stopwatch, peak_rss_bytes, run_worker, write_docs_section

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
RESULTS = HERE / "results" / "limits.json"


# ================================================================= the models
def inline_model(calls: int) -> Path:
    """``benchmarks/inline.py``'s chain of ``calls`` calls, generated once."""
    return _cached(f"inline-chain-{calls}.onnx", lambda: _inline_module().make_model(calls))


def roundtrip_model(nodes: int) -> Path:
    """``benchmarks/roundtrip.py``'s chain of ``nodes`` nodes, generated once."""
    sys.path.insert(0, str(HERE))
    import roundtrip

    return roundtrip.model_path(nodes)


def _inline_module() -> Any:
    sys.path.insert(0, str(HERE))
    import inline

    return inline


def _cached(name: str, make: Callable[[], onnx.ModelProto]) -> Path:
    path = CACHE / name
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        onnx.save(make(), tmp)
        os.replace(tmp, path)
    return path


# ================================================================ the workers
def _rss_now_mb() -> float:
    try:
        kib = int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0])
    except (OSError, IndexError):
        return 0.0
    return kib / 1024


def _work(job: str, tool: str, source: Path, out: Path) -> Callable[[], dict[str, float]]:
    """Import what ``tool`` needs; return the measured work (load ... save)."""
    if tool == "onnx":
        import onnx.inliner

        def protobuf() -> dict[str, float]:
            watch = Stopwatch()
            proto = onnx.load(source)
            if job == "inline":
                proto = onnx.inliner.inline_local_functions(proto)
            onnx.save(proto, out)
            watch.lap()
            return {"cpu": watch.cpu, "wall": watch.wall}
        return protobuf
    if tool == "onnx_ir":
        import onnx_ir

        def onnx_ir_load_save() -> dict[str, float]:
            watch = Stopwatch()
            model = onnx_ir.load(source)
            onnx_ir.save(model, out)
            watch.lap()
            return {"cpu": watch.cpu, "wall": watch.wall}
        return onnx_ir_load_save

    import graphpass

    run_pass: Callable[[graphpass.Model], object] | None = None
    run_pipeline: Callable[[graphpass.Model], Any] | None = None
    if job == "inline":  # what a pass needs is set up before the clock starts
        # The pass imports networkx on first use: imported here, outside the clock, as
        # every tool's imports are (the C++ inliner's onnx, the older graphpass's).
        import networkx  # noqa: F401

        from graphpass.framework import PassContext, default_registry
        from graphpass.passes.inline_functions import InlineFunctions

        context = PassContext(registry=default_registry())

        def run_pass(model: graphpass.Model) -> object:
            return InlineFunctions().run(model, context)
    elif job == "train-ready":
        run_pipeline = _run_as_the_cli(graphpass.PassManager(["train-ready"]))

    def with_graphpass() -> dict[str, float]:
        watch = Stopwatch()
        model = graphpass.load(source)
        phases = {"load": watch.lap()}
        if run_pass is not None:
            run_pass(model)
            phases["inline"] = watch.lap()
        elif run_pipeline is not None:
            result = run_pipeline(model)
            if not result.ok:
                raise RuntimeError(f"train-ready stopped: {result.findings[:3]}")
            model = result.model
            phases["run"] = watch.lap()
        graphpass.save(model, out)
        phases["save"] = watch.lap()
        return {**phases, "cpu": watch.cpu, "wall": watch.wall}
    return with_graphpass


def _run_as_the_cli(manager: Any) -> Callable[[Any], Any]:
    """``manager.run`` as ``graphpass run`` calls it: on the loaded model, not a copy.

    Decided before the clock starts. (An older graphpass, run by ``--before``, has no
    ``copy`` argument: it always copied.)
    """
    import inspect

    if "copy" in inspect.signature(manager.run).parameters:
        return lambda model: manager.run(model, copy=False)
    return manager.run


def _worker(job: str, tool: str, source: str) -> None:
    with tempfile.TemporaryDirectory(prefix="graphpass-limits-") as folder:
        work = _work(job, tool, Path(source), Path(folder) / "out.onnx")
        imported = _rss_now_mb()
        result = work()
        result["peak_rss_mb"] = peak_rss_bytes() / 2**20
        result["imports_rss_mb"] = imported
        print(json.dumps(result))


# ================================================================ measuring
Config = tuple[str, str]  # (label, interpreter)


def measure(job: str, tools: list[tuple[str, str, str]], source: Path, repeats: int
            ) -> dict[str, dict[str, float]]:
    """Best of ``repeats`` for each ``(label, tool, python)``, the tools taking turns."""
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in tools}
    for _ in range(repeats):
        for label, tool, python in tools:
            runs[label].append(run_worker(__file__, job, tool, str(source), python=python))
    best = {label: min(results, key=lambda r: r["cpu"]) for label, results in runs.items()}
    for label, result in best.items():
        result["peak_rss_mb"] = min(r["peak_rss_mb"] for r in runs[label])
    return best


def slope(sizes: list[int], times: list[float]) -> list[float]:
    """The exponent k of ``time ~ size^k`` between consecutive sizes."""
    return [math.log(times[i + 1] / times[i]) / math.log(sizes[i + 1] / sizes[i])
            for i in range(len(sizes) - 1)]


# =================================================================== report
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", metavar="PYTHON",
                        help="an interpreter whose graphpass is the version to compare with")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--growth", action="store_true")
    parser.add_argument("--only", default="inline,roundtrip,train-ready",
                        help="rows to measure (for a quick look; the table needs all three)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--worker", nargs=3, metavar=("JOB", "TOOL", "MODEL"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker)
        return
    here = sys.executable
    ours = [("graphpass", "graphpass", here)]
    if args.before:
        ours.insert(0, ("graphpass before", "graphpass", args.before))
    results: dict[str, Any] = {"machine": _machine(), "before": args.before}

    only = set(args.only.split(","))
    calls, calls4 = args.calls, args.calls * 4
    results["inline"] = {}
    for size in (calls, calls4) if "inline" in only else ():
        results["inline"][size] = measure(
            "inline", [*ours, ("onnx.inliner (C++)", "onnx", here)], inline_model(size),
            args.repeats)
        _progress("inline", size, results["inline"][size])
    model = roundtrip_model(args.nodes)
    if "roundtrip" in only:
        peers = [("protobuf", "onnx", here), ("onnx_ir", "onnx_ir", here)]
        results["roundtrip"] = measure("roundtrip", [*ours, *peers], model, args.repeats)
        _progress("load+save", args.nodes, results["roundtrip"])
    if "train-ready" in only:
        results["train-ready"] = measure("train-ready", ours, model, args.repeats)
        _progress("train-ready", args.nodes, results["train-ready"])
    if only != {"inline", "roundtrip", "train-ready"}:
        return
    if args.growth:
        results["growth"] = _growth(ours, args.repeats)
    summary = render(results, args.calls, args.nodes)
    print()
    print(summary)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    if args.write_docs:
        write_docs(summary, results)


def _growth(ours: list[tuple[str, str, str]], repeats: int) -> dict[str, Any]:
    growth: dict[str, Any] = {"inline": {}, "roundtrip": {}}
    for size in (5000, 20000, 50000):
        growth["inline"][size] = measure("inline", ours, inline_model(size),
                                         repeats)
        _progress("inline", size, growth["inline"][size])
    for size in (10_000, 100_000, 1_000_000):
        growth["roundtrip"][size] = measure("roundtrip", [*ours, ("protobuf", "onnx", ours[-1][2])],
                                            roundtrip_model(size),
                                            repeats if size < 1_000_000 else 1)
        _progress("load+save", size, growth["roundtrip"][size])
    return growth


def _progress(what: str, size: int, best: dict[str, dict[str, float]]) -> None:
    shown = ", ".join(f"{label} {r['cpu']:.2f} s / {r['peak_rss_mb']:.0f} MB"
                      for label, r in best.items())
    print(f"  {what:<12} {size:>9,}: {shown}", flush=True)


def _machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    today = datetime.date.today().isoformat()
    return (f"{today}, {platform.node()}, {platform.machine()}, {os.cpu_count()} cores "
            f"(load average {load:.1f} at the start), Python {platform.python_version()}, "
            f"onnx {onnx.__version__}")


def render(results: dict[str, Any], calls: int, nodes: int) -> str:
    """The markdown summary: the issue's table, then growth."""
    before = results.get("before")
    columns = ["graphpass before", "graphpass"] if before else ["graphpass"]
    inline = results["inline"]
    calls4 = calls * 4
    roundtrip = results["roundtrip"]
    protobuf = roundtrip["protobuf"]["cpu"]
    lines = [
        "| work | " + " | ".join(columns) + " | peer | " +
        " | ".join(f"{c} / peer" for c in columns) + " | goal |",
        "|---|" + "---:|" * len(columns) + "---|" + "---:|" * len(columns) + "---|",
    ]

    def row(work: str, ours: list[float], peer: str, peer_value: float, goal: str,
            unit: str = "s") -> None:
        fmt = "{:.0f} MB" if unit == "MB" else "{:.2f} s"
        lines.append(f"| {work} | " + " | ".join(fmt.format(v) for v in ours) +
                     f" | {peer} {fmt.format(peer_value)} | " +
                     " | ".join(f"{v / peer_value:.2f}x" for v in ours) + f" | {goal} |")

    cpp = inline[calls]["onnx.inliner (C++)"]["cpu"]
    row(f"load + inline-functions + save, {calls:,} calls",
        [inline[calls][c]["cpu"] for c in columns], "onnx C++ inliner", cpp, "2x")
    growth_cells = " | ".join(
        f"x{inline[calls4][c]['cpu'] / inline[calls][c]['cpu']:.2f}" for c in columns)
    cpp_growth = inline[calls4]["onnx.inliner (C++)"]["cpu"] / cpp
    lines.append(f"| same, {calls:,} -> {calls4:,} calls (time for 4x the work) | "
                 f"{growth_cells} | C++ inliner x{cpp_growth:.2f} | "
                 + " | ".join("" for _ in columns) + " | at most x4.4 |")
    row(f"load + save, {nodes:,} nodes", [roundtrip[c]["cpu"] for c in columns],
        "protobuf", protobuf, "3x")
    row(f"load + save, {nodes:,} nodes", [roundtrip[c]["cpu"] for c in columns],
        "onnx_ir", roundtrip["onnx_ir"]["cpu"], "")
    row("peak RSS, same load + save", [roundtrip[c]["peak_rss_mb"] for c in columns],
        "protobuf", roundtrip["protobuf"]["peak_rss_mb"], "2x", unit="MB")
    row("peak RSS, same load + save", [roundtrip[c]["peak_rss_mb"] for c in columns],
        "onnx_ir", roundtrip["onnx_ir"]["peak_rss_mb"], "", unit="MB")
    train = results["train-ready"]
    row(f"load + train-ready + save, {nodes:,} nodes", [train[c]["cpu"] for c in columns],
        "protobuf load + save", protobuf, "5x")
    lines += ["", "Where graphpass's time goes (CPU s):", ""]
    for work, table in (("inline", inline[calls]), ("load + save", roundtrip),
                        ("train-ready", train)):
        for column in columns:
            phases = {k: v for k, v in table[column].items()
                      if k not in ("cpu", "wall", "peak_rss_mb", "imports_rss_mb")}
            shown = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
            lines.append(f"- {work}, {column}: {shown}")
    imports = ", ".join(f"{label} {r['imports_rss_mb']:.0f} MB" for label, r in roundtrip.items())
    lines.append(f"- RSS after the imports, before loading: {imports}")
    growth = results.get("growth")
    if growth:
        lines += ["", "Growth (time ~ size^k between consecutive sizes; 1.0 is linear):", ""]
        for work, unit, table in (("load + inline + save", "calls", growth["inline"]),
                                  ("load + save", "nodes", growth["roundtrip"])):
            sizes = sorted(int(s) for s in table)
            for column in next(iter(table.values())):
                times = [table[s if s in table else str(s)][column]["cpu"] for s in sizes]
                steps = ", ".join(f"{a:,}->{b:,} {unit}: k={k:.2f} (x{tb / ta:.1f})"
                                  for a, b, k, ta, tb in zip(sizes, sizes[1:],
                                                             slope(sizes, times), times,
                                                             times[1:], strict=False))
                cells = ", ".join(f"{s:,}: {t:.2f} s" for s, t in zip(sizes, times, strict=True))
                lines.append(f"- {work}, {column}: {cells}; {steps}")
    return "\n".join(lines)


def write_docs(summary: str, results: dict[str, Any]) -> None:
    """Replace (or append) this benchmark's section in docs/benchmarks.md."""
    write_docs_section("limits", [
        "## At the limit: against protobuf's own cost",
        "",
        "`benchmarks/limits.py`: each measurement in a fresh process, the tools taking turns, "
        "best of the runs, CPU seconds; peak RSS is the process's high-water mark, imports "
        f"included. Machine: {results['machine']}.",
        "",
        summary,
    ])


if __name__ == "__main__":
    main()
