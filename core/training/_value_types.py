"""Element types and shapes of values: declared, else from ONNX shape inference.

A value's type comes from its initializer or its declaration (graph inputs, outputs,
``value_info``), searching enclosing graphs outward; when neither says, from ONNX
shape inference. Inference runs at most once per :class:`ModelTypes` (and once per
:class:`FunctionTypes`), lazily, on the model's structure
(:func:`graphpass.files._checking.structural_proto`): external weights are never read and
large embedded ones never copied.

Element type ``0`` stands for "not a tensor" (a sequence, an optional, a map);
``None`` means unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import onnx

from graphpass.files import strict_inference, structural_proto
from graphpass.ir import Function, Graph, Model, Tensor
from graphpass.ir.proto import function_to_proto

__all__ = ["FunctionTypes", "ModelTypes", "TypeInfo"]

Shape = tuple["int | str | None", ...]


class TypeInfo(NamedTuple):
    """What is known of a value's type.

    Attributes:
        elem_type: The element type (``0``: not a tensor; ``None``: unknown).
        shape: The dimensions (ints, symbolic names, ``None``), or ``None`` if unknown.
    """

    elem_type: int | None
    shape: Shape | None = None

    @property
    def rank(self) -> int | None:
        """The number of dimensions, if known."""
        return None if self.shape is None else len(self.shape)

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        """The dimensions if all are known numbers, else ``None``."""
        if self.shape is None or not all(isinstance(d, int) for d in self.shape):
            return None
        return tuple(int(d) for d in self.shape)  # type: ignore[arg-type]


_UNKNOWN = TypeInfo(None, None)
_NOT_DECODED = TypeInfo(-1)  # a marker: this type was not decoded yet

_NOT_A_TENSOR = 0


def _type_only(tensor: Tensor) -> onnx.TensorProto:
    """An initializer with its name, element type and shape, and no data."""
    return onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)


_DIM_VALUE = {"dim_value": True, "dim_param": False, None: None}


def _info(type_proto: onnx.TypeProto) -> TypeInfo | None:
    which = type_proto.WhichOneof("value")
    if which is None:
        return None
    if which != "tensor_type":
        return TypeInfo(_NOT_A_TENSOR)
    tensor = type_proto.tensor_type
    elem_type = int(tensor.elem_type) or None  # 0 (or absent): not known
    shape: Shape | None = None
    if tensor.HasField("shape"):
        dims: list[int | str | None] = []
        for dim in tensor.shape.dim:
            kind = _DIM_VALUE[dim.WhichOneof("value")]
            dims.append(None if kind is None else dim.dim_value if kind else dim.dim_param)
        shape = tuple(dims)
    if elem_type is None and shape is None:
        return None
    return TypeInfo(elem_type, shape)


def _collect(graph: onnx.GraphProto, into: dict[str, TypeInfo], *,
             nested: bool = True, initializers: bool = True) -> None:
    """Types of every declared value in ``graph`` and (if ``nested``) its subgraphs.

    ``initializers=False`` leaves out the initializers (the caller knows them: reading
    them back from an inferred model costs more than all the declarations).
    """
    decoded: dict[bytes, TypeInfo | None] = {}  # most values share their type with others
    for items in (graph.input, graph.output, graph.value_info):
        for item in items:  # a hot loop: inference declares every value of a model
            name = item.name
            if name in into:  # the first declaration wins
                continue
            type_proto = item.type
            key = type_proto.SerializeToString()
            found = decoded.get(key, _NOT_DECODED)
            if found is _NOT_DECODED:
                found = decoded[key] = _info(type_proto)
            if found is not None:
                into[name] = found
    if initializers:
        for tensor in graph.initializer:
            name = tensor.name
            if name not in into:
                into[name] = TypeInfo(tensor.data_type, tuple(tensor.dims))
    if not nested:
        return
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _collect(attribute.g, into, initializers=initializers)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    _collect(subgraph, into, initializers=initializers)


def _infer(proto: onnx.ModelProto) -> dict[str, TypeInfo]:
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False,
                                                     data_prop=False)
    except Exception:  # inference is a best effort: what it cannot type stays unknown
        inferred = proto
    return _collected(inferred, initializers=False)  # initializers type themselves


def _collected(inferred: onnx.ModelProto, *, nested: bool = True,
               initializers: bool = True) -> dict[str, TypeInfo]:
    found: dict[str, TypeInfo] = {}
    _collect(inferred.graph, found, nested=nested, initializers=initializers)
    return found


def _declared(graph: Graph, name: str) -> tuple[TypeInfo | None, bool]:
    """``(type, defined here)`` of ``name`` in ``graph`` without inference."""
    # A hot path (asked once per value of a model): the graph's own dicts, no views.
    tensor = graph._initializers.get(name)
    if tensor is not None:
        return TypeInfo(tensor.dtype, tensor.shape), True
    value = graph._values.get(name)
    if value is None:
        return None, False
    type_proto = value.type
    found = _info(type_proto) if type_proto is not None else None
    return found, value._producer is not None or value.is_defined


class _Lookup:
    """Shared lookup: declarations first, then (once) shape inference."""

    def __init__(self) -> None:
        self._inferred: dict[str, TypeInfo] | None = None

    def _infer(self) -> dict[str, TypeInfo]:
        raise NotImplementedError

    def _from_inference(self, name: str, known: TypeInfo | None, *,
                        need_shape: bool = True) -> TypeInfo:
        if known is not None and known.elem_type is not None \
                and (known.shape is not None or not need_shape):
            return known
        if self._inferred is None:
            self._inferred = self._infer()
        inferred = self._inferred.get(name)
        if known is None:
            return inferred or _UNKNOWN
        if inferred is None:
            return known
        return TypeInfo(known.elem_type if known.elem_type is not None else inferred.elem_type,
                        known.shape if known.shape is not None else inferred.shape)


class ModelTypes(_Lookup):
    """Types of the values of a model's main graph and its subgraphs.

    Function bodies are typed per call (:class:`FunctionTypes`): in them only
    declarations count.
    """

    def __init__(self, model: Model):
        """Look types up in ``model`` (inference runs lazily, on the first unknown)."""
        super().__init__()
        self._model = model
        # Answers by (graph, name, need_shape), while the model does not change: a pass
        # asks about the same values over and over.
        self._known: dict[tuple[int, str, bool], TypeInfo] = {}
        self._known_version = model.graph._version  # the graphs looked at here

    def of(self, graph: Graph, name: str) -> TypeInfo:
        """What is known of the type of ``name`` as seen from ``graph``."""
        if self._model.graph._version == self._known_version:  # _remembered, inline: hot
            found = self._known.get((id(graph), name, True))
            if found is not None:
                return found
        return self._remembered(graph, name, True)

    def elem_type(self, graph: Graph, name: str) -> int | None:
        """The element type of tensor ``name`` as seen from ``graph``, if known.

        ``None`` also for a value that is not a tensor. Shape inference runs only
        when no declaration gives the type.
        """
        return self._remembered(graph, name, False).elem_type or None

    def _remembered(self, graph: Graph, name: str, need_shape: bool) -> TypeInfo:
        version = self._model.graph._version
        if version != self._known_version:
            self._known.clear()
            self._known_version = version
        key = (id(graph), name, need_shape)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = self._lookup(graph, name, need_shape=need_shape)
        return found

    def _lookup(self, graph: Graph, name: str, *, need_shape: bool) -> TypeInfo:
        scope: Graph | None = graph
        known: TypeInfo | None = None
        while scope is not None:
            known, defined = _declared(scope, name)
            if known is not None or defined:
                break
            scope = scope.parent_graph
        if graph.function is not None:
            return known or _UNKNOWN
        return self._from_inference(name, known, need_shape=need_shape)

    def _infer(self) -> dict[str, TypeInfo]:
        # Strict inference gives the same types when it succeeds, and the check pass
        # reuses its outcome; where it fails, the lenient one types what it can.
        inferred, _ = strict_inference(self._model)
        if inferred is not None:
            # Initializers are typed by their tensors (``_declared``), which come first.
            nested = any(True for _ in self._model.graph.subgraphs())
            return _collected(inferred, nested=nested, initializers=False)
        return _infer(structural_proto(self._model))


class FunctionTypes(_Lookup):
    """Types inside a function body, for the input types of one call."""

    def __init__(self, model: Model, function: Function, inputs: Iterable[TypeInfo]):
        """Prepare inference of ``function``'s body with these input types."""
        super().__init__()
        self._model = model
        self._function = function
        self._inputs = tuple(inputs)

    def of(self, graph: Graph, name: str) -> TypeInfo:
        """What is known of the type of ``name`` in the body (or one of its subgraphs)."""
        known, _ = _declared(graph, name)
        if known is None and name in self._function.graph.input_names:
            position = self._function.graph.input_names.index(name)
            if position < len(self._inputs):
                known = self._inputs[position]
        return self._from_inference(name, known)

    def _infer(self) -> dict[str, TypeInfo]:
        function = function_to_proto(self._function, emit_tensor=_type_only)
        inputs = []
        for name, known in zip(function.input, self._inputs, strict=False):
            if known.elem_type:
                inputs.append(onnx.helper.make_tensor_value_info(
                    name, known.elem_type, None if known.shape is None else list(known.shape)))
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
