"""Benchmark: load + to_proto + save of a synthetic model, graphpass against onnx and onnx_ir.

The model is a chain of blocks ``MatMul -> Add -> LeakyRelu(alpha)`` with two small
initializers per block, named nodes, and a ``value_info`` entry for every tenth
value, at 10k, 100k and 1M nodes. For each size and tool a fresh Python process
does, from file to file:

* graphpass: ``graphpass.load`` -> ``Model.to_proto`` -> ``graphpass.save``
* onnx_ir: ``onnx_ir.load`` -> ``onnx_ir.serde.serialize_model`` -> ``onnx_ir.save``
* onnx: ``onnx.load`` -> ``onnx.save`` (a protobuf needs no conversion)

Times are CPU seconds of that process (``time.process_time``: on a shared machine
wall time mostly measures the neighbours), best of ``--repeats`` runs; wall time
and the peak RSS of the process are reported too. The summary gives the ratio to
each peer and how graphpass's time grows with size: the exponent ``k`` in
``time ~ nodes^k`` between consecutive sizes (1.0 is linear).

Usage::

    .venv/bin/python benchmarks/roundtrip.py [--sizes 10000,100000,1000000] [--repeats 2]
                                             [--write-docs]

``--write-docs`` replaces this benchmark's section in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
from pathlib import Path

import onnx
from _bench import Stopwatch, peak_rss_bytes, run_worker, write_docs_section
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent
CACHE = ROOT / ".cache"
RESULTS = ROOT / "results" / "roundtrip.json"
TOOLS = ("graphpass", "onnx_ir", "onnx")


# ================================================================ the model
def make_model(nodes: int) -> onnx.ModelProto:
    """A chain of ``nodes // 3`` blocks of MatMul, Add and LeakyRelu."""
    blocks = max(1, nodes // 3)
    graph_nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    value_info: list[onnx.ValueInfoProto] = []
    previous = "x"
    for block in range(blocks):
        weight, bias = f"w{block}", f"b{block}"
        initializers.append(helper.make_tensor(weight, TensorProto.FLOAT, [4, 4],
                                               [0.25] * 16))
        initializers.append(helper.make_tensor(bias, TensorProto.FLOAT, [4], [0.1] * 4))
        mm, add, act = f"mm{block}", f"add{block}", f"act{block}"
        graph_nodes.append(helper.make_node("MatMul", [previous, weight], [mm], name=f"{mm}_n"))
        graph_nodes.append(helper.make_node("Add", [mm, bias], [add], name=f"{add}_n"))
        graph_nodes.append(helper.make_node("LeakyRelu", [add], [act], name=f"{act}_n",
                                            alpha=0.01))
        if block % 3 == 0:
            value_info.append(helper.make_tensor_value_info(mm, TensorProto.FLOAT, ["N", 4]))
        previous = act
    graph = helper.make_graph(
        graph_nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["N", 4])],
        initializers, value_info=value_info)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                             producer_name="graphpass-benchmark")


def model_path(nodes: int) -> Path:
    """The synthetic model of ``nodes`` nodes, generated once into the cache folder."""
    path = CACHE / f"roundtrip-chain-{nodes}.onnx"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        onnx.save(make_model(nodes), tmp)
        os.replace(tmp, path)
    return path


# ============================================================ one measurement
def _measure(tool: str, source: Path, out_dir: Path) -> dict[str, float]:
    """Run one tool's load / to_proto / save in this process; return CPU and wall times."""
    import onnx_ir

    import graphpass

    out = out_dir / "out.onnx"
    watch = Stopwatch()
    result: dict[str, float] = {}
    if tool == "graphpass":
        model = graphpass.load(source)
        result["load"] = watch.lap()
        model.to_proto()
        result["to_proto"] = watch.lap()
        graphpass.save(model, out)
    elif tool == "onnx_ir":
        model = onnx_ir.load(source)
        result["load"] = watch.lap()
        onnx_ir.serde.serialize_model(model)
        result["to_proto"] = watch.lap()
        onnx_ir.save(model, out)
    else:
        proto = onnx.load(source)
        result["load"] = watch.lap()
        result["to_proto"] = watch.lap()
        onnx.save(proto, out)
    result["save"] = watch.lap()
    result["cpu"], result["wall"] = watch.cpu, watch.wall
    result["peak_rss_mb"] = peak_rss_bytes() / 2**20
    return result


