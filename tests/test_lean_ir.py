"""What makes load, passes and save cheap must not change what they produce.

* A saved model's bytes are ``SerializeToString`` of ``Model.to_proto()``, however its
  nodes changed since loading (``graphpass.ir.proto.model_to_chunks`` writes nodes
  from their fields and the unchanged parts of their loaded proto).
* A graph remembers that its nodes are in order only until it changes.
* Values keep their uses in a list while few, then in a dict: the bookkeeping stays right.
* Inlining stamps bodies from prepared plans: the same model as copying node by node.
* ``check`` reuses the strict shape inference ``lint-gradients`` ran, only while the
  model is unchanged, and says what a full check says.
* Collections during a pass skip the model's objects; nothing stays frozen afterwards.
* Loading and saving a model imports no networkx (its import alone is ~17 MB of RSS,
  an eighth of a 100k-node model's load and save); the view imports it when asked for.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import warnings

import onnx
import pytest
from _inline_corpus import wrap
from _ir_consistency import assert_consistent
from onnx import TensorProto, helper

import graphpass
from graphpass import Attribute, Node
from graphpass.files import run_checker, strict_inference
from graphpass.framework import PassContext, default_registry
from graphpass.ir import _gc
from graphpass.ir.proto import model_to_bytes
from graphpass.passes import _inline_expand
from graphpass.passes.inline_functions import InlineFunctions


@pytest.fixture(scope="module")
def node_test_models() -> list[tuple[str, onnx.ModelProto]]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [(case.name, case.model) for case in collect_testcases()]


def _same_bytes(model: graphpass.Model) -> bool:
    return model_to_bytes(model) == model.to_proto().SerializeToString()


def _change_every_way(model: graphpass.Model) -> None:
    """Change nodes in all the ways a pass can (names, fields, inputs, attributes ...)."""
    nodes = model.graph.nodes
    for position, node in enumerate(nodes):
        way = position % 6
        if way == 0:
            node.name = f"{node.name}_renamed"
            node.set_metadata("pass", "touched")
        elif way == 1:
            node.doc_string = ""  # emptied: left out
            node.set_inputs(list(node.inputs))
        elif way == 2:
            node.set_attribute(Attribute.from_value("graphpass_extra", 3))
        elif way == 3 and node.attributes:
            node.remove_attribute(next(iter(node.attributes)))
        elif way == 4:
            node.domain = node.domain  # set to what it was: written as it was loaded
            node.name = ""
    model.graph.append(Node("Identity", [model.graph.output_names[0]], ["graphpass_out"],
                            name="new", metadata={"k": "v"}, doc_string="made here"))


def test_saved_bytes_are_those_of_the_proto_on_every_node_test_model(
        node_test_models: list[tuple[str, onnx.ModelProto]]) -> None:
    assert len(node_test_models) > 1500
    failures = []
    for name, proto in node_test_models:
        model = graphpass.Model.from_proto(proto)
        if not _same_bytes(model):
            failures.append(f"{name}: unchanged")
        _change_every_way(model)
        if not _same_bytes(model):
            failures.append(f"{name}: changed")
    assert failures == []


def test_saved_bytes_keep_unknown_fields_and_fields_present_with_defaults() -> None:
    node = helper.make_node("Relu", ["x"], ["y"], domain="")
    node.name = node.doc_string = ""  # present, with their default value
    node.MergeFromString(bytes([0xF8, 0x06, 0x2A]))  # field 111 (varint): unknown to onnx
    graph = helper.make_graph([node, helper.make_node("Neg", ["y"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    proto = helper.make_model(graph)
    model = graphpass.Model.from_proto(proto)
    assert model_to_bytes(model) == proto.SerializeToString()
    first = model.graph.nodes[0]
    first.set_metadata("k", "v")
    first.name = ""  # present and empty, set again: stays present
    assert _same_bytes(model)
    written = onnx.ModelProto.FromString(model_to_bytes(model)).graph.node[0]
    assert written.HasField("name") and written.HasField("doc_string")
    assert written.SerializeToString().endswith(bytes([0xF8, 0x06, 0x2A]))
    graph_unknown = helper.make_model(graph)
    graph_unknown.graph.MergeFromString(bytes([0xF8, 0x06, 0x01]))
    model = graphpass.Model.from_proto(graph_unknown)  # written the plain way
    model.graph.nodes[1].name = "renamed"
    assert _same_bytes(model)


def test_saving_after_inlining_gives_the_bytes_of_the_proto(
        node_test_models: list[tuple[str, onnx.ModelProto]]) -> None:
    context = PassContext(registry=default_registry())
    for name, proto in node_test_models[::7]:
        for variant in ("node-call", "nested"):
            try:
                wrapped = wrap(proto, variant)
            except Exception:  # cases the corpus helper cannot wrap
                continue
            model = graphpass.Model.from_proto(wrapped)
            InlineFunctions().run(model, context)
            assert _same_bytes(model), (name, variant)


def _sorted_chain() -> graphpass.Model:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Neg", ["a"], ["y"], name="second")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    return graphpass.Model.from_proto(helper.make_model(graph))


def test_a_graph_knows_it_is_in_order_only_until_it_changes() -> None:
    model = _sorted_chain()
    graph = model.graph
    assert graph._known_sorted()  # learnt while loading
    first = graph.nodes[0]
    graph.remove(first, safe=False)
    graph.append(first)  # now after its consumer
    assert not graph._known_sorted()
    with pytest.raises(graphpass.InvalidModelError, match="not in topological order"):
        graphpass.validate(model)
    graph.sort()
    graphpass.validate(model)
    assert graph._known_sorted()
    copy = model.copy()
    assert copy.graph._known_sorted()  # the same nodes, in the same order
    copy.graph.nodes[0].name = "renamed"  # any change forgets it
    assert not copy.graph._known_sorted() and model.graph._known_sorted()


def test_a_node_reading_its_own_output_is_a_cycle_also_through_its_subgraph() -> None:
    then = helper.make_graph([helper.make_node("Identity", ["y"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", 1, [1])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", 1, [1])])
    branch = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other,
                              name="if")
    graph = helper.make_graph(
        [branch], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                        helper.make_tensor_value_info("x", 1, [1])],
        [helper.make_tensor_value_info("y", 1, [1])])
    model = graphpass.Model.from_proto(helper.make_model(graph))
    assert not model.graph._known_sorted()
    with pytest.raises(graphpass.CycleError, match="'if'"):
        graphpass.validate(model)


def test_values_used_many_times_keep_their_uses_right() -> None:
    model = _sorted_chain()
    graph = model.graph
    readers = [Node("Identity", ["a"], [f"r{i}"], name=f"r{i}") for i in range(40)]
    graph.extend(readers)
    assert len(graph.uses("a")) == 41 and type(graph.value("a")._uses) is dict
    assert_consistent(graph)
    for reader in readers[::2]:
        graph.remove(reader)
    graph.replace_uses("a", "x")
    assert graph.uses("a") == () and len(graph.uses("x")) == 22  # first, second, 20 readers
    assert_consistent(graph)


def test_inlining_stamped_bodies_equals_copying_node_by_node(
        node_test_models: list[tuple[str, onnx.ModelProto]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    context = PassContext(registry=default_registry())
    wrapped = []
    for _, proto in node_test_models[::11]:
        for variant in ("node-default", "repeated"):
            try:
                wrapped.append(wrap(proto, variant))
            except Exception:  # cases the corpus helper cannot wrap
                continue
    assert len(wrapped) > 200
    stamped = []
    for proto in wrapped:
        model = graphpass.Model.from_proto(proto)
        InlineFunctions().run(model, context)
        stamped.append(model.to_proto())
    monkeypatch.setattr(_inline_expand.Inliner, "_stamp_all", lambda *args: None)
    for proto, expected in zip(wrapped, stamped, strict=True):
        model = graphpass.Model.from_proto(proto)
        InlineFunctions().run(model, context)
        assert model.to_proto() == expected


def _fails_strict_inference() -> graphpass.Model:
    # Add of a float and an int: lenient inference lets it pass, the full check does not.
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "i"], ["y"], name="mixed")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return graphpass.Model.from_proto(helper.make_model(graph))


def test_check_reuses_strict_inference_only_while_the_model_is_unchanged() -> None:
    model = _fails_strict_inference()
    fresh = run_checker(model, full_check=True)
    assert fresh is not None and fresh.kind == "inference"
    inferred, problem = strict_inference(model)
    assert inferred is None and problem == fresh
    assert run_checker(model, full_check=True) == fresh  # reused
    model.graph.nodes[0].set_inputs(["x", "x"])  # fixed: the remembered failure is stale
    assert run_checker(model, full_check=True) is None
    good = _sorted_chain()
    inferred, problem = strict_inference(good)
    assert problem is None and inferred is not None
    assert run_checker(good, full_check=True) is None


def test_a_pass_runs_with_the_model_frozen_and_nothing_stays_frozen() -> None:
    seen = []

    class Watch(graphpass.AnalysisPass):
        name = "watch-collector"
        description = "records whether the model's objects are frozen while it runs"

        def run(self, model: graphpass.Model, context: PassContext) -> graphpass.PassResult:
            seen.append(gc.get_freeze_count())
            model.copy()  # a paused block inside: its objects join the frozen ones
            return graphpass.PassResult()

    graphpass.PassManager([Watch]).run(_sorted_chain())
    assert seen and seen[0] > 0
    assert gc.get_freeze_count() == 0 and not _gc._Account.sparing


def test_load_and_save_import_no_networkx_until_the_view_is_asked_for(tmp_path) -> None:
    source = tmp_path / "model.onnx"
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])), source)
    script = (
        "import sys, graphpass\n"
        f"model = graphpass.load({str(source)!r})\n"
        f"graphpass.save(model, {str(tmp_path / 'out.onnx')!r})\n"
        "print('networkx' in sys.modules)\n"
        "model.graph.nx\n"
        "print('networkx' in sys.modules)\n")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True).stdout.split()
    assert shown == ["False", "True"]
