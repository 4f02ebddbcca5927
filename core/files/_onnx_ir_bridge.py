"""Conversion between the graphpass IR and ``onnx_ir``, keeping what onnx_ir would normalize.

The ecosystem's passes (``onnx_ir.passes.common``, ``onnxscript``'s optimizer and
rewriter) work on ``onnx_ir.Model`` objects. :class:`OnnxIRConversion` converts a
:class:`~graphpass.Model` into one, and back after a pass ran on it::

    conversion = OnnxIRConversion(model)
    onnx_ir.passes.common.CommonSubexpressionEliminationPass()(conversion.ir_model)
    if conversion.changed():
        conversion.write_back(model)        # in place

The way there goes through ``ModelProto`` (``onnx_ir.serde``, the library's own
reader), the way back through ``onnx_ir.serde.serialize_model`` and
:func:`graphpass.ir.proto.model_from_proto`. What the pass did not change is written
back exactly as graphpass had it, so the round trip keeps graphpass's guarantees:

* **Unchanged is equal.** Every onnx_ir object the conversion made is remembered
  with its state; :meth:`OnnxIRConversion.changed` compares them, so a pass that
  changes nothing leaves the model as it was (the same object, not a re-read
  copy). When something changed, each node, declaration, initializer, graph and
  function that is still in its converted state is written back from the original
  proto. onnx_ir would otherwise normalize: fields present with their default
  value (``domain: ""`` on nodes, an opset import's default domain, empty doc
  strings), unknown fields of newer ONNX releases, duplicate ``value_info`` entries
  and ``metadata_props`` keys, ``value_info`` for graph outputs and for names no node
  defines, trailing empty node outputs, the order of ``value_info``; it adds
  ``value_info`` for every initializer and repeats a tensor's ``metadata_props`` on
  writing; it drops ``sparse_initializer`` and ``training_info`` (both carried over
  verbatim here).
* **Weights stay where they are.** Initializers are handed to onnx_ir as
  ``onnx_ir.ExternalTensor`` (file-backed: memory-mapped on demand) or
  ``onnx_ir.LazyTensor`` (embedded or in memory: read only if the pass reads them),
  and are never serialized on the way back: each keeps its graphpass
  :class:`~graphpass.Tensor` (renamed if the pass renamed it). New tensors a pass
  makes (folded constants) come back embedded.
* **Provenance stays.** ``metadata_props`` of nodes, values, graphs and functions
  survive; the libraries add their own on nodes they create
  (``pkg.onnxscript.rewriter.rule_name``, ``pkg.onnxscript.optimizer.folded_from``).
"""

from __future__ import annotations

import collections
import functools
import itertools
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import onnx

from graphpass.errors import InvalidModelError
from graphpass.ir import Graph, Model, Node, Tensor, paused_gc
from graphpass.ir.proto import UNKNOWN_FIELDS, model_from_proto, model_to_proto, unknown_fields

if TYPE_CHECKING:
    import onnx_ir as ir

__all__ = ["OnnxIRConversion", "count_nodes"]

_STAND_IN = "graphpass-original-initializer"
"""The location of the stand-in tensors that keep original weights out of serialization."""

# Fields onnx_ir reads and writes itself; the others are carried over from the original.
_MODEL_FIELDS = frozenset({"ir_version", "opset_import", "producer_name", "producer_version",
                           "domain", "model_version", "doc_string", "graph", "metadata_props",
                           "functions", "configuration"})
_MODEL_SCALARS = ("ir_version", "producer_name", "producer_version", "domain", "model_version",
                  "doc_string")
_NODE_SCALARS = ("name", "op_type", "domain", "overload", "doc_string")
_FUNCTION_SCALARS = ("name", "domain", "overload", "doc_string")
_GRAPH_TYPES = frozenset({onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS})


def count_nodes(model: ir.Model) -> dict[str, int]:
    """Nodes per operator (``domain::op_type``, or ``op_type`` for ONNX) in every graph.

    Counts the main graph, its subgraphs and the function bodies.
    """
    counts: dict[str, int] = {}
    graphs: list[Any] = [model.graph, *model.functions.values()]
    for graph in graphs:
        for node in graph.all_nodes():
            key = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
            counts[key] = counts.get(key, 0) + 1
    return counts


