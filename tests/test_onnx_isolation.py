"""onnx's checker and shape inference where a crash cannot take graphpass down.

By default they run in process: the fuzzers (``test_fuzz_mutations.py``, the long runs
of ``benchmarks/fuzz_mutations.py``) find no model that crashes the onnx graphpass
needs, and the models that crashed earlier onnx releases (reported upstream) end in
findings here. With ``GRAPHPASS_ONNX_ISOLATION=process`` they run in a worker process:
the results are the same, and a worker that crashes (killed here with ``SIGSEGV``
mid-call) or takes too long is one clear finding, after which the next call works.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import onnx
import onnx.parser
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass.files import _checking as checking
from graphpass.passes.check import Check
from graphpass.passes.infer_shapes import InferShapes

# Models that crashed onnx's shape inference or checker in earlier releases.
UPSTREAM_CRASHES = {
    "onnx#6185 Gemm with absurd attributes": '''<ir_version: 10, opset_import: ["" : 6]>
        graph (double[2,1] in0, double in1, double[2] in2) => (double[2,2] out0) {
           out0 = Gemm <alpha: float = 1, beta: float = -693.752, broadcast: int = -436,
                        transB: int = 823> (in0, in1, in2)
        }''',
    "onnx#6180 Conv with inputs of the wrong rank": '''<ir_version: 9, opset_import: ["" : 11]>
        graph (float[7,6,1,5] in0, float in1, float[7,2,3,2,1] in2) => (float[7] out0) {
           out0 = Conv <auto_pad = "NOTSET", group = 1> (in0, in1, in2)
        }''',
    "onnx#7298 OneHotEncoder after a custom op":
        '''<ir_version: 9, opset_import: ["" : 17, "ai.onnx.ml": 3, "custom": 1]>
        graph (float[3] x) => (float[3,2] z) {
           y = custom.CustomIdentity (x)
           z = ai.onnx.ml.OneHotEncoder <cats_int64s = [1, 2]> (y)
        }''',
    "onnxruntime#24806 Einsum with too few inputs": '''<ir_version: 9, opset_import: ["" : 17]>
        graph (float[3,4] x) => (float[3] z) {
           z = Einsum <equation = "ij,jk->"> (x)
        }''',
}


def _run(model: graphpass.Model, pass_type: type) -> graphpass.PassResult:
    from graphpass.framework import PassContext, default_registry

    instance = pass_type()
    return instance.run(model, PassContext(registry=default_registry()))


def _chain(length: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(length)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(f"v{length}", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def long_chain() -> graphpass.Model:
    """A model whose shape inference takes a good part of a second."""
    return graphpass.Model.from_proto(_chain(60_000))


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(checking.ISOLATION_ENV, "process")
    yield
    checking._WORKER.close()


@pytest.mark.parametrize("name", sorted(UPSTREAM_CRASHES))
def test_models_that_crashed_earlier_onnx_releases_end_in_findings(name: str) -> None:
    model = graphpass.Model.from_proto(onnx.parser.parse_model(UPSTREAM_CRASHES[name]))
    checked = _run(model, Check)
    inferred = _run(model, InferShapes)
    assert [f.code for f in checked.findings] in (["GP501"], ["GP502"], [])
    assert all(f.code in ("GP510", "GP511") for f in inferred.findings)


@pytest.mark.parametrize("name", sorted(UPSTREAM_CRASHES))
def test_isolated_results_are_the_same(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = onnx.parser.parse_model(UPSTREAM_CRASHES[name])
    here = [(_run(graphpass.Model.from_proto(proto), kind).findings) for kind in (Check,
                                                                                  InferShapes)]
    monkeypatch.setenv(checking.ISOLATION_ENV, "process")
    try:
        there = [(_run(graphpass.Model.from_proto(proto), kind).findings) for kind in (
            Check, InferShapes)]
        assert checking._WORKER.pid is not None and checking._WORKER.pid != os.getpid()
    finally:
        checking._WORKER.close()
    assert [[(f.code, f.message) for f in r] for r in there] == \
        [[(f.code, f.message) for f in r] for r in here]


def test_isolated_inference_adds_the_same_declarations(isolated) -> None:
    model = graphpass.Model.from_proto(_chain(50))
    result = _run(model, InferShapes)
    assert result.stats["value_info added"] == 49 and not result.findings


def test_a_crash_of_the_worker_is_a_finding_and_the_next_call_works(isolated,
                                                                   long_chain) -> None:
    model = long_chain
    checking.infer_shapes(_chain(2))  # the worker is up
    pid = checking._WORKER.pid
    assert pid is not None

    def crash() -> None:  # once the call is under way
        while not checking._WORKER._lock.locked():
            time.sleep(0.001)
        time.sleep(0.1)
        os.kill(pid, signal.SIGSEGV)

    killer = threading.Thread(target=crash)
    killer.start()
    result = _run(model, InferShapes)
    killer.join()
    assert [f.code for f in result.findings] == ["GP510"]
    assert "crashed on this model" in result.findings[0].message
    assert "SIGSEGV" in result.findings[0].message
    assert not result.changed
    # A new worker serves the next call.
    assert _run(graphpass.Model.from_proto(_chain(5)), InferShapes).stats[
        "value_info added"] == 4
    assert checking._WORKER.pid not in (None, pid)


def test_a_call_that_takes_too_long_is_stopped(isolated, long_chain,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(checking.TIMEOUT_ENV, "0.05")
    problem = checking.run_checker(long_chain, full_check=True)
    assert problem is not None and "took longer than 0.05 s" in problem.message
    monkeypatch.setenv(checking.TIMEOUT_ENV, "60")
    assert checking.run_checker(graphpass.Model.from_proto(_chain(3)), full_check=True) is None


def test_the_command_line_with_isolation(tmp_path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(UPSTREAM_CRASHES["onnx#6180 Conv with inputs of the "
                                                       "wrong rank"]), path)
    monkeypatch.setenv(checking.ISOLATION_ENV, "process")
    code, _, _ = cli("lint", path, "-p", "check")
    checking._WORKER.close()
    assert code == 1  # the checker's verdict, as a finding
