"""Nodes: one ONNX operator call.

Inputs and outputs are value *names*, as in ONNX (``""`` marks an omitted optional
input or output). They are read-only tuples; change them with
:meth:`Node.set_input`, :meth:`Node.set_inputs` and :meth:`Node.set_outputs` so
that the graph's edges stay right.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import onnx

from graphpass.ir._attribute import Attribute
from graphpass.ir._clone import clone_node
from graphpass.ir._metadata import LazyMetadata

if TYPE_CHECKING:
    from graphpass.ir._graph import Graph

__all__ = ["Node"]


# What differs from the ``NodeProto`` a node was loaded from (``Node._changed``). A
# loaded node that nobody changed is written back as that proto; a changed one as a
# copy of it with the changed fields rewritten, so fields the IR does not model (and
# fields present with their default value) survive either way.
CHANGED_INPUTS = 1
CHANGED_OUTPUTS = 2
CHANGED_ATTRIBUTES = 4
CHANGED_METADATA = 8
CHANGED_NAME = 16
CHANGED_FIELDS = 32
"""op_type, domain, overload or doc_string."""


class Node(LazyMetadata):
    """One operator call in a graph.

    A node loaded from a file keeps its ``NodeProto``: its attributes are decoded on
    first use, and it is written back as it was loaded unless it changed.

    Attributes:
        op_type: The operator (or model-local function) name.
        domain: The operator set domain; ``""`` is the default ONNX domain.
        overload: The function overload (ONNX IR v10); usually ``""``.
        name: The node name (may be empty; not necessarily unique).
        doc_string: The node's doc string.
    """

    __slots__ = (
        "_attributes",
        "_captures",
        "_changed",
        "_doc_string",
        "_domain",
        "_graph",
        "_inputs",
        "_loaded_from",
        "_loaded_index",
        "_name",
        "_next",
        "_op_type",
        "_outputs",
        "_overload",
        "_prev",
    )

    def __init__(
        self,
        op_type: str,
        inputs: Sequence[str] = (),
        outputs: Sequence[str] = (),
        *,
        domain: str = "",
        name: str = "",
        attributes: Iterable[Attribute] | Mapping[str, Any] = (),
        overload: str = "",
        doc_string: str = "",
        metadata: Mapping[str, str] | None = None,
    ):
        """Create a node that belongs to no graph yet.

        Args:
            op_type: The operator name.
            inputs: Input value names (``""`` for an omitted optional input).
            outputs: Output value names.
            domain: The operator domain (``""`` for ONNX).
            name: The node name.
            attributes: ``Attribute`` objects, or a mapping of names to Python values.
            overload: The function overload (ONNX IR v10).
            doc_string: The doc string.
            metadata: ``metadata_props`` entries.
        """
        self._op_type = op_type
        self._domain = domain
        self._overload = overload
        self._name = name
        self._doc_string = doc_string
        self._inputs: tuple[str, ...] = tuple(inputs)
        self._outputs: tuple[str, ...] = tuple(outputs)
        # None: not decoded yet from the loaded proto (then no attribute holds a graph or a
        # tensor).
        self._attributes: dict[str, Attribute] | None = {}
        self._metadata: dict[str, str] | None = dict(metadata) if metadata else None
        # A loaded node's NodeProto is ``_loaded_from[_loaded_index]``: the repeated field it
        # was loaded from, held once per graph (cheaper than one proto object per node).
        self._loaded_from: Any = None
        self._loaded_index = 0
        self._changed = 0
        self._graph: Graph | None = None
        self._prev: Node | None = None
        self._next: Node | None = None
        self._captures: dict[str, int] | None = None
        if isinstance(attributes, Mapping):
            for key, value in attributes.items():
                self.set_attribute(value if isinstance(value, Attribute)
                                   else Attribute.from_value(key, value))
        else:
            for attribute in attributes:
                self.set_attribute(attribute)

    # ------------------------------------------------------------------ fields
    @property
    def op_type(self) -> str:
        """The operator (or model-local function) name."""
        return self._op_type

    @op_type.setter
    def op_type(self, value: str) -> None:
        self._op_type = value
        self._field_changed(CHANGED_FIELDS)

    @property
    def domain(self) -> str:
        """The operator set domain; ``""`` is the default ONNX domain."""
        return self._domain

    @domain.setter
    def domain(self, value: str) -> None:
        self._domain = value
        self._field_changed(CHANGED_FIELDS)

    @property
    def overload(self) -> str:
        """The function overload (ONNX IR v10); usually ``""``."""
        return self._overload

    @overload.setter
    def overload(self, value: str) -> None:
        self._overload = value
        self._field_changed(CHANGED_FIELDS)

    @property
    def name(self) -> str:
        """The node name (may be empty; not necessarily unique)."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value
        self._field_changed(CHANGED_NAME)

    @property
    def doc_string(self) -> str:
        """The node's doc string."""
        return self._doc_string

    @doc_string.setter
    def doc_string(self, value: str) -> None:
        self._doc_string = value
        self._field_changed(CHANGED_FIELDS)

    def _field_changed(self, what: int) -> None:
        self._changed |= what
        if self._graph is not None:
            self._graph._touch()

    # --------------------------------------------------------------- structure
    @property
    def graph(self) -> Graph | None:
        """The graph that holds this node, or ``None`` when it is detached."""
        return self._graph

    @property
    def inputs(self) -> tuple[str, ...]:
        """Input value names; ``""`` is an omitted optional input."""
        return self._inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        """Output value names; ``""`` is an omitted optional output."""
        return self._outputs

    def set_input(self, index: int, name: str) -> None:
        """Make input ``index`` read ``name`` (``""`` to omit it)."""
        graph = self._graph
        inputs = list(self._inputs)
        if index == len(inputs):
            inputs.append(name)
            self._inputs = tuple(inputs)
            self._changed |= CHANGED_INPUTS
            if graph is not None:
                if name:
                    graph._use(name, self, index)
                graph._touch()
            return
        old = inputs[index]
        inputs[index] = name
        if graph is not None and old:
            graph._unuse(old, self, index)
        self._inputs = tuple(inputs)
        self._changed |= CHANGED_INPUTS
        if graph is not None:
            if name:
                graph._use(name, self, index)
            graph._touch()

    def set_inputs(self, names: Sequence[str]) -> None:
        """Replace all input names, keeping the graph's edges right."""
        names = tuple(names)
        graph = self._graph
        if graph is not None:
            for slot, old in enumerate(self._inputs):
                if old:
                    graph._unuse(old, self, slot)
        self._inputs = names
        self._changed |= CHANGED_INPUTS
        if graph is not None:
            for slot, new in enumerate(names):
                if new:
                    graph._use(new, self, slot)
            graph._touch()

    def set_outputs(self, names: Sequence[str]) -> None:
        """Replace all output names, keeping the graph's edges right.

        Raises:
            graphpass.InvalidModelError: A new name is already defined in the graph.
        """
        names = tuple(names)
        graph = self._graph
        if graph is not None:
            for old in self._outputs:
                if old:
                    graph._undefine_output(old, self)
        old_names = self._outputs
        self._outputs = names
        if graph is not None:
            try:
                for index, new in enumerate(names):
                    if new:
                        graph._define_output(new, self, index)
            except Exception:
                for new in names:
                    if new and graph._values.get(new) is not None \
                            and graph._values[new]._producer is self:
                        graph._undefine_output(new, self)
                self._outputs = old_names
                for index, old in enumerate(old_names):
                    if old:
                        graph._define_output(old, self, index)
                raise
            graph._touch()
        self._changed |= CHANGED_OUTPUTS

    # -------------------------------------------------------------- attributes
    def _decoded_attributes(self) -> dict[str, Attribute]:
        """The attributes by name, decoded from the loaded proto on first use."""
        attributes = self._attributes
        if attributes is None:
            attributes = self._attributes = {}
            loaded = self._loaded_proto()
            assert loaded is not None
            for proto in loaded.attribute:
                attributes[proto.name] = Attribute(proto.name, proto.type, proto, None,
                                                   proto.ref_attr_name)
        return attributes

    @property
    def attributes(self) -> Mapping[str, Attribute]:
        """The attributes by name, in order (read-only; see :meth:`set_attribute`)."""
        return MappingProxyType(self._decoded_attributes())

    def attribute(self, name: str, default: Any = None) -> Any:
        """Return the decoded value of attribute ``name``, or ``default`` if absent."""
        found = self._decoded_attributes().get(name)
        if found is None or found.is_reference:
            return default
        return found.value

    def set_attribute(self, attribute: Attribute) -> None:
        """Add or replace an attribute (graph values become this node's subgraphs).

        Raises:
            ValueError: A graph of the attribute already belongs to another node (or
                to another attribute of this one), to a model or to a function.
        """
        attributes = self._decoded_attributes()
        old = attributes.get(attribute.name)
        self._check_attachable(attribute, old)
        if old is not None:
            self._detach_subgraphs(old)
        attributes[attribute.name] = attribute
        self._changed |= CHANGED_ATTRIBUTES
        self._attach_subgraphs(attribute)
        self._touch()

    def remove_attribute(self, name: str) -> None:
        """Remove attribute ``name`` if present."""
        old = self._decoded_attributes().pop(name, None)
        if old is not None:
            self._changed |= CHANGED_ATTRIBUTES
            self._detach_subgraphs(old)
            self._touch()

    def subgraphs(self) -> Iterator[Graph]:
        """Yield the graphs held by this node's graph-typed attributes."""
        attributes = self._attributes
        if attributes:  # attributes not decoded yet hold no graph
            for attribute in attributes.values():
                yield from attribute.graphs

    @property
    def captured_names(self) -> tuple[str, ...]:
        """Names this node's subgraphs use from enclosing scopes."""
        return tuple(self._captures) if self._captures else ()

    # ------------------------------------------------------------------ helpers
    @property
    def is_function_call(self) -> bool:
        """Whether this node calls a model-local function of its model."""
        graph = self._graph
        model = graph.model if graph is not None else None
        return model is not None and (self._domain, self._op_type, self._overload) \
            in model.functions

    def copy(self) -> Node:
        """Return a detached copy; subgraphs are copied too."""
        return clone_node(self)

    def _touch(self) -> None:
        if self._graph is not None:
            self._graph._touch()

    def _loaded_proto(self) -> onnx.NodeProto | None:
        """The ``NodeProto`` this node was loaded (or copied) from, if any (never changed)."""
        if self._loaded_from is None:
            return None
        proto: onnx.NodeProto = self._loaded_from[self._loaded_index]
        return proto

    def _loaded_metadata(self) -> Any:
        if self._loaded_from is None or self._changed & CHANGED_METADATA:
            return None
        return self._loaded_from[self._loaded_index].metadata_props

    def _forget_loaded_metadata(self) -> None:
        self._changed |= CHANGED_METADATA

    def _check_attachable(self, attribute: Attribute, replaced: Attribute | None) -> None:
        mine = {id(g) for g in replaced.graphs} if replaced is not None else set()
        seen: set[int] = set()
        for subgraph in attribute.graphs:
            owner = subgraph._parent
            if id(subgraph) in seen or (owner is not None and id(subgraph) not in mine):
                holder = f"node {owner.name or owner.op_type!r}" if owner is not None else \
                    "this attribute twice"
                raise ValueError(f"graph {subgraph.name!r} already belongs to {holder}; "
                                 "copy it first")
            if subgraph._model is not None or subgraph._function is not None:
                raise ValueError(f"graph {subgraph.name!r} is the main graph of a model or the "
                                 "body of a function; copy it first")
            seen.add(id(subgraph))

    def _attach_subgraphs(self, attribute: Attribute) -> None:
        for subgraph in attribute.graphs:
            subgraph._parent = self
            for name in subgraph._free:
                self._capture_changed(name, +1)

    def _detach_subgraphs(self, attribute: Attribute) -> None:
        for subgraph in attribute.graphs:
            for name in subgraph._free:
                self._capture_changed(name, -1)
            subgraph._parent = None

    def _capture_changed(self, name: str, delta: int) -> None:
        captures = self._captures
        if captures is None:
            captures = self._captures = {}
        old = captures.get(name, 0)
        new = old + delta
        if new:
            captures[name] = new
        else:
            del captures[name]
        graph = self._graph
        if graph is not None:
            if old == 0 and new > 0:
                graph._capture(name, self)
            elif old > 0 and new == 0:
                graph._release(name, self)

    def __repr__(self) -> str:
        op = f"{self._domain}::{self._op_type}" if self._domain else self._op_type
        return f"Node({op}, name={self._name!r}, inputs={list(self._inputs)}, " \
               f"outputs={list(self._outputs)})"
