"""Conversion between ``onnx`` protobuf messages and the graphpass IR (its serialization).

What the IR's own :meth:`Model.from_proto <graphpass.Model.from_proto>` and
:meth:`~graphpass.Model.to_proto` stand on, below :mod:`graphpass.ir._model` (which
imports it), so that the model's class is handed in rather than imported; the public
module is :mod:`graphpass.ir.proto`.

The conversion is lossless: ``model_to_proto(model_from_proto(p)) == p`` for any
model the IR can represent. Fields the IR does not model (device configurations,
quantization annotations, training info, fields added by newer ONNX releases) are
carried over verbatim, and a field that was present with its default value stays
present (protobuf equality tells the two apart).

Protos are referenced, not copied, on the way in: tensors keep pointing at the
loaded ``TensorProto`` so weights are never duplicated in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
from google.protobuf.descriptor import FieldDescriptor

from graphpass.errors import InvalidModelError
from graphpass.ir._attribute import Attribute
from graphpass.ir._function import Function
from graphpass.ir._gc import paused_gc
from graphpass.ir._graph import _FEW_USES, Graph
from graphpass.ir._metadata import NO_METADATA
from graphpass.ir._node import (
    CHANGED_ATTRIBUTES,
    CHANGED_FIELDS,
    CHANGED_INPUTS,
    CHANGED_METADATA,
    CHANGED_NAME,
    CHANGED_OUTPUTS,
    Node,
)
from graphpass.ir._tensor import Tensor, resolve_external_location
from graphpass.ir._value import CAPTURE, Value
from graphpass.ir._wire import (
    NodeWriter,
    encode_varint,
    field_prefix,
    find_field,
    first_field_after,
)

if TYPE_CHECKING:
    from graphpass.ir._model import Model

try:  # protobuf >= 4.22
    from google.protobuf.unknown_fields import UnknownFieldSet
except ImportError:  # pragma: no cover - older protobuf: unknown fields are not kept
    UnknownFieldSet = None

__all__ = [
    "TENSOR_ATTRIBUTE_TYPES",
    "UNKNOWN_FIELDS",
    "TensorEmitter",
    "attribute_tensors",
    "attribute_to_proto",
    "function_from_proto",
    "function_to_proto",
    "graph_from_proto",
    "graph_to_proto",
    "model_from_proto",
    "model_to_bytes",
    "model_to_chunks",
    "model_to_proto",
    "node_to_proto",
    "subgraph_protos",
    "unknown_fields",
]

TensorEmitter = Callable[[Tensor], onnx.TensorProto]
"""Decides what ``TensorProto`` to write for an initializer (used by :func:`graphpass.save`)."""

_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS
TENSOR_ATTRIBUTE_TYPES = frozenset({onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS,
                                onnx.AttributeProto.SPARSE_TENSOR,
                                onnx.AttributeProto.SPARSE_TENSORS})
_EMPTY: frozenset[str] = frozenset()
UNKNOWN_FIELDS = "<unknown fields>"
"""Key in an IR object's ``_extra`` for the bytes of fields the protobuf schema does not know."""
_UNKNOWN = UNKNOWN_FIELDS


def _default_emitter(tensor: Tensor) -> onnx.TensorProto:
    return tensor.to_proto()


# =============================================================== generic fields
def _split_fields(proto: Any, scalars: tuple[str, ...], modelled: tuple[str, ...]
                  ) -> tuple[dict[str, Any], frozenset[str], dict[str, Any] | None]:
    """Sort the fields a message holds into those the IR models and those it keeps verbatim.

    Args:
        proto: The message.
        scalars: Modelled scalar fields; one present with its default value is
            remembered, so that it is written back present.
        modelled: The other modelled fields.

    Returns:
        The modelled fields' values by name, the scalars present with their default
        value, and the other fields (values referenced, not copied) with the bytes of
        unknown fields, or ``None`` when there are none.
    """
    fields: dict[str, Any] = {}
    present_empty: set[str] = set()
    extra: dict[str, Any] = {}
    for field, value in proto.ListFields():
        name = field.name
        if name in scalars:
            fields[name] = value
            if not value:
                present_empty.add(name)
        elif name in modelled:
            fields[name] = value
        else:
            extra[name] = value
    unknown = unknown_fields(proto)
    if unknown is not None:
        extra[_UNKNOWN] = unknown
    return fields, frozenset(present_empty) if present_empty else _EMPTY, extra or None


