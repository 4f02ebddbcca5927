"""The conversion to onnx_ir and back keeps what a pass did not change.

Oracles: protobuf equality with the input (whole corpora: ONNX's node tests, the models
it ships, torch 2.13 exports, and the awkward corners of the format), the identity of
tensor objects (weights never re-read or copied), and onnxruntime outputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
import test_roundtrip_edge_cases as edge
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes import common
from test_files_big import WEIGHT_BYTES, write_big_model

import graphpass
from graphpass.files import OnnxIRConversion

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
FLOAT = TensorProto.FLOAT


def _changed_producer(proto: onnx.ModelProto) -> onnx.ModelProto:
    expected = onnx.ModelProto()
    expected.CopyFrom(proto)
    expected.producer_name = "changed by the test"
    return expected


def _failures(cases: list[tuple[str, onnx.ModelProto, Path | None]]) -> list[str]:
    """For each model: the conversion sees no change and returns the very same model; after
    a change of the producer name only (so that everything else is written back from onnx_ir),
    the model equals the input but for that name."""
    failures = []
    for name, proto, base_dir in cases:
        try:
            model = graphpass.Model.from_proto(proto, base_dir)
            conversion = OnnxIRConversion(model)
            if conversion.changed() or conversion.to_model() is not model:
                failures.append(f"{name}: a conversion that changes nothing is seen as a change")
                continue
            conversion.ir_model.producer_name = "changed by the test"
            if conversion.to_model().to_proto() != _changed_producer(proto):
                failures.append(f"{name}: written back differently")
        except Exception as error:  # collect, report all at once
            failures.append(f"{name}: {type(error).__name__}: {error}")
    return failures


def test_every_onnx_node_test_model_comes_back_equal() -> None:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [(case.name, case.model, None) for case in collect_testcases()]
    assert len(cases) > 1500
    assert _failures(cases) == []


def test_every_model_shipped_with_onnx_and_torch_exports_come_back_equal() -> None:
    pytest.importorskip("torch")
    from _roundtrip_torch_models import exported_models

    cases = [(str(path.relative_to(ONNX_DATA)), onnx.load(path, load_external_data=False),
              path.parent) for path in sorted(ONNX_DATA.rglob("*.onnx"))]
    cases += [(f"torch {name}", onnx.load(path, load_external_data=False), path.parent)
              for name, path in exported_models().items()]
    assert len(cases) > 100
    assert _failures(cases) == []


def _unknown_fields_everywhere() -> onnx.ModelProto:
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [edge._vi("t")])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e"])], "else", [], [edge._vi("e")])
    proto = edge._model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch,
                                          else_branch=other)],
                        [edge._vi("x"), edge._vi("c", [], TensorProto.BOOL)], [edge._vi("y")])
    proto.functions.add().CopyFrom(helper.make_function(
        "local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 18)]))
    for message, number in [(proto, 900), (proto.graph, 901), (proto.graph.node[0], 902),
                            (proto.graph.node[0].attribute[0], 903),
                            (proto.graph.node[0].attribute[0].g, 904),
                            (proto.graph.node[0].attribute[0].g.node[0], 905),
                            (proto.functions[0], 906), (proto.functions[0].node[0], 907),
                            (proto.graph.input[0], 908), (proto.opset_import[0], 909)]:
        edge._with_unknown_field(message, number, b"future")
    return proto


def _present_but_empty() -> onnx.ModelProto:
    proto = edge._simple()
    proto.doc_string = proto.domain = proto.producer_name = ""
    proto.model_version = 0
    proto.graph.doc_string = ""
    node = proto.graph.node[0]
    node.domain = node.doc_string = node.overload = ""
    proto.graph.input[0].doc_string = ""
    proto.graph.initializer[0].doc_string = ""
    node.attribute.add().CopyFrom(helper.make_attribute("unused", 0))
    return proto


def _duplicates() -> onnx.ModelProto:
    proto = edge._model(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
        [edge._vi("x", ["N"])], [edge._vi("y", [2]), edge._vi("y", [3])],
        value_info=[edge._vi("h", [4]), edge._vi("h", [5]), edge._vi("y", [6]), edge._vi("x", [7]),
                    edge._vi("nowhere", [3]), onnx.ValueInfoProto(name="x")],
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("", 17)])
    proto.metadata_props.add(key="k", value="1")
    proto.metadata_props.add(key="k", value="2")
    proto.graph.node[0].attribute.extend([helper.make_attribute("a", 1),
                                          helper.make_attribute("a", 2)])
    return proto


def _sparse_and_training_info() -> onnx.ModelProto:
    values = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "s")
    indices = numpy_helper.from_array(np.array([1, 3], np.int64), "s_indices")
    proto = edge._model([helper.make_node("Add", ["x", "s"], ["y"])], [edge._vi("x", [4])],
                        [edge._vi("y", [4])])
    proto.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    info = proto.training_info.add()
    info.algorithm.CopyFrom(helper.make_graph(
        [helper.make_node("Sub", ["x", "x"], ["x_new"])], "algo", [], [edge._vi("x_new")]))
    return proto


def _metadata_and_empty_outputs() -> onnx.ModelProto:
    proto = edge._model([helper.make_node("Dropout", ["x"], ["d", ""], name="drop"),
                         helper.make_node("Relu", ["d"], ["y"], name="relu")],
                        [edge._vi("x")], [edge._vi("y")])
    proto.graph.node[1].metadata_props.add(key="graphpass.inlined_from", value="Block@/b1")
    proto.graph.input[0].metadata_props.add(key="origin", value="input")
    proto.graph.metadata_props.add(key="graph", value="1")
    initializer = numpy_helper.from_array(np.ones(2, np.float32), "unused_w")
    initializer.doc_string = "doc"
    initializer.metadata_props.add(key="a", value="b")
    proto.graph.initializer.append(initializer)
    return proto


CORNERS = {
    "unknown fields everywhere": _unknown_fields_everywhere,
    "fields present with default values": _present_but_empty,
    "duplicate and dangling declarations": _duplicates,
    "sparse initializers and training_info": _sparse_and_training_info,
    "functions with attribute defaults and overloads": edge._function_model,
    "nested subgraphs with outer captures": edge._nested_capture_model,
    "metadata, trailing empty outputs, initializer metadata": _metadata_and_empty_outputs,
}


@pytest.mark.parametrize("corner", list(CORNERS))
def test_awkward_corners_of_the_format_come_back_equal(corner: str) -> None:
    proto = CORNERS[corner]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _failures([(corner, proto, None)]) == []


def test_onnx_ir_would_normalize_these_corners_itself() -> None:
    """Why the merge exists: onnx_ir's own round trip changes every corner above."""
    for corner, make in CORNERS.items():
        proto = make()
        if corner.startswith(("functions", "nested")):
            continue  # these onnx_ir keeps
        back = ir.serde.serialize_model(ir.serde.deserialize_model(proto))
        assert back != proto, corner


