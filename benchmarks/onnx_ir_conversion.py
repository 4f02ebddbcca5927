"""Benchmark: converting a graphpass model to onnx_ir and back, against onnx_ir.load + save.

Every ecosystem pass (``onnx-ir-*``, ``onnxscript-*``, a plugin's pattern rewrites)
converts the model to an ``onnx_ir.Model`` and back
(``graphpass.files._onnx_ir_bridge.OnnxIRConversion``). This measures that cost on the
synthetic chain of ``benchmarks/roundtrip.py`` (MatMul -> Add -> LeakyRelu blocks, two
initializers per block) and puts it next to what onnx_ir itself spends to read and write
the same file. For each size, fresh Python processes measure:

* graphpass, changed: ``OnnxIRConversion(model)`` (to onnx_ir), then a change of the
  graph's name (so that the way back runs in full: serialization, the merge that keeps
  what did not change, reading back) and ``to_model()`` (back). The model is loaded with
  ``graphpass.load`` first, outside the measurement: in a pipeline it is already loaded.
* graphpass, unchanged: ``OnnxIRConversion(model)`` and ``changed()`` (what a pass that
  changes nothing costs: nothing is converted back).
* onnx_ir: ``onnx_ir.load`` + ``onnx_ir.save`` of the file.

CPU seconds (``time.process_time``), best of ``--repeats``; the ratio is graphpass's
conversion (to + back) over onnx_ir's load + save; the issue asks for at most 2x.

Usage::

    .venv/bin/python benchmarks/onnx_ir_conversion.py [--sizes 10000,100000] [--repeats 2]
                                                      [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

from _bench import Stopwatch, peak_rss_bytes, run_worker, write_docs_section
from roundtrip import model_path

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "onnx_ir_conversion.json"
KINDS = ("changed", "unchanged", "onnx_ir")
LIMIT = 2.0


def _measure(kind: str, source: Path) -> dict[str, float]:
    import onnx_ir

    import graphpass
    from graphpass.files import OnnxIRConversion

    result: dict[str, float] = {}
    if kind == "onnx_ir":
        with tempfile.TemporaryDirectory(prefix="graphpass-bench-") as folder:
            watch = Stopwatch()
            model = onnx_ir.load(source)
            result["to"] = watch.lap()
            onnx_ir.save(model, Path(folder) / "out.onnx")
            result["back"] = watch.lap()
    else:
        loaded = graphpass.load(source)
        watch = Stopwatch()
        conversion = OnnxIRConversion(loaded)
        result["to"] = watch.lap()
        if kind == "changed":
            conversion.ir_model.graph.name = "changed by the benchmark"
            back = conversion.to_model()
            assert back is not loaded and back.graph.name == "changed by the benchmark"
        else:
            assert not conversion.changed()
        result["back"] = watch.lap()
    result["cpu"], result["wall"] = watch.cpu, watch.wall
    result["peak_rss_mb"] = peak_rss_bytes() / 2**20
    return result


def render(results: dict[str, dict[int, dict[str, float]]], sizes: list[int]) -> str:
    """The markdown summary: per-size times and the ratio to onnx_ir."""
    names = {"changed": "graphpass, changed (to onnx_ir + back)",
             "unchanged": "graphpass, unchanged (to onnx_ir + changed())",
             "onnx_ir": "onnx_ir.load + onnx_ir.save"}
    lines = ["| nodes | what | to / load | back / save | total CPU s | peak RSS MB |",
             "|---:|---|---:|---:|---:|---:|"]
    for size in sizes:
        for kind in KINDS:
            r = results[kind][size]
            lines.append(f"| {size:,} | {names[kind]} | {r['to']:.2f} | {r['back']:.2f} "
                         f"| {r['cpu']:.2f} | {r['peak_rss_mb']:.0f} |")
    lines += ["", "| nodes | changed / onnx_ir | unchanged / onnx_ir |", "|---:|---:|---:|"]
    for size in sizes:
        base = results["onnx_ir"][size]["cpu"]
        lines.append(f"| {size:,} | {results['changed'][size]['cpu'] / base:.2f}x "
                     f"| {results['unchanged'][size]['cpu'] / base:.2f}x |")
    return "\n".join(lines)


def write_docs(summary: str) -> None:
    """Replace (or append) this benchmark's section in docs/benchmarks.md."""
    import onnx
    import onnx_ir

    write_docs_section("onnx-ir-conversion", [
        "## The onnx_ir conversion",
        "",
        "`benchmarks/onnx_ir_conversion.py`: what every ecosystem pass (`onnx-ir-*`, "
        "`onnxscript-*`, a plugin's pattern rewrites) pays to convert the model to onnx_ir "
        "and back, on the chain model of the round-trip benchmark, next to "
        "`onnx_ir.load` + `onnx_ir.save` of the same file (the issue's budget: 2x). Each "
        "measurement in a fresh process, CPU seconds, best of the runs; machine: "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"onnx {onnx.__version__}, onnx_ir {onnx_ir.__version__}.",
        "",
        summary,
        "",
        "Where the time goes: the way there is graphpass's `to_proto` plus onnx_ir's own "
        "reader (`onnx_ir.serde.deserialize_model`) plus remembering each object's state; the "
        "way back writes the nodes and initializers a pass changed with onnx_ir's writer (the "
        "others are copied from the original), merges declarations, and reads the result "
        "with graphpass's reader. Python's collector scans the objects each way makes once "
        "(about a third of the time at 100k nodes). Weights are not part of it: the "
        "conversion hands them over as lazy tensors and keeps graphpass's own on the way "
        "back. A pass that changes "
        "nothing pays the way there and one comparison of states.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_measure(args.worker[0], Path(args.worker[1]))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, dict[int, dict[str, float]]] = {kind: {} for kind in KINDS}
    for size in sizes:
        source = model_path(size)
        for kind in KINDS:
            runs = [run_worker(__file__, kind, str(source)) for _ in range(args.repeats)]
            results[kind][size] = min(runs, key=lambda r: r["cpu"])
            best = results[kind][size]
            print(f"{size:>9,} nodes  {kind:<10} {best['cpu']:7.2f} s CPU  "
                  f"{best['peak_rss_mb']:7.0f} MB", flush=True)
    summary = render(results, sizes)
    print()
    print(summary)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"sizes": sizes, "results": results}, indent=2))
    if args.write_docs:
        write_docs(summary)
    worst = max(results["changed"][s]["cpu"] / results["onnx_ir"][s]["cpu"] for s in sizes)
    if worst > LIMIT:
        raise SystemExit(f"the conversion costs {worst:.2f}x onnx_ir.load + save (limit {LIMIT}x)")


if __name__ == "__main__":
    main()