def _worker(tool: str, source: str) -> None:
    with tempfile.TemporaryDirectory(prefix="graphpass-bench-") as folder:
        print(json.dumps(_measure(tool, Path(source), Path(folder))))


# ==================================================================== report
def growth(sizes: list[int], times: list[float]) -> list[float]:
    """The exponent k of ``time ~ size^k`` between consecutive sizes."""
    return [math.log(times[i + 1] / times[i]) / math.log(sizes[i + 1] / sizes[i])
            for i in range(len(sizes) - 1)]


def render(results: dict[str, dict[int, dict[str, float]]], sizes: list[int]) -> str:
    """The markdown summary: per-size times, ratios, growth."""
    lines = [
        "| nodes | tool | load | to_proto | save | total CPU s | µs/node | wall s | peak RSS MB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        for tool in TOOLS:
            r = results[tool][size]
            lines.append(
                f"| {size:,} | {tool} | {r['load']:.2f} | {r['to_proto']:.2f} | {r['save']:.2f} "
                f"| {r['cpu']:.2f} | {r['cpu'] / size * 1e6:.1f} | {r['wall']:.2f} "
                f"| {r['peak_rss_mb']:.0f} |")
    lines += ["", "| nodes | graphpass / onnx_ir | graphpass / onnx |", "|---:|---:|---:|"]
    for size in sizes:
        ours = results["graphpass"][size]["cpu"]
        lines.append(f"| {size:,} | {ours / results['onnx_ir'][size]['cpu']:.2f}x "
                     f"| {ours / results['onnx'][size]['cpu']:.2f}x |")
    lines.append("")
    for tool in TOOLS:
        exponents = growth(sizes, [results[tool][s]["cpu"] for s in sizes])
        steps = ", ".join(f"{a:,}->{b:,}: k={k:.2f}"
                          for a, b, k in zip(sizes, sizes[1:], exponents, strict=False))
        lines.append(f"- growth of {tool} (time ~ nodes^k): {steps}")
    return "\n".join(lines)


def write_docs(summary: str, sizes: list[int]) -> None:
    """Replace (or append) this benchmark's section in docs/benchmarks.md."""
    write_docs_section("roundtrip", [
        "## Round trip: load, to_proto, save",
        "",
        "`benchmarks/roundtrip.py`: a chain of `MatMul -> Add -> LeakyRelu` blocks (two "
        "initializers per block, named nodes, `value_info` for every ninth value), each tool in "
        "a fresh process, file to file. CPU seconds, best of the runs; machine: "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"onnx {onnx.__version__}, onnx_ir {_version('onnx_ir')}.",
        "",
        summary,
        "",
        "Why it is linear: a first version of the loader took 0.86 s for 100k nodes, 2.2 s "
        "for 200k and 5.4 s for 400k. The cause was Python's cyclic garbage collector: "
        "loading allocates millions of small objects that all stay alive (nodes, values, "
        "networkx's adjacency dicts), and each allocation burst triggered collections that "
        "scanned the growing set of live objects again. graphpass now pauses the collector "
        "while it converts or copies a model (`graphpass.ir._gc.paused_gc`; its docstring "
        "has the details: small blocks go straight to the oldest generation, with an "
        "account that triggers full collections so dropped models are freed; large ones "
        "age normally), and avoids per-node work that is not needed (one walk over the "
        "nodes to check external data, no generator per node when looking for subgraphs). "
        "The model's objects are still scanned once by the collector after a large load, "
        "which is why `load` is the largest share.",
    ])


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except ImportError:
        return "not installed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, dict[int, dict[str, float]]] = {tool: {} for tool in TOOLS}
    for size in sizes:
        source = model_path(size)
        for tool in TOOLS:
            runs = [run_worker(__file__, tool, str(source)) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["cpu"])
            results[tool][size] = best
            print(f"{size:>9,} nodes  {tool:<9} {best['cpu']:7.2f} s CPU  "
                  f"{best['wall']:7.2f} s wall  {best['peak_rss_mb']:7.0f} MB", flush=True)
    summary = render(results, sizes)
    print()
    print(summary)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"sizes": sizes, "results": results}, indent=2))
    if args.write_docs:
        write_docs(summary, sizes)


if __name__ == "__main__":
    main()