# ============================================================== remembered state
# A state is one flat tuple (counts keep it unambiguous): a model of 100k nodes is
# remembered in a few hundred thousand objects, which the garbage collector scans too.
def _flat_items(mapping: Mapping[str, str] | None) -> tuple[Any, ...]:
    if not mapping:
        return (0,)
    return (len(mapping), *itertools.chain.from_iterable(mapping.items()))


def _metadata(owner: Any) -> Mapping[str, str] | None:
    """``metadata_props`` without the empty dict onnx_ir makes on first access.

    Reading the property of every node and value of a large model would allocate
    that many dicts (and make the collector scan them); the attribute behind it is
    read when it exists.
    """
    try:
        return owner._metadata_props  # type: ignore[no-any-return]
    except AttributeError:  # another onnx_ir: the public property
        return owner.metadata_props  # type: ignore[no-any-return]


def _attributes(node: Any) -> Mapping[str, Any]:
    """A node's attributes as a plain dict (onnx_ir's ``Attributes`` is a ``UserDict``)."""
    attributes = node.attributes
    return attributes.data if isinstance(attributes, collections.UserDict) else attributes


def _value_state(value: ir.Value) -> tuple[Any, ...]:
    shape = value.shape
    dims: tuple[Any, ...] = (-1,) if shape is None else (len(shape), *shape)
    return (value.name, value.type, value.doc_string, id(value.const_value), *dims,
            *_flat_items(_metadata(value)))


def _node_state(node: ir.Node) -> tuple[Any, ...]:
    inputs, outputs = node.inputs, node.outputs
    attributes = _attributes(node)
    return (node.op_type, node.domain, node.overload, node.name, node.doc_string,
            len(inputs), *[None if v is None else v.name for v in inputs],
            len(outputs), *[v.name for v in outputs],
            len(attributes), *map(id, attributes.values()), *_flat_items(_metadata(node)))


def _graph_state(graph: ir.Graph) -> tuple[Any, ...]:
    return (graph.name, graph.doc_string, _flat_items(graph.metadata_props),
            tuple(map(id, graph.inputs)), tuple(map(id, graph.outputs)),
            tuple((name, id(v)) for name, v in graph.initializers.items()),
            tuple(map(id, graph)))


def _function_state(function: ir.Function) -> tuple[Any, ...]:
    return (function.domain, function.name, function.overload, function.doc_string,
            _flat_items(function.metadata_props), tuple(sorted(function.opset_imports.items())),
            tuple(map(id, function.attributes.values())),
            tuple(map(id, function.inputs)), tuple(map(id, function.outputs)),
            tuple(map(id, function)))


def _model_state(model: ir.Model) -> tuple[Any, ...]:
    return (model.ir_version, model.producer_name, model.producer_version, model.domain,
            model.model_version, model.doc_string, _flat_items(model.metadata_props),
            tuple(sorted(model.opset_imports.items())), id(model.graph),
            tuple((key, id(f)) for key, f in model.functions.items()))


def _same_entries(mapping: Mapping[str, str] | None, entries: Any) -> bool:
    """Whether ``metadata_props`` read as a dict still are what the original entries say."""
    return dict(mapping or {}) == {entry.key: entry.value for entry in entries}


def _same_opsets(opsets: Mapping[str, int], entries: Any) -> bool:
    return dict(opsets) == {entry.domain: entry.version for entry in entries}


def _graph_values(graph: Any) -> Iterator[ir.Value]:
    """Every value a graph or function defines: inputs, initializers, node outputs."""
    yield from graph.inputs
    initializers = getattr(graph, "initializers", None)
    if initializers:
        yield from initializers.values()
    for node in graph:
        yield from node.outputs


