"""Benchmark: a model with 2.3 GiB of external weights, peak memory and time per save path.

The weights are one external data file (sparse: made with ``truncate``) holding
three 800 MiB tensors. Each case runs in a fresh process and reports its CPU and
wall time and its peak RSS (``VmHWM``):

* graphpass, save next to the data: ``load -> to_proto -> save`` in the same folder;
  the data file is referenced in place (nothing copied).
* graphpass, save elsewhere: the same to another folder; the data file is copied
  whole (``shutil.copyfile``, kernel-side copy).
* graphpass, save elsewhere without one tensor: the data is streamed tensor by
  tensor in 16 MiB chunks into a new file.
* onnx_ir: ``onnx_ir.load -> onnx_ir.save`` to another folder (lazy tensors, streamed).
* onnx: ``onnx.load`` (reads the weights) ``-> onnx.save`` with external data.

Usage::

    .venv/bin/python benchmarks/big_weights.py [--folder /tmp] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _bench import Stopwatch, peak_rss_bytes, run_worker, write_docs_section

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "big_weights.json"
TENSORS, ELEMENTS = 3, 200 * 1024 * 1024

CASES = [
    ("graphpass-in-place", "graphpass: save next to the data (referenced in place)"),
    ("graphpass-elsewhere", "graphpass: save to another folder (data file copied)"),
    ("graphpass-drop-one", "graphpass: drop one tensor, save elsewhere (data streamed)"),
    ("onnx_ir", "onnx_ir: load, save to another folder"),
    ("onnx", "onnx: load (reads the weights), save with external data"),
]


def _write_model(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT.parent / "tests"))
    from test_files_big import write_big_model

    return write_big_model(folder, TENSORS, ELEMENTS)


def _worker(case: str, source: str, target: str) -> None:
    """One case, in this (fresh) process: print its CPU and wall time and peak RSS."""
    import onnx
    import onnx_ir

    import graphpass

    watch = Stopwatch()
    if case.startswith("graphpass"):
        model = graphpass.load(source)
        model.to_proto()
        if case == "graphpass-drop-one":
            model.graph.remove_initializer("w0")
            model.graph.nodes[0].set_input(1, "x")
        graphpass.save(model, target)
    elif case == "onnx_ir":
        onnx_ir.save(onnx_ir.load(source), target, external_data="model.onnx.data")
    else:
        proto = onnx.load(source)
        onnx.save(proto, target, save_as_external_data=True, location="model.onnx.data")
    watch.lap()
    print(json.dumps({"cpu": watch.cpu, "wall": watch.wall,
                      "peak_rss_mb": peak_rss_bytes() / 2**20}))


def run_case(case: str, folder: Path) -> dict[str, float]:
    """Run one case in a fresh process on a fresh copy of the sparse model."""
    source_dir = folder / "source"
    shutil.rmtree(source_dir, ignore_errors=True)
    source = _write_model(source_dir)
    target_dir = source_dir if case == "graphpass-in-place" else folder / "out"
    shutil.rmtree(folder / "out", ignore_errors=True)
    target_dir.mkdir(exist_ok=True)
    target = target_dir / ("resaved.onnx" if target_dir == source_dir else "model.onnx")
    try:
        return run_worker(__file__, case, str(source), str(target))
    except RuntimeError as error:  # the last line of its stderr says why
        return {"error": str(error).splitlines()[-1][:200]}  # type: ignore[dict-item]


def render(results: dict[str, dict[str, float]]) -> str:
    """The markdown table."""
    weights = TENSORS * ELEMENTS * 4 / 2**30
    lines = [f"Weights: {weights:.2f} GiB in one external data file.", "",
             "| case | CPU s | wall s | peak RSS MB | peak RSS / weights |",
             "|---|---:|---:|---:|---:|"]
    for case, label in CASES:
        r = results[case]
        if "error" in r:
            lines.append(f"| {label} | failed: {r['error']} | | | |")
            continue
        lines.append(f"| {label} | {r['cpu']:.2f} | {r['wall']:.2f} | {r['peak_rss_mb']:.0f} "
                     f"| {r['peak_rss_mb'] / (weights * 1024):.1%} |")
    return "\n".join(lines)


def write_docs(summary: str) -> None:
    """Replace (or append) this benchmark's section in docs/benchmarks.md."""
    write_docs_section("big-weights", [
        "## Models over 2 GB: peak memory", "",
        "`benchmarks/big_weights.py`: each case in a fresh process; peak RSS is the "
        "process's high-water mark (`VmHWM`), imports included (about 90 MB). The weights "
        "file is sparse, so reading it costs nothing and the times are mostly writing.", "",
        summary, "",
        "graphpass never holds more than one 16 MiB chunk of weights: saving next to the "
        "data references it in place (nothing written), a data file used whole is copied "
        "inside the kernel (`copy_file_range`), a partly used one is streamed. Its saves "
        "are atomic and durable: every file is written under a temporary name, flushed to "
        "disk (`fsync`) and only then renamed into place. onnx_ir's save does not flush, "
        "which is most of the difference in time on this 2.3 GiB write; `onnx.load` reads "
        "all weights into memory."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=tempfile.gettempdir())
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--worker", nargs=3, metavar=("CASE", "SOURCE", "TARGET"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker)
        return
    folder = Path(tempfile.mkdtemp(prefix="graphpass-big-", dir=args.folder))
    try:
        free = shutil.disk_usage(folder).free
        if free < 3 * TENSORS * ELEMENTS * 4:
            print(f"skipped: {free / 2**30:.1f} GiB free in {folder}, need about 7 GiB")
            return
        results = {}
        for case, label in CASES:
            results[case] = run_case(case, folder)
            print(f"{label}: {results[case]}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    summary = render(results)
    print()
    print(summary)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    if args.write_docs:
        write_docs(summary)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
