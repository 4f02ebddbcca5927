"""Benchmark: inline-functions against onnx's C++ inliner and onnx_ir's InlinePass.

Synthetic models: a chain of N calls (1k, 5k, 50k) of 20 model-local functions of
10 nodes each; every function has two attributes with declared defaults, and every
other call gives one of them. Each tool goes from file to file (load, inline,
save), best of a few runs, in this one process:

* graphpass: ``graphpass.load`` -> ``InlineFunctions().run`` -> ``graphpass.save``
* onnx.inliner: ``onnx.load`` -> ``onnx.inliner.inline_local_functions`` -> ``onnx.save``
* onnx_ir: ``onnx_ir.load`` -> ``onnx_ir.passes.common.InlinePass`` -> ``onnx_ir.save``

Times are CPU seconds of this process (``time.process_time``, user + system): on a
shared machine wall-clock times swing with the load, CPU times much less.

onnx_ir's pass grows quadratically; it is run only where its predicted time stays
under ``--onnx-ir-cap`` seconds, and extrapolated (clearly labelled) above.

The outputs of every tool's model are compared with the original's (onnxruntime runs
models with local functions itself) on the smallest size.

Exits 1 if graphpass's model computes other outputs than the original.

Usage::

    .venv/bin/python benchmarks/inline.py [--sizes 1000,5000,50000] [--repeats 3]
                                          [--onnx-ir-cap 120]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnx_ir
from _bench import Stopwatch
from onnx import helper, numpy_helper
from onnx_ir.passes.common import InlinePass

import graphpass
from graphpass.framework import PassContext, default_registry
from graphpass.passes.inline_functions import InlineFunctions

FUNCTIONS = 20
DOMAIN = "bench"
_FLOAT = onnx.AttributeProto.FLOAT


# ================================================================ the models
def _body(index: int) -> onnx.FunctionProto:
    """Ten nodes; LeakyRelu and Elu take their alpha from attributes with defaults."""
    def ref(name: str, to: str) -> onnx.AttributeProto:
        return onnx.AttributeProto(name=name, ref_attr_name=to, type=_FLOAT)

    steps = [("Add", ["x", "w"], "a", []), ("LeakyRelu", ["a"], "b", [ref("alpha", "alpha")]),
             ("Mul", ["b", "w"], "c", []), ("Sub", ["c", "x"], "d", []),
             ("Elu", ["d"], "e", [ref("alpha", "beta")]), ("Add", ["e", "x"], "f", []),
             ("Relu", ["f"], "g", []), ("Mul", ["g", "w"], "h", []),
             ("Tanh", ["h"], "i", []), ("Add", ["i", "x"], "y", [])]
    nodes = []
    for position, (op, inputs, output, attributes) in enumerate(steps):
        node = helper.make_node(op, inputs, [output], name=f"n{position}")
        node.attribute.extend(attributes)
        nodes.append(node)
    return helper.make_function(
        DOMAIN, f"F{index}", ["x", "w"], ["y"], nodes, [helper.make_opsetid("", 21)],
        attribute_protos=[helper.make_attribute("alpha", 0.1 + index / 100),
                          helper.make_attribute("beta", 0.5 + index / 100)])


def make_model(calls: int) -> onnx.ModelProto:
    """A chain of ``calls`` calls cycling through the 20 functions."""
    weights = [numpy_helper.from_array(np.full((4,), 0.01 * (i + 1), np.float32), f"W{i}")
               for i in range(FUNCTIONS)]
    nodes = []
    previous = "X"
    for position in range(calls):
        index = position % FUNCTIONS
        node = helper.make_node(f"F{index}", [previous, f"W{index}"], [f"v{position}"],
                                name=f"call{position}", domain=DOMAIN)
        if position % 2:
            node.attribute.append(helper.make_attribute("alpha", 0.2))
        nodes.append(node)
        previous = f"v{position}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("X", 1, [4])],
                              [helper.make_tensor_value_info(previous, 1, [4])], weights)
    return helper.make_model(graph, ir_version=10, functions=[_body(i) for i in range(FUNCTIONS)],
                             opset_imports=[helper.make_opsetid("", 21),
                                            helper.make_opsetid(DOMAIN, 1)])


# ================================================================ the tools
@dataclass(frozen=True)
class Tool:
    """How a tool loads a model file, inlines its functions, and saves it."""

    load: Callable[[Path], Any]
    inline: Callable[[Any], Any]
    save: Callable[[Any, Path], object]


def _graphpass_inline(model: graphpass.Model) -> graphpass.Model:
    InlineFunctions().run(model, PassContext(registry=default_registry()))
    return model


TOOLS: dict[str, Tool] = {
    "graphpass": Tool(graphpass.load, _graphpass_inline, graphpass.save),
    "onnx.inliner (C++)": Tool(onnx.load, onnx.inliner.inline_local_functions, onnx.save),
    "onnx_ir InlinePass": Tool(onnx_ir.load, lambda model: InlinePass()(model).model,
                               onnx_ir.save),
}


@dataclass
class Timing:
    load: float
    inline: float
    save: float
    measured: bool = True

    @property
    def total(self) -> float:
        return self.load + self.inline + self.save


def run(tool: Tool, source: Path, target: Path) -> Timing:
    """Load, inline and save, in this process; CPU seconds of each step."""
    watch = Stopwatch()
    model = tool.load(source)
    loaded = watch.lap()
    model = tool.inline(model)
    inlined = watch.lap()
    tool.save(model, target)
    return Timing(loaded, inlined, watch.lap())


def best_of(tool: Tool, source: Path, target: Path, repeats: int) -> Timing:
    runs = []
    for _ in range(repeats):
        gc.collect()
        runs.append(run(tool, source, target))
    return min(runs, key=lambda t: t.total)


def same_outputs(original: Path, candidate: Path) -> bool:
    import onnxruntime

    feeds = {"X": np.linspace(-1, 1, 4, dtype=np.float32)}
    outputs = [onnxruntime.InferenceSession(str(p), providers=["CPUExecutionProvider"])
               .run(None, feeds)[0] for p in (original, candidate)]
    return bool(np.allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-6))


# ================================================================ the report
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,50000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--onnx-ir-cap", type=float, default=120.0,
                        help="skip onnx_ir where its predicted time exceeds this (seconds)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[str, int], Timing] = {}
    correct: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for size in sizes:
            source = folder / f"chain{size}.onnx"
            onnx.save(make_model(size), source)
            repeats = args.repeats if size <= 10_000 else 1
            for name, tool in TOOLS.items():
                target = folder / f"{name.split()[0]}-{size}.onnx"
                if name.startswith("onnx_ir"):
                    predicted = _predict(results, name, size)
                    if predicted is not None and predicted > args.onnx_ir_cap:
                        results[(name, size)] = Timing(0.0, predicted, 0.0, measured=False)
                        continue
                    repeats = 1
                results[(name, size)] = best_of(tool, source, target, repeats)
                print(f"  {size:>6} calls  {name:<20} {results[(name, size)].total:8.3f} s",
                      flush=True)
            if size == sizes[0]:
                print("\noutputs equal the original's (onnxruntime):")
                for name in TOOLS:
                    target = folder / f"{name.split()[0]}-{size}.onnx"
                    if target.exists():
                        same = same_outputs(source, target)
                        correct[name] = same
                        verdict = "yes" if same else "NO (attribute defaults dropped)"
                        print(f"  {name:<20} {verdict}")
                print()
    _print_table(results, sizes)
    return 0 if correct.get("graphpass", True) else 1


def _predict(results: dict[tuple[str, int], Timing], name: str, size: int) -> float | None:
    """Predict a tool's time at ``size`` from its measured runs (power law)."""
    measured = sorted((s, t.total) for (n, s), t in results.items() if n == name and t.measured)
    if not measured:
        return None
    if len(measured) == 1:
        exponent = 2.0  # onnx_ir's pass is quadratic in call sites
    else:
        (s0, t0), (s1, t1) = measured[-2], measured[-1]
        exponent = math.log(t1 / t0) / math.log(s1 / s0)
    last_size, last_time = measured[-1]
    return last_time * (size / last_size) ** exponent