def _subgraphs(node: ir.Node) -> list[tuple[str, list[ir.Graph]]]:
    """The graph-valued attributes of a node: name and graphs (usually none)."""
    found = []
    for name, attribute in _attributes(node).items():
        kind = int(attribute.type)  # onnx_ir's AttributeType has ONNX's numbers
        if kind in _GRAPH_TYPES and not attribute.is_ref():
            value = attribute.value
            found.append((name, [value] if kind == onnx.AttributeProto.GRAPH else list(value)))
    return found


@dataclass(frozen=True, slots=True)
class _NodeOrigin:
    node: Node
    protos: Any  # the original repeated field of nodes, and the node's place in it
    index: int
    state: tuple[Any, ...]
    attributes: tuple[Any, ...]  # the converted Attr objects, kept so that their ids stay theirs

    @property
    def proto(self) -> onnx.NodeProto:
        """The node as graphpass wrote it (a message wrapper made on each call)."""
        return self.protos[self.index]  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class _GraphOrigin:
    graph: Graph
    proto: onnx.GraphProto
    state: tuple[Any, ...]
    values: dict[str | None, Any]  # name -> ir.Value, as converted
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _FunctionOrigin:
    extra: Mapping[str, Any] | None
    proto: onnx.FunctionProto
    state: tuple[Any, ...]
    values: dict[str | None, Any]
    keep: tuple[Any, ...]


