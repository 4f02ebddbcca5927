"""graphpass.validate: structural rules, clear messages, and save refusing invalid models.

``load`` accepts a model with dangling names (passes report on them); ``validate``
and ``save`` do not.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass import CycleError, InvalidModelError, Node
from graphpass.files._validate import find_problems


def _vi(name: str, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [2])


def _model(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str],
           **kwargs: object) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "main", [_vi(n) for n in inputs], [_vi(n) for n in outputs])
    kwargs.setdefault("opset_imports", [helper.make_opsetid("", 18)])
    return helper.make_model(graph, **kwargs)  # type: ignore[arg-type]


def _branch(name: str, op: str, source: str, out: str) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, [source], [out], name=f"{name}_node")],
                             name, [], [_vi(out)])


def _if_model(then_source: str, *, define_after: bool = False) -> onnx.ModelProto:
    """An If whose then-branch reads ``then_source`` from the outer graph."""
    produce_a = helper.make_node("Relu", ["x"], ["a"], name="make_a")
    if_node = helper.make_node("If", ["c"], ["y"], name="choose",
                               then_branch=_branch("then", "Neg", then_source, "t"),
                               else_branch=_branch("else", "Abs", "x", "e"))
    nodes = [if_node, produce_a] if define_after else [produce_a, if_node]
    graph = helper.make_graph(nodes, "main", [_vi("x"), _vi("c", TensorProto.BOOL)], [_vi("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


# ==================================================================== accepted
def test_valid_models_pass() -> None:
    graphpass.validate(graphpass.Model.from_proto(_if_model("a")))
    graphpass.validate(graphpass.Model.from_proto(
        _model([helper.make_node("Add", ["x", "x"], ["y"])], ["x"], ["y"])))


def test_outer_names_are_visible_in_nested_subgraphs() -> None:
    inner = _branch("inner", "Neg", "a", "i")  # 'a' comes from two scopes out
    body = helper.make_graph(
        [helper.make_node("If", ["c"], ["o"], name="inner_if", then_branch=inner,
                          else_branch=_branch("inner_else", "Abs", "x", "j"))],
        "outer_then", [], [_vi("o")])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("If", ["c"], ["y"], name="outer_if", then_branch=body,
                          else_branch=_branch("outer_else", "Abs", "x", "e"))],
        "main", [_vi("x"), _vi("c", TensorProto.BOOL)], [_vi("y")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(proto)
    graphpass.validate(graphpass.Model.from_proto(proto))


# =============================================================== dangling names
def test_dangling_name_in_the_main_graph_is_named() -> None:
    proto = _model([helper.make_node("Add", ["x", "missing_weight"], ["y"], name="add")],
                   ["x"], ["y"])
    model = graphpass.Model.from_proto(proto)  # loading accepts it
    with pytest.raises(InvalidModelError) as caught:
        graphpass.validate(model)
    text = str(caught.value)
    assert "'add' (Add)" in text and "'missing_weight'" in text and "graph 'main'" in text
    assert "detect-missing-buffers" in text  # the hint says what to do


def test_load_accepts_a_dangling_name_and_save_refuses_it(tmp_path: Path) -> None:
    source = tmp_path / "in.onnx"
    onnx.save(_model([helper.make_node("Add", ["x", "gone"], ["y"], name="add")], ["x"], ["y"]),
              source)
    model = graphpass.load(source)
    assert model.graph.free_names == ("gone",)
    out = tmp_path / "out" / "model.onnx"
    with pytest.raises(InvalidModelError, match=r"refusing to save.*'gone'") as caught:
        graphpass.save(model, out)
    assert str(out) in str(caught.value)
    assert not out.parent.exists()
    graphpass.save(model, out, validate=False)  # a deliberately broken fixture
    assert onnx.load(out) == onnx.load(source)


def test_dangling_name_inside_a_subgraph_names_the_subgraph() -> None:
    model = graphpass.Model.from_proto(_if_model("nowhere"))
    with pytest.raises(InvalidModelError) as caught:
        graphpass.validate(model)
    text = str(caught.value)
    assert "'then_node' (Neg)" in text and "'nowhere'" in text
    assert "subgraph 'then' of node 'choose' (If)" in text and "graph 'main'" in text


def test_undefined_graph_output() -> None:
    model = graphpass.Model.from_proto(
        _model([helper.make_node("Relu", ["x"], ["h"])], ["x"], ["y"]))
    with pytest.raises(InvalidModelError, match="graph output 'y' is not defined"):
        graphpass.validate(model)


def test_function_body_cannot_see_the_main_graph() -> None:
    function = helper.make_function("local", "F", ["a"], ["b"],
                                    [helper.make_node("Add", ["a", "x"], ["b"], name="uses_x")],
                                    [helper.make_opsetid("", 18)])
    proto = _model([helper.make_node("F", ["x"], ["y"], domain="local")], ["x"], ["y"],
                   functions=[function],
                   opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])
    with pytest.raises(InvalidModelError) as caught:
        graphpass.validate(graphpass.Model.from_proto(proto))
    assert "function local::F" in str(caught.value) and "'x'" in str(caught.value)


def test_removing_a_producer_makes_its_consumers_dangle() -> None:
    model = graphpass.Model.from_proto(_model(
        [helper.make_node("Relu", ["x"], ["h"], name="relu"),
         helper.make_node("Neg", ["h"], ["y"], name="neg")], ["x"], ["y"]))
    relu = model.graph.nodes[0]
    model.graph.remove(relu, safe=False)
    with pytest.raises(InvalidModelError, match="'neg' \\(Neg\\) uses 'h'"):
        graphpass.validate(model)


# ========================================================== cycles and ordering
def test_cycle_names_its_nodes() -> None:
    proto = _model([helper.make_node("Relu", ["b"], ["a"], name="first"),
                    helper.make_node("Neg", ["a"], ["b"], name="second"),
                    helper.make_node("Abs", ["a"], ["y"], name="third")], [], ["y"])
    with pytest.raises(CycleError) as caught:
        graphpass.validate(graphpass.Model.from_proto(proto))
    text = str(caught.value)
    assert "first" in text and "second" in text and "third" not in text.split("hint", maxsplit=1)[0]
    assert "graph 'main'" in text


def test_self_loop_is_a_cycle() -> None:
    proto = _model([helper.make_node("Add", ["x", "a"], ["a"], name="loop")], ["x"], ["a"])
    with pytest.raises(CycleError, match="loop"):
        graphpass.validate(graphpass.Model.from_proto(proto))


def test_nodes_out_of_order_are_reported_and_sort_fixes_them(tmp_path: Path) -> None:
    proto = _model([helper.make_node("Neg", ["h"], ["y"], name="late"),
                    helper.make_node("Relu", ["x"], ["h"], name="early")], ["x"], ["y"])
    model = graphpass.Model.from_proto(proto)
    with pytest.raises(InvalidModelError, match="'late' \\(Neg\\) uses 'h' before node 'early'") \
            as caught:
        graphpass.validate(model)
    assert not isinstance(caught.value, CycleError)
    assert "topological-sort" in str(caught.value)
    assert model.graph.sort()
    graphpass.validate(model)
    path = tmp_path / "sorted.onnx"
    graphpass.save(model, path)
    onnxruntime.InferenceSession(str(path))  # the runtime accepts the result


def test_subgraph_capture_of_a_later_value_is_out_of_order() -> None:
    model = graphpass.Model.from_proto(_if_model("a", define_after=True))
    with pytest.raises(InvalidModelError, match="'choose' \\(If\\) uses 'a' before"):
        graphpass.validate(model)
    model.graph.sort()
    graphpass.validate(model)


# ===================================================================== domains
def test_custom_domain_without_opset_import() -> None:
    proto = _model([helper.make_node("Fancy", ["x"], ["y"], domain="com.example", name="f")],
                   ["x"], ["y"])
    with pytest.raises(InvalidModelError, match=r"com\.example::Fancy.*no opset for domain "
                                                r"'com\.example'"):
        graphpass.validate(graphpass.Model.from_proto(proto))


def test_local_function_call_without_opset_import(tmp_path: Path) -> None:
    function = helper.make_function("local", "F", ["a"], ["b"],
                                    [helper.make_node("Relu", ["a"], ["b"])],
                                    [helper.make_opsetid("", 18)])
    proto = _model([helper.make_node("F", ["x"], ["y"], domain="local", name="call")],
                   ["x"], ["y"], functions=[function])
    model = graphpass.Model.from_proto(proto)
    with pytest.raises(InvalidModelError, match="model-local function local::F"):
        graphpass.validate(model)
    # onnxruntime refuses the same model, for the same reason
    with pytest.raises(Exception, match="No opset import for domain 'local'"):
        onnxruntime.InferenceSession(proto.SerializeToString())
    model.opset_imports["local"] = 1
    graphpass.validate(model)


def test_function_body_domain_must_be_imported() -> None:
    function = helper.make_function("local", "F", ["a"], ["b"],
                                    [helper.make_node("Op", ["a"], ["b"], domain="other")],
                                    [helper.make_opsetid("", 18)])
    proto = _model([helper.make_node("F", ["x"], ["y"], domain="local")], ["x"], ["y"],
                   functions=[function],
                   opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])
    with pytest.raises(InvalidModelError, match="function local::F imports no opset"):
        graphpass.validate(graphpass.Model.from_proto(proto))


def test_ai_onnx_is_the_default_domain() -> None:
    proto = _model([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")], ["x"], ["y"])
    graphpass.validate(graphpass.Model.from_proto(proto))


# ================================================================== find_problems
def test_find_problems_lists_every_problem() -> None:
    proto = _model([helper.make_node("Add", ["x", "w1"], ["h"], name="a"),
                    helper.make_node("Custom", ["h", "w2"], ["y"], domain="x.y", name="b")],
                   ["x"], ["y"])
    problems = find_problems(graphpass.Model.from_proto(proto))
    messages = [p.message for p in problems]
    assert len(messages) == 3
    assert any("'w1'" in m for m in messages) and any("'w2'" in m for m in messages)
    assert any("domain 'x.y'" in m for m in messages)


def test_validate_does_not_change_the_model() -> None:
    proto = _model([helper.make_node("Neg", ["h"], ["y"]),
                    helper.make_node("Relu", ["x"], ["h"])], ["x"], ["y"])
    model = graphpass.Model.from_proto(proto)
    version = model.version
    assert find_problems(model)
    assert model.version == version and model.to_proto() == proto


def test_model_built_in_python_is_checked_too() -> None:
    graph = graphpass.Graph("g", inputs=[_vi("x")], outputs=[_vi("y")],
                            nodes=[Node("Relu", ["x"], ["h"]), Node("Neg", ["h"], ["y"])])
    model = graphpass.Model(graph, opset_imports={"": 18})
    graphpass.validate(model)
    graph.append(Node("Abs", ["undefined"], ["z"], name="abs"))
    with pytest.raises(InvalidModelError, match="'abs' \\(Abs\\) uses 'undefined'"):
        graphpass.validate(model)
