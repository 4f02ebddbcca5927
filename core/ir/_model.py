"""Models: the main graph, model-local functions, opset imports and metadata."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import onnx

from graphpass.errors import InvalidModelError
from graphpass.ir._clone import clone_model
from graphpass.ir._function import Function, FunctionId, format_function_id
from graphpass.ir._graph import Graph
from graphpass.ir._node import Node
from graphpass.ir._serde import UNKNOWN_FIELDS, model_from_proto, model_to_proto

__all__ = ["UNKNOWN_FIELDS", "Model"]


class Model:
    """An ONNX model.

    Attributes:
        graph: The main graph.
        ir_version: The ONNX IR version.
        opset_imports: Operator set versions by domain (``""`` is ONNX).
        producer_name: The tool that wrote the model.
        producer_version: Its version.
        domain: The model's domain.
        model_version: The model's own version number.
        doc_string: The doc string.
        metadata: ``metadata_props`` by key.
        source_path: The file the model was loaded from, if any.
        base_dir: The folder external data locations are relative to.
    """

    def __init__(
        self,
        graph: Graph,
        *,
        ir_version: int = 10,
        opset_imports: Mapping[str, int] | None = None,
        functions: Iterator[Function] | list[Function] = (),  # type: ignore[assignment]
        producer_name: str = "",
        producer_version: str = "",
        domain: str = "",
        model_version: int = 0,
        doc_string: str = "",
        metadata: Mapping[str, str] | None = None,
    ):
        self.graph = graph
        graph._model = self
        self.ir_version = ir_version
        self.opset_imports: dict[str, int] = dict(opset_imports if opset_imports is not None
                                                   else {"": 21})
        self.producer_name = producer_name
        self.producer_version = producer_version
        self.domain = domain
        self.model_version = model_version
        self.doc_string = doc_string
        self.metadata: dict[str, str] = dict(metadata or {})
        self._version = 0
        self._functions: dict[FunctionId, Function] = {}
        for function in functions:
            self.add_function(function)
        self.source_path: Path | None = None
        self.base_dir: Path | None = None
        self._extra: dict[str, Any] | None = None
        self._present_empty: frozenset[str] = frozenset()
        self._opset_protos: Any = None
        self._metadata_proto: Any = None

    # =============================================================== functions
    @property
    def functions(self) -> Mapping[FunctionId, Function]:
        """Model-local functions by ``(domain, name, overload)`` (read-only mapping)."""
        return MappingProxyType(self._functions)

    def add_function(self, function: Function) -> None:
        """Add a function.

        Raises:
            InvalidModelError: A function with the same key exists.
        """
        if function.id in self._functions:
            raise InvalidModelError(
                f"function {function.qualified_name} is defined twice",
                hint="each (domain, name, overload) may be defined once per model",
            )
        self._functions[function.id] = function
        function._model = self
        self._version += 1

    def remove_function(self, function_id: FunctionId) -> Function:
        """Remove and return a function."""
        function = self._functions.pop(function_id)
        function._model = None
        self._version += 1
        return function

    def function_for(self, node: Node) -> Function | None:
        """Return the model-local function a node calls, or ``None`` for an operator."""
        return self._functions.get((node.domain, node.op_type, node.overload))

    @property
    def extra_fields(self) -> Mapping[str, Any]:
        """``ModelProto`` fields the IR does not model (``training_info`` ...), read-only.

        They are written back unchanged by :meth:`to_proto`.
        """
        return MappingProxyType({k: v for k, v in (self._extra or {}).items()
                                 if k != UNKNOWN_FIELDS})

    # ================================================================= walking
    def graphs(self) -> Iterator[Graph]:
        """Yield the main graph, every function body, and all their subgraphs."""
        for root in (self.graph, *(f.graph for f in self._functions.values())):
            yield root
            yield from root.subgraphs()

    def walk(self) -> Iterator[Node]:
        """Yield every node: main graph, subgraphs, function bodies."""
        yield from self.graph.walk()
        for function in self._functions.values():
            yield from function.graph.walk()

    @property
    def version(self) -> int:
        """A counter that grows whenever the IR is changed through its methods."""
        return self._version + self.graph._version + sum(
            f.graph._version for f in self._functions.values())

    def fingerprint(self) -> int:
        """A cheap hash of the model's state, to detect unexpected changes.

        Every change made through the IR's methods, and every field set on a node or
        a graph (names, doc strings, op types ...), moves :attr:`version`, which the
        fingerprint includes; it also covers the plain fields of the model and its
        functions that a pass can set directly: opset imports, metadata, names, doc
        strings, attribute lists. It costs time in the number of functions, not of
        nodes. (In-place edits of the protobuf messages inside attributes or
        declarations are not seen.)
        """
        parts: list[Any] = [self.version, id(self.graph), self.ir_version,
                            tuple(sorted(self.opset_imports.items())), tuple(self._functions),
                            self.producer_name, self.producer_version, self.domain,
                            self.model_version, self.doc_string, tuple(self.metadata.items())]
        for function in self._functions.values():
            parts.append((function.domain, function.name, function.overload,
                          function.doc_string, tuple(function.attribute_names),
                          tuple((k, id(a)) for k, a in function.attribute_defaults.items()),
                          tuple(sorted(function.opset_imports.items())),
                          tuple(function.metadata.items()), id(function.graph)))
        return hash(tuple(parts))

    # ============================================================= conversion
    @classmethod
    def from_proto(cls, proto: onnx.ModelProto, base_dir: str | Path | None = None) -> Model:
        """Build a model from an ``onnx.ModelProto`` (referenced, not copied: don't change it).

        Args:
            proto: The model.
            base_dir: The folder external data is relative to.

        Raises:
            InvalidModelError: The proto cannot be represented (a name defined twice ...).
        """
        return model_from_proto(cls, proto, base_dir)

    def to_proto(self) -> onnx.ModelProto:
        """Return the model as an ``onnx.ModelProto``.

        External data stays external (the protos keep their references); in-memory
        tensors are embedded.
        """
        return model_to_proto(self)

    def copy(self) -> Model:
        """Return a deep copy. Tensors are shared: they are immutable."""
        return clone_model(self)

    def function_label(self, function_id: FunctionId) -> str:
        """Format a function key for messages."""
        return format_function_id(function_id)

    def __repr__(self) -> str:
        return (f"Model(ir_version={self.ir_version}, opsets={self.opset_imports}, "
                f"{len(self.graph)} nodes, {len(self._functions)} functions)")