# ================================================================= conversion
class OnnxIRConversion:
    """A graphpass model converted to ``onnx_ir``, and the way back.

    Attributes:
        ir_model: The ``onnx_ir.Model``; passes change it in place.
        model: The graphpass model it was converted from (never changed here).
    """

    def __init__(self, model: Model):
        """Convert ``model`` (it is not changed; its weights are not read).

        Raises:
            InvalidModelError: onnx_ir cannot read the model.
        """
        import onnx_ir as ir

        self.model = model
        with paused_gc():
            self._proto = model_to_proto(model, _placeholder)
            try:
                self.ir_model: ir.Model = ir.serde.deserialize_model(self._proto)
            except Exception as error:  # onnx_ir raises plain exceptions on what it refuses
                raise InvalidModelError(
                    f"onnx_ir cannot read the model: {type(error).__name__}: "
                    f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}",
                    hint="run graphpass's own passes on it, or fix what onnx_ir names") from None
            if model.base_dir is not None:
                ir.external_data.set_base_dir(self.ir_model.graph, model.base_dir)
            self._nodes: dict[int, _NodeOrigin] = {}
            self._graphs: dict[int, _GraphOrigin] = {}
            self._functions: dict[int, _FunctionOrigin] = {}
            self._values: dict[int, tuple[Any, ...]] = {}
            self._tensors: dict[int, Tensor] = {}  # id of the onnx_ir tensor made for each
            self._keep: list[Any] = []  # every converted object, so that ids stay unique
            self._remember_graph(model.graph, self.ir_model.graph, self._proto.graph)
            for function, ir_function, proto in zip(
                    model.functions.values(), self.ir_model.functions.values(),
                    self._proto.functions, strict=True):
                self._remember_function(function, ir_function, proto)
            self._model_state = _model_state(self.ir_model)
            self._keep.append(self.ir_model.graph)

    # ---------------------------------------------------------------- remember
    def _remember_graph(self, graph: Graph, ir_graph: ir.Graph, proto: onnx.GraphProto) -> None:
        for name, tensor in graph.initializers.items():
            ir_value = ir_graph.initializers[name]
            ir_tensor = _ir_tensor(tensor)
            ir_value.const_value = ir_tensor
            self._tensors[id(ir_tensor)] = tensor
            self._keep.append(ir_tensor)
        self._remember_nodes(graph, ir_graph, proto.node)
        values = {}
        for value in _graph_values(ir_graph):
            self._values[id(value)] = _value_state(value)
            self._keep.append(value)
            values[value.name] = value
        self._graphs[id(ir_graph)] = _GraphOrigin(
            graph, proto, _graph_state(ir_graph), values, tuple(ir_graph.inputs),
            tuple(ir_graph.outputs))
        self._keep.append(ir_graph)

    def _remember_nodes(self, graph: Graph, ir_nodes: Iterable[ir.Node], protos: Any) -> None:
        for index, (node, ir_node) in enumerate(zip(graph, ir_nodes, strict=True)):
            for name, ir_graphs in _subgraphs(ir_node):
                proto = protos[index]
                graphs = node.attributes[name].graphs or []
                attribute = next(a for a in proto.attribute if a.name == name)
                graph_protos = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
                for subgraph, ir_subgraph, subgraph_proto in zip(graphs, ir_graphs, graph_protos,
                                                                 strict=True):
                    self._remember_graph(subgraph, ir_subgraph, subgraph_proto)
            self._keep.append(ir_node)
            self._nodes[id(ir_node)] = _NodeOrigin(node, protos, index, _node_state(ir_node),
                                                   tuple(_attributes(ir_node).values()))

    def _remember_function(self, function: Any, ir_function: ir.Function,
                           proto: onnx.FunctionProto) -> None:
        self._remember_nodes(function.graph, ir_function, proto.node)
        values = {}
        for value in _graph_values(ir_function):
            self._values[id(value)] = _value_state(value)
            self._keep.append(value)
            values[value.name] = value
        self._functions[id(ir_function)] = _FunctionOrigin(
            function._extra, proto, _function_state(ir_function), values,
            (ir_function, tuple(ir_function.attributes.values())))

    # ----------------------------------------------------------------- changed
    def changed(self) -> bool:
        """Whether anything in :attr:`ir_model` differs from what the conversion made."""
        with paused_gc():
            return self._changed()

    def _changed(self) -> bool:
        ir_model = self.ir_model
        if _model_state(ir_model) != self._model_state:
            return True
        for function in ir_model.functions.values():
            origin = self._functions.get(id(function))
            if origin is None or _function_state(function) != origin.state:
                return True
            if self._graph_changed(function, None):
                return True
        return self._graph_changed(ir_model.graph, self._graphs.get(id(ir_model.graph)))

    def _graph_changed(self, graph: Any, origin: _GraphOrigin | None) -> bool:
        if origin is not None and _graph_state(graph) != origin.state:
            return True
        for node in graph:
            node_origin = self._nodes.get(id(node))
            if node_origin is None or _node_state(node) != node_origin.state:
                return True
            for _name, subgraphs in _subgraphs(node):
                for subgraph in subgraphs:
                    sub_origin = self._graphs.get(id(subgraph))
                    if sub_origin is None or self._graph_changed(subgraph, sub_origin):
                        return True
        values = self._values
        return any(values.get(id(v)) != _value_state(v) for v in _graph_values(graph))

    # ------------------------------------------------------------------- back
    def to_model(self) -> Model:
        """The graphpass model :attr:`ir_model` now describes.

        The original model itself when nothing changed; otherwise a new one in which
        what is unchanged is written as the original had it.

        Raises:
            InvalidModelError: The changed model cannot be represented (onnx_ir wrote
                something graphpass refuses, such as a name defined twice).
        """
        import onnx_ir as ir

        with paused_gc():
            if not self._changed():
                return self.model
            kept = self._kept_nodes(self.ir_model.graph)
            graph = self.ir_model.graph
            # onnx_ir writes the main graph's changed nodes only (a view of them); the
            # others are copied from the original.
            # So are its initializers that still hold the original tensors.
            tensors = self._tensors
            view = ir.GraphView(
                graph.inputs, graph.outputs,
                nodes=[node for node, origin in zip(graph, kept, strict=True) if origin is None],
                initializers=[value for value in graph.initializers.values()
                              if id(value.const_value) not in tensors],
                doc_string=graph.doc_string, opset_imports=graph.opset_imports,
                name=graph.name, metadata_props=graph.metadata_props)
            swapped = self._swap_original_tensors()
            try:
                proto = ir.serde.serialize_model(_model_with_graph(self.ir_model, view))
            finally:
                for value, tensor in swapped:
                    value.const_value = tensor
            self._merge_model(proto, kept)
            model = model_from_proto(proto, self.model.base_dir)
            self._restore_tensors(self.ir_model.graph, model.graph)
            for ir_function, function in zip(self.ir_model.functions.values(),
                                             model.functions.values(), strict=True):
                self._restore_tensors(ir_function, function.graph)
        model.source_path = self.model.source_path
        return model

    def write_back(self, target: Model) -> bool:
        """Make ``target`` what :attr:`ir_model` describes, in place.

        Returns:
            Whether anything changed (``target`` is left alone when not).
        """
        model = self.to_model()
        if model is self.model:
            return False
        _adopt(target, model)
        return True

    # ------------------------------------------------------------- tensors
    def _swap_original_tensors(self) -> list[tuple[Any, Any]]:
        """Give every initializer still holding an original tensor a stand-in.

        serialize_model would otherwise read or copy every weight; the stand-in
        serializes as a reference, and the graphpass tensor is put back afterwards.
        """
        import onnx_ir as ir

        swapped = []
        for graph in _all_graphs(self.ir_model):
            if graph is self.ir_model.graph:
                continue  # written from a view without them
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is not None and id(tensor) in self._tensors:
                    original = self._tensors[id(tensor)]
                    value.const_value = ir.ExternalTensor(
                        _STAND_IN, None, None, tensor.dtype, shape=ir.Shape(original.shape),
                        name=value.name or "")
                    swapped.append((value, tensor))
        return swapped

    def _restore_tensors(self, ir_graph: Any, graph: Graph) -> None:
        """Put the graphpass tensors back on the initializers that still hold them."""
        for name, value in getattr(ir_graph, "initializers", {}).items():
            tensor = self._tensors.get(id(value.const_value))
            if tensor is not None:
                graph.set_initializer(tensor if tensor.name == name else tensor.with_name(name))
        for ir_node, node in zip(ir_graph, graph, strict=True):
            for name, ir_subgraphs in _subgraphs(ir_node):
                for ir_subgraph, subgraph in zip(ir_subgraphs, node.attributes[name].graphs or [],
                                                 strict=True):
                    self._restore_tensors(ir_subgraph, subgraph)

    # ------------------------------------------------------------- merging
    def _kept_nodes(self, graph: ir.Graph) -> list[_NodeOrigin | None]:
        """Per node: its origin when it is as converted (and has no subgraphs), else None."""
        kept: list[_NodeOrigin | None] = []
        nodes = self._nodes
        for node in graph:
            origin = nodes.get(id(node))
            if origin is not None and _node_state(node) == origin.state and not _subgraphs(node):
                kept.append(origin)
            else:
                kept.append(None)
        return kept

    def _merge_model(self, proto: onnx.ModelProto, kept: list[_NodeOrigin | None]) -> None:
        original, ir_model = self._proto, self.ir_model
        _keep_presence(proto, original, _MODEL_SCALARS)
        if _same_opsets(ir_model.opset_imports, original.opset_import):
            _replace(proto.opset_import, original.opset_import)
        if _same_entries(ir_model.metadata_props, original.metadata_props):
            _replace(proto.metadata_props, original.metadata_props)
        self._merge_graph(ir_model.graph, proto.graph, kept)
        for ir_function, function_proto in zip(ir_model.functions.values(), proto.functions,
                                               strict=True):
            self._merge_function(ir_function, function_proto)
        for field, value in original.ListFields():
            if field.name not in _MODEL_FIELDS:
                _copy_field(proto, field, value)
        _restore_unknown(proto, self.model._extra)

    def _merge_graph(self, ir_graph: ir.Graph, proto: onnx.GraphProto,
                     kept: list[_NodeOrigin | None] | None = None) -> None:
        """Write back what did not change; ``kept``: ``proto`` has only the other nodes."""
        if kept is None:
            for ir_node, node_proto in zip(ir_graph, proto.node, strict=True):
                self._merge_node(ir_node, node_proto)
        else:
            self._assemble_nodes(ir_graph, proto, kept)
            self._assemble_initializers(ir_graph, proto)
        for tensor_proto in proto.initializer:
            if (tensor_proto.data_location == onnx.TensorProto.EXTERNAL
                    and tensor_proto.external_data and
                    tensor_proto.external_data[0].value == _STAND_IN):
                tensor_proto.ClearField("data_location")
                tensor_proto.ClearField("external_data")
        origin = self._graphs.get(id(ir_graph))
        if origin is None:
            return
        original = origin.proto
        _keep_presence(proto, original, ("name", "doc_string"))
        if _same_entries(ir_graph.metadata_props, original.metadata_props):
            _replace(proto.metadata_props, original.metadata_props)
        self._merge_declarations(proto.input, ir_graph.inputs, origin.inputs, original.input)
        self._merge_declarations(proto.output, ir_graph.outputs, origin.outputs, original.output)
        scope = {v.name: v for v in _graph_values(ir_graph)}
        self._merge_value_info(proto.value_info, original.value_info, scope, origin.values)
        if len(original.sparse_initializer) and not len(proto.sparse_initializer):
            proto.sparse_initializer.extend(original.sparse_initializer)
        if sorted(a.SerializeToString() for a in proto.quantization_annotation) == sorted(
                a.SerializeToString() for a in original.quantization_annotation):
            _replace(proto.quantization_annotation, original.quantization_annotation)
        _restore_unknown(proto, origin.graph._extra)

    def _assemble_nodes(self, ir_graph: ir.Graph, proto: onnx.GraphProto,
                        kept: list[_NodeOrigin | None]) -> None:
        """The node list: the original's nodes where kept, onnx_ir's (merged) elsewhere.

        onnx_ir declared the outputs of the nodes it wrote; an output of a kept node
        whose type or shape a pass changed (shape inference) is declared here.
        """
        import onnx_ir as ir

        written = iter(list(proto.node))
        nodes = []
        values = self._values
        for ir_node, origin in zip(ir_graph, kept, strict=True):
            if origin is None:
                node_proto = next(written)
                self._merge_node(ir_node, node_proto)
                nodes.append(node_proto)
                continue
            nodes.append(origin.proto)
            for value in ir_node.outputs:
                if (values.get(id(value)) != _value_state(value) and _declared(value)
                        and not value.is_graph_output()):
                    ir.serde.serialize_value_into(proto.value_info.add(), value)
        del proto.node[:]
        proto.node.extend(nodes)

    def _assemble_initializers(self, ir_graph: ir.Graph, proto: onnx.GraphProto) -> None:
        """The initializers in order: placeholders for original tensors, onnx_ir's for new ones.

        :meth:`_restore_tensors` puts the original tensors back in place of the placeholders.
        """
        written = {tensor.name: tensor for tensor in proto.initializer}
        entries = []
        for name, value in ir_graph.initializers.items():
            original = self._tensors.get(id(value.const_value))
            if original is not None:
                entries.append(onnx.TensorProto(name=name, data_type=original.dtype,
                                                dims=original.shape))
            elif name in written:  # onnx_ir skips an initializer without a value
                entries.append(written[name])
        _replace(proto.initializer, entries)

    def _merge_function(self, ir_function: ir.Function, proto: onnx.FunctionProto) -> None:
        for ir_node, node_proto in zip(ir_function, proto.node, strict=True):
            self._merge_node(ir_node, node_proto)
        origin = self._functions.get(id(ir_function))
        if origin is None:
            return
        original = origin.proto
        _keep_presence(proto, original, _FUNCTION_SCALARS)
        if _same_entries(ir_function.metadata_props, original.metadata_props):
            _replace(proto.metadata_props, original.metadata_props)
        if _same_opsets(ir_function.opset_imports, original.opset_import):
            _replace(proto.opset_import, original.opset_import)
        if tuple(map(id, ir_function.attributes.values())) == origin.state[6]:
            _replace(proto.attribute, original.attribute)
            _replace(proto.attribute_proto, original.attribute_proto)
        scope = {v.name: v for v in _graph_values(ir_function)}
        self._merge_value_info(proto.value_info, original.value_info, scope, origin.values)
        _restore_unknown(proto, origin.extra)

    def _merge_node(self, ir_node: ir.Node, proto: onnx.NodeProto) -> None:
        has_graphs = False
        for name, ir_graphs in _subgraphs(ir_node):
            has_graphs = True
            attribute = next(a for a in proto.attribute if a.name == name)
            graph_protos = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
            for ir_subgraph, graph_proto in zip(ir_graphs, graph_protos, strict=True):
                self._merge_graph(ir_subgraph, graph_proto)
        origin = self._nodes.get(id(ir_node))
        if origin is None:
            return
        state = _node_state(ir_node)
        if not has_graphs and state == origin.state:
            proto.CopyFrom(origin.proto)
            return
        original = origin.proto
        _keep_presence(proto, original, _NODE_SCALARS)
        written = list(proto.output)
        if written == _without_trailing_empty(original.output):
            _replace(proto.output, original.output)
        converted = {id(a): a.name for a in origin.attributes}
        originals = {a.name: a for a in original.attribute}
        attributes = []
        for ir_attribute, attribute in zip(ir_node.attributes.values(), proto.attribute,
                                           strict=True):
            original_name = converted.get(id(ir_attribute))
            if original_name is None:
                attributes.append(attribute)  # new or changed: as onnx_ir writes it
            elif attribute.type not in _GRAPH_TYPES:
                attributes.append(originals[original_name])
            else:  # the original attribute's own fields, around the merged graphs
                merged = onnx.AttributeProto()
                merged.CopyFrom(origin.node.attributes[original_name].proto)
                if attribute.HasField("g"):
                    merged.g.CopyFrom(attribute.g)
                merged.graphs.extend(attribute.graphs)
                attributes.append(merged)
        if attributes != list(proto.attribute):
            _replace(proto.attribute, attributes)
        if _same_entries(ir_node.metadata_props, original.metadata_props):
            _replace(proto.metadata_props, original.metadata_props)
        # A loaded node keeps its unknown fields in its proto (written with it above).
        unknown = unknown_fields(original)
        if unknown is not None:
            proto.MergeFromString(unknown)

    def _merge_declarations(self, target: Any, values: Iterable[ir.Value],
                            converted: tuple[Any, ...], originals: Any) -> None:
        """Graph inputs or outputs: an unchanged value keeps its original declaration."""
        position: dict[int, int] = {}
        for index, value in enumerate(converted):
            position.setdefault(id(value), index)
        for index, value in enumerate(values):
            if index < len(converted) and converted[index] is value:
                original_index: int | None = index
            else:
                original_index = position.get(id(value))
            if original_index is not None and self._values.get(id(value)) == _value_state(value):
                target[index].CopyFrom(originals[original_index])

    def _merge_value_info(self, target: Any, originals: Any, scope: Mapping[str | None, Any],
                          converted: Mapping[str | None, Any]) -> None:
        """``value_info``: the original entries of unchanged values, in their order.

        Entries of values the pass removed go; entries for names no value had when the
        model was converted stay as they were; entries onnx_ir writes for a value
        that has not changed (an initializer, a value declared as a graph output) are
        onnx_ir's normalization and are left out; the others are new information
        (shape inference, a changed type) and are kept.
        """
        written = {entry.name: entry for entry in target}
        entries: list[onnx.ValueInfoProto] = []
        taken: set[str] = set()
        values = self._values
        for entry in originals:
            name = entry.name
            value = scope.get(name)
            before = converted.get(name)
            if value is None:
                if before is None:
                    entries.append(entry)  # declared a name nothing defined: verbatim
                continue
            if values.get(id(value)) == _value_state(value) and value is before:
                entries.append(entry)
                taken.add(name)
            elif name not in taken and name in written:
                entries.append(written[name])
                taken.add(name)
        for name, entry in written.items():
            if name in taken:
                continue
            value = scope.get(name)
            if value is None:
                continue  # onnx_ir's own bookkeeping (function value info before IR 10)
            if values.get(id(value)) == _value_state(value) and converted.get(name) is value:
                continue
            entries.append(entry)
        if entries != list(target):
            _replace(target, entries)