def _write_extra(message: Any, name: str, value: Any) -> None:
    if name == _UNKNOWN:
        message.MergeFromString(value)
        return
    field = message.DESCRIPTOR.fields_by_name[name]
    if field.is_repeated:
        getattr(message, name).extend(value)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        getattr(message, name).CopyFrom(value)
    else:
        setattr(message, name, value)


def _write_extras(message: Any, extra: dict[str, Any] | None) -> None:
    """Write back the fields kept verbatim while loading (see :func:`_split_fields`)."""
    if extra:
        for name, value in extra.items():
            _write_extra(message, name, value)


def unknown_fields(message: Any) -> bytes | None:
    """The wire bytes of the fields in ``message`` that its schema does not know.

    A model written by a newer ONNX release can carry fields this ``onnx`` does not
    know; protobuf keeps them as "unknown fields". The IR stores their bytes and
    writes them back, so they survive a round trip.
    """
    if UnknownFieldSet is None:  # pragma: no cover
        return None
    fields = UnknownFieldSet(message)
    if not len(fields):
        return None
    return bytes(_encode_unknown(fields, bytearray()))


def _encode_unknown(fields: Any, out: bytearray) -> bytearray:
    for entry in fields:
        number, wire_type, data = entry.field_number, entry.wire_type, entry.data
        encode_varint(out, number << 3 | wire_type)
        if wire_type == 0:
            encode_varint(out, data)
        elif wire_type == 1:
            out += data.to_bytes(8, "little")
        elif wire_type == 5:
            out += data.to_bytes(4, "little")
        elif wire_type == 2:
            encode_varint(out, len(data))
            out += data
        else:  # 3: a group, ended by its end tag
            _encode_unknown(data, out)
            encode_varint(out, number << 3 | 4)
    return out


# ==================================================================== loading
def model_from_proto(model_class: type[Model], proto: onnx.ModelProto,
                     base_dir: str | Path | None = None) -> Model:
    """Build a :class:`~graphpass.Model` from a ``ModelProto``.

    Args:
        model_class: :class:`~graphpass.Model` (handed in: this module is below it).
        proto: The model; it is referenced, not copied.
        base_dir: The folder external data locations are relative to.

    Raises:
        InvalidModelError: The model cannot be represented (no graph, a name defined twice,
            a function defined twice).
        ExternalDataError: A tensor's external data location is unsafe (absolute, ``..``,
            or a link out of ``base_dir``).
    """
    with paused_gc() as block:
        model = _model_from_proto(model_class, proto,
                                  Path(base_dir) if base_dir is not None else None)
        block.owner = model
        return model


def _model_from_proto(model_class: type[Model], proto: onnx.ModelProto,
                      base: Path | None) -> Model:
    fields, present_empty, extra = _split_fields(
        proto, ("ir_version", "producer_name", "producer_version", "domain", "model_version",
                "doc_string"),
        ("graph", "opset_import", "functions", "metadata_props"))
    if "graph" not in fields:
        raise InvalidModelError(
            "the model has no graph",
            hint="this is not an ONNX model, or it was truncated",
        )
    graph = graph_from_proto(fields["graph"], base)
    opsets = fields.get("opset_import", ())
    model = model_class(
        graph,
        ir_version=fields.get("ir_version", 0),
        opset_imports={entry.domain: entry.version for entry in opsets},
        producer_name=fields.get("producer_name", ""),
        producer_version=fields.get("producer_version", ""),
        domain=fields.get("domain", ""),
        model_version=fields.get("model_version", 0),
        doc_string=fields.get("doc_string", ""),
    )
    model._opset_protos = opsets if opsets else None
    metadata_proto = fields.get("metadata_props")
    if metadata_proto is not None:
        model.metadata = {entry.key: entry.value for entry in metadata_proto}
        model._metadata_proto = metadata_proto
    for function_proto in fields.get("functions", ()):
        model.add_function(function_from_proto(function_proto, base))
    _check_text("the model", [model.producer_name, model.producer_version, model.domain,
                              model.doc_string, *model.opset_imports, *model.metadata.keys(),
                              *model.metadata.values()])
    model._present_empty = present_empty
    model._extra = extra
    model.base_dir = base
    model._version = 0
    for loaded in model.graphs():  # loaded in order: no need to check again until changed
        mark = loaded._sorted_at
        if mark is not None and mark[0] is loaded and mark[1] == 0:  # marked while loading
            loaded._mark_sorted()  # (a subgraph again: now its model's graph is its root)
    return model


