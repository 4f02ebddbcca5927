"""How ``lint-gradients`` scales, against asking the trainer itself.

Builds MLP chains of growing depth (MatMul, Add, Relu per layer, one weight matrix and one
bias each, no value_info: the lint has to infer types) and times

* ``lint-gradients`` (in this process), and
* onnxruntime-training 1.19.2's ``generate_artifacts`` on the same model (in its venv, one
  batch process; the time of each job excludes the venv's start),

and prints the time per node (flat when the pass is linear) and the ratio lint / ORT.

Usage::

    .venv/bin/python benchmarks/gradient_lint_scaling.py [--sizes 250 500 1000 2000 4000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from ort_training import gradient_corpus as corpus  # noqa: E402

import graphpass  # noqa: E402
from graphpass.framework._pass_base import PassContext  # noqa: E402
from graphpass.framework._plugin_loading import default_registry  # noqa: E402
from graphpass.passes.lint_gradients import LintGradients  # noqa: E402

WIDTH = 8


def chain(layers: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, weights, value = [], [], "x"
    for i in range(layers):
        weights.append(numpy_helper.from_array(
            rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.1, f"layer{i}.weight"))
        weights.append(numpy_helper.from_array(np.zeros(WIDTH, np.float32), f"layer{i}.bias"))
        nodes += [helper.make_node("MatMul", [value, f"layer{i}.weight"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"layer{i}.bias"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
        value = f"h{i}"
    nodes.append(helper.make_node("ReduceSum", [value], ["loss"], keepdims=0))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def time_lint(proto: onnx.ModelProto, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        model = graphpass.Model.from_proto(proto)
        begin = time.perf_counter()
        result = LintGradients({"loss": ["loss"]}).run(
            model, PassContext(registry=default_registry()))
        best = min(best, time.perf_counter() - begin)
        assert not result.findings, result.findings
    return best


def time_ort(python: str, protos: dict[int, onnx.ModelProto]) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as scratch:
        jobs = []
        for layers, proto in protos.items():
            path = Path(scratch) / f"chain{layers}.onnx"
            onnx.save(proto, path)
            jobs.append({"id": layers, "model": str(path)})
        results = corpus.run_oracle(python, jobs, Path(scratch))
    for result in results.values():
        assert result["ok"], result["error"]
    return {int(layers): float(r["seconds"]) for layers, r in results.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[250, 500, 1000, 2000, 4000])
    parser.add_argument("--ort-python", default=os.environ.get(
        "GRAPHPASS_ORT_TRAINING_PYTHON", str(REPO / ".venv-ort-training" / "bin" / "python")))
    args = parser.parse_args()
    protos = {layers: chain(layers) for layers in args.sizes}
    lint = {layers: time_lint(proto) for layers, proto in protos.items()}
    ort = time_ort(args.ort_python, protos) if Path(args.ort_python).exists() else {}
    print(f"{'layers':>7} {'nodes':>7} {'lint ms':>9} {'us/node':>8} {'ORT ms':>9} "
          f"{'lint/ORT':>9}")
    for layers in args.sizes:
        nodes = 3 * layers + 1
        ort_ms = ort.get(layers, float("nan")) * 1000
        print(f"{layers:7d} {nodes:7d} {lint[layers] * 1000:9.1f} "
              f"{lint[layers] * 1e6 / nodes:8.1f} {ort_ms:9.1f} "
              f"{lint[layers] * 1000 / ort_ms:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
