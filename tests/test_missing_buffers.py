"""detect-missing-buffers on hand-built models: scopes, data, inputs, and the ONNX corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.findings import Severity
from graphpass.framework import PassContext, default_registry
from graphpass.passes.detect_missing_buffers import DetectMissingBuffers

FLOAT = TensorProto.FLOAT


def run_pass(model: graphpass.Model | onnx.ModelProto, **options: object):
    if isinstance(model, onnx.ModelProto):
        model = graphpass.Model.from_proto(model)
    return DetectMissingBuffers(options or None).run(
        model, PassContext(registry=default_registry()))


def tensor_input(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, FLOAT, shape)


def make_model(nodes, inputs, outputs, initializers=(), functions=(), opset=18, **graph_kw):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers), **graph_kw)
    opsets = [helper.make_opsetid("", opset)]
    if functions:
        opsets.append(helper.make_opsetid("local", 1))
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions))


def weight(name: str, shape=(4,), value: float = 1.0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, value, np.float32), name)


def names(result) -> list[str]:
    return [finding.value for finding in result.findings]


# ================================================================= complete models
def test_complete_model_is_silent_and_untouched():
    proto = make_model(
        [helper.make_node("Mul", ["x", "block.scale"], ["y"], name="mul")],
        [tensor_input("x", [2, 4])], [tensor_input("y", [2, 4])], [weight("block.scale")])
    model = graphpass.Model.from_proto(proto)
    before = model.to_proto().SerializeToString()
    result = run_pass(model)
    assert result.findings == []
    assert result.changed is False
    assert result.stats["missing"] == 0
    assert model.to_proto().SerializeToString() == before


# ====================================================================== undefined
def test_undefined_name_in_main_graph_is_named_with_its_consumers():
    proto = make_model(
        [helper.make_node("Mul", ["x", "block.scale"], ["h"], name="mul"),
         helper.make_node("Add", ["h", "block.scale"], ["y"], name="add")],
        [tensor_input("x", [2, 4])], [tensor_input("y", [2, 4])])
    result = run_pass(proto)
    (finding,) = result.findings
    assert finding.code == "GP301"
    assert finding.severity is Severity.ERROR
    assert finding.value == "block.scale"
    assert finding.node == "mul"
    assert finding.data["module"] == "block"
    assert finding.data["attribute"] == "scale"
    assert finding.data["problem"] == "undefined"
    assert [c["node"] for c in finding.data["consumers"]] == ["mul", "add"]
    assert finding.message.startswith("module 'block': ")
    assert "Mul 'mul', Add 'add'" in finding.message
    assert finding.hint


def test_undefined_graph_output_is_reported():
    proto = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [tensor_input("x", [2])], [tensor_input("y", [2]), tensor_input("z", [2])])
    result = run_pass(proto)
    assert names(result) == ["z"]
    assert result.findings[0].data["consumers"] == [
        {"node": None, "op_type": None, "graph": "main"}]


def test_name_defined_later_in_node_order_is_not_missing():
    proto = make_model(
        [helper.make_node("Add", ["a", "x"], ["y"], name="late_use"),
         helper.make_node("Relu", ["x"], ["a"], name="defines_a")],
        [tensor_input("x", [2])], [tensor_input("y", [2])])
    assert run_pass(proto).findings == []


def _loop_body(computes_v_out: onnx.NodeProto) -> onnx.GraphProto:
    """A Loop body ``(i, cond_in, v_in) -> (cond_out, v_out)`` around one node."""
    return helper.make_graph(
        [computes_v_out, helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         tensor_input("v_in", [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         tensor_input("v_out", [2])])


def _loop_model(body_reads: str, outer_defines_later: bool = False) -> onnx.ModelProto:
    body = _loop_body(helper.make_node("Add", ["v_in", body_reads], ["v_out"], name="body_add"))
    loop = helper.make_node("Loop", ["trip", "", "x"], ["y"], name="loop", body=body)
    trip = numpy_helper.from_array(np.array(3, np.int64), "trip")
    nodes = [loop]
    if outer_defines_later:
        nodes.append(helper.make_node("Relu", ["x"], ["outer_late"], name="late"))
    return make_model(nodes, [tensor_input("x", [2])], [tensor_input("y", [2])],
                      [trip, weight("outer_w", (2,))])


def test_loop_body_reading_an_outer_value_is_fine():
    assert run_pass(_loop_model("outer_w")).findings == []
    assert run_pass(_loop_model("x")).findings == []


def test_loop_body_reading_an_outer_value_defined_later_is_not_missing():
    assert run_pass(_loop_model("outer_late", outer_defines_later=True)).findings == []


def test_loop_body_reading_an_undefined_name_points_into_the_body():
    result = run_pass(_loop_model("layers.0.gain"))
    (finding,) = result.findings
    assert finding.value == "layers.0.gain"
    assert finding.graph == "main > Loop 'loop' > body"
    assert finding.node == "body_add"
    assert finding.data["module"] == "layers.0"
    assert "Add 'body_add' in main > Loop 'loop' > body" in finding.message


def test_nested_if_inside_loop_resolves_two_levels_out():
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["v_in", "outer_w"], ["t"], name="deep_ok"),
         helper.make_node("Mul", ["t", "nowhere"], ["r"], name="deep_bad")],
        "then", [], [tensor_input("r", [2])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["v_in"], ["r2"])], "else", [], [tensor_input("r2", [2])])
    body = _loop_body(helper.make_node("If", ["cond_in"], ["v_out"], name="branch",
                                       then_branch=then_branch, else_branch=else_branch))
    proto = make_model(
        [helper.make_node("Loop", ["trip", "go", "x"], ["y"], name="loop", body=body)],
        [tensor_input("x", [2])], [tensor_input("y", [2])],
        [numpy_helper.from_array(np.array(2, np.int64), "trip"),
         numpy_helper.from_array(np.array(True), "go"), weight("outer_w", (2,))])
    result = run_pass(proto)
    assert names(result) == ["nowhere"]
    assert result.findings[0].graph == "main > Loop 'loop' > body > If 'branch' > then_branch"


def test_one_finding_per_name_even_across_subgraphs():
    then_branch = helper.make_graph([helper.make_node("Add", ["x", "gone"], ["t"], name="in_if")],
                                    "then", [], [tensor_input("t", [2])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])],
                                    "else", [], [tensor_input("e", [2])])
    proto = make_model(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_branch,
                          else_branch=else_branch),
         helper.make_node("Mul", ["y", "gone"], ["z"], name="outer_mul")],
        [tensor_input("x", [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [tensor_input("z", [2])])
    (finding,) = run_pass(proto).findings
    assert finding.value == "gone"
    graphs = {c["graph"] for c in finding.data["consumers"]}
    assert graphs == {"main", "main > If 'if' > then_branch"}


def test_function_body_has_no_outer_scope():
    body = [helper.make_node("Mul", ["a", "block.scale"], ["b"], name="fmul")]
    function = helper.make_function("local", "Scale", ["a"], ["b"], body,
                                    [helper.make_opsetid("", 18)])
    proto = make_model(
        [helper.make_node("Scale", ["x"], ["y"], domain="local", name="call")],
        [tensor_input("x", [4])], [tensor_input("y", [4])],
        [weight("block.scale")],  # the main graph has it; the function cannot see it
        functions=[function])
    (finding,) = run_pass(proto).findings
    assert finding.value == "block.scale"
    assert finding.function == "local::Scale"
    assert finding.node == "fmul"
    assert "a function body sees only its own inputs" in finding.message


def test_complete_function_is_silent():
    body = [helper.make_node("Mul", ["a", "a"], ["b"])]
    function = helper.make_function("local", "Square", ["a"], ["b"], body,
                                    [helper.make_opsetid("", 18)])
    proto = make_model([helper.make_node("Square", ["x"], ["y"], domain="local")],
                       [tensor_input("x", [4])], [tensor_input("y", [4])], functions=[function])
    assert run_pass(proto).findings == []


# ================================================================== data problems
def test_initializer_shorter_than_its_shape():
    short = onnx.TensorProto(name="block.linear.weight", data_type=FLOAT, dims=[4, 4],
                             raw_data=np.zeros(3, np.float32).tobytes())
    unused = onnx.TensorProto(name="spare", data_type=FLOAT, dims=[2], float_data=[])
    proto = make_model([helper.make_node("MatMul", ["x", "block.linear.weight"], ["y"])],
                       [tensor_input("x", [1, 4])], [tensor_input("y", [1, 4])],
                       [short, unused])
    result = run_pass(proto)
    by_name = {f.value: f for f in result.findings}
    assert set(by_name) == {"block.linear.weight", "spare"}
    assert by_name["block.linear.weight"].code == "GP302"
    assert by_name["block.linear.weight"].severity is Severity.ERROR
    assert "raw_data holds 12 bytes" in by_name["block.linear.weight"].message
    assert by_name["spare"].severity is Severity.WARNING


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_external_data_missing_or_short(tmp_path: Path, damage: str):
    proto = make_model([helper.make_node("Mul", ["x", "block.gain"], ["y"], name="mul")],
                       [tensor_input("x", [1024])], [tensor_input("y", [1024])],
                       [weight("block.gain", (1024,), 2.0)])
    path = tmp_path / "m.onnx"
    onnx.save(proto, path, save_as_external_data=True, location="m.data", size_threshold=0)
    data = tmp_path / "m.data"
    if damage == "missing":
        data.unlink()
    else:
        data.write_bytes(data.read_bytes()[:100])
    model = graphpass.load(path, check_external_data=False)
    (finding,) = run_pass(model).findings
    assert finding.code == "GP302"
    assert finding.value == "block.gain"
    assert finding.data["consumers"][0]["node"] == "mul"
    assert "m.data" in finding.message


def test_intact_external_data_is_silent(tmp_path: Path):
    proto = make_model([helper.make_node("Mul", ["x", "block.gain"], ["y"])],
                       [tensor_input("x", [1024])], [tensor_input("y", [1024])],
                       [weight("block.gain", (1024,), 2.0)])
    path = tmp_path / "m.onnx"
    onnx.save(proto, path, save_as_external_data=True, location="m.data", size_threshold=0)
    assert run_pass(graphpass.load(path)).findings == []


# =================================================================== state inputs
def _inputs_model(*inputs: onnx.ValueInfoProto, initializers=()) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [inputs[0].name], ["y"])]
    nodes += [helper.make_node("Identity", [i.name], [f"o{n}"]) for n, i in enumerate(inputs[1:])]
    outputs = [tensor_input("y", [])] + [tensor_input(f"o{n}", []) for n in range(len(inputs) - 1)]
    return make_model(nodes, list(inputs), outputs, initializers)


def test_bare_state_inputs_are_errors_and_data_inputs_are_not():
    proto = _inputs_model(
        tensor_input("input_ids", ["batch", 8]),
        tensor_input("past_key_values.0.key", ["batch", 2, "past", 8]),
        tensor_input("input.1", [1, 8]),
        tensor_input("encoder.layer.0.weight", [8, 8]),
        tensor_input("encoder.layer.0.gain", [8]),
    )
    result = run_pass(proto)
    assert names(result) == ["encoder.layer.0.gain", "encoder.layer.0.weight"]
    assert {f.code for f in result.findings} == {"GP303"}
    assert all(f.data["kind"] == "module state" for f in result.findings)
    assert "every run must feed it" in result.findings[0].message


def test_dotted_data_input_just_before_the_weights_is_not_state():
    # An old-style model listing its initializers as inputs after its data input.
    proto = _inputs_model(tensor_input("image.rgb", [1, 3, 8, 8]),
                          tensor_input("conv.weight", [4, 3, 3, 3]),
                          initializers=[weight("conv.weight", (4, 3, 3, 3))])
    assert run_pass(proto).findings == []


def test_state_input_before_the_first_weight_of_its_module_is_state():
    proto = _inputs_model(tensor_input("x", ["n", 4]), tensor_input("block.running", [4]),
                          tensor_input("block.linear.weight", [4, 4]))
    assert names(run_pass(proto)) == ["block.running", "block.linear.weight"]


def test_module_path_input_before_any_state_needs_a_state_like_name():
    # A fixed-shape dotted data input that comes first, with no state after it: silent.
    proto = _inputs_model(tensor_input("x", [2]), tensor_input("cache.step", [1]))
    assert run_pass(proto).findings == []


def test_input_with_an_initializer_is_silent():
    proto = _inputs_model(tensor_input("x", [4]), tensor_input("block.weight", [4]),
                          initializers=[weight("block.weight")])
    assert run_pass(proto).findings == []


def test_data_inputs_option_silences_named_inputs():
    proto = _inputs_model(tensor_input("x", [4]), tensor_input("block.weight", [4]),
                          tensor_input("aux.weight", [4]))
    assert names(run_pass(proto, data_inputs=["aux.*"])) == ["block.weight"]


def _with_metadata(info: onnx.ValueInfoProto, **metadata: str) -> onnx.ValueInfoProto:
    for key, value in metadata.items():
        info.metadata_props.add(key=f"pkg.torch.export.graph_signature.InputSpec.{key}",
                                value=value)
    return info


def test_torch_metadata_decides_between_data_and_state():
    proto = _inputs_model(
        _with_metadata(tensor_input("block.x", [4]), kind="USER_INPUT", persistent="None"),
        _with_metadata(tensor_input("pos", [4]), kind="BUFFER", persistent="False"),
        _with_metadata(tensor_input("cst", [4]), kind="CONSTANT_TENSOR", persistent="None"),
        _with_metadata(tensor_input("lifted_tensor_0", [4]), kind="CONSTANT_TENSOR"),
    )
    result = run_pass(proto)
    kinds = {f.value: f.data["kind"] for f in result.findings}
    assert kinds == {"pos": "non-persistent buffer", "cst": "tensor constant",
                     "lifted_tensor_0": "lifted constant"}
    assert {f.data["fix"] for f in result.findings} == {"export-state"}
    assert "graphpass.torch.save_state" in result.findings[0].hint


def test_findings_are_sorted_by_module_path():
    proto = make_model(
        [helper.make_node("Sum", ["x", "z.b.w", "a.scale", "z.a.w", "loose"], ["y"])],
        [tensor_input("x", [4])], [tensor_input("y", [4])])
    result = run_pass(proto)
    assert names(result) == ["loose", "a.scale", "z.a.w", "z.b.w"]
    assert [f.data["module"] for f in result.findings] == ["", "a", "z.a", "z.b"]
    assert result.stats == {"missing": 4, "modules": 4, "undefined": 4}


# ========================================================================= corpus
def test_no_findings_on_the_onnx_node_test_corpus():
    from onnx.backend.test.case.node import collect_testcases

    noisy = []
    cases = collect_testcases(None)
    assert len(cases) > 1000
    for case in cases:
        result = run_pass(case.model)
        if result.findings:
            noisy.append((case.name, [f.message for f in result.findings]))
    assert noisy == []


def test_no_findings_on_the_models_shipped_with_onnx():
    data_dir = Path(onnx.__file__).parent / "backend" / "test" / "data"
    paths = sorted(data_dir.rglob("*.onnx"))
    assert len(paths) > 100
    noisy = []
    for path in paths:
        result = run_pass(graphpass.load(path))
        if result.findings:
            noisy.append((str(path.relative_to(data_dir)), [f.message for f in result.findings]))
    assert noisy == []
