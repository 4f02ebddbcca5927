"""Benchmark: what the commit protocol of ``save`` costs when rewriting an output in place.

An output of 256 MiB of external weights is rewritten with new weights five times
(``graphpass.save(..., overwrite_input=True)``: lock, references of the current model
and of the other models in the folder, data streamed under its new name, fsyncs,
renames, the old data removed). Side by side, in the same process:

* graphpass, the folder holding only the output;
* graphpass, the folder holding four more models of 64 MiB of embedded weights each
  (read once for the data files they reference: the protocol never removes a data file
  another model uses);
* onnx: ``onnx.save_model(..., save_as_external_data=True)`` of the same model over the
  same file (no atomicity: it writes the data file in place).

Wall seconds per rewrite (the protocol is I/O: fsyncs and renames), and the share of a
graphpass rewrite spent outside writing the data (from the steps the test hook logs).

Usage::

    .venv/bin/python benchmarks/save_commit.py [--folder /tmp] [--rounds 5]
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

ELEMENTS = 64 * 2**20  # 256 MiB of float32


def _model(value: float, elements: int) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.full(elements, value, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [elements])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [elements])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _graphpass_rounds(folder: Path, rounds: int, neighbours: int) -> dict[str, float]:
    import graphpass
    from graphpass import Tensor

    out = folder / "m.onnx"
    graphpass.save(graphpass.Model.from_proto(_model(0.0, ELEMENTS)), out, external_data=True)
    for index in range(neighbours):
        onnx.save(_model(float(index), ELEMENTS // 4), folder / f"other{index}.onnx")
    steps = folder / "steps.txt"
    os.environ["GRAPHPASS_TEST_STEPS"] = str(steps)
    parts = dict.fromkeys(("total", "write data", "fsync data", "model", "the rest"), 0.0)
    try:
        for index in range(rounds):
            model = graphpass.load(out)
            model.graph.set_initializer(Tensor.from_array(
                "w", np.full(ELEMENTS, index + 1.0, np.float32)))
            steps.unlink(missing_ok=True)
            started = time.monotonic()
            graphpass.save(model, out, overwrite_input=True, external_data=True)
            ended = time.monotonic()
            logged = [(line.split(" ", 1)[1].rsplit(" ", 1)[0], float(line.rsplit(" ", 1)[1]))
                      for line in steps.read_text().splitlines()]
            created = [at for name, at in logged if name == "temporary created"]
            at = dict(logged)
            seconds = {"total": ended - started,
                       "write data": at["data written"] - created[0],
                       "fsync data": at["data synced"] - at["data written"],
                       "model": at["model synced"] - created[1]}
            seconds["the rest"] = seconds["total"] - sum(
                seconds[k] for k in ("write data", "fsync data", "model"))
            for key, value in seconds.items():
                parts[key] += value / rounds
    finally:
        del os.environ["GRAPHPASS_TEST_STEPS"]
    return parts


def _onnx_rounds(folder: Path, rounds: int) -> float:
    out = folder / "m.onnx"
    total = 0.0
    for index in range(rounds):
        model = _model(index + 1.0, ELEMENTS)
        started = time.monotonic()
        onnx.save_model(model, out, save_as_external_data=True, location="m.onnx.data",
                        size_threshold=0)
        total += time.monotonic() - started
    return total / rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="graphpass-commit-", dir=args.folder) as scratch:
        root = Path(scratch)
        for name, neighbours in (("graphpass, alone in its folder", 0),
                                 ("graphpass, next to 4 models of 64 MiB", 4)):
            folder = root / f"next-to-{neighbours}"
            folder.mkdir()
            rows.append((name, _graphpass_rounds(folder, args.rounds, neighbours)))
        folder = root / "onnx"
        folder.mkdir()
        rows.append(("onnx.save_model (not atomic, no fsync)",
                     {"total": _onnx_rounds(folder, args.rounds)}))
    peer = rows[-1][1]["total"]
    columns = ("total", "write data", "fsync data", "model", "the rest")
    print(f"rewriting an output of 256 MiB of external weights, {args.rounds} times; "
          "wall seconds per rewrite")
    print(f"{'':<40} " + " ".join(f"{c:>10}" for c in columns) + f" {'vs onnx':>8}")
    for name, seconds in rows:
        cells = " ".join(f"{seconds[c]:>10.3f}" if c in seconds else f"{'':>10}"
                         for c in columns)
        print(f"{name:<40} {cells} {seconds['total'] / peer:>7.2f}x")
    print("the rest: lock, references of the current and neighbouring models, renames, "
          "folder fsyncs, removing the old data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