def function_from_proto(proto: onnx.FunctionProto, base_dir: Path | None = None) -> Function:
    """Build a :class:`~graphpass.Function` from a ``FunctionProto``."""
    fields, present_empty, extra = _split_fields(
        proto, ("name", "domain", "overload", "doc_string"),
        ("input", "output", "attribute", "attribute_proto", "node", "opset_import",
         "value_info", "metadata_props"))
    label = f"{fields.get('domain', '')}::{fields.get('name', '')}"
    graph = Graph(fields.get("name", ""))
    for input_name in fields.get("input", ()):
        graph._inputs.append(graph._value_for(input_name))
        graph._input_names[input_name] = graph._input_names.get(input_name, 0) + 1
    _load_nodes(graph, fields.get("node", ()), base_dir, where=f"function {label}")
    for slot, output_name in enumerate(fields.get("output", ())):
        graph._use(output_name, None, slot)
        graph._outputs.append(graph._values[output_name])
    _load_declarations(graph, fields.get("value_info", ()), "value_info", graph._value_info)
    opsets = fields.get("opset_import", ())
    function = Function(
        fields.get("domain", ""),
        fields.get("name", ""),
        graph,
        overload=fields.get("overload", ""),
        attribute_names=list(fields.get("attribute", ())),
        attribute_defaults=[_attribute_from_proto(a, base_dir)
                            for a in fields.get("attribute_proto", ())],
        opset_imports={entry.domain: entry.version for entry in opsets},
        doc_string=fields.get("doc_string", ""),
        metadata={e.key: e.value for e in fields.get("metadata_props", ())},
    )
    _check_text(f"function {label}", [function.name, function.domain, function.overload,
                                       function.doc_string, *function.attribute_names,
                                       *function.opset_imports, *graph._values,
                                       *function.metadata.keys(), *function.metadata.values()])
    function._metadata_proto = fields.get("metadata_props")
    function._opset_protos = opsets if opsets else None
    function._present_empty = present_empty
    function._extra = extra
    graph._version = 0
    if graph._sorted_at is _LOADED_SORTED:
        graph._mark_sorted()
    return function


def graph_from_proto(proto: onnx.GraphProto, base_dir: Path | None = None) -> Graph:
    """Build a :class:`~graphpass.Graph` (with its subgraphs) from a ``GraphProto``."""
    fields, present_empty, extra = _split_fields(
        proto, ("name", "doc_string"),
        ("node", "initializer", "sparse_initializer", "input", "output", "value_info",
         "metadata_props"))
    graph = Graph(fields.get("name", ""), doc_string=fields.get("doc_string", ""))
    where = f"graph {graph.name!r}"
    _load_declarations(graph, fields.get("input", ()), "input", graph._inputs)
    for value in graph._inputs:
        graph._input_names[value.name] = graph._input_names.get(value.name, 0) + 1
    initializers = graph._initializers
    values = graph._values
    tensor_from_proto = Tensor.from_proto
    shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
    tensor_protos = fields.get("initializer", ())
    for index, tensor_proto in enumerate(tensor_protos):
        tensor = tensor_from_proto(tensor_proto, base_dir)
        tensor.shape = shapes.setdefault(tensor.shape, tensor.shape)  # one tuple per shape
        tensor._proto = tensor_protos  # the proto by its index: see Tensor.__slots__
        tensor._proto_at = index
        name = tensor.name
        if name in initializers:
            raise InvalidModelError(f"initializer {name!r} is defined twice", where=where,
                                    hint="initializer names must be unique in a graph")
        initializers[name] = tensor
        if name not in values:
            values[name] = Value(graph, name)
    for sparse in fields.get("sparse_initializer", ()):
        name = sparse.values.name
        if name in graph._sparse_initializers or name in graph._initializers:
            raise InvalidModelError(f"initializer {name!r} is defined twice", where=where)
        if base_dir is not None:
            _check_tensor_locations((sparse.values, sparse.indices), base_dir)
        graph._sparse_initializers[name] = sparse
        graph._value_for(name)
    _load_nodes(graph, fields.get("node", ()), base_dir, where=where)
    outputs = fields.get("output", ())
    for slot, info in enumerate(outputs):
        graph._use(info.name, None, slot)
    _load_declarations(graph, outputs, "output", graph._outputs)
    _load_declarations(graph, fields.get("value_info", ()), "value_info", graph._value_info)
    _check_text(where, [graph.name, graph.doc_string, *graph._values])
    graph._metadata_proto = fields.get("metadata_props")
    graph._present_empty = present_empty
    graph._extra = extra
    graph._version = 0
    if graph._sorted_at is _LOADED_SORTED:
        graph._mark_sorted()  # (a subgraph is marked again once its model is loaded)
    return graph


