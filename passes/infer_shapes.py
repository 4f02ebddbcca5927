"""The ``infer-shapes`` pass: declare the types and shapes ONNX shape inference finds.

Runs ``onnx.shape_inference.infer_shapes`` (not strict, with data propagation) on the
model's structure and copies the results back:

* a ``value_info`` entry for every node output (main graph and subgraphs) that has no
  declaration yet;
* the type of every graph output that has none (common in subgraphs), and the shape of
  every declaration that gives a tensor type without a shape.

Declared types and shapes are never changed (only completed), and nothing else is
touched. Weights are not
read or embedded: large and external initializers are given to shape inference as
typed graph inputs (:func:`graphpass.files._checking.structural_proto`), so the pass works on
models with external data and past 2 GiB. Function bodies are left as they are (ONNX
shape inference does not type them).

If shape inference itself fails, the pass changes nothing and reports ``GP510``
(warning).

Data propagation is skipped (``GP511``, info) when the model has a 1-D tensor longer
than :data:`DATA_PROPAGATION_LIMIT` elements: onnx's data propagation materializes every
element of a 1-D tensor as a shape dimension (some 140 bytes each), so a tensor
declared ``[10**8]`` would make it allocate gigabytes, and ``[2**62]`` exhaust memory.
Shape tensors are short; the limit never skips them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar, Final

import onnx

from graphpass.files import infer_shapes, structural_proto
from graphpass.findings import Finding, Severity
from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import Graph, Model, Value

__all__ = ["DATA_PROPAGATION_LIMIT", "InferShapes"]

DATA_PROPAGATION_LIMIT: Final = 2**16
"""Data propagation runs only when no 1-D tensor of the model is longer than this."""


class InferShapes(Pass):
    """Add value_info for every value ONNX shape inference can type."""

    name = "infer-shapes"
    description = "Add value_info for every value ONNX shape inference can type."
    codes: ClassVar[Mapping[str, str]] = {
        "GP510": "ONNX shape inference failed; no types were added.",
        "GP511": "A 1-D tensor is too long for ONNX's data propagation; it was skipped."}

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Infer and declare types; report how many declarations were added."""
        proto = structural_proto(model)
        findings: list[Finding] = []
        try:
            inferred = infer_shapes(proto, check_type=False, strict_mode=False, data_prop=False)
            longest = _longest_vector(inferred)
            if longest[1] <= DATA_PROPAGATION_LIMIT:
                inferred = infer_shapes(proto, check_type=False, strict_mode=False,
                                        data_prop=True)
            else:
                findings.append(Finding(
                    "GP511", Severity.INFO,
                    f"skipped ONNX data propagation: {longest[0]!r} is a 1-D tensor of "
                    f"{longest[1]} elements, and data propagation would hold a shape "
                    "dimension for each", value=longest[0],
                    hint="shapes computed at run time (Shape -> ... -> Reshape) stay unknown"))
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError,
                RuntimeError) as error:
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            return PassResult(findings=[Finding(
                "GP510", Severity.WARNING, f"ONNX shape inference failed: {first_line[:500]}",
                hint="run the `check` pass for the details; nothing was changed")])
        added = typed_outputs = 0
        for graph, graph_proto in _graph_pairs(model.graph, inferred.graph):
            added += _declare_values(graph, graph_proto)
            typed_outputs += _type_outputs(graph, graph_proto)
        return PassResult(changed=bool(added or typed_outputs), findings=findings,
                          stats={"value_info added": added, "outputs typed": typed_outputs})


def _longest_vector(proto: onnx.ModelProto) -> tuple[str, int]:
    """The longest 1-D tensor declared, inferred or stored anywhere in the model."""
    longest = ("", 0)
    stack = [proto.graph]
    while stack:
        graph = stack.pop()
        for info in (*graph.input, *graph.output, *graph.value_info):
            dims = info.type.tensor_type.shape.dim
            if len(dims) == 1 and dims[0].dim_value > longest[1]:
                longest = (info.name, dims[0].dim_value)
        for tensor in graph.initializer:
            if len(tensor.dims) == 1 and tensor.dims[0] > longest[1]:
                longest = (tensor.name, tensor.dims[0])
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t") and len(attribute.t.dims) == 1 \
                        and attribute.t.dims[0] > longest[1]:
                    longest = (node.output[0] if node.output else node.name,
                               attribute.t.dims[0])
                if attribute.HasField("g"):
                    stack.append(attribute.g)
                stack.extend(attribute.graphs)
    return longest


def _graph_pairs(graph: Graph, proto: onnx.GraphProto) -> Iterator[tuple[Graph, onnx.GraphProto]]:
    """Walk a graph and its proto (written from it, so nodes line up) side by side."""
    yield graph, proto
    for node, node_proto in zip(graph, proto.node, strict=False):
        for attribute_proto in node_proto.attribute:
            attribute = node.attributes.get(attribute_proto.name)
            if attribute is None or not attribute.graphs:
                continue
            subgraph_protos = ([attribute_proto.g] if attribute_proto.HasField("g")
                               else list(attribute_proto.graphs))
            for subgraph, subgraph_proto in zip(attribute.graphs, subgraph_protos, strict=False):
                yield from _graph_pairs(subgraph, subgraph_proto)


def _declare_values(graph: Graph, proto: onnx.GraphProto) -> int:
    added = 0
    for info in proto.value_info:
        value = graph.values.get(info.name)
        if value is None or value.producer is None:
            continue  # not a node output of this graph
        if value.is_declared:
            added += _complete(value, info.type)
        elif info.type.WhichOneof("value") is not None:
            graph.add_value_info(info)
            added += 1
    return added


def _type_outputs(graph: Graph, proto: onnx.GraphProto) -> int:
    return sum(_complete(value, info.type)
               for value, info in zip(graph.outputs, proto.output, strict=False)
               if info.name == value.name)


def _complete(value: Value, inferred: onnx.TypeProto) -> bool:
    """Give ``value`` what inference adds to its type; whether that was anything."""
    completed = _completed(value.type, inferred)
    if completed is None:
        return False
    value.type = completed
    return True


def _completed(declared: onnx.TypeProto | None, inferred: onnx.TypeProto) -> onnx.TypeProto | None:
    """The declared type with what inference adds (a missing type or shape), or ``None``."""
    if inferred.WhichOneof("value") is None:
        return None
    if declared is None or declared.WhichOneof("value") is None:
        return inferred
    if declared.WhichOneof("value") != "tensor_type" or inferred.WhichOneof(
            "value") != "tensor_type":
        return None
    mine, theirs = declared.tensor_type, inferred.tensor_type
    if mine.HasField("shape") or not theirs.HasField("shape"):
        return None
    if mine.elem_type and theirs.elem_type and mine.elem_type != theirs.elem_type:
        return None
    completed = onnx.TypeProto()
    completed.CopyFrom(declared)
    completed.tensor_type.shape.CopyFrom(theirs.shape)
    if not completed.tensor_type.elem_type:
        completed.tensor_type.elem_type = theirs.elem_type
    return completed
