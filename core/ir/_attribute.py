"""Node attributes.

An :class:`Attribute` keeps the ``onnx.AttributeProto`` it came from (so that it
round-trips exactly) and decodes its value only when asked. Graph-valued
attributes (the bodies of ``If``, ``Loop``, ``Scan`` and any other graph-typed
attribute) hold nested :class:`~graphpass.Graph` objects instead, so that passes
can walk and change subgraphs like any other graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from graphpass.ir._graph import Graph

__all__ = ["Attribute", "AttributeType"]

AttributeType = onnx.AttributeProto.AttributeType
_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS


class Attribute:
    """A named attribute of a node or a function's attribute default.

    Attributes:
        name: The attribute name.
        type: The ``onnx.AttributeProto.AttributeType``.
        ref_attr_name: In a function body, the name of the function attribute this
            one refers to; empty for a concrete value.
        graphs: For graph-typed attributes, the nested graphs (one for ``GRAPH``).
    """

    __slots__ = ("_proto", "graphs", "name", "ref_attr_name", "type")

    def __init__(
        self,
        name: str,
        type: int,
        proto: onnx.AttributeProto,
        graphs: Sequence[Graph] | None = None,
        ref_attr_name: str = "",
    ):
        self.name = name
        self.type = int(type)
        self.ref_attr_name = ref_attr_name
        self._proto = proto
        self.graphs: list[Graph] = list(graphs or ())

    @classmethod
    def from_value(cls, name: str, value: Any, type: int | None = None) -> Attribute:
        """Make an attribute from a Python value (as ``onnx.helper.make_attribute`` does).

        Graph values (a :class:`~graphpass.Graph` or a list of them) become nested graphs.
        """
        if isinstance(value, Graph):
            proto = onnx.AttributeProto(name=name, type=_GRAPH)
            return cls(name, _GRAPH, proto, [value])
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, Graph) for v in value):
            proto = onnx.AttributeProto(name=name, type=_GRAPHS)
            return cls(name, _GRAPHS, proto, list(value))
        proto = onnx.helper.make_attribute(name, value, attr_type=type)
        return cls(name, proto.type, proto)

    @classmethod
    def reference(cls, name: str, ref_attr_name: str, type: int) -> Attribute:
        """Make an attribute that refers to an attribute of the enclosing function."""
        proto = onnx.AttributeProto(name=name, ref_attr_name=ref_attr_name)
        proto.type = type  # type: ignore[assignment]  # an AttributeType value
        return cls(name, type, proto, ref_attr_name=ref_attr_name)

    @property
    def is_reference(self) -> bool:
        """Whether this attribute refers to an attribute of the enclosing function."""
        return bool(self.ref_attr_name)

    @property
    def is_graph(self) -> bool:
        """Whether the value is one or more graphs."""
        return self.type in (_GRAPH, _GRAPHS) and not self.ref_attr_name

    @property
    def proto(self) -> onnx.AttributeProto:
        """The underlying proto, without graph values (those live in :attr:`graphs`)."""
        return self._proto

    @property
    def value(self) -> Any:
        """The decoded value: a number, string, list, ``TensorProto``, or ``Graph``(s)."""
        if self.ref_attr_name:
            raise ValueError(
                f"attribute {self.name!r} refers to function attribute {self.ref_attr_name!r} "
                "and has no value of its own"
            )
        if self.type == _GRAPH:
            return self.graphs[0]
        if self.type == _GRAPHS:
            return list(self.graphs)
        value = onnx.helper.get_attribute_value(self._proto)
        if isinstance(value, bytes) and self.type == onnx.AttributeProto.STRING:
            return value.decode("utf-8", errors="replace")
        return value

    def renamed(self, name: str) -> Attribute:
        """Return a copy under another name (graphs are shared, not copied)."""
        proto = onnx.AttributeProto()
        proto.CopyFrom(self._proto)
        proto.name = name
        return Attribute(name, self.type, proto, self.graphs, self.ref_attr_name)

    def __repr__(self) -> str:
        if self.ref_attr_name:
            return f"Attribute({self.name!r}, ref={self.ref_attr_name!r})"
        if self.is_graph:
            return f"Attribute({self.name!r}, {len(self.graphs)} graph(s))"
        return f"Attribute({self.name!r}, {self.value!r})"