def _load_declarations(graph: Graph, infos: Iterable[onnx.ValueInfoProto], kind: str,
                       target: list[Value]) -> None:
    """Attach loaded declarations to their values and append the values to ``target``.

    The first declaration of a value becomes its declaration; a later one that
    differs is kept verbatim for that entry (see ``Value._alt_info``).
    """
    values = graph._values
    seen: dict[str, int] | None = None
    for info in infos:
        name = info.name
        value = values.get(name)
        if value is None:
            value = values[name] = Value(graph, name)
        if value._info is None:
            value._info = info
        elif value._info is not info and value._info != info:
            if seen is None:
                seen = {}
                for earlier in target:
                    seen[earlier.name] = seen.get(earlier.name, 0) + 1
            if value._alt_info is None:
                value._alt_info = {}
            value._alt_info[(kind, seen.get(name, 0))] = info
        if seen is not None:
            seen[name] = seen.get(name, 0) + 1
        target.append(value)


_LOADED_SORTED: Any = ("loaded in order",)
"""``Graph._sorted_at`` of a graph whose nodes came in topological order while loading."""


def _load_nodes(graph: Graph, protos: Any, base_dir: Path | None, where: str) -> None:
    """Append a node for each ``NodeProto`` (kept, and written back while unchanged).

    Only what the graph's bookkeeping needs is decoded now: inputs, outputs, the
    text fields (which must be UTF-8), and the attributes of nodes that hold graphs
    or tensors (subgraphs take part in the bookkeeping; tensors' data locations are
    checked). Other attributes are decoded when first asked for.
    """
    values = graph._values
    initializers = graph._initializers
    input_names = graph._input_names
    sparse_initializers = graph._sparse_initializers
    new_node = Node.__new__
    new_value = Value.__new__
    use = graph._use
    op_types: dict[str, str] = {}
    previous: Node | None = None
    count = 0
    in_order = True  # no node used a value before the node computing it
    for index, proto in enumerate(protos):
        node = new_node(Node)
        inputs = proto.input[:]
        node._outputs = outputs = tuple(proto.output[:])
        op_type = proto.op_type
        op_type = node._op_type = op_types.setdefault(op_type, op_type)  # one str per op
        name = node._name = proto.name
        domain = node._domain = proto.domain
        overload = node._overload = proto.overload
        doc_string = node._doc_string = proto.doc_string
        node._loaded_from = protos
        node._loaded_index = index
        node._changed = 0
        # Most nodes carry none: known now, for the price of a look, instead of a trip
        # to the proto on the first question (which every pass reading metadata asks).
        node._metadata = None if proto.metadata_props else NO_METADATA
        node._captures = None
        node._graph = None  # set below: loading subgraphs records captures only in the node
        node._next = None
        attribute_protos = proto.attribute
        # None: decoded on first use (for most nodes: never)
        node._attributes = _load_attributes(node, attribute_protos, base_dir) \
            if attribute_protos else None
        node._graph = graph
        try:
            "".join((op_type, name, domain, overload, doc_string))
        except TypeError:
            _check_text("a node", [op_type, domain, name, overload, doc_string])
        node._prev = previous
        if previous is None:
            graph._head = node
        else:
            previous._next = node
        previous = node
        count += 1
        for position, output in enumerate(outputs):
            if output:
                value = values.get(output)
                if value is None:  # the usual case, a new name: nothing else to update
                    value = values[output] = new_value(Value)
                    value.graph = graph
                    value.name = output
                    value._producer = node
                    value._index = position
                    value._uses = ()
                    value._info = None
                    value._alt_info = None
                else:
                    if in_order and any(user is not None for user, _ in value._uses):
                        in_order = False
                    graph._define_output(output, node, position, where=where)
        for slot, input_name in enumerate(inputs):
            if input_name:
                value = values.get(input_name)
                if value is None:
                    use(input_name, node, slot)
                else:
                    inputs[slot] = value.name  # one str per name, not one per use
                    producer = value._producer
                    if producer is node:
                        in_order = False  # the node reads its own output: a cycle
                    if (producer is not None or input_name in initializers
                            or input_name in input_names or input_name in sparse_initializers):
                        uses = value._uses  # defined already: no other bookkeeping
                        if not uses:
                            value._uses = [(node, slot)]
                        elif type(uses) is list and len(uses) < _FEW_USES:
                            uses.append((node, slot))
                        else:
                            use(input_name, node, slot)
                    else:
                        use(input_name, node, slot)
        node._inputs = tuple(inputs)
        # Loading the attributes may have set the captures (mypy sees only the None above).
        captures: dict[str, int] | None = getattr(node, "_captures")  # noqa: B009
        if captures:
            for captured in captures:
                known = values.get(captured)
                if known is not None and known._producer is node:
                    in_order = False  # a subgraph reads its holder's output: a cycle
                use(captured, node, CAPTURE)
    graph._tail = previous
    graph._count += count
    if in_order:
        graph._sorted_at = _LOADED_SORTED


