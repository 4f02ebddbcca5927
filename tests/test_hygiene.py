"""The hygiene passes: remove-unused, topological-sort, infer-shapes, check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from _inline_support import run_ort
from _model_strategies import models
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass import PassManager
from graphpass.ir import Model

FLOAT = TensorProto.FLOAT


def _apply(proto: onnx.ModelProto, *passes: str, **options: object) -> graphpass.RunResult:
    return PassManager(list(passes), options or None).run(Model.from_proto(proto))


def _attribute(node: onnx.NodeProto, name: str) -> onnx.AttributeProto:
    return next(a for a in node.attribute if a.name == name)


def _info(name: str, shape: list[int] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, FLOAT, shape if shape is not None else [2])


# ================================================================ remove-unused
def _dead_branch_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Mul", ["a", "w"], ["y"], name="mul"),
        helper.make_node("Neg", ["x"], ["dead1"], name="neg"),
        helper.make_node("Add", ["dead1", "w_dead"], ["dead2"], name="add_dead"),
        helper.make_node("Abs", ["dead2"], ["dead3"], name="abs_dead"),
    ]
    graph = helper.make_graph(
        nodes, "g", [_info("x")], [_info("y")],
        [numpy_helper.from_array(np.array([2.0, 3.0], np.float32), "w"),
         numpy_helper.from_array(np.array([1.0, 1.0], np.float32), "w_dead"),
         numpy_helper.from_array(np.array([5.0], np.float32), "w_unused")],
        value_info=[_info("a"), _info("dead1")], doc_string="keep me")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("unused.domain", 1)])
    helper.set_model_props(model, {"author": "tests"})
    return model


def test_remove_unused_drops_dead_nodes_initializers_and_opsets_and_keeps_the_rest() -> None:
    proto = _dead_branch_model()
    result = _apply(proto, "remove-unused")
    out = result.model.to_proto()
    assert [n.name for n in out.graph.node] == ["relu", "mul"]
    assert [t.name for t in out.graph.initializer] == ["w"]
    assert [v.name for v in out.graph.value_info] == ["a"]
    assert {o.domain for o in out.opset_import} == {""}
    assert out.graph.doc_string == "keep me"
    assert {p.key: p.value for p in out.metadata_props} == {"author": "tests"}
    assert result.records[0].stats == {"removed nodes": 3, "removed functions": 0,
                                       "removed initializers": 2, "removed opset imports": 1}
    onnx.checker.check_model(out, full_check=True)
    feeds = {"x": np.array([-1.0, 2.0], np.float32)}
    np.testing.assert_array_equal(run_ort(proto, feeds)[0], run_ort(out, feeds)[0])
    # Nothing left to do: a second run changes nothing.
    assert not _apply(out, "remove-unused").changed


def test_remove_unused_keeps_initializers_that_are_graph_inputs_and_graph_outputs() -> None:
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="id"),
             helper.make_node("Neg", ["x"], ["z"], name="neg")]
    graph = helper.make_graph(
        nodes, "g", [_info("x"), _info("bias")], [_info("y"), _info("z")],
        [numpy_helper.from_array(np.zeros(2, np.float32), "bias")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = _apply(proto, "remove-unused")
    assert not result.changed
    assert result.model.to_proto() == proto


def _if_model(use_outer_in_branch: bool, if_output_used: bool) -> onnx.ModelProto:
    then_nodes = [helper.make_node("Add", ["x", "outer"], ["t"], name="then_add"),
                  helper.make_node("Neg", ["outer"], ["then_dead"], name="then_dead")]
    if not use_outer_in_branch:
        then_nodes[0] = helper.make_node("Identity", ["x"], ["t"], name="then_add")
    then_branch = helper.make_graph(then_nodes, "then", [], [_info("t")])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="else_id")],
                                    "else", [], [_info("e")])
    nodes = [
        helper.make_node("Relu", ["x"], ["outer"], name="outer_producer"),
        helper.make_node("If", ["cond"], ["branch_out"], name="if",
                         then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Identity", ["branch_out" if if_output_used else "x"], ["y"],
                         name="final"),
    ]
    graph = helper.make_graph(nodes, "g", [_info("x"), helper.make_tensor_value_info(
        "cond", TensorProto.BOOL, [])], [_info("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_remove_unused_keeps_producers_of_captured_values_and_cleans_subgraphs() -> None:
    proto = _if_model(use_outer_in_branch=True, if_output_used=True)
    out = _apply(proto, "remove-unused").model.to_proto()
    assert [n.name for n in out.graph.node] == ["outer_producer", "if", "final"]
    then_branch = _attribute(out.graph.node[1], "then_branch").g
    assert [n.name for n in then_branch.node] == ["then_add"]  # the dead node inside went
    for cond in (True, False):
        feeds = {"x": np.array([-1.0, 2.0], np.float32), "cond": np.array(cond)}
        np.testing.assert_array_equal(run_ort(proto, feeds)[0], run_ort(out, feeds)[0])


def test_remove_unused_removes_a_dead_if_and_what_only_its_subgraph_used() -> None:
    proto = _if_model(use_outer_in_branch=True, if_output_used=False)
    result = _apply(proto, "remove-unused")
    out = result.model.to_proto()
    assert [n.name for n in out.graph.node] == ["final"]
    assert result.records[0].stats["removed nodes"] == 2 + 3  # Relu, If and its 3 inner nodes
    feeds = {"x": np.array([-1.0, 2.0], np.float32), "cond": np.array(True)}
    np.testing.assert_array_equal(run_ort(proto, feeds)[0], run_ort(out, feeds)[0])


def _functions_model() -> onnx.ModelProto:
    def function(name: str, nodes: list[onnx.NodeProto], domain: str = "lib",
                 opsets: tuple[tuple[str, int], ...] = (("", 18),)) -> onnx.FunctionProto:
        return helper.make_function(domain, name, ["fx"], ["fy"], nodes,
                                    [helper.make_opsetid(d, v) for d, v in opsets])

    called = function("F", [helper.make_node("G", ["fx"], ["g"], domain="lib"),
                            helper.make_node("Neg", ["fx"], ["unused_in_body"]),
                            helper.make_node("Relu", ["g"], ["fy"])],
                      opsets=(("", 18), ("lib", 1)))
    nested = function("G", [helper.make_node("Abs", ["fx"], ["fy"])])
    orphan = function("H", [helper.make_node("K", ["fx"], ["fy"], domain="other")],
                      domain="other", opsets=(("", 18), ("other", 1)))
    orphan_callee = function("K", [helper.make_node("Neg", ["fx"], ["fy"])], domain="other")
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="lib", name="call")],
                              "g", [_info("x")], [_info("y")])
    return helper.make_model(
        graph, functions=[called, nested, orphan, orphan_callee],
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("lib", 1),
                       helper.make_opsetid("other", 1)])


def test_remove_unused_removes_uncalled_functions_transitively_and_their_domains() -> None:
    proto = _functions_model()
    result = _apply(proto, "remove-unused")
    out = result.model.to_proto()
    assert sorted(f.name for f in out.functions) == ["F", "G"]
    assert {o.domain for o in out.opset_import} == {"", "lib"}
    body = next(f for f in out.functions if f.name == "F")
    assert [n.op_type for n in body.node] == ["G", "Relu"]  # dead node in a body went
    (note,) = result.findings
    assert note.code == "GP520" and "other::H" in note.message and "other::K" in note.message
    onnx.checker.check_model(out, full_check=True)
    feeds = {"x": np.array([-1.0, 2.0], np.float32)}
    np.testing.assert_array_equal(run_ort(proto, feeds)[0], run_ort(out, feeds)[0])
    kept = _apply(proto, "remove-unused",
                  **{"remove-unused": {"functions": False}}).model.to_proto()
    assert len(kept.functions) == 4 and {o.domain for o in kept.opset_import} == {
        "", "lib", "other"}


def test_remove_unused_is_linear_on_a_long_dead_chain() -> None:
    count = 20_000
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="live")]
    previous = "x"
    for index in range(count):
        nodes.append(helper.make_node("Neg", [previous], [f"d{index}"]))
        previous = f"d{index}"
    graph = helper.make_graph(nodes, "g", [_info("x")], [_info("y")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = _apply(proto, "remove-unused")
    assert len(result.model.graph) == 1
    assert result.records[0].stats["removed nodes"] == count


def test_remove_unused_leaves_node_test_models_valid_and_equal_when_nothing_is_dead() -> None:
    from onnx.backend.test.case.node import collect_testcases

    checked = changed = 0
    for case in collect_testcases(None)[::7]:
        proto = case.model
        try:
            model = Model.from_proto(proto)
        except graphpass.GraphpassError:
            continue
        result = PassManager(["remove-unused"]).run(model)
        out = result.model.to_proto()
        if result.changed:
            changed += 1
            # Only dead code or unused imports went: the node count can only drop.
            assert len(out.graph.node) <= len(proto.graph.node)
        else:
            assert out == proto, case.name
        checked += 1
    assert checked > 200


# ============================================================= topological-sort
def test_topological_sort_orders_main_graph_subgraphs_and_functions() -> None:
    then_branch = helper.make_graph(
        [helper.make_node("Neg", ["u"], ["t"], name="late"),
         helper.make_node("Abs", ["x"], ["u"], name="early")], "then", [], [_info("t")])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                                    [_info("e")])
    body = helper.make_function("lib", "F", ["fx"], ["fy"],
                                [helper.make_node("Relu", ["m"], ["fy"]),
                                 helper.make_node("Neg", ["fx"], ["m"])],
                                [helper.make_opsetid("", 18)])
    nodes = [helper.make_node("If", ["cond"], ["b"], then_branch=then_branch,
                              else_branch=else_branch, name="if"),
             helper.make_node("F", ["b"], ["y"], domain="lib", name="call"),
             helper.make_node("Less", ["x", "x"], ["cmp"], name="less"),
             helper.make_node("ReduceMin", ["cmp_i"], ["cond_f"], keepdims=0, name="reduce"),
             helper.make_node("Cast", ["cmp"], ["cmp_i"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Cast", ["cond_f"], ["cond"], to=TensorProto.BOOL, name="tobool")]
    graph = helper.make_graph(nodes, "g", [_info("x")], [_info("y")])
    proto = helper.make_model(graph, functions=[body],
                              opset_imports=[helper.make_opsetid("", 18),
                                             helper.make_opsetid("lib", 1)])
    result = _apply(proto, "topological-sort")
    assert result.changed
    out = result.model.to_proto()
    assert [n.name for n in out.graph.node] == ["less", "cast", "reduce", "tobool", "if", "call"]
    assert [n.name for n in _attribute(out.graph.node[4], "then_branch").g.node] == [
        "early", "late"]
    assert [n.op_type for n in out.functions[0].node] == ["Neg", "Relu"]
    onnx.checker.check_model(out, full_check=True)
    feeds = {"x": np.array([-1.0, 2.0], np.float32)}
    assert run_ort(out, feeds)[0].shape == (2,)
    again = _apply(out, "topological-sort")
    assert not again.changed and again.model.to_proto() == out


# ================================================================= infer-shapes
def _untyped_model() -> onnx.ModelProto:
    branch = helper.make_graph([helper.make_node("Relu", ["m"], ["r"]),
                                helper.make_node("Neg", ["r"], ["bo"])], "then", [],
                               [helper.make_value_info("bo", onnx.TypeProto())])
    other = helper.make_graph([helper.make_node("Identity", ["m"], ["eo"])], "else", [],
                              [helper.make_value_info("eo", onnx.TypeProto())])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Shape", ["m"], ["s"], name="shape"),
        helper.make_node("Reshape", ["m", "target"], ["flat"], name="reshape"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch,
                         else_branch=other),
    ]
    documented = helper.make_tensor_value_info("s", TensorProto.INT64, None)
    documented.doc_string = "declared by hand"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", FLOAT, ["batch", 4]),
                     helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FLOAT, None), _info("flat", [-1])],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
         numpy_helper.from_array(np.array([-1], np.int64), "target")],
        value_info=[documented])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_infer_shapes_declares_new_values_and_keeps_existing_declarations() -> None:
    proto = _untyped_model()
    result = _apply(proto, "infer-shapes")
    assert result.changed
    out = result.model.to_proto()
    declared = {v.name: v for v in out.graph.value_info}
    # A declaration is completed (shape added), never replaced.
    assert declared["s"].doc_string == "declared by hand"
    assert declared["s"].type.tensor_type.elem_type == TensorProto.INT64
    assert [d.dim_value for d in declared["s"].type.tensor_type.shape.dim] == [2]
    assert out.graph.output[1] == proto.graph.output[1]  # "flat" keeps its declared [-1]
    m_shape = [d.dim_param or d.dim_value for d in declared["m"].type.tensor_type.shape.dim]
    assert m_shape == ["batch", 3]
    then_branch = _attribute(out.graph.node[3], "then_branch").g
    assert {v.name for v in then_branch.value_info} == {"r"}
    assert then_branch.output[0].type.tensor_type.elem_type == FLOAT
    assert list(out.graph.node[:3]) == list(proto.graph.node[:3])
    assert list(out.graph.initializer) == list(proto.graph.initializer)
    assert result.records[0].stats["value_info added"] >= 2
    feeds = {"x": np.ones((2, 4), np.float32), "cond": np.array(True)}
    for expected, actual in zip(run_ort(proto, feeds), run_ort(out, feeds), strict=True):
        np.testing.assert_array_equal(expected, actual)
    assert not _apply(out, "infer-shapes").changed


def test_infer_shapes_never_reads_or_embeds_external_weights(tmp_path: Path) -> None:
    weight = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "g", [helper.make_tensor_value_info("x", FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [numpy_helper.from_array(weight, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(proto, tmp_path / "big.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="big.onnx.data", size_threshold=0)
    model = graphpass.load(tmp_path / "big.onnx")
    tensor = model.graph.initializers["w"]
    (tmp_path / "big.onnx.data").rename(tmp_path / "moved-away")  # reading would now fail
    result = PassManager(["infer-shapes", "check"]).run(model)
    assert result.ok and result.changed
    new_tensor = result.model.graph.initializers["w"]
    assert new_tensor is tensor and new_tensor.is_external
    written = result.model.to_proto()
    assert written.graph.initializer[0].data_location == TensorProto.EXTERNAL
    assert not written.graph.initializer[0].raw_data
    assert written.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 64


# ======================================================================== check
def test_check_accepts_a_valid_model_and_reports_checker_errors_as_findings() -> None:
    assert _apply(_dead_branch_model(), "check").findings == []
    broken = _dead_branch_model()
    broken.graph.node[1].input[1] = "nowhere"
    result = _apply(broken, "check")
    (finding,) = result.findings
    assert finding.code == "GP501" and finding.severity is graphpass.Severity.ERROR
    assert "nowhere" in finding.message and finding.pass_name == "check"
    assert not result.ok


def test_check_full_check_reports_shape_inference_errors_with_the_node() -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "z"], ["y"], name="bad_add")], "g",
        [_info("x", [2]), _info("z", [3])], [_info("y", [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (finding,) = _apply(proto, "check").findings
    assert finding.code == "GP502" and finding.node == "bad_add"
    lenient = _apply(proto, "check", **{"check": {"full-check": False}})
    assert lenient.findings == []


def test_check_works_on_large_weights_without_embedding_them() -> None:
    weight = np.ones((256, 256), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [_info("x", [1, 256])],
        [_info("y", [1, 256])], [numpy_helper.from_array(weight, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    from graphpass.files import structural_proto

    light = structural_proto(Model.from_proto(proto))
    assert not light.graph.initializer and [i.name for i in light.graph.input] == ["x", "w"]
    assert _apply(proto, "check").findings == []


def test_check_handles_many_large_weights_from_memory_and_files() -> None:
    # Regression: stubs were keyed by id() of temporary protos, so all but the last
    # large weight stayed in the proto without data and the checker rejected it.
    weights = {f"w{i}": np.full((64, 64), i, np.float32) for i in range(4)}
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"])
             for i in range(4)]
    graph = helper.make_graph(nodes, "g", [_info("x", [1, 64])], [_info("h3", [1, 64])])
    model = Model.from_proto(helper.make_model(graph,
                                               opset_imports=[helper.make_opsetid("", 18)]))
    for name, value in weights.items():
        model.graph.set_initializer(graphpass.Tensor.from_array(name, value))
    from graphpass.files import structural_proto

    light = structural_proto(model)
    assert not light.graph.initializer
    assert [i.name for i in light.graph.input] == ["x", "w0", "w1", "w2", "w3"]
    result = graphpass.PassManager(["check"]).run(model)
    assert result.findings == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(functions=True, control_flow=True), st.sampled_from([0, 16, 1024]))
def test_structural_bytes_are_the_structural_proto_serialized(proto: onnx.ModelProto,
                                                             inline_limit: int) -> None:
    # The fast writer of the checker's input (node by node from the loaded protos) must
    # give the very bytes of the plain one, whichever weights it declares as inputs,
    # also after a pass changed some nodes and a weight was added.
    from graphpass.files._checking import structural_bytes, structural_proto

    model = Model.from_proto(proto)
    for changed in (False, True):
        if changed:
            for node in list(model.graph)[::2]:
                node.name = f"{node.name}_renamed"
            model.graph.set_initializer(
                graphpass.Tensor.from_array("extra", np.ones((8, 8), np.float32)))
        expected = structural_proto(model, inline_limit=inline_limit).SerializeToString()
        assert structural_bytes(model, inline_limit=inline_limit) == expected
