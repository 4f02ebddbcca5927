"""Pausing the garbage collector during conversions must not keep dead models alive."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from graphpass.ir import _gc


def _chain(nodes: int) -> bytes:
    weight = numpy_helper.from_array(np.ones(2, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", [f"v{i}", "w"], [f"v{i + 1}"], name=f"n{i}")
         for i in range(nodes)], "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(f"v{nodes}", TensorProto.FLOAT, [2])], [weight])
    return helper.make_model(graph).SerializeToString()


_DROPPED_IN_A_LOOP = """
import gc, sys
sys.path.insert(0, sys.argv[1])
import onnx
import graphpass
from graphpass.ir import _gc
from test_ir_gc import _chain

_gc._MIN_BATCH = 50_000
proto = onnx.ModelProto.FromString(_chain(3000))
gc.collect()
before = len(gc.get_objects())
per_model = None
for _ in range(20):
    model = graphpass.Model.from_proto(proto)
    copy = model.copy()
    if per_model is None:
        per_model = len(gc.get_objects()) - before
    del model, copy
print(per_model, len(gc.get_objects()) - before)
"""


def test_models_dropped_in_a_loop_are_collected() -> None:
    # The account is process-wide, and what other tests leave in a process (a Dask
    # cluster's threads, frozen objects) changes it: measure in a fresh process.
    out = subprocess.run([sys.executable, "-c", _DROPPED_IN_A_LOOP, str(Path(__file__).parent)],
                         capture_output=True, text=True, check=True).stdout
    per_model, grown = map(int, out.split())
    assert per_model > 20_000
    # 20 loads and copies without collection would leave ~20 models' objects alive
    assert grown < 5 * per_model, (grown, per_model)


def test_collector_state_is_restored() -> None:
    assert gc.isenabled()
    with _gc.paused_gc():
        assert not gc.isenabled()
        with _gc.paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with _gc.paused_gc():
            pass
        assert not gc.isenabled()  # an application that switched it off keeps it off
    finally:
        gc.enable()