# ------------------------------------------------------------- after real changes
def _cse_model() -> onnx.ModelProto:
    """Two identical Relu nodes (CSE merges them), plus what must survive around them."""
    proto = edge._model(
        [helper.make_node("Relu", ["x"], ["a"], name="r1"),
         helper.make_node("Relu", ["x"], ["b"], name="r2"),
         helper.make_node("Add", ["a", "b"], ["c"], name="add", domain=""),
         helper.make_node("Mul", ["c", "w"], ["y"], name="mul", doc_string="")],
        [edge._vi("x")], [edge._vi("y")],
        initializers=[numpy_helper.from_array(np.array([1.5, 2.0], np.float32), "w")],
        value_info=[edge._vi("c"), edge._vi("c")])
    proto.graph.node[0].metadata_props.add(key="graphpass.inlined_from", value="Block@/b1")
    proto.graph.node[3].metadata_props.add(key="pkg.torch.onnx.stack_trace", value="line 3")
    edge._with_unknown_field(proto.graph.node[3], 950, b"kept")
    edge._with_unknown_field(proto.graph.node[2], 951, b"kept too")
    edge._with_unknown_field(proto, 952, b"model")
    return proto


def test_what_a_changing_pass_leaves_alone_keeps_every_detail() -> None:
    proto = _cse_model()
    model = graphpass.Model.from_proto(proto)
    conversion = OnnxIRConversion(model)
    common.CommonSubexpressionEliminationPass()(conversion.ir_model)
    assert conversion.changed()
    written = conversion.to_model().to_proto()
    assert [n.name for n in written.graph.node] == ["r1", "add", "mul"]
    expected = onnx.ModelProto()
    expected.CopyFrom(proto)
    del expected.graph.node[1]
    # The Add node changed (it reads "a" twice now); what it had besides its inputs stays:
    # `domain: ""`, its unknown field. The untouched nodes are as they were, provenance
    # and unknown fields included; so are the duplicate declarations of "c".
    expected.graph.node[1].input[1] = "a"
    assert written == expected


