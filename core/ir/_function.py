"""Model-local functions.

A :class:`Function` is an ONNX ``FunctionProto``: a body :class:`~graphpass.Graph`
whose inputs and outputs are untyped names, the attributes it takes (with or
without declared defaults), and its own opset imports. A model keys its functions
by :data:`FunctionId` ``(domain, name, overload)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from graphpass.ir._attribute import Attribute
from graphpass.ir._clone import clone_function
from graphpass.ir._graph import Graph

if TYPE_CHECKING:
    from graphpass.ir._model import Model

__all__ = ["Function", "FunctionId", "format_function_id"]

FunctionId = tuple[str, str, str]
"""A function's key in a model: ``(domain, name, overload)``."""


def format_function_id(function_id: FunctionId) -> str:
    """Format a function key as ``domain::name`` or ``domain::name:overload``."""
    domain, name, overload = function_id
    text = f"{domain}::{name}"
    return f"{text}:{overload}" if overload else text


class Function:
    """A model-local function.

    Attributes:
        domain: The function's domain (calls use it as the node domain).
        name: The function's name (calls use it as the node op_type).
        overload: The overload (ONNX IR v10), usually ``""``.
        graph: The body. Its inputs and outputs are the function's formal parameters.
        attribute_names: Attributes the function takes without a default.
        attribute_defaults: Attributes the function takes with a declared default.
        opset_imports: The opsets the body uses, by domain.
        doc_string: The doc string.
    """

    def __init__(
        self,
        domain: str,
        name: str,
        graph: Graph,
        *,
        overload: str = "",
        attribute_names: Iterable[str] = (),
        attribute_defaults: Iterable[Attribute] = (),
        opset_imports: Mapping[str, int] | None = None,
        doc_string: str = "",
        metadata: Mapping[str, str] | None = None,
    ):
        self.domain = domain
        self.name = name
        self.overload = overload
        self.graph = graph
        graph._function = self
        self.attribute_names: list[str] = list(attribute_names)
        self.attribute_defaults: dict[str, Attribute] = {a.name: a for a in attribute_defaults}
        self.opset_imports: dict[str, int] = dict(opset_imports or {})
        self.doc_string = doc_string
        self.metadata: dict[str, str] = dict(metadata or {})
        self._model: Model | None = None
        self._extra: dict[str, Any] | None = None
        self._present_empty: frozenset[str] = frozenset()
        self._opset_protos: Any = None
        self._metadata_proto: Any = None

    @property
    def id(self) -> FunctionId:
        """The key ``(domain, name, overload)``."""
        return (self.domain, self.name, self.overload)

    @property
    def qualified_name(self) -> str:
        """``domain::name`` or ``domain::name:overload``, as used in messages and options."""
        return format_function_id(self.id)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The formal input names."""
        return self.graph.input_names

    @property
    def outputs(self) -> tuple[str, ...]:
        """The formal output names."""
        return self.graph.output_names

    @property
    def all_attribute_names(self) -> list[str]:
        """Every attribute the function takes, with or without a default."""
        return [*self.attribute_names, *self.attribute_defaults]

    @property
    def model(self) -> Model | None:
        """The model that holds this function, if any."""
        return self._model

    def copy(self) -> Function:
        """Return a deep copy, detached from any model."""
        return clone_function(self)

    def __repr__(self) -> str:
        return f"Function({self.qualified_name}, {len(self.graph)} nodes)"
