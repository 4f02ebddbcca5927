"""Deep copies of IR objects.

Tensors and non-graph attribute protos are immutable and shared between the copy
and the original; everything structural (graphs, nodes, values, declarations) is
new, so changing the copy never changes the original.

A copy is made with ``type(original)``, so this module needs none of the IR classes
at run time and each of them can import it for its ``copy()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from graphpass.ir._gc import paused_gc
from graphpass.ir._metadata import NO_METADATA

if TYPE_CHECKING:
    from graphpass.ir._attribute import Attribute
    from graphpass.ir._function import Function
    from graphpass.ir._graph import Graph
    from graphpass.ir._model import Model
    from graphpass.ir._node import Node

__all__ = ["clone_function", "clone_graph", "clone_model", "clone_node"]

_Whole = TypeVar("_Whole", "Graph", "Model")


def clone_attribute(attribute: Attribute) -> Attribute:
    """Copy an attribute; graph values are deep-copied, other values shared."""
    if not attribute.graphs:
        return attribute
    return type(attribute)(attribute.name, attribute.type, attribute._proto,
                           [clone_graph(g) for g in attribute.graphs], attribute.ref_attr_name)


def clone_node(node: Node) -> Node:
    """Return a detached copy of ``node`` (subgraphs copied).

    The copy shares the ``NodeProto`` the node was loaded from (protos are never
    changed) and remembers what differs from it.
    """
    node_type = type(node)
    copy = node_type.__new__(node_type)
    copy._op_type = node._op_type
    copy._domain = node._domain
    copy._overload = node._overload
    copy._name = node._name
    copy._doc_string = node._doc_string
    copy._inputs = node._inputs
    copy._outputs = node._outputs
    metadata = node._metadata
    copy._metadata = metadata if metadata is None or metadata is NO_METADATA else dict(metadata)
    copy._loaded_from = node._loaded_from
    copy._loaded_index = node._loaded_index
    copy._changed = node._changed
    copy._graph = None
    copy._prev = None
    copy._next = None
    copy._captures = None
    attributes = node._attributes
    if attributes is None:  # not decoded yet: nothing to copy, the copy decodes its own
        copy._attributes = None
        return copy
    copied: dict[str, Attribute] = {}
    copy._attributes = copied
    for name, attribute in attributes.items():
        if attribute.graphs:
            cloned = clone_attribute(attribute)
            copied[name] = cloned
            copy._attach_subgraphs(cloned)
        else:
            copied[name] = attribute
    return copy


def _with_gc_paused(clone: Callable[[_Whole], _Whole], original: _Whole) -> _Whole:
    """Run ``clone`` with the collector paused; its objects are accounted to the copy."""
    with paused_gc() as block:
        copy = clone(original)
        block.owner = copy
        return copy


def _carry_unmodelled(copy: Function | Model, original: Function | Model) -> None:
    """Share what a function or model carries from its proto without modelling it."""
    copy._extra = dict(original._extra) if original._extra else None
    copy._present_empty = original._present_empty
    copy._opset_protos = original._opset_protos
    copy._metadata_proto = original._metadata_proto


def clone_graph(graph: Graph) -> Graph:
    """Return a deep copy of ``graph`` that belongs to no node, function or model."""
    return _with_gc_paused(_clone_graph, graph)


def _clone_graph(graph: Graph) -> Graph:
    copy = type(graph)(graph.name, doc_string=graph.doc_string)
    for value in graph._inputs:
        new_value = copy._value_for(value.name)
        new_value._info = value._info
        copy._inputs.append(new_value)
        copy._input_names[value.name] = copy._input_names.get(value.name, 0) + 1
    copy._initializers = dict(graph._initializers)
    copy._sparse_initializers = dict(graph._sparse_initializers)
    for name in copy._initializers:
        copy._value_for(name)
    for name in copy._sparse_initializers:
        copy._value_for(name)
    attach, link = copy._attach, copy._link
    previous = None
    for node in graph:  # fresh copies, in order: appended without the checks of append()
        cloned = clone_node(node)
        attach(cloned, touch=False)
        link(cloned, previous, None)
        previous = cloned
    copy.set_outputs([value.name for value in graph._outputs])
    for value in graph._values.values():
        if value._info is not None or value._alt_info is not None:
            new_value = copy._value_for(value.name)
            new_value._info = value._info
            new_value._alt_info = dict(value._alt_info) if value._alt_info else None
    copy._value_info = [copy._values[v.name] for v in graph._value_info]
    copy._metadata = dict(graph._metadata) if graph._metadata is not None else None
    copy._metadata_proto = graph._metadata_proto
    copy._extra = dict(graph._extra) if graph._extra else None
    copy._present_empty = graph._present_empty
    copy._version = 0
    if graph._known_sorted():  # the same nodes in the same order
        copy._mark_sorted()
    return copy


def clone_function(function: Function) -> Function:
    """Return a deep copy of ``function``, detached from any model."""
    copy = type(function)(
        function.domain,
        function.name,
        clone_graph(function.graph),
        overload=function.overload,
        attribute_names=function.attribute_names,
        attribute_defaults=[clone_attribute(a) for a in function.attribute_defaults.values()],
        opset_imports=function.opset_imports,
        doc_string=function.doc_string,
        metadata=function.metadata,
    )
    _carry_unmodelled(copy, function)
    return copy


def clone_model(model: Model) -> Model:
    """Return a deep copy of ``model``; tensors are shared (they are immutable)."""
    return _with_gc_paused(_clone_model, model)


def _clone_model(model: Model) -> Model:
    copy = type(model)(
        clone_graph(model.graph),
        ir_version=model.ir_version,
        opset_imports=model.opset_imports,
        functions=[clone_function(f) for f in model.functions.values()],
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=model.model_version,
        doc_string=model.doc_string,
        metadata=model.metadata,
    )
    copy.source_path = model.source_path
    copy.base_dir = model.base_dir
    _carry_unmodelled(copy, model)
    copy._version = 0
    return copy
