"""Helpers for the inline-functions tests: run the pass, run models, find leftover calls."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

import graphpass
from graphpass.framework import PassContext, PassResult, default_registry
from graphpass.passes.inline_functions import InlineFunctions

FLOAT = onnx.TensorProto.FLOAT
PROVENANCE = "graphpass.inlined_from"


def inline(proto: onnx.ModelProto, **options: Any) -> tuple[onnx.ModelProto, PassResult]:
    """Run the pass on a copy of ``proto``; return the new proto and the result."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    model = graphpass.Model.from_proto(copy)
    result = InlineFunctions(options or None).run(model, PassContext(registry=default_registry()))
    return model.to_proto(), result


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in its nodes' attributes."""
    stack = [graph]
    while stack:
        current = stack.pop()
        yield current
        for node in current.node:
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    stack.append(attribute.g)
                stack.extend(attribute.graphs)


def all_nodes(proto: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every node of the main graph, function bodies, and their subgraphs."""
    roots = [proto.graph]
    for function in proto.functions:
        roots.append(helper.make_graph(function.node, "body", [], []))
    for root in roots:
        for graph in all_graphs(root):
            yield from graph.node


def calls_left(proto: onnx.ModelProto, functions: Sequence[onnx.FunctionProto]
               ) -> list[str]:
    """The nodes of ``proto`` that call one of ``functions`` (by domain, name, overload)."""
    keys = {(f.domain, f.name, f.overload) for f in functions}
    return [node.name for node in all_nodes(proto)
            if (node.domain, node.op_type, node.overload) in keys]


def run_ort(proto: onnx.ModelProto, feeds: Mapping[str, Any]) -> list[Any]:
    """Run a model with onnxruntime on the CPU."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    return list(session.run(None, dict(feeds)))


def run_reference(proto: onnx.ModelProto, feeds: Mapping[str, Any]) -> list[Any]:
    """Run a model with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(proto).run(None, dict(feeds)))


def assert_close(actual: Sequence[Any], expected: Sequence[Any], rtol: float = 1e-5,
                 atol: float = 1e-6) -> None:
    """Compare output lists."""
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


def check(proto: onnx.ModelProto) -> None:
    """The full ONNX checker (types, shapes, functions)."""
    onnx.checker.check_model(proto, full_check=True)


def model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto], functions: Sequence[onnx.FunctionProto] = (),
          *, opset: int = 18, extra_opsets: Mapping[str, int] | None = None,
          ir_version: int = 10, initializers: Sequence[onnx.TensorProto] = (),
          value_info: Sequence[onnx.ValueInfoProto] = ()) -> onnx.ModelProto:
    """A model of one graph with local functions (their domains imported at version 1)."""
    opsets = {"": opset, **{f.domain: 1 for f in functions}, **(extra_opsets or {})}
    graph = helper.make_graph(list(nodes), "main", list(inputs), list(outputs),
                              initializer=list(initializers), value_info=list(value_info))
    return helper.make_model(graph, functions=list(functions), ir_version=ir_version,
                             opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])


def function(name: str, inputs: Sequence[str], outputs: Sequence[str],
             nodes: Sequence[onnx.NodeProto], *, domain: str = "local", opset: int = 18,
             attributes: Sequence[str] = (), defaults: Sequence[onnx.AttributeProto] = (),
             overload: str = "", extra_opsets: Mapping[str, int] | None = None,
             value_info: Sequence[onnx.ValueInfoProto] = ()) -> onnx.FunctionProto:
    """A model-local function."""
    opsets = {"": opset, **{n.domain: 1 for n in nodes if n.domain not in ("", "ai.onnx")},
              **(extra_opsets or {})}
    proto = helper.make_function(domain, name, list(inputs), list(outputs), list(nodes),
                                 [helper.make_opsetid(d, v) for d, v in opsets.items()],
                                 attributes=list(attributes), attribute_protos=list(defaults))
    if overload:
        proto.overload = overload
    proto.value_info.extend(value_info)
    return proto


def ref(name: str, refers_to: str, kind: int) -> onnx.AttributeProto:
    """An attribute that refers to an attribute of the enclosing function."""
    return onnx.AttributeProto(name=name, ref_attr_name=refers_to, type=kind)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], *, name: str = "",
         domain: str = "", attributes: Sequence[onnx.AttributeProto] = (),
         overload: str = "", **values: Any) -> onnx.NodeProto:
    """A node; ``attributes`` are added as given (references), ``values`` via make_node."""
    proto = helper.make_node(op_type, list(inputs), list(outputs), name=name or None,
                             domain=domain or None, **values)
    proto.attribute.extend(attributes)
    if overload:
        proto.overload = overload
    return proto


def tensor(name: str, shape: Sequence[int | str] | None = (3,), elem: int = FLOAT
           ) -> onnx.ValueInfoProto:
    """A tensor declaration."""
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def neg_then_fused() -> onnx.ModelProto:
    """``x -> local::Neg2 -> kernels::Fused -> y``: a call to inline, then a fused kernel."""
    neg = function("Neg2", ["x"], ["y"], [node("Neg", ["x"], ["y"])])
    fused = function("Fused", ["x"], ["y"], [node("Abs", ["x"], ["y"])], domain="kernels")
    calls = [node("Neg2", ["x"], ["a"], name="n", domain="local"),
             node("Fused", ["a"], ["y"], name="f", domain="kernels")]
    return model(calls, [tensor("x")], [tensor("y")], [neg, fused])


def provenance(proto: onnx.ModelProto) -> dict[str, str]:
    """``graphpass.inlined_from`` of every main-graph node, by node name."""
    return {n.name: entry.value for n in proto.graph.node for entry in n.metadata_props
            if entry.key == PROVENANCE}
