"""A model with more than 2 GB of external weights: load, to_proto and save stay small.

The weights are a sparse file (``truncate``: instant, no disk used), so the test
is fast. It runs in a fresh Python process and reads that process's peak RSS:
loading, converting to a proto and saving next to the data (referenced in place)
must peak far below the weight size. Copying and streaming the data to another
folder is measured in ``benchmarks/big_weights.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

WEIGHT_BYTES = 3 * 800 * 1024 * 1024  # 2.34 GiB


def write_big_model(folder: Path, tensors: int = 3, elements: int = 200 * 1024 * 1024) -> Path:
    """A MatMul chain whose float weights sit in one sparse external data file."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "model.onnx.data"
    nbytes = elements * 4
    with open(data, "wb") as handle:
        handle.truncate(tensors * nbytes)
    initializers, nodes, previous = [], [], "x"
    for index in range(tensors):
        tensor = onnx.TensorProto(name=f"w{index}", data_type=TensorProto.FLOAT,
                                  dims=[elements // 1024, 1024])
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", data.name), ("offset", str(index * nbytes)),
                           ("length", str(nbytes))):
            tensor.external_data.add(key=key, value=value)
        initializers.append(tensor)
        nodes.append(helper.make_node("Add", [previous, f"w{index}"], [f"h{index}"]))
        previous = f"h{index}"
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     [elements // 1024, 1024])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [elements // 1024, 1024])],
        initializers)
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


# The child reads its own peak RSS from /proc (VmHWM): ru_maxrss would include the
# parent's resident size, which a forked child inherits as its high-water mark.
_CHILD = """
import json, resource, sys
import onnx, graphpass
source, target = sys.argv[1], sys.argv[2]
model = graphpass.load(source)
proto = model.to_proto()
same = proto == onnx.load(source, load_external_data=False)
graphpass.save(model, target)
try:
    status = open("/proc/self/status").read().split("VmHWM:")[1].split()
    peak = int(status[0]) * 1024
except (OSError, IndexError):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"equal": same, "peak_rss_bytes": peak}))
"""


@pytest.mark.slow
def test_over_2gb_of_external_weights_load_round_trip_and_save_in_place(tmp_path: Path) -> None:
    source = write_big_model(tmp_path)
    data = tmp_path / "model.onnx.data"
    assert data.stat().st_size == WEIGHT_BYTES > 2**31
    before = data.stat()
    target = tmp_path / "resaved.onnx"
    completed = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(target)],
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["equal"]
    # Imports (onnx, numpy, networkx, ...) alone take ~100 MB; nothing scales with the weights.
    assert report["peak_rss_bytes"] < WEIGHT_BYTES / 8, report
    after = data.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == \
        (before.st_ino, before.st_mtime_ns, before.st_size)  # referenced, not rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data",
                                                          "resaved.onnx"]
    assert onnx.load(target, load_external_data=False) == onnx.load(source,
                                                                    load_external_data=False)