def _load_attributes(node: Node, protos: Any, base_dir: Path | None
                     ) -> dict[str, Attribute] | None:
    """The attributes of a loaded node, or ``None`` to decode them when first asked for.

    Attributes holding graphs or tensors are decoded now (and their tensors' data
    locations checked); a node holding graphs is always written from its attributes.
    """
    decode = False
    for proto in protos:
        name, reference = proto.name, proto.ref_attr_name
        try:
            "".join((name, reference))
        except TypeError:
            _check_text("an attribute", [name, reference])
        if proto.type in TENSOR_ATTRIBUTE_TYPES or proto.HasField("g") or proto.graphs:
            decode = True
    if not decode:
        return None
    attributes: dict[str, Attribute] = {}
    node._attributes = attributes
    for proto in protos:
        attribute = _attribute_from_proto(proto, base_dir)
        attributes[attribute.name] = attribute
        if attribute.graphs:
            node._attach_subgraphs(attribute)
            node._changed |= CHANGED_ATTRIBUTES  # subgraphs are written from the IR
    return attributes


def _attribute_from_proto(proto: onnx.AttributeProto, base_dir: Path | None) -> Attribute:
    if base_dir is not None and proto.type in TENSOR_ATTRIBUTE_TYPES:
        _check_tensor_locations(attribute_tensors(proto), base_dir)
    name, reference = proto.name, proto.ref_attr_name
    try:
        "".join((name, reference))
    except TypeError:
        _check_text("an attribute", [name, reference])
    has_graph = proto.HasField("g") or len(proto.graphs) > 0
    if not has_graph:
        return Attribute(name, proto.type, proto, None, reference)
    stripped = onnx.AttributeProto()
    for field, value in proto.ListFields():
        if field.name not in ("g", "graphs"):
            _write_extra(stripped, field.name, value)
    unknown = unknown_fields(proto)
    if unknown is not None:
        stripped.MergeFromString(unknown)
    if proto.HasField("g"):
        graphs = [graph_from_proto(proto.g, base_dir)]
    else:
        graphs = [graph_from_proto(g, base_dir) for g in proto.graphs]
    return Attribute(name, proto.type, stripped, graphs, reference)


def attribute_tensors(proto: onnx.AttributeProto) -> list[onnx.TensorProto]:
    """The ``TensorProto`` messages held directly by a tensor-typed attribute."""
    tensors: list[onnx.TensorProto] = []
    if proto.HasField("t"):
        tensors.append(proto.t)
    tensors.extend(proto.tensors)
    sparse = [proto.sparse_tensor] if proto.HasField("sparse_tensor") else []
    for item in (*sparse, *proto.sparse_tensors):
        tensors.extend((item.values, item.indices))
    return tensors