def _print_table(results: dict[tuple[str, int], Timing], sizes: list[int]) -> None:
    print("\nCPU seconds, best of the runs:")
    print(f"{'calls':>7}  {'tool':<20}{'load':>9}{'inline':>10}{'save':>9}{'total':>10}")
    for size in sizes:
        for name in TOOLS:
            timing = results.get((name, size))
            if timing is None:
                continue
            if timing.measured:
                print(f"{size:>7}  {name:<20}{timing.load:>9.3f}{timing.inline:>10.3f}"
                      f"{timing.save:>9.3f}{timing.total:>10.3f}")
            else:
                print(f"{size:>7}  {name:<20}{'':>28}{timing.total:>10.1f}  "
                      "(not run: extrapolated from the measured sizes)")
    ours = "graphpass"
    print("\nratios (total, load to save):")
    for size in sizes:
        mine = results[(ours, size)].total
        cpp = results[("onnx.inliner (C++)", size)].total
        line = f"  {size:>6} calls: graphpass / onnx.inliner = {mine / cpp:5.2f}x"
        onnx_ir = results.get(("onnx_ir InlinePass", size))
        if onnx_ir is not None:
            label = "" if onnx_ir.measured else " (extrapolated)"
            line += f";  onnx_ir / graphpass = {onnx_ir.total / mine:7.1f}x{label}"
        print(line)
    print("\ngrowth per size step (linear = the calls ratio):")
    for before, after in itertools.pairwise(sizes):
        for name in TOOLS:
            first, second = results.get((name, before)), results.get((name, after))
            if first is None or second is None or not (first.measured and second.measured):
                continue
            print(f"  {name:<20} {before:>6} -> {after:<6} calls x{after / before:<4.0f}: "
                  f"total x{second.total / first.total:5.1f}, inline x"
                  f"{second.inline / first.inline:5.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
