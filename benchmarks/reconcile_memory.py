"""Peak memory of filling a model from a large checkpoint (reconcile-initializers).

Builds a model whose 32 weight matrices are graph inputs (as ``export_params=False``
leaves them) and a checkpoint of at least 2 GB whose keys carry DDP's ``module.``
prefix, then measures, each in a fresh subprocess:

* graphpass: ``load`` -> ``PassManager(["reconcile-initializers"])`` -> ``save``;
* the usual alternative: ``safetensors.numpy.load_file`` + ``onnx.numpy_helper``
  + ``onnx.save_model(save_as_external_data=True)``.

Peak RSS is the child's high-water mark (``VmHWM``); the baseline is the RSS
after imports. graphpass's output is checked against the checkpoint bytes.

    .venv/bin/python benchmarks/reconcile_memory.py [--size-gb 2] [--formats safetensors,pt]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
from _bench import peak_rss_bytes, run_worker
from onnx import TensorProto, helper

LAYERS = 32
RESULTS = Path(__file__).resolve().parent / "results" / "reconcile_memory.json"


def _width(size_gb: float) -> int:
    """The matrix width that makes LAYERS float32 matrices add up to ``size_gb``."""
    return int(np.ceil(np.sqrt(size_gb * 2**30 / (LAYERS * 4)) / 64) * 64)


def build_model(path: Path, width: int) -> None:
    nodes, inputs = [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])]
    previous = "x"
    for layer in range(LAYERS):
        weight = f"layers.{layer}.weight"
        inputs.append(helper.make_tensor_value_info(weight, TensorProto.FLOAT, [width, width]))
        nodes.append(helper.make_node("MatMul", [previous, weight], [f"h{layer}"]))
        previous = f"h{layer}"
    graph = helper.make_graph(nodes, "big", inputs,
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT,
                                                             [1, width])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


def build_safetensors(path: Path, width: int) -> None:
    """Write the checkpoint piece by piece (never holding more than one chunk)."""
    nbytes = width * width * 4
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    for layer in range(LAYERS):
        header[f"module.layers.{layer}.weight"] = {
            "dtype": "F32", "shape": [width, width],
            "data_offsets": [layer * nbytes, (layer + 1) * nbytes]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rows = max(1, (16 * 2**20) // (width * 4))
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
        for layer in range(LAYERS):
            generator = np.random.default_rng(layer)
            for start in range(0, width, rows):
                count = min(rows, width - start)
                block = generator.standard_normal((count, width), dtype=np.float32) / width
                handle.write(block.tobytes())


def build_torch(path: Path, safetensors_path: Path) -> None:
    script = textwrap.dedent(f"""
        import torch
        from safetensors.torch import load_file
        torch.save(load_file({str(safetensors_path)!r}), {str(path)!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True)


def _graphpass(model_path: str, checkpoint: str, out: str) -> dict[str, object]:
    import psutil

    import graphpass

    if checkpoint.endswith(".pt"):
        import torch  # noqa: F401  (the torch loader needs it; count its import in the baseline)
    baseline = psutil.Process().memory_info().rss
    start = time.perf_counter()
    model = graphpass.load(model_path)
    result = graphpass.PassManager(["reconcile-initializers"], checkpoints=[checkpoint]).run(model)
    graphpass.save(result.model, out)
    seconds = time.perf_counter() - start
    stats = result.records[0].stats
    return {"peak": peak_rss_bytes(), "baseline": baseline, "seconds": seconds,
            "filled": stats["filled"], "matched_by": stats["matched by"]}


def _naive(model_path: str, checkpoint: str, out: str) -> dict[str, object]:
    import psutil
    from onnx import numpy_helper
    from safetensors.numpy import load_file

    baseline = psutil.Process().memory_info().rss
    start = time.perf_counter()
    model = onnx.load(model_path)
    weights = load_file(checkpoint)
    for key, array in weights.items():
        name = key.removeprefix("module.")
        model.graph.initializer.append(numpy_helper.from_array(array, name))
    kept = [i for i in model.graph.input if i.name == "x"]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    onnx.save_model(model, out, save_as_external_data=True, location="naive.onnx.data")
    seconds = time.perf_counter() - start
    return {"peak": peak_rss_bytes(), "baseline": baseline, "seconds": seconds,
            "filled": len(weights)}


_WORKERS = {"graphpass": _graphpass, "naive": _naive}


def measure(worker: str, *arguments: Path) -> dict[str, float]:
    """Run ``worker`` in a fresh process (its peak RSS is its own)."""
    return run_worker(__file__, worker, *map(str, arguments))


def check_output(output: Path, checkpoint: Path, width: int) -> None:
    """The first and last weights in the output data equal the checkpoint's bytes."""
    model = onnx.load(output, load_external_data=False)
    nbytes = width * width * 4
    with open(checkpoint, "rb") as handle:
        (header_size,) = struct.unpack("<Q", handle.read(8))
    for layer in (0, LAYERS - 1):
        tensor = next(t for t in model.graph.initializer if t.name == f"layers.{layer}.weight")
        info = {e.key: e.value for e in tensor.external_data}
        with open(output.parent / info["location"], "rb") as handle:
            handle.seek(int(info["offset"]))
            written = hashlib.sha256(handle.read(nbytes)).hexdigest()
        with open(checkpoint, "rb") as handle:
            handle.seek(8 + header_size + layer * nbytes)
            original = hashlib.sha256(handle.read(nbytes)).hexdigest()
        if written != original:
            raise SystemExit(f"layer {layer}: the output's bytes differ from the checkpoint's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--formats", default="safetensors",
                        help="comma-separated: safetensors, pt")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp)")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--worker", nargs=4, metavar=("WORKER", "MODEL", "CHECKPOINT", "OUT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker, *arguments = args.worker
        print(json.dumps(_WORKERS[worker](*arguments)))
        return
    work = args.dir or Path(tempfile.mkdtemp(prefix="graphpass-reconcile-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    width = _width(args.size_gb)
    try:
        model = work / "model.onnx"
        build_model(model, width)
        safetensors_path = work / "model.safetensors"
        build_safetensors(safetensors_path, width)
        size = safetensors_path.stat().st_size
        largest = width * width * 4
        rows = []
        for fmt in args.formats.split(","):
            checkpoint = safetensors_path
            if fmt == "pt":
                checkpoint = work / "model.pt"
                build_torch(checkpoint, safetensors_path)
            out = work / f"filled-{fmt}" / "model.onnx"
            out.parent.mkdir(exist_ok=True)
            measured = measure("graphpass", model, checkpoint, out)
            check_output(out, safetensors_path, width)
            rows.append({"tool": f"graphpass ({fmt})", **measured})
            shutil.rmtree(out.parent)
        if not args.skip_naive:
            out = work / "naive" / "naive.onnx"
            out.parent.mkdir(exist_ok=True)
            rows.append({"tool": "load_file + onnx.save_model", **measure("naive", model,
                                                                         safetensors_path, out)})
            shutil.rmtree(out.parent)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"checkpoint: {size / 2**30:.2f} GiB, {LAYERS} tensors of "
          f"{largest / 2**20:.0f} MiB")
    print(f"{'tool':34} {'peak RSS':>10} {'over baseline':>14} {'/ checkpoint':>13} {'s':>7}")
    for row in rows:
        extra = row["peak"] - row["baseline"]
        print(f"{row['tool']:34} {row['peak'] / 2**20:8.0f} MiB {extra / 2**20:10.0f} MiB "
              f"{row['peak'] / size:13.3f} {row['seconds']:7.1f}")
    if len(rows) > 1 and not args.skip_naive:
        print(f"peak RSS ratio graphpass / naive: {rows[0]['peak'] / rows[-1]['peak']:.3f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"checkpoint_bytes": size, "largest_tensor_bytes": largest,
                                   "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