def subgraph_protos(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """Yield every ``GraphProto`` held by the node attributes of ``graph``, at any depth."""
    stack = [graph]
    while stack:
        current = stack.pop()
        for node in current.node:
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    yield attribute.g
                    stack.append(attribute.g)
                for subgraph in attribute.graphs:
                    yield subgraph
                    stack.append(subgraph)


def _check_tensor_locations(tensors: Sequence[onnx.TensorProto], base_dir: Path) -> None:
    """Refuse external data locations outside ``base_dir`` in tensors the IR keeps as protos."""
    for tensor in tensors:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            resolve_external_location(base_dir, location, tensor.name)


def _check_text(owner: str, texts: Iterable[Any]) -> None:
    """Refuse names and strings that are not UTF-8.

    protobuf hands string fields holding invalid UTF-8 over as ``bytes``; ONNX
    requires UTF-8, and nothing downstream (passes, writing the model back) can use
    them, so the model is refused while loading.

    Raises:
        InvalidModelError: One of ``texts`` is ``bytes``.
    """
    items = list(texts)
    try:
        "".join(items)
    except TypeError:
        bad = next(item for item in items if not isinstance(item, str))
        raise InvalidModelError(
            f"{owner} has a name or text that is not valid UTF-8: {bad!r}",
            hint="the file is corrupt, or was written by a tool that does not encode names "
                 "as UTF-8 (ONNX requires it)") from None


# ==================================================================== writing
def model_to_proto(model: Model, emit_tensor: TensorEmitter | None = None) -> onnx.ModelProto:
    """Build a ``ModelProto`` from a :class:`~graphpass.Model`.

    Args:
        model: The model.
        emit_tensor: Decides what ``TensorProto`` to write for each initializer; by
            default a tensor loaded from a proto is written as it was loaded and any
            other tensor is embedded.
    """
    with paused_gc():
        return _model_to_proto(model, emit_tensor or _default_emitter)


def model_to_bytes(model: Model, emit_tensor: TensorEmitter | None = None) -> bytes:
    """``model_to_proto(model, emit_tensor).SerializeToString()``, in less time and memory.

    See :func:`model_to_chunks`.
    """
    return b"".join(model_to_chunks(model, emit_tensor))


def model_to_chunks(model: Model, emit_tensor: TensorEmitter | None = None, *,
                    declare_instead: Callable[[Tensor], bool] | None = None) -> list[bytes]:
    """The serialized model (:func:`model_to_bytes`) as pieces to write one after another.

    The main graph's nodes and initializers, the bulk of a model, are serialized one
    by one (an unchanged loaded node straight from the proto it was loaded from) and
    spliced into the bytes of the rest of the model, instead of being copied into a
    new ``ModelProto`` first; written piece by piece, the model is never in memory
    twice. The bytes are those of ``SerializeToString``: protobuf writes the fields of
    a message in the order of their numbers, fields it does not know last (a main
    graph or model holding such fields is serialized the plain way).

    Args:
        model: The model.
        emit_tensor: As for :func:`model_to_proto`.
        declare_instead: Main-graph initializers for which it is true are left out and
            declared as graph inputs of their type and shape instead (after the model's
            inputs, unless declared there already), and the IR version is at least 4:
            the model's structure for the checker and shape inference
            (:func:`graphpass.files._checking.structural_bytes`).

    Raises:
        ValueError: ``declare_instead`` is given and the main graph or model holds
            fields protobuf does not know.
    """
    emit = emit_tensor or _default_emitter
    graph = model.graph
    if (model._extra and _UNKNOWN in model._extra) or (graph._extra and _UNKNOWN in graph._extra):
        if declare_instead is not None:
            raise ValueError("the model holds fields protobuf does not know")
        return [model_to_proto(model, emit).SerializeToString()]
    with paused_gc():
        writer = NodeWriter(lambda attribute: attribute_to_proto(attribute, emit)
                            .SerializeToString())
        nodes = writer.entries(graph)
        tensors = list(graph._initializers.values())
        declared: list[Tensor] = []
        if declare_instead is not None:
            declared = [t for t in tensors if declare_instead(t)]
            if declared:
                left_out = {id(t) for t in declared}
                tensors = [t for t in tensors if id(t) not in left_out]
        initializers = _tagged(_INITIALIZER_TAG, [emit(t).SerializeToString() for t in tensors])
        head_proto = _model_to_proto(model, emit, bulk=False)
        if declared:
            _declare_as_inputs(head_proto, declared)
        head = head_proto.SerializeToString()
        return _splice_main_graph(head, nodes, initializers)


def _declare_as_inputs(proto: onnx.ModelProto, tensors: list[Tensor]) -> None:
    """Declare ``tensors`` as inputs of the main graph (those not declared there yet)."""
    inputs = proto.graph.input
    known = {entry.name for entry in inputs}
    for tensor in tensors:
        if tensor.name not in known:
            inputs.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.dtype,
                                                             list(tensor.shape)))
    # Graph inputs without initializers need IR version 4 or later.
    proto.ir_version = max(proto.ir_version, 4)


_INITIALIZER_TAG = 0x2A  # GraphProto.initializer: field 5, length-delimited
_GRAPH_TAG = 0x3A  # ModelProto.graph: field 7
_INITIALIZER_FIELD = 5
_GRAPH_FIELD = 7


def _tagged(tag: int, bodies: list[bytes]) -> list[bytes]:
    """``bodies`` as entries of a repeated message field: tag, length, message."""
    parts: list[bytes] = []
    for body in bodies:
        parts.append(field_prefix(tag, len(body)))
        parts.append(body)
    return parts


def _splice_main_graph(head: bytes, nodes: list[bytes], initializers: list[bytes]
                       ) -> list[bytes]:
    """Put the main graph's node and initializer entries into the serialized model."""
    start, content_start, end = find_field(head, 0, len(head), _GRAPH_FIELD)
    split = first_field_after(head, content_start, end, _INITIALIZER_FIELD)
    size = (end - content_start) + sum(map(len, nodes)) + sum(map(len, initializers))
    chunks = [head[:start], field_prefix(_GRAPH_TAG, size)]
    chunks += nodes
    chunks.append(head[content_start:split])
    chunks += initializers
    chunks.append(head[split:])
    return chunks


