"""Gradient builders: how one operator's backward pass is written in standard ONNX.

A :class:`GradientBuilder` covers one ``(domain, op_type)`` over a range of opset
versions. It declares which inputs are differentiable (every other input stops
gradients: shapes, indices, masks), the conditions under which it refuses a node
(:class:`Refusal`, written with the predicates of
:mod:`graphpass.training.rules._model`, so that ``lint-gradients`` says exactly what
the builder will do), and a function that emits the backward nodes::

    from graphpass.training import GradientBuilder, GradientContext

    def _tanh(ctx: GradientContext) -> list[str | None]:
        y, dy = ctx.output(0), ctx.output_gradient(0)
        one = ctx.emit.scalar(1.0, like=y)
        return [ctx.emit.op("Mul", dy, ctx.emit.op("Sub", one, ctx.emit.op("Mul", y, y)))]

    TANH = GradientBuilder("Tanh", _tanh, differentiable=frozenset({0}))

The function gets a :class:`GradientContext`: the forward node (inputs, outputs,
attributes, known types and shapes), the gradients of its outputs (``None`` for an
output no gradient reaches), the input positions whose gradient is wanted, and an
:class:`~graphpass.training.Emitter` that appends standard ONNX nodes. It returns one
gradient name (or ``None``) per input, or a mapping from input positions to names.

Plugins give builders through the ``graphpass_gradient_builders`` hook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphpass.errors import GraphpassError
from graphpass.training._constants import constant_value
from graphpass.training._value_types import TypeInfo
from graphpass.training.rules import NodeSite, Predicate, normalize_domain

if TYPE_CHECKING:
    from graphpass.ir import Node
    from graphpass.training._emit import Emitter

__all__ = [
    "BuildFunction",
    "BuilderResult",
    "GradientBuilder",
    "GradientContext",
    "GradientError",
    "Refusal",
]

BuilderResult = Sequence["str | None"] | Mapping[int, "str | None"]
"""What a build function returns: a gradient name (or ``None``) per input, in input
order, or a mapping from input positions to gradient names."""

BuildFunction = Callable[["GradientContext"], BuilderResult]
"""Emits the backward nodes of one forward node (see :class:`GradientContext`)."""


class GradientError(GraphpassError):
    """A gradient graph cannot be built (the message names the node and the reason).

    Attributes:
        node: The name (op type when unnamed) of the node it cannot differentiate.
    """

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None,
                 node: str | None = None):
        self.node = node
        super().__init__(message, where=where, hint=hint)


@dataclass(frozen=True)
class Refusal:
    """A condition under which a builder does not differentiate a node.

    Attributes:
        when: Conditions that must all hold (predicates of
            :mod:`graphpass.training.rules._model`).
        reason: Why, in one sentence.
        hint: What to do about it.
    """

    when: tuple[Predicate, ...]
    reason: str
    hint: str

    def matches(self, site: NodeSite) -> bool:
        """Whether every condition holds for ``site``."""
        return all(predicate.matches(site) for predicate in self.when)

    def describe(self) -> str:
        """The conditions in words."""
        return " and ".join(predicate.describe() for predicate in self.when) or "always"


@dataclass(frozen=True)
class GradientBuilder:
    """The backward pass of one operator, over a range of opset versions.

    Attributes:
        op_type: The operator.
        build: The function emitting the backward nodes (see :class:`GradientContext`).
        domain: The operator's domain (``""`` and ``"ai.onnx"`` are the ONNX domain).
        differentiable: The input positions gradients flow into; ``None`` means every
            input (variadic operators). Every other input is a stop-gradient input.
        since_version: The first opset version of ``domain`` the builder covers.
        until_version: The last one (``None``: every later version).
        refusals: Conditions under which the builder refuses a node.
        description: One line about the formula (shown in listings).
    """

    op_type: str
    build: BuildFunction
    domain: str = ""
    differentiable: frozenset[int] | None = None
    since_version: int = 1
    until_version: int | None = None
    refusals: tuple[Refusal, ...] = ()
    description: str = ""
    _key: tuple[str, str] = field(default=("", ""), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "domain", normalize_domain(self.domain))
        object.__setattr__(self, "_key", (self.domain, self.op_type))
        if self.until_version is not None and self.until_version < self.since_version:
            raise ValueError(f"gradient builder {self.op_type}: until_version "
                             f"{self.until_version} is before since_version "
                             f"{self.since_version}")

    @property
    def key(self) -> tuple[str, str]:
        """``(domain, op_type)`` with the domain normalized."""
        return self._key

    @property
    def name(self) -> str:
        """The registry name: ``[domain::]op_type``, with the opset range unless open.

        ``Softmax``, ``my.domain::Cube``, ``Gather@16+``, ``Split@13-17``.
        """
        base = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        if self.since_version <= 1 and self.until_version is None:
            return base
        if self.until_version is None:
            return f"{base}@{self.since_version}+"
        return f"{base}@{self.since_version}-{self.until_version}"

    def covers(self, opset: int) -> bool:
        """Whether the builder handles nodes of ``domain`` at this opset version."""
        return self.since_version <= opset and (self.until_version is None
                                                 or opset <= self.until_version)

    def is_differentiable(self, index: int) -> bool:
        """Whether input ``index`` receives a gradient."""
        return self.differentiable is None or index in self.differentiable

    def refusal_for(self, site: NodeSite) -> Refusal | None:
        """The first refusal whose conditions hold for ``site``, if any."""
        for refusal in self.refusals:
            if refusal.matches(site):
                return refusal
        return None


class GradientContext:
    """What a build function sees of one forward node.

    Attributes:
        node: The forward node (read it; do not change it).
        opset: The opset version of the node's domain.
        emit: Appends backward nodes (standard ONNX at the model's opset).
        output_gradients: The gradient of each output (``None``: no gradient reaches it).
        wanted: The input positions whose gradient is wanted.
    """

    def __init__(self, node: Node, opset: int, emit: Emitter,
                 output_gradients: Sequence[str | None], wanted: frozenset[int],
                 type_of: Callable[[str], TypeInfo],
                 require_output: Callable[[Node, int], str]):
        self.node = node
        self.opset = opset
        self.emit = emit
        self.output_gradients = tuple(output_gradients)
        self.wanted = wanted
        self._type_of = type_of
        self._require_output = require_output

    # ------------------------------------------------------------- the node
    def input(self, index: int) -> str:
        """The name of input ``index`` (``""`` when it is omitted or absent)."""
        inputs = self.node.inputs
        return inputs[index] if index < len(inputs) else ""

    def has_input(self, index: int) -> bool:
        """Whether input ``index`` is given."""
        return bool(self.input(index))

    def output(self, index: int) -> str:
        """The name of output ``index`` (``""`` when the node does not produce it)."""
        outputs = self.node.outputs
        return outputs[index] if index < len(outputs) else ""

    def require_output(self, index: int) -> str:
        """The name of output ``index``, adding it to the forward node if it is omitted.

        For values the forward pass computes anyway and the backward pass needs (a
        ``Dropout`` mask, ``MaxPool`` indices): keeping them costs memory, not time.
        """
        name = self.output(index)
        return name or self._require_output(self.node, index)

    def attribute(self, name: str, default: Any = None) -> Any:
        """The attribute's value (strings decoded, lists as lists), else ``default``."""
        value = self.node.attribute(name, default)
        return value

    def constant_value(self, name: str) -> Any:
        """The value of a constant input as a numpy array, else ``None``.

        Constants are initializers that are not graph inputs, and ``Constant`` outputs.
        """
        graph = self.node.graph
        return None if graph is None else constant_value(graph, name)

    # ------------------------------------------------------------ gradients
    def output_gradient(self, index: int) -> str | None:
        """The gradient reaching output ``index``, or ``None``."""
        grads = self.output_gradients
        return grads[index] if index < len(grads) else None

    def required_output_gradient(self, index: int = 0) -> str:
        """The gradient reaching output ``index``, which the builder cannot do without.

        A builder is called when a gradient reaches one of the node's outputs: for a
        one-output operator, output 0 always has one.

        Raises:
            GradientError: None reaches it (only a statistics output of a normalization,
                say, is used by the loss).
        """
        gradient = self.output_gradient(index)
        if gradient is None:
            raise self.error(f"no gradient reaches output {index}, which the builder needs",
                             f"compute the loss from output {index}")
        return gradient

    def needs(self, index: int) -> bool:
        """Whether the gradient of input ``index`` is wanted."""
        return index in self.wanted

    # ---------------------------------------------------------------- types
    def type_of(self, name: str) -> TypeInfo:
        """What is known of a value's element type and shape."""
        if not name:
            return TypeInfo(None)
        return self._type_of(name)

    def rank(self, name: str) -> int:
        """The rank of ``name``.

        Raises:
            GradientError: It is unknown (builders that need it declare a refusal).
        """
        rank = self.type_of(name).rank
        if rank is None:
            raise self.error(f"the rank of {name!r} is unknown",
                             "run infer-shapes first, or declare the input shapes")
        return rank

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The dimensions of ``name`` when all are known numbers, else ``None``."""
        return self.type_of(name).static_shape

    def error(self, reason: str, hint: str) -> GradientError:
        """A :class:`GradientError` naming this node (raise it)."""
        return GradientError(f"cannot differentiate node {node_label(self.node)!r} "
                             f"({op_label(self.node)}): {reason}", hint=hint,
                             node=node_label(self.node))


def op_label(node: Node) -> str:
    """``domain::op_type``, or ``op_type`` in the ONNX domain."""
    domain = normalize_domain(node.domain)
    return f"{domain}::{node.op_type}" if domain else node.op_type


def node_label(node: Node) -> str:
    """The node's name, its op type when it has none."""
    return node.name or node.op_type
