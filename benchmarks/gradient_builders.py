"""Every built-in gradient builder against finite differences, and training graphs against torch.

Three sweeps, the full versions of what ``make test`` samples:

* **node tests**: every one-node case of ONNX's backend tests whose operator has a
  built-in builder (all sizes), in float64, against central differences;
* **random models**: ``--examples`` hypothesis examples per operator (broadcasting,
  attributes, static and symbolic shapes), the same check;
* **torch models**: ``gradient.onnx``'s loss and gradients against ``torch.autograd``
  and ten ``step.onnx`` runs against ``torch.optim.AdamW``, on the models of
  ``tests/_training_models.py``;
* **scaling**: the CPU time of building the training graphs of residual
  MatMul/Gelu/LayerNorm stacks of 100 to 800 blocks (ratios per doubling).

It prints a table per sweep and writes the counts into ``docs/benchmarks.md``.

Usage::

    .venv/bin/python benchmarks/gradient_builders.py [--examples 100] [--only Conv,Gather]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ.setdefault("GRAPHPASS_FULL_SWEEP", "1")

from _bench import write_docs_section  # noqa: E402


def node_sweep(only: set[str]) -> dict[str, Counter[str]]:
    from _gradcheck import CaseResult, check_node_case, node_cases

    counts: dict[str, Counter[str]] = defaultdict(Counter)
    errors: dict[str, float] = defaultdict(float)
    for case in node_cases(only or None):
        op_type = case.model.graph.node[0].op_type
        try:
            result = check_node_case(case)
        except Exception as error:  # a crash is a failure to count, not to hide
            result = CaseResult(case.name, op_type, "failed", f"{type(error).__name__}: {error}")
        counts[op_type][result.status] += 1
        counts[op_type]["directions"] += result.directions
        errors[op_type] = max(errors[op_type], result.max_error)
        if result.status == "failed":
            print(f"  FAILED {case.name}: {result.detail[:300]}", flush=True)
    for op_type, error in errors.items():
        counts[op_type]["max_error_e12"] = int(error * 1e12)
    return counts


def random_sweep(only: set[str], examples: int) -> dict[str, dict[str, object]]:
    from _gradient_cases import CASES, run_random

    found: dict[str, dict[str, object]] = {}
    for op_type in sorted(CASES):
        if only and op_type not in only:
            continue
        try:
            tally = run_random(op_type, examples)
            found[op_type] = {"examples": tally.examples, "passed": tally.passed,
                              "directions": tally.directions, "kinks": tally.kinks,
                              "max_error": tally.max_error}
        except Exception as error:  # hypothesis re-raises the shrunk failure
            found[op_type] = {"examples": 0, "passed": 0, "failed": str(error)[:300]}
            print(f"  FAILED {op_type}: {str(error)[:300]}", flush=True)
    return found


def torch_sweep() -> dict[str, dict[str, float]]:
    import onnxruntime
    from _training_models import exported, recipes, torch_loss
    from safetensors.numpy import load_file

    import graphpass

    found: dict[str, dict[str, float]] = {}
    for name, recipe in recipes().items():
        with tempfile.TemporaryDirectory() as folder:
            train = Path(folder) / "train"
            graphpass.PassManager(["inline-functions", "build-training-graph"], options={
                "build-training-graph": {"directory": str(train), "loss": recipe.loss}}
            ).run(graphpass.load(exported(name)))
            manifest = json.loads((train / "manifest.json").read_text())
            weights = load_file(str(train / "weights.safetensors"))
            feeds = {**recipe.batch(), "target": recipe.target(), **weights}
            session = onnxruntime.InferenceSession(str(train / "gradient.onnx"))
            loss, *grads = session.run(None, feeds)
            module = recipe.make()
            expected = torch_loss(module, recipe)
            expected.backward()
            state = module.state_dict(keep_vars=True)
            worst = max(float(np.abs(g - state[w].grad.numpy()).max()
                              / max(float(np.abs(state[w].grad.numpy()).max()), 1e-6))
                        for w, g in zip(manifest["trainable"], grads, strict=True))
            found[name] = {"weights": len(grads),
                           "loss_error": abs(float(loss) - float(expected.detach())),
                           "max_relative_gradient_error": worst,
                           "adamw_10_steps_max_difference": _adamw(train, recipe, manifest)}

    return found


def _adamw(train: Path, recipe: object, manifest: dict[str, object]) -> float:
    import onnxruntime
    import torch
    from _training_models import torch_loss
    from safetensors.numpy import load_file

    session = onnxruntime.InferenceSession(str(train / "step.onnx"))
    values = {**load_file(str(train / "weights.safetensors")),
              **load_file(str(train / "optimizer_state.safetensors"))}
    step = manifest["step"]
    assert isinstance(step, dict)
    for _ in range(10):
        feeds = {**recipe.batch(), "target": recipe.target(),  # type: ignore[attr-defined]
                 "lr": np.array(1e-2, np.float32),
                 **{n: values[n] for n in step["inputs"] if n in values}}
        outputs = dict(zip(step["outputs"], session.run(None, feeds), strict=True))
        for source, updated in step["carry"]:
            values[source] = outputs[updated]
    module = recipe.make()  # type: ignore[attr-defined]
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2)
    for _ in range(10):
        optimizer.zero_grad()
        torch_loss(module, recipe).backward()
        optimizer.step()
    state = module.state_dict()
    trainable = manifest["trainable"]
    assert isinstance(trainable, list)
    return max(float(np.abs(values[w] - state[w].numpy()).max()) for w in trainable)


def scaling_sweep(blocks: tuple[int, ...] = (100, 200, 400, 800)) -> list[tuple[int, int, float]]:
    from onnx import TensorProto, helper, numpy_helper

    import graphpass
    from graphpass.training.graphs import build_training_graphs
    from graphpass.training.optimizers import AdamW

    rng = np.random.default_rng(0)
    found = []
    for count in blocks:
        nodes, weights, x = [], [], "x"
        for i in range(count):
            weights += [numpy_helper.from_array(rng.standard_normal((16, 16), np.float32), f"w{i}"),
                        numpy_helper.from_array(np.zeros(16, np.float32), f"b{i}"),
                        numpy_helper.from_array(np.ones(16, np.float32), f"g{i}")]
            nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                      helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                      helper.make_node("Gelu", [f"a{i}"], [f"e{i}"]),
                      helper.make_node("LayerNormalization", [f"e{i}", f"g{i}", f"b{i}"],
                                       [f"l{i}"]),
                      helper.make_node("Add", [f"l{i}", x], [f"r{i}"])]
            x = f"r{i}"
        graph = helper.make_graph(
            nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["n", 16])], weights)
        model = graphpass.Model.from_proto(helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10))
        started = time.process_time()
        graphs = build_training_graphs(model, trainable=list(model.graph.initializers),
                                       optimizer=AdamW())
        found.append((len(model.graph), len(graphs.step.graph), time.process_time() - started))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100,
                        help="random examples per operator (default 100)")
    parser.add_argument("--only", default="", help="comma-separated operators")
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    warnings.filterwarnings("ignore")
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        nodes = node_sweep(only)
    print(f"node tests ({time.perf_counter() - started:.0f} s)")
    print(f"{'operator':28} {'cases':>5} {'passed':>6} {'kinks':>5} {'refused':>7} "
          f"{'no grad':>7} {'failed':>6} {'dirs':>5} {'max err':>8}")
    for op_type in sorted(nodes):
        c = nodes[op_type]
        total = sum(c[k] for k in ("passed", "kinks", "refused", "no-gradient", "failed"))
        print(f"{op_type:28} {total:5} {c['passed']:6} {c['kinks']:5} {c['refused']:7} "
              f"{c['no-gradient']:7} {c['failed']:6} {c['directions']:5} "
              f"{c['max_error_e12'] / 1e12:8.1e}")
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        random = random_sweep(only, args.examples)
    print(f"\nrandom models, {args.examples} examples each ({time.perf_counter() - started:.0f} s)")
    for op_type, tally in random.items():
        print(f"{op_type:28} {tally}")
    torch_results = {} if args.skip_torch or only else torch_sweep()
    if torch_results:
        print("\ntorch models")
        for name, values in torch_results.items():
            print(f"{name:18} {values}")
    scaling = [] if only else scaling_sweep()
    if scaling:
        print("\nscaling: forward nodes, step-graph nodes, CPU seconds, ratio to the previous")
        for index, (forward, step_nodes, seconds) in enumerate(scaling):
            ratio = seconds / scaling[index - 1][2] if index else float("nan")
            print(f"{forward:6} {step_nodes:7} {seconds:7.2f} {ratio:5.2f}")
    failed = sum(c["failed"] for c in nodes.values()) + sum(
        1 for t in random.values() if "failed" in t)
    if not only:
        _write_docs(nodes, random, torch_results, args.examples, scaling)
    return 1 if failed else 0


def _write_docs(nodes: dict[str, Counter[str]], random: dict[str, dict[str, object]],
                torch_results: dict[str, dict[str, float]], examples: int,
                scaling: list[tuple[int, int, float]]) -> None:
    cases = sum(sum(c[k] for k in ("passed", "kinks", "refused", "no-gradient", "failed"))
                for c in nodes.values())
    passed = sum(c["passed"] for c in nodes.values())
    refused = sum(c["refused"] for c in nodes.values())
    random_passed = sum(int(t["passed"]) for t in random.values())  # type: ignore[call-overload]
    random_examples = sum(int(t["examples"]) for t in random.values())  # type: ignore[call-overload]
    worst = max(float(t.get("max_error", 0.0)) for t in random.values())  # type: ignore[arg-type]
    lines = [
        "## Gradient builders: finite differences and torch",
        "",
        f"`benchmarks/gradient_builders.py`: {len(random)} operators with built-in builders. "
        f"ONNX node tests: {passed} of {cases} cases pass in float64 against central "
        f"differences, {refused} are declared refusals (`AveragePool` with `ceil_mode`, "
        "`MaxPool` with `storage_order`, an `Einsum` diagonal, models below opset 13), the rest have no "
        "float input and output or sit on a kink. Random models: "
        f"{random_passed} of {random_examples} examples ({examples} per operator) pass, "
        f"largest relative error {worst:.1e}.",
        "",
        "| torch model | weights | loss error | max relative gradient error | "
        "AdamW, 10 steps: max difference |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {name} | {int(v['weights'])} | {v['loss_error']:.1e} | "
          f"{v['max_relative_gradient_error']:.1e} | {v['adamw_10_steps_max_difference']:.1e} |"
          for name, v in torch_results.items()),
        "",
        "Building the training graphs (gradient, AdamW step, eval) of residual "
        "MatMul/Gelu/LayerNorm stacks, CPU seconds: "
        + ", ".join(f"{forward} forward nodes {seconds:.2f} s" for forward, _, seconds
                    in scaling) + ".",
    ]
    write_docs_section("gradient-builders", lines)


if __name__ == "__main__":
    sys.exit(main())