def test_renamed_and_moved_weights_keep_their_tensors(tmp_path: Path) -> None:
    """Initializers that a pass renames or deduplicates keep the graphpass tensor: external
    data stays a reference into the same file, an in-memory array stays that array."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    proto = edge._model(
        [helper.make_node("Add", ["x", "w1"], ["a"]), helper.make_node("Add", ["a", "w2"], ["y"])],
        [edge._vi("x", [2, 3])], [edge._vi("y", [2, 3])],
        initializers=[numpy_helper.from_array(w, "w1"), numpy_helper.from_array(w, "w2")])
    path = tmp_path / "model.onnx"
    onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)
    model = graphpass.load(path)
    in_memory = graphpass.Tensor.from_array("w2", w)
    model.graph.set_initializer(in_memory)
    external = model.graph.initializers["w1"]
    assert external.is_external
    conversion = OnnxIRConversion(model)
    graph = conversion.ir_model.graph
    assert isinstance(graph.initializers["w1"].const_value, ir.ExternalTensor)
    assert isinstance(graph.initializers["w2"].const_value, ir.LazyTensor)
    graph.initializers["w1"].name = "weights"  # what a renaming pass does
    back = conversion.to_model()
    assert set(back.graph.initializers) == {"weights", "w2"}  # onnx_ir re-keys a renamed one
    renamed = back.graph.initializers["weights"]
    assert renamed.is_external and renamed.external_path == external.external_path
    assert renamed.external_offset == external.external_offset
    assert back.graph.initializers["w2"] is in_memory
    assert back.graph.consumers("weights")[0].op_type == "Add"


def test_a_pass_that_reads_weights_reads_the_right_bytes(tmp_path: Path) -> None:
    """onnxscript's constant folding reads weights through the lazy tensors: the folded
    model computes what onnxruntime computes for the original."""
    from onnxscript import optimizer

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    proto = edge._model(
        [helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["x", "ab"], ["y"])],
        [edge._vi("x", [2, 3])], [edge._vi("y", [2, 3])],
        initializers=[numpy_helper.from_array(a, "a"), numpy_helper.from_array(a + 1, "b")])
    path = tmp_path / "model.onnx"
    onnx.save(proto, path, save_as_external_data=True, location="model.onnx.data",
              size_threshold=0)
    model = graphpass.load(path)
    conversion = OnnxIRConversion(model)
    optimizer.optimize(conversion.ir_model)
    folded = conversion.to_model()
    assert [n.op_type for n in folded.graph] == ["Add"]
    out = tmp_path / "folded.onnx"
    graphpass.save(folded, out)
    x = np.ones((2, 3), np.float32)
    before = onnxruntime.InferenceSession(str(path)).run(None, {"x": x})[0]
    after = onnxruntime.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(after, x + a * (a + 1))


def test_the_callers_model_and_tensors_are_never_changed() -> None:
    proto = _cse_model()
    model = graphpass.Model.from_proto(proto)
    tensor_proto = model.graph.initializers["w"].proto
    conversion = OnnxIRConversion(model)
    conversion.ir_model.graph.initializers["w"].name = "renamed"
    common.CommonSubexpressionEliminationPass()(conversion.ir_model)
    back = conversion.to_model()
    assert "renamed" in back.graph.initializers
    assert model.to_proto() == proto
    assert tensor_proto is not None and tensor_proto.name == "w"


# ------------------------------------------------------------------ laziness
_CHILD = """
import json, sys
import graphpass
from graphpass.files._onnx_ir_bridge import OnnxIRConversion
import onnx_ir.passes.common as common

model = graphpass.load(sys.argv[1])
conversion = OnnxIRConversion(model)
common.TopologicalSortPass()(conversion.ir_model)
conversion.ir_model.graph.name = "changed"          # so that the way back runs in full
common.CommonSubexpressionEliminationPass()(conversion.ir_model)
back = conversion.to_model()
graphpass.save(back, sys.argv[2])
status = open("/proc/self/status").read().split("VmHWM:")[1].split()
print(json.dumps({"peak": int(status[0]) * 1024, "graph": back.graph.name,
                  "external": all(t.is_external for t in back.graph.initializers.values())}))
"""


@pytest.mark.slow
def test_weights_in_a_data_file_are_never_read_into_memory(tmp_path: Path) -> None:
    """2.3 GiB of external weights: converting, running onnx_ir passes, converting back and
    saving next to the data peaks at a fraction of the weights' size."""
    source = write_big_model(tmp_path)
    target = tmp_path / "out.onnx"
    completed = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(target)],
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["graph"] == "changed" and result["external"]
    assert result["peak"] < 300 * 2**20 < WEIGHT_BYTES / 4, result  # imports alone: ~90 MB
    written = onnx.load(target, load_external_data=False)
    assert [t.external_data[0].value for t in written.graph.initializer] == ["model.onnx.data"] * 3


def test_types_a_pass_gives_to_values_of_untouched_nodes_are_declared() -> None:
    """Shape inference changes no node, only what is known about their outputs."""
    proto = edge._model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                         helper.make_node("Neg", ["a"], ["b"], name="neg"),
                         helper.make_node("Abs", ["b"], ["y"], name="abs")],
                        [edge._vi("x", [2, 3])], [edge._vi("y", [2, 3])])
    model = graphpass.Model.from_proto(proto)
    conversion = OnnxIRConversion(model)
    common.ShapeInferencePass()(conversion.ir_model)
    written = conversion.to_model().to_proto()
    assert list(written.graph.node) == list(proto.graph.node)
    assert [(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in written.graph.value_info] == [("a", [2, 3]), ("b", [2, 3])]