def _model_to_proto(model: Model, emit: TensorEmitter, *, bulk: bool = True
                    ) -> onnx.ModelProto:
    """The model as a proto.

    Without ``bulk``, the main graph's nodes and initializers are left out
    (:func:`model_to_chunks` writes them).
    """
    proto = onnx.ModelProto()
    present_empty = model._present_empty
    if model.ir_version or "ir_version" in present_empty:
        proto.ir_version = model.ir_version
    _write_opsets(proto.opset_import, model.opset_imports, model._opset_protos)
    for name in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        value = getattr(model, name)
        if value or name in present_empty:
            setattr(proto, name, value)
    _graph_to_proto(model.graph, proto.graph, emit, bulk=bulk)
    _write_metadata(proto.metadata_props, model.metadata, model._metadata_proto)
    for function in model.functions.values():
        function_to_proto(function, proto.functions.add(), emit)
    _write_extras(proto, model._extra)
    return proto


def _write_opsets(target: Any, opsets: dict[str, int], original: Any) -> None:
    if original is not None and opsets == {entry.domain: entry.version for entry in original}:
        target.extend(original)
        return
    for domain, version in opsets.items():
        target.add(domain=domain, version=version)


def function_to_proto(function: Function, proto: onnx.FunctionProto | None = None,
                      emit_tensor: TensorEmitter | None = None) -> onnx.FunctionProto:
    """Write a :class:`~graphpass.Function` into a ``FunctionProto`` (a new one by default)."""
    emit = emit_tensor or _default_emitter
    if proto is None:
        proto = onnx.FunctionProto()
    present_empty = function._present_empty
    for name in ("name", "domain", "overload", "doc_string"):
        value = getattr(function, name)
        if value or name in present_empty:
            setattr(proto, name, value)
    graph = function.graph
    proto.input.extend(graph.input_names)
    proto.output.extend(graph.output_names)
    proto.attribute.extend(function.attribute_names)
    for attribute in function.attribute_defaults.values():
        proto.attribute_proto.append(attribute_to_proto(attribute, emit))
    _write_nodes(graph, proto.node, emit)
    _write_opsets(proto.opset_import, function.opset_imports, function._opset_protos)
    _write_declarations(proto.value_info, graph._value_info, "value_info")
    _write_metadata(proto.metadata_props, function.metadata, function._metadata_proto)
    _write_extras(proto, function._extra)
    return proto


def graph_to_proto(graph: Graph, proto: onnx.GraphProto | None = None,
                   emit_tensor: TensorEmitter | None = None) -> onnx.GraphProto:
    """Write a :class:`~graphpass.Graph` into a ``GraphProto`` (a new one by default)."""
    if proto is None:
        proto = onnx.GraphProto()
    _graph_to_proto(graph, proto, emit_tensor or _default_emitter, bulk=True)
    return proto


def _graph_to_proto(graph: Graph, proto: onnx.GraphProto, emit: TensorEmitter, *,
                    bulk: bool) -> None:
    proto.SetInParent()  # an empty graph is still present
    if bulk:
        _write_nodes(graph, proto.node, emit)
    present_empty = graph._present_empty
    if graph.name or "name" in present_empty:
        proto.name = graph.name
    if bulk:
        for tensor in graph._initializers.values():
            proto.initializer.append(emit(tensor))
    if graph._sparse_initializers:
        proto.sparse_initializer.extend(graph._sparse_initializers.values())
    if graph.doc_string or "doc_string" in present_empty:
        proto.doc_string = graph.doc_string
    _write_declarations(proto.input, graph._inputs, "input")
    _write_declarations(proto.output, graph._outputs, "output")
    _write_declarations(proto.value_info, graph._value_info, "value_info")
    _write_loaded_metadata(proto, graph)
    _write_extras(proto, graph._extra)


def _write_declarations(target: Any, values: list[Value], kind: str) -> None:
    append = target.append
    seen: dict[str, int] = {}
    for value in values:
        if value._alt_info is None:
            append(value._info_proto(kind))
        else:
            occurrence = seen.get(value.name, 0)
            seen[value.name] = occurrence + 1
            append(value._info_proto(kind, occurrence))


def _write_metadata(target: Any, metadata: dict[str, str], original: Any) -> None:
    if original is not None and metadata == {entry.key: entry.value for entry in original}:
        target.extend(original)
    else:
        for key, value in metadata.items():
            target.add(key=key, value=value)


