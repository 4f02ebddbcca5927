"""Round-trips of the awkward corners of the ONNX format.

Each model here stresses one thing the IR must carry through unchanged: fields it
does not model, fields present with their default value, duplicate declarations,
sparse initializers, training_info, functions with attribute defaults and overloads,
nested subgraphs that capture outer names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _roundtrip_support import file_round_trips, ir_round_trip
from onnx import TensorProto, helper, numpy_helper

import graphpass

FLOAT = TensorProto.FLOAT


def _vi(name: str, shape: list[int | str] | None = None, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape if shape is not None else [2])


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], **kwargs: object) -> onnx.ModelProto:
    initializers = kwargs.pop("initializers", [])
    value_info = kwargs.pop("value_info", [])
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers,  # type: ignore[arg-type]
                              value_info=value_info)  # type: ignore[arg-type]
    opsets = kwargs.pop("opset_imports", [helper.make_opsetid("", 18)])
    return helper.make_model(graph, opset_imports=opsets, **kwargs)  # type: ignore[arg-type]


def _simple() -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x")],
                  [_vi("y")], initializers=[numpy_helper.from_array(
                      np.array([1.0, 2.0], np.float32), "w")])


def _with_unknown_field(message: onnx.Message, number: int, payload: bytes) -> None:
    """Append a field the schema does not know (as a newer ONNX release might write)."""
    tag = (number << 3) | 2
    encoded = bytearray()
    for number_to_encode in (tag, len(payload)):
        rest = number_to_encode
        while True:
            byte = rest & 0x7F
            rest >>= 7
            encoded.append(byte | (0x80 if rest else 0))
            if not rest:
                break
    message.MergeFromString(bytes(encoded) + payload)


def _check(proto: onnx.ModelProto, tmp_path: Path) -> None:
    assert ir_round_trip(proto) == proto
    file_round_trips(proto, tmp_path)


# ------------------------------------------------------------------ unknown fields
def test_unknown_fields_everywhere_survive(tmp_path: Path) -> None:
    proto = _model(
        [helper.make_node("If", ["c"], ["y"], name="if",
                          then_branch=helper.make_graph(
                              [helper.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t")]),
                          else_branch=helper.make_graph(
                              [helper.make_node("Relu", ["x"], ["e"])], "else", [], [_vi("e")]))],
        [_vi("x"), _vi("c", [], TensorProto.BOOL)], [_vi("y")])
    proto.functions.add().CopyFrom(helper.make_function(
        "local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 18)]))
    for message, number in [(proto, 900), (proto.graph, 901), (proto.graph.node[0], 902),
                            (proto.graph.node[0].attribute[0], 903),
                            (proto.graph.node[0].attribute[0].g, 904),
                            (proto.graph.node[0].attribute[0].g.node[0], 905),
                            (proto.functions[0], 906), (proto.functions[0].node[0], 907),
                            (proto.graph.input[0], 908), (proto.opset_import[0], 909)]:
        _with_unknown_field(message, number, b"future")
    assert ir_round_trip(proto) == proto
    path = tmp_path / "m.onnx"
    graphpass.save(graphpass.Model.from_proto(proto), path)
    assert onnx.load(path) == proto


def test_unknown_fields_on_a_changed_node_stay_with_it() -> None:
    proto = _simple()
    _with_unknown_field(proto.graph.node[0], 950, b"kept")
    model = graphpass.Model.from_proto(proto)
    node = model.graph.nodes[0]
    node.name = "renamed"
    written = model.to_proto()
    assert written.graph.node[0].name == "renamed"
    written.graph.node[0].name = "add"
    assert written == proto


# ------------------------------------------------------------- present but empty
def test_fields_present_with_default_values(tmp_path: Path) -> None:
    proto = _simple()
    proto.doc_string = ""
    proto.domain = ""
    proto.model_version = 0
    proto.producer_name = ""
    proto.graph.doc_string = ""
    node = proto.graph.node[0]
    node.domain = ""
    node.doc_string = ""
    node.overload = ""
    proto.graph.input[0].doc_string = ""
    proto.graph.initializer[0].doc_string = ""
    proto.graph.initializer[0].data_location = TensorProto.DEFAULT
    node.attribute.add().CopyFrom(helper.make_attribute("unused", 0))
    assert proto.HasField("doc_string") and node.HasField("overload")
    _check(proto, tmp_path)


def test_empty_subgraph_and_empty_graph_stay_present() -> None:
    proto = _simple()
    attribute = proto.graph.node[0].attribute.add()
    attribute.name = "body"
    attribute.type = onnx.AttributeProto.GRAPH
    attribute.g.SetInParent()
    assert attribute.HasField("g")
    assert ir_round_trip(proto) == proto

    empty = onnx.ModelProto(ir_version=10)
    empty.graph.SetInParent()
    assert ir_round_trip(empty) == empty


# ------------------------------------------------------------ duplicate entries
def test_duplicate_declarations_survive(tmp_path: Path) -> None:
    proto = _model(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
        [_vi("x", ["N"])], [_vi("y", [2]), _vi("y", [3])],
        value_info=[_vi("h", [4]), _vi("h", [5]), _vi("y", [6]), _vi("x", [7])],
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("", 17)])
    proto.metadata_props.add(key="k", value="1")
    proto.metadata_props.add(key="k", value="2")
    node = proto.graph.node[0]
    node.attribute.extend([helper.make_attribute("a", 1), helper.make_attribute("a", 2)])
    _check(proto, tmp_path)


def test_changing_a_duplicated_declaration_rewrites_all_copies() -> None:
    proto = _model([helper.make_node("Relu", ["x"], ["h"])], [_vi("x")], [_vi("h", [2])],
                   value_info=[_vi("h", [4]), _vi("h", [5])])
    model = graphpass.Model.from_proto(proto)
    value = model.graph.value("h")
    value.declare(_vi("h", [9]))
    written = model.to_proto()
    shapes = [[d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*written.graph.output, *written.graph.value_info]]
    assert shapes == [[9], [9], [9]]


def test_attribute_change_on_node_with_duplicate_attributes_is_written() -> None:
    proto = _simple()
    proto.graph.node[0].attribute.extend([helper.make_attribute("a", 1),
                                          helper.make_attribute("a", 2)])
    model = graphpass.Model.from_proto(proto)
    node = model.graph.nodes[0]
    node.set_attribute(graphpass.Attribute.from_value("b", 3))
    written = model.to_proto().graph.node[0]
    assert [a.name for a in written.attribute] == ["a", "b"]
    assert written.attribute[1].i == 3


# ------------------------------------------------------------ sparse and training
def test_sparse_initializers(tmp_path: Path) -> None:
    values = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "s")
    indices = numpy_helper.from_array(np.array([1, 3], np.int64), "s_indices")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    proto = _model([helper.make_node("Add", ["x", "s"], ["y"])], [_vi("x", [4])], [_vi("y", [4])])
    proto.graph.sparse_initializer.append(sparse)
    _check(proto, tmp_path)
    model = graphpass.Model.from_proto(proto)
    assert model.graph.producer("s") is None and model.graph.is_defined("s")
    assert model.graph.consumers("s") == model.graph.nodes


def test_training_info(tmp_path: Path) -> None:
    proto = _simple()
    info = proto.training_info.add()
    info.initialization.CopyFrom(helper.make_graph(
        [helper.make_node("Constant", [], ["w_init"], value=numpy_helper.from_array(
            np.zeros(2, np.float32)))], "init", [], [_vi("w_init")]))
    info.initialization_binding.add(key="w", value="w_init")
    info.algorithm.CopyFrom(helper.make_graph(
        [helper.make_node("Sub", ["w", "w"], ["w_new"])], "algo", [], [_vi("w_new")]))
    info.update_binding.add(key="w", value="w_new")
    _check(proto, tmp_path)


# ------------------------------------------------------------------- functions
def _function_model() -> onnx.ModelProto:
    body = [helper.make_node("Constant", [], ["alpha_t"], value_float=0.0),
            helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.0)]
    body[1].attribute[0].ClearField("f")
    body[1].attribute[0].ref_attr_name = "alpha"
    body[0].attribute[0].ClearField("f")
    body[0].attribute[0].ref_attr_name = "alpha"
    first = helper.make_function("local", "Act", ["x"], ["y"], body,
                                 [helper.make_opsetid("", 18)], attributes=[])
    first.attribute_proto.append(helper.make_attribute("alpha", 0.25))
    first.doc_string = "the default overload"
    second = onnx.FunctionProto()
    second.CopyFrom(first)
    second.overload = "v2"
    del second.attribute_proto[:]
    second.attribute.append("alpha")
    second.value_info.append(_vi("alpha_t", []))
    second.metadata_props.add(key="origin", value="test")
    calls = [helper.make_node("Act", ["x"], ["h"], domain="local"),
             helper.make_node("Act", ["h"], ["y"], domain="local", alpha=0.5)]
    calls[1].overload = "v2"
    return _model(calls, [_vi("x")], [_vi("y")], functions=[first, second],
                  opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])


def test_functions_with_attribute_defaults_and_overloads(tmp_path: Path) -> None:
    proto = _function_model()
    _check(proto, tmp_path)
    model = graphpass.Model.from_proto(proto)
    assert set(model.functions) == {("local", "Act", ""), ("local", "Act", "v2")}
    first = model.functions["local", "Act", ""]
    assert first.attribute_defaults["alpha"].value == pytest.approx(0.25)
    assert first.all_attribute_names == ["alpha"]
    calls = model.graph.nodes
    assert [model.function_for(n) for n in calls] == [first, model.functions["local", "Act", "v2"]]


# ------------------------------------------------------------- nested subgraphs
def _nested_capture_model() -> onnx.ModelProto:
    inner = helper.make_graph([helper.make_node("Add", ["a", "b"], ["i"])], "inner", [],
                              [_vi("i")])
    inner_else = helper.make_graph([helper.make_node("Identity", ["a"], ["j"])], "inner_else", [],
                                   [_vi("j")])
    loop_body = helper.make_graph(
        [helper.make_node("If", ["cond_in"], ["b_out"], name="inner_if", then_branch=inner,
                          else_branch=inner_else),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("iter", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
                 _vi("b", [2])], [_vi("cond_out", [], TensorProto.BOOL), _vi("b_out")])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Loop", ["n", "c", "x"], ["y"], name="loop", body=loop_body)]
    return _model(nodes, [_vi("x"), _vi("n", [], TensorProto.INT64),
                          _vi("c", [], TensorProto.BOOL)], [_vi("y")])


def test_nested_subgraphs_with_outer_scope_captures(tmp_path: Path) -> None:
    proto = _nested_capture_model()
    onnx.checker.check_model(proto)
    _check(proto, tmp_path)
    model = graphpass.Model.from_proto(proto)
    _relu, loop = model.graph.nodes
    assert loop.captured_names == ("a",)
    assert model.graph.consumers("a") == [loop]
    body = loop.attributes["body"].graphs[0]
    assert body.free_names == ("a",)
    inner_if = body.nodes[0]
    assert set(inner_if.captured_names) == {"a", "b"}  # b is the body's own input
    assert body.resolve("a") is model.graph.value("a")
