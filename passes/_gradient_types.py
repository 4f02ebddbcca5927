"""Element types and ranks of values, for deciding where gradients can flow.

A value's type comes from its declaration (graph inputs, outputs, ``value_info``),
from its initializer, or, when neither says, from ONNX shape inference. Inference
runs at most once per model (and once per called function), on a proto copy whose
initializers carry no data: external weights are never read and embedded ones never
copied.

Element type ``0`` stands for "not a tensor" (a sequence, an optional, a map):
gradients do not flow through those. ``None`` means unknown.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from graphpass.ir import Function, Graph, Model, Tensor
from graphpass.proto import function_to_proto, model_to_proto

__all__ = ["FunctionTypes", "ModelTypes", "TypeInfo"]

TypeInfo = tuple["int | None", "int | None"]
"""``(element type, rank)``; each ``None`` when unknown."""

_NOT_A_TENSOR = 0


def _type_only(tensor: Tensor) -> onnx.TensorProto:
    """An initializer with its name, element type and shape, and no data."""
    return onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)


def _info(type_proto: onnx.TypeProto) -> TypeInfo | None:
    which = type_proto.WhichOneof("value")
    if which is None:
        return None
    if which != "tensor_type":
        return (_NOT_A_TENSOR, None)
    tensor = type_proto.tensor_type
    elem_type = int(tensor.elem_type) if tensor.HasField("elem_type") and tensor.elem_type \
        else None
    rank = len(tensor.shape.dim) if tensor.HasField("shape") else None
    if elem_type is None and rank is None:
        return None
    return (elem_type, rank)


def _collect(graph: onnx.GraphProto, into: dict[str, TypeInfo]) -> None:
    """Types of every declared value in ``graph`` and its subgraphs."""
    for item in (*graph.input, *graph.output, *graph.value_info):
        found = _info(item.type)
        if found is not None:
            into.setdefault(item.name, found)
    for tensor in graph.initializer:
        into.setdefault(tensor.name, (tensor.data_type, len(tensor.dims)))
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _collect(attribute.g, into)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    _collect(subgraph, into)


def _infer(proto: onnx.ModelProto) -> dict[str, TypeInfo]:
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False,
                                                     data_prop=False)
    except Exception:  # inference is a best effort: what stays unknown counts as float
        inferred = proto
    found: dict[str, TypeInfo] = {}
    _collect(inferred.graph, found)
    return found


def _declared(graph: Graph, name: str) -> tuple[TypeInfo | None, bool]:
    """``(type, defined here)`` of ``name`` in ``graph`` without inference."""
    if name in graph.initializers:
        tensor = graph.initializers[name]
        return (tensor.dtype, len(tensor.shape)), True
    value = graph.values.get(name)
    if value is None:
        return None, False
    found = _info(value.type) if value.type is not None else None
    return found, value.is_defined


class _Lookup:
    """Shared lookup: declarations first, then (once) shape inference."""

    def __init__(self) -> None:
        self._inferred: dict[str, TypeInfo] | None = None

    def _infer(self) -> dict[str, TypeInfo]:
        raise NotImplementedError

    def _from_inference(self, name: str, known: TypeInfo | None) -> TypeInfo:
        if known is not None and known[0] is not None and known[1] is not None:
            return known
        if self._inferred is None:
            self._inferred = self._infer()
        inferred = self._inferred.get(name)
        if known is None:
            return inferred or (None, None)
        if inferred is None:
            return known
        return (known[0] if known[0] is not None else inferred[0],
                known[1] if known[1] is not None else inferred[1])


class ModelTypes(_Lookup):
    """Types of the values of a model's main graph and its subgraphs."""

    def __init__(self, model: Model):
        """Look types up in ``model`` (inference runs lazily, on the first unknown)."""
        super().__init__()
        self._model = model

    def of(self, graph: Graph, name: str) -> TypeInfo:
        """``(element type, rank)`` of ``name`` as seen from ``graph``."""
        scope: Graph | None = graph
        known: TypeInfo | None = None
        while scope is not None:
            known, defined = _declared(scope, name)
            if known is not None or defined:
                break
            scope = scope.parent_graph
        return self._from_inference(name, known)

    def _infer(self) -> dict[str, TypeInfo]:
        return _infer(model_to_proto(self._model, _type_only))


class FunctionTypes(_Lookup):
    """Types inside a function body, for the input types of one call."""

    def __init__(self, model: Model, function: Function, inputs: Iterable[TypeInfo]):
        """Prepare inference of ``function``'s body with these input types."""
        super().__init__()
        self._model = model
        self._function = function
        self._inputs = tuple(inputs)

    def of(self, graph: Graph, name: str) -> TypeInfo:
        """``(element type, rank)`` of ``name`` in the body (or one of its subgraphs)."""
        known, _ = _declared(graph, name)
        if known is None and name in self._function.graph.input_names:
            position = self._function.graph.input_names.index(name)
            if position < len(self._inputs):
                known = self._inputs[position]
        return self._from_inference(name, known)

    def _infer(self) -> dict[str, TypeInfo]:
        function = function_to_proto(self._function, emit_tensor=_type_only)
        inputs = []
        for name, (elem_type, rank) in zip(function.input, self._inputs, strict=False):
            if elem_type:
                shape = None if rank is None else [None] * rank
                inputs.append(onnx.helper.make_tensor_value_info(name, elem_type, shape))
            else:
                inputs.append(onnx.ValueInfoProto(name=name))
        graph = onnx.helper.make_graph(list(function.node), function.name or "body", inputs,
                                       [onnx.ValueInfoProto(name=n) for n in function.output],
                                       value_info=list(function.value_info))
        opsets: dict[str, int] = dict(self._model.opset_imports)
        opsets.update({entry.domain: entry.version for entry in function.opset_import})
        others = [function_to_proto(f, emit_tensor=_type_only)
                  for f in self._model.functions.values() if f is not self._function]
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()],
            functions=others, ir_version=max(self._model.ir_version, 8))
        return _infer(model)