def _write_loaded_metadata(proto: onnx.GraphProto, owner: Graph) -> None:
    """Write a graph's ``metadata_props``: as loaded, unless it was changed."""
    if owner._metadata_proto is not None:
        proto.metadata_props.extend(owner._metadata_proto)
    elif owner._metadata:
        for key, text in owner._metadata.items():
            proto.metadata_props.add(key=key, value=text)


def _write_nodes(graph: Graph, target: Any, emit: TensorEmitter) -> None:
    """Write the nodes: unchanged loaded ones as they were loaded, in runs."""
    unchanged: list[onnx.NodeProto] = []
    for node in graph:
        loaded = node._loaded_from
        if loaded is not None and not node._changed:
            unchanged.append(loaded[node._loaded_index])
            continue
        if unchanged:
            target.extend(unchanged)
            unchanged = []
        node_to_proto(node, target.add(), emit)
    if unchanged:
        target.extend(unchanged)


_TEXT_FIELDS = ("op_type", "domain", "overload", "doc_string")


def node_to_proto(node: Node, proto: onnx.NodeProto | None = None,
                  emit_tensor: TensorEmitter | None = None) -> onnx.NodeProto:
    """Write a :class:`~graphpass.Node` into a ``NodeProto`` (a new one by default).

    A node loaded from a proto is written as a copy of that proto with the fields
    that changed since rewritten; fields the IR does not model stay as they were.
    """
    if proto is None:
        proto = onnx.NodeProto()
    loaded = node._loaded_proto()
    if loaded is None:
        _write_new_node(node, proto, emit_tensor)
        return proto
    proto.CopyFrom(loaded)
    changed = node._changed
    if changed & CHANGED_INPUTS:
        del proto.input[:]
        proto.input.extend(node._inputs)
    if changed & CHANGED_OUTPUTS:
        del proto.output[:]
        proto.output.extend(node._outputs)
    if changed & CHANGED_NAME:
        _set_text(proto, "name", node._name)
    if changed & CHANGED_FIELDS:
        for field_name in _TEXT_FIELDS:
            _set_text(proto, field_name, getattr(node, field_name))
    if changed & CHANGED_ATTRIBUTES:
        del proto.attribute[:]
        _write_attributes(node, proto, emit_tensor)
    if changed & CHANGED_METADATA:
        del proto.metadata_props[:]
        for key, text in node._decoded_metadata().items():
            proto.metadata_props.add(key=key, value=text)
    return proto


def _set_text(proto: Any, field_name: str, value: str) -> None:
    """Set a text field that changed; an emptied one is left out, as for a new node."""
    if getattr(proto, field_name) != value:
        if value:
            setattr(proto, field_name, value)
        else:
            proto.ClearField(field_name)


def _write_new_node(node: Node, proto: onnx.NodeProto, emit_tensor: TensorEmitter | None
                    ) -> None:
    if node._inputs:
        proto.input.extend(node._inputs)
    if node._outputs:
        proto.output.extend(node._outputs)
    if node._name:
        proto.name = node._name
    if node._op_type:
        proto.op_type = node._op_type
    if node._domain:
        proto.domain = node._domain
    if node._overload:
        proto.overload = node._overload
    if node._doc_string:
        proto.doc_string = node._doc_string
    _write_attributes(node, proto, emit_tensor)
    if node._metadata:
        for key, text in node._metadata.items():
            proto.metadata_props.add(key=key, value=text)


def _write_attributes(node: Node, proto: onnx.NodeProto, emit_tensor: TensorEmitter | None
                      ) -> None:
    attributes = node._decoded_attributes()
    if not attributes:
        return
    emit = emit_tensor or _default_emitter
    for attribute in attributes.values():
        if attribute.graphs:
            attribute_to_proto(attribute, emit, proto.attribute.add())
        else:
            proto.attribute.append(attribute._proto)


def attribute_to_proto(attribute: Attribute, emit_tensor: TensorEmitter | None = None,
                       proto: onnx.AttributeProto | None = None) -> onnx.AttributeProto:
    """Write an :class:`~graphpass.Attribute` (with its graphs) into an ``AttributeProto``."""
    if not attribute.graphs:
        if proto is None:
            return attribute._proto
        proto.CopyFrom(attribute._proto)
        return proto
    if proto is None:
        proto = onnx.AttributeProto()
    proto.CopyFrom(attribute._proto)
    if attribute.name != proto.name:
        proto.name = attribute.name
    emit = emit_tensor or _default_emitter
    if attribute.type != _GRAPHS:
        graph_to_proto(attribute.graphs[0], proto.g, emit)
    else:
        for graph in attribute.graphs:
            graph_to_proto(graph, proto.graphs.add(), emit)
    return proto
