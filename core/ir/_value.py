"""Values: the named edges of an ONNX graph.

Every name that appears in a graph (a graph input, an initializer, a node output,
or a name the graph uses from an enclosing scope) has one :class:`Value` in that
graph. A value knows its producer, its uses, and its declared type (from the
graph's inputs, outputs or ``value_info``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import onnx

if TYPE_CHECKING:
    from typing import TypeAlias

    from graphpass.ir._graph import Graph
    from graphpass.ir._node import Node

    Uses: TypeAlias = (tuple[()] | list[tuple[Node | None, int]]
                       | dict[tuple[Node | None, int], None])

__all__ = ["CAPTURE", "Use", "Value"]

CAPTURE = -1
"""The input slot recorded for a node that uses a value inside one of its subgraphs."""


class Use(NamedTuple):
    """One use of a value.

    Attributes:
        node: The consuming node, or ``None`` when the value is a graph output.
        slot: The input index on ``node``; :data:`CAPTURE` when a subgraph of ``node``
            uses the value; the output index when ``node`` is ``None``.
    """

    node: Node | None
    slot: int


class Value:
    """A named value in one graph.

    Attributes:
        name: The value's name, unique in its graph.
        graph: The graph the value belongs to.
    """

    __slots__ = ("_alt_info", "_index", "_info", "_producer", "_uses", "graph", "name")

    def __init__(self, graph: Graph, name: str):
        self.graph = graph
        self.name = name
        self._producer: Node | None = None
        self._index = -1
        # Uses are plain ``(node, slot)`` tuples (equal to the ``Use`` they stand for,
        # and cheaper to make; :attr:`uses` hands out ``Use`` objects), each at most
        # once, in order: ``()`` before the first, a list while there are few (most
        # values have one or two), then the keys of an insertion-ordered dict (values
        # unused), so that dropping one use stays O(1) for a value used by thousands of
        # nodes. All three iterate, count and test the same; Graph._use and
        # Graph._unuse add and drop uses.
        self._uses: Uses = ()
        self._info: onnx.ValueInfoProto | None = None
        # A value declared differently in several entries of (inputs, outputs, value_info)
        # keeps the other declarations verbatim, keyed by (list, n-th entry of this value
        # in that list), so that the model round-trips exactly. Any change to the
        # declaration drops them: from then on every entry writes the one declaration.
        self._alt_info: dict[tuple[str, int], onnx.ValueInfoProto] | None = None

    # ------------------------------------------------------------------ topology
    @property
    def producer(self) -> Node | None:
        """The node that computes this value, or ``None``."""
        return self._producer

    @property
    def output_index(self) -> int:
        """The producer's output index for this value, or -1."""
        return self._index

    @property
    def uses(self) -> tuple[Use, ...]:
        """Every use: node inputs, subgraph captures, and graph outputs."""
        return tuple(map(Use._make, self._uses))

    def consumers(self) -> list[Node]:
        """The distinct nodes that use this value (directly or inside a subgraph)."""
        seen: dict[int, Node] = {}
        for node, _ in self._uses:
            if node is not None:
                seen.setdefault(id(node), node)
        return list(seen.values())

    @property
    def is_graph_input(self) -> bool:
        """Whether this value is one of the graph's inputs."""
        graph = self.graph  # by name (O(1)): a graph has one value of each name
        return self.name in graph._input_names and graph._values.get(self.name) is self

    @property
    def is_graph_output(self) -> bool:
        """Whether this value is one of the graph's outputs."""
        return any(node is None for node, _ in self._uses)

    @property
    def is_initializer(self) -> bool:
        """Whether the graph has an initializer of this name."""
        return self.name in self.graph._initializers

    @property
    def is_defined(self) -> bool:
        """Whether this graph defines the value (input, initializer or node output)."""
        return self.graph._is_defined(self.name)

    # -------------------------------------------------------------- declaration
    @property
    def type(self) -> onnx.TypeProto | None:
        """The declared type, or ``None`` when nothing declares it (do not modify)."""
        if self._info is not None and self._info.HasField("type"):
            return self._info.type
        return None

    @type.setter
    def type(self, type_proto: onnx.TypeProto | None) -> None:
        info = self._own_info()
        if type_proto is None:
            info.ClearField("type")
        else:
            info.type.CopyFrom(type_proto)
        self.graph._touch()

    @property
    def elem_type(self) -> int | None:
        """The element type of a tensor value, or ``None`` when it is not declared."""
        type_proto = self.type
        if type_proto is None or type_proto.WhichOneof("value") != "tensor_type":
            return None
        if not type_proto.tensor_type.HasField("elem_type"):
            return None
        return int(type_proto.tensor_type.elem_type)

    @property
    def shape(self) -> tuple[int | str | None, ...] | None:
        """The declared tensor shape (ints, symbolic names, ``None`` for unknown)."""
        type_proto = self.type
        if type_proto is None or type_proto.WhichOneof("value") != "tensor_type":
            return None
        tensor_type = type_proto.tensor_type
        if not tensor_type.HasField("shape"):
            return None
        dims: list[int | str | None] = []
        for dim in tensor_type.shape.dim:
            which = dim.WhichOneof("value")
            dims.append(dim.dim_value if which == "dim_value"
                        else dim.dim_param if which == "dim_param" else None)
        return tuple(dims)

    @property
    def doc_string(self) -> str:
        """The declaration's doc string."""
        return self._info.doc_string if self._info is not None else ""

    @doc_string.setter
    def doc_string(self, text: str) -> None:
        self._own_info().doc_string = text
        self.graph._touch()

    @property
    def metadata(self) -> dict[str, str]:
        """A copy of the declaration's ``metadata_props`` (use :meth:`set_metadata` to change)."""
        if self._info is None:
            return {}
        return {entry.key: entry.value for entry in self._info.metadata_props}

    def set_metadata(self, key: str, value: str | None) -> None:
        """Set (or with ``None`` remove) one ``metadata_props`` entry of the declaration."""
        info = self._own_info()
        kept = [(e.key, e.value) for e in info.metadata_props if e.key != key]
        if value is not None:
            kept.append((key, value))
        del info.metadata_props[:]
        for k, v in kept:
            info.metadata_props.add(key=k, value=v)
        self.graph._touch()

    @property
    def is_declared(self) -> bool:
        """Whether an input, output or ``value_info`` entry declares this value."""
        return self._info is not None

    def declaration(self) -> onnx.ValueInfoProto:
        """Return the declaration as a fresh ``ValueInfoProto`` named like the value."""
        proto = onnx.ValueInfoProto()
        if self._info is not None:
            proto.CopyFrom(self._info)
        proto.name = self.name
        return proto

    def declare(self, info: onnx.ValueInfoProto | onnx.TypeProto | None) -> None:
        """Replace the declaration (type, doc string, metadata) with a copy of ``info``."""
        proto = onnx.ValueInfoProto(name=self.name)
        if isinstance(info, onnx.ValueInfoProto):
            proto.CopyFrom(info)
            proto.name = self.name
        elif isinstance(info, onnx.TypeProto):
            proto.type.CopyFrom(info)
        self._info = proto
        self._alt_info = None
        self.graph._touch()

    def _own_info(self) -> onnx.ValueInfoProto:
        # Declarations loaded from a file are shared with the source proto; copy first.
        fresh = onnx.ValueInfoProto()
        if self._info is not None:
            fresh.CopyFrom(self._info)
        fresh.name = self.name
        self._info = fresh
        self._alt_info = None
        return fresh

    def _info_proto(self, kind: str, occurrence: int = 0) -> onnx.ValueInfoProto:
        """The declaration to write as this value's ``occurrence``-th entry in ``kind``.

        ``kind`` is ``input``, ``output`` or ``value_info``.
        """
        info = self._info
        if self._alt_info is not None:
            info = self._alt_info.get((kind, occurrence), info)
        if info is None:
            return onnx.ValueInfoProto(name=self.name)
        if info.name != self.name:
            renamed = onnx.ValueInfoProto()
            renamed.CopyFrom(info)
            renamed.name = self.name
            return renamed
        return info

    def __repr__(self) -> str:
        producer = self._producer.op_type if self._producer is not None else None
        return f"Value({self.name!r}, producer={producer!r}, uses={len(self._uses)})"
