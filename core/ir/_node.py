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

from graphpass.ir._attribute import Attribute
from graphpass.ir._clone import clone_node
from graphpass.ir._metadata import LazyMetadata

if TYPE_CHECKING:
    from graphpass.ir._graph import Graph

__all__ = ["Node"]


class Node(LazyMetadata):
    """One operator call in a graph.

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
        "_extra",
        "_graph",
        "_inputs",
        "_next",
        "_outputs",
        "_present_empty",
        "_prev",
        "doc_string",
        "domain",
        "name",
        "op_type",
        "overload",
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
        self.op_type = op_type
        self.domain = domain
        self.overload = overload
        self.name = name
        self.doc_string = doc_string
        self._inputs: tuple[str, ...] = tuple(inputs)
        self._outputs: tuple[str, ...] = tuple(outputs)
        self._attributes: dict[str, Attribute] = {}
        self._metadata: dict[str, str] | None = dict(metadata) if metadata else None
        self._metadata_proto: Any = None
        self._extra: dict[str, Any] | None = None
        self._present_empty: frozenset[str] = frozenset()
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
        inputs = list(self._inputs)
        if index == len(inputs):
            inputs.append(name)
        else:
            inputs[index] = name
        self.set_inputs(inputs)

    def set_inputs(self, names: Sequence[str]) -> None:
        """Replace all input names, keeping the graph's edges right."""
        names = tuple(names)
        graph = self._graph
        if graph is not None:
            for slot, old in enumerate(self._inputs):
                if old:
                    graph._unuse(old, self, slot)
        self._inputs = names
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

    # -------------------------------------------------------------- attributes
    @property
    def attributes(self) -> Mapping[str, Attribute]:
        """The attributes by name, in order (read-only; see :meth:`set_attribute`)."""
        return MappingProxyType(self._attributes)

    def attribute(self, name: str, default: Any = None) -> Any:
        """Return the decoded value of attribute ``name``, or ``default`` if absent."""
        found = self._attributes.get(name)
        if found is None or found.is_reference:
            return default
        return found.value

    def set_attribute(self, attribute: Attribute) -> None:
        """Add or replace an attribute (graph values become this node's subgraphs).

        Raises:
            ValueError: A graph of the attribute already belongs to another node (or
                to another attribute of this one), to a model or to a function.
        """
        old = self._attributes.get(attribute.name)
        self._check_attachable(attribute, old)
        if old is not None:
            self._detach_subgraphs(old)
        self._forget_verbatim_attributes()
        self._attributes[attribute.name] = attribute
        self._attach_subgraphs(attribute)
        self._touch()

    def remove_attribute(self, name: str) -> None:
        """Remove attribute ``name`` if present."""
        old = self._attributes.pop(name, None)
        if old is not None:
            self._forget_verbatim_attributes()
            self._detach_subgraphs(old)
            self._touch()

    def subgraphs(self) -> Iterator[Graph]:
        """Yield the graphs held by this node's graph-typed attributes."""
        for attribute in self._attributes.values():
            yield from attribute.graphs

    @property
    def captured_names(self) -> tuple[str, ...]:
        """Names this node's subgraphs use from enclosing scopes."""
        return tuple(self._captures) if self._captures else ()

    # ----------------------------------------------------------------- helpers
    @property
    def is_function_call(self) -> bool:
        """Whether this node calls a model-local function of its model."""
        graph = self._graph
        model = graph.model if graph is not None else None
        return model is not None and (self.domain, self.op_type, self.overload) in model.functions

    def copy(self) -> Node:
        """Return a detached copy; subgraphs are copied too."""
        return clone_node(self)

    def _touch(self) -> None:
        if self._graph is not None:
            self._graph._touch()

    def _forget_verbatim_attributes(self) -> None:
        # A node loaded with duplicate attribute names keeps its attribute list verbatim
        # (in ``_extra``) until an attribute changes; then the mapping is written.
        if self._extra is not None and "attribute" in self._extra:
            self._extra = {k: v for k, v in self._extra.items() if k != "attribute"} or None

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
        op = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        return f"Node({op}, name={self.name!r}, inputs={list(self._inputs)}, " \
               f"outputs={list(self._outputs)})"