# ================================================================== helpers
_MODEL_ATTRIBUTES = ("ir_version", "producer_name", "producer_version", "domain",
                     "model_version", "doc_string", "opset_imports", "metadata_props",
                     "functions")


def _model_with_graph(model: ir.Model, graph: Any) -> Any:
    """``model`` as onnx_ir's writer reads it (its ``ModelProtocol``), with another main graph."""
    fields = {name: getattr(model, name) for name in _MODEL_ATTRIBUTES}
    fields["device_configurations"] = getattr(model, "device_configurations", ())
    return types.SimpleNamespace(**fields, graph=graph)


def _declared(value: ir.Value) -> bool:
    """Whether onnx_ir writes a ``value_info`` entry for ``value`` (it has something to say)."""
    return bool(value.name) and (value.shape is not None or value.type is not None
                                 or bool(_metadata(value)) or bool(value.doc_string))


def _placeholder(tensor: Tensor) -> onnx.TensorProto:
    """What the conversion writes for an initializer: name, type and shape, no data."""
    return onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)


def _ir_tensor(tensor: Tensor) -> Any:
    """An onnx_ir tensor reading ``tensor``'s data only when asked, never copying a file."""
    import onnx_ir as ir

    dtype = ir.DataType(tensor.dtype)
    shape = ir.Shape(tensor.shape)
    path = tensor.external_path
    if path is not None:  # external data or a checkpoint region: memory-mapped when read
        return ir.ExternalTensor(path.name, tensor.external_offset, tensor.nbytes, dtype,
                                 shape=shape, name=tensor.name, base_dir=path.parent)
    return ir.LazyTensor(functools.partial(_read, tensor), dtype, shape, name=tensor.name)


def _read(tensor: Tensor) -> Any:
    import onnx_ir as ir

    return ir.serde.deserialize_tensor(tensor.to_embedded_proto())


def _all_graphs(model: ir.Model) -> Iterator[ir.Graph]:
    """The main graph and every subgraph (function bodies have no initializers)."""
    stack = [model.graph]
    for function in model.functions.values():
        stack.extend(g for node in function for _, graphs in _subgraphs(node) for g in graphs)
    while stack:
        graph = stack.pop()
        yield graph
        for node in graph:
            for _name, graphs in _subgraphs(node):
                stack.extend(graphs)


def _keep_presence(target: Any, original: Any, fields: Iterable[str]) -> None:
    """Scalar fields whose value did not change are present exactly when they were."""
    for name in fields:
        if getattr(target, name) == getattr(original, name):
            if original.HasField(name):
                setattr(target, name, getattr(original, name))
            else:
                target.ClearField(name)


def _replace(target: Any, items: Iterable[Any]) -> None:
    items = list(items)
    del target[:]
    target.extend(items)


def _without_trailing_empty(names: Iterable[str]) -> list[str]:
    kept = list(names)
    while kept and not kept[-1]:
        kept.pop()
    return kept


def _copy_field(target: Any, field: Any, value: Any) -> None:
    if field.is_repeated:
        getattr(target, field.name).extend(value)
    elif field.type == field.TYPE_MESSAGE:
        getattr(target, field.name).CopyFrom(value)
    else:
        setattr(target, field.name, value)


def _restore_unknown(target: Any, extra: Mapping[str, Any] | None) -> None:
    """Write back the unknown fields (of a newer ONNX release) the original carried."""
    if extra and UNKNOWN_FIELDS in extra:
        target.MergeFromString(extra[UNKNOWN_FIELDS])


def _adopt(target: Model, source: Model) -> None:
    """Move everything of ``source`` into ``target`` (``source`` is used up)."""
    before = target.version
    target.graph = source.graph
    source.graph._model = target
    for function_id in list(target.functions):
        target.remove_function(function_id)
    for function in list(source.functions.values()):
        source.remove_function(function.id)
        target.add_function(function)
    for name in ("ir_version", "opset_imports", "producer_name", "producer_version", "domain",
                 "model_version", "doc_string", "metadata", "_extra", "_present_empty",
                 "_opset_protos", "_metadata_proto"):
        setattr(target, name, getattr(source, name))
    # The version must move on, whatever the new graphs' own counters say.
    target._version += before + 1 - target.version
