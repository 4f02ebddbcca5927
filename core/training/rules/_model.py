"""Gradient rules: what a trainer can differentiate, written down as data.

A :class:`GradientRules` object describes one trainer at one release: which
``(domain, op_type)`` pairs have gradient builders, how the trainer looks a builder
up, which inputs it treats as non-differentiable (:class:`StopEdges`), and the
known conditions under which a registered builder still fails (:class:`OpFailure`)
or a weight or loss is refused (:class:`TrainerFailure`). The ``lint-gradients``
pass reads it; nothing in it runs the trainer.

graphpass ships the rules of onnxruntime-training. A plugin gives another trainer's
rules through the ``graphpass_gradient_rules`` hook, built in Python or read from a
TOML file with :meth:`GradientRules.from_toml`::

    from graphpass.training.rules._model import GradientRules
    from graphpass.plugins import hookimpl

    @hookimpl
    def graphpass_gradient_rules():
        return [GradientRules.from_toml(Path(__file__).with_name("mytrainer.toml"))]

Conditions are declarative where they can be (:class:`AttributeIn`,
:class:`AttributeNotIn`, :class:`AttributeMissing`, :class:`InputsFewerThan`,
:class:`InputPresent`, :class:`OutputsFewerThan`, :class:`InputNeedsGradient`,
:class:`InputTypeIn`, :class:`InputTypeNotIn`, :class:`InputRankIn`);
:class:`Check` wraps a small function for the rest.

:func:`select_weights` picks the weights to train from ``trainable`` and ``frozen``
options (names or ``fnmatch`` patterns), as ``lint-gradients`` and the training
artifacts plugin both do.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import onnx

from graphpass.checkpoint import ReconcileResult
from graphpass.errors import PluginError
from graphpass.findings import Finding, Severity
from graphpass.ir import Graph, Node, dtype_name
from graphpass.torch import TRAINABLE_TYPES, StateKind, default_trainable, signature_parameters

Shape = tuple["int | str | None", ...]
"""A tensor shape: numbers, symbolic names, or ``None`` for unknown dimensions."""

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "DIFFERENTIABLE_TYPES",
    "AttributeIn",
    "AttributeMissing",
    "AttributeNotIn",
    "Check",
    "GradientRules",
    "InputNeedsGradient",
    "InputPresent",
    "InputRankIn",
    "InputTypeIn",
    "InputTypeNotIn",
    "InputsFewerThan",
    "InputsWithoutGradient",
    "Lookup",
    "NodeSite",
    "OpFailure",
    "OutputsFewerThan",
    "Predicate",
    "SelectionReport",
    "StopEdges",
    "TrainableWeights",
    "TrainerFailure",
    "TrainerFailureKind",
    "WeightSelection",
    "normalize_domain",
    "select_weights",
    "trainable_weights",
    "weight_matches",
]

DIFFERENTIABLE_TYPES: frozenset[int] = TRAINABLE_TYPES
"""The element types gradients flow through (float, float16, double, bfloat16): the
types :func:`graphpass.torch._export_record.default_trainable` takes weights of."""

_NOTHING: frozenset[int] = frozenset()

Lookup = Literal["op_type", "domain"]
"""How a trainer finds a node's gradient builder: by ``op_type`` alone (ONNX Runtime),
or by ``domain`` and ``op_type`` together."""

TrainerFailureKind = Literal["unreachable", "no-gradient", "duplicate", "captured", "loss-type"]
"""The weight- and loss-level problems :class:`TrainerFailure` describes:

* ``unreachable``: a trainable weight reaches no loss through differentiable edges.
* ``no-gradient``: it reaches the loss only through non-differentiable inputs
  (stop edges) of nodes on the path, so no builder produces its gradient.
* ``duplicate``: one node reads it at two differentiable inputs.
* ``captured``: a subgraph (``If``/``Loop``/``Scan`` body) reads it from outside.
* ``loss-type``: the loss has an element type the trainer does not seed.
"""


def normalize_domain(domain: str) -> str:
    """Return ``""`` for the default ONNX domain (``""`` or ``"ai.onnx"``), else ``domain``."""
    return "" if domain in ("", "ai.onnx") else domain


def _split_qualified(text: str) -> tuple[str, str]:
    """Split ``"com.microsoft::Gelu"``; a name without ``::`` is in the ONNX domain."""
    domain, _, op_type = text.rpartition("::")
    return normalize_domain(domain), op_type


# ============================================================================ sites
@dataclass(frozen=True)
class NodeSite:
    """What a condition sees of a node on the differentiable path.

    Attributes:
        node: The node.
        inputs_needing_gradient: Input positions whose gradient the trainer asks
            this node's builder for.
        outputs_needing_gradient: Output positions whose gradient flows back into it.
        trainable: The trainable weights (names) of the model.
        input_types: The element type of each input (``None``: absent or unknown;
            ``0``: not a tensor).
        input_ranks: The rank of each input (``None``: absent or unknown).
        input_shapes: The shape of each input (``None``: absent or unknown; dimensions
            are numbers, symbolic names or ``None``).
        output_shapes: The shape of each output, likewise.
        loss_added: Whether the trainer adds a loss block after the model's outputs
            (``generate_artifacts`` with a loss), so that they stop being graph outputs.
    """

    node: Node
    inputs_needing_gradient: frozenset[int] = frozenset()
    outputs_needing_gradient: frozenset[int] = frozenset()
    trainable: frozenset[str] = frozenset()
    input_types: tuple[int | None, ...] = ()
    input_ranks: tuple[int | None, ...] = ()
    input_shapes: tuple[Shape | None, ...] = ()
    output_shapes: tuple[Shape | None, ...] = ()
    loss_added: bool = False

    def input_type(self, index: int) -> int | None:
        """The element type of input ``index`` (``None``: absent or unknown)."""
        return self.input_types[index] if index < len(self.input_types) else None

    def input_rank(self, index: int) -> int | None:
        """The rank of input ``index`` (``None``: absent or unknown)."""
        return self.input_ranks[index] if index < len(self.input_ranks) else None

    def input_shape(self, index: int) -> Shape | None:
        """The shape of input ``index`` (``None``: absent or unknown)."""
        return self.input_shapes[index] if index < len(self.input_shapes) else None

    def output_shape(self, index: int) -> Shape | None:
        """The shape of output ``index`` (``None``: absent or unknown)."""
        return self.output_shapes[index] if index < len(self.output_shapes) else None


def _attribute_value(node: Node, name: str, default: Any) -> Any:
    """The attribute's value, ``default`` when it is absent.

    ``None`` when unknown: absent without a default, or referring to a function attribute.
    """
    attribute = node.attributes.get(name)
    if attribute is None:
        return default
    if attribute.is_reference:
        return None
    value = attribute.value
    if isinstance(value, list):
        value = tuple(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return value


def _normalized(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in values)


# ======================================================================= predicates
@dataclass(frozen=True)
class AttributeIn:
    """Holds when attribute ``name`` is one of ``values``.

    Attributes:
        name: The attribute.
        values: The values that make the condition hold.
        default: The value the operator assumes when the attribute is absent
            (``None``: an absent attribute never matches).
    """

    name: str
    values: tuple[Any, ...]
    default: Any = None

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        value = _attribute_value(site.node, self.name, self.default)
        return value is not None and value in _normalized(self.values)

    def describe(self) -> str:
        """The condition in words."""
        shown = ", ".join(repr(v) for v in self.values)
        return f"attribute {self.name} is {shown}" if len(self.values) == 1 else \
            f"attribute {self.name} is one of {shown}"


@dataclass(frozen=True)
class AttributeNotIn:
    """Holds when attribute ``name`` is none of ``values`` (see :class:`AttributeIn`)."""

    name: str
    values: tuple[Any, ...]
    default: Any = None

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        value = _attribute_value(site.node, self.name, self.default)
        return value is not None and value not in _normalized(self.values)

    def describe(self) -> str:
        """The condition in words."""
        return f"attribute {self.name} is not " + " or ".join(repr(v) for v in self.values)


@dataclass(frozen=True)
class AttributeMissing:
    """Holds when the node has no attribute ``name``."""

    name: str

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        return self.name not in site.node.attributes

    def describe(self) -> str:
        """The condition in words."""
        return f"attribute {self.name} is not given"


@dataclass(frozen=True)
class InputsFewerThan:
    """Holds when the node lists fewer than ``count`` inputs (omitted ``''`` slots count)."""

    count: int

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        return len(site.node.inputs) < self.count

    def describe(self) -> str:
        """The condition in words."""
        return f"fewer than {self.count} inputs are listed"


@dataclass(frozen=True)
class InputPresent:
    """Holds when the node has a (non-omitted) input at position ``index``."""

    index: int

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        inputs = site.node.inputs
        return self.index < len(inputs) and bool(inputs[self.index])

    def describe(self) -> str:
        """The condition in words."""
        return f"input {self.index} is given"


@dataclass(frozen=True)
class OutputsFewerThan:
    """Holds when the node produces fewer than ``count`` outputs (omitted ones don't count)."""

    count: int

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        return sum(1 for name in site.node.outputs if name) < self.count

    def describe(self) -> str:
        """The condition in words."""
        return f"fewer than {self.count} outputs are produced"


@dataclass(frozen=True)
class InputNeedsGradient:
    """Holds when the trainer asks for the gradient of input ``index``."""

    index: int

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        return self.index in site.inputs_needing_gradient

    def describe(self) -> str:
        """The condition in words."""
        return f"input {self.index} needs a gradient"


def _type_names(types: Iterable[int]) -> str:
    return ", ".join(onnx.TensorProto.DataType.Name(t) if t in onnx.TensorProto.DataType.values()
                     else str(t) for t in types)


@dataclass(frozen=True)
class InputTypeIn:
    """Holds when input ``index`` has one of the element types ``types``."""

    index: int
    types: frozenset[int]

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        return site.input_type(self.index) in self.types

    def describe(self) -> str:
        """The condition in words."""
        return f"input {self.index} is {_type_names(sorted(self.types))}"


@dataclass(frozen=True)
class InputTypeNotIn:
    """Holds when input ``index`` has a known element type outside ``types``."""

    index: int
    types: frozenset[int]

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        elem_type = site.input_type(self.index)
        return elem_type is not None and elem_type not in self.types

    def describe(self) -> str:
        """The condition in words."""
        return f"input {self.index} is not {_type_names(sorted(self.types))}"


@dataclass(frozen=True)
class InputRankIn:
    """Holds when input ``index`` has a known rank among ``ranks``."""

    index: int
    ranks: frozenset[int]

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        return site.input_rank(self.index) in self.ranks

    def describe(self) -> str:
        """The condition in words."""
        shown = " or ".join(str(r) for r in sorted(self.ranks))
        return f"input {self.index} has rank {shown}"


@dataclass(frozen=True)
class Check:
    """A condition written as a function, for what the declarative ones cannot say.

    Attributes:
        name: A short name (used in TOML files: ``{ check = "name" }``).
        description: The condition in words.
        function: Returns whether the condition holds for a :class:`NodeSite`.
    """

    name: str
    description: str
    function: Callable[[NodeSite], bool]

    def matches(self, site: NodeSite) -> bool:
        """Whether the condition holds for ``site``."""
        return bool(self.function(site))

    def describe(self) -> str:
        """The condition in words."""
        return self.description


Predicate = (AttributeIn | AttributeNotIn | AttributeMissing | InputsFewerThan | InputPresent
             | OutputsFewerThan | InputNeedsGradient | InputTypeIn | InputTypeNotIn
             | InputRankIn | Check)
"""A condition on a node (all conditions of a rule must hold)."""


# ========================================================================== entries
@dataclass(frozen=True)
class StopEdges:
    """Inputs of an operator that a trainer treats as non-differentiable.

    Paths through them need no gradient (indices, shapes, masks ...).

    Attributes:
        op_type: The operator.
        inputs: The input positions; ``None`` means every input.
        when: Conditions under which these inputs stop gradients (all must hold).
        note: Why, in a few words.
    """

    op_type: str
    inputs: frozenset[int] | None
    when: tuple[Predicate, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class InputsWithoutGradient:
    """Inputs a trainer traverses but whose gradient the operator's builder never produces.

    A trainable weight that reaches the loss only through such inputs gets no
    gradient (see ``no-gradient`` in :data:`TrainerFailureKind`).

    Attributes:
        op_type: The operator.
        inputs: The input positions.
        note: Why, in a few words.
    """

    op_type: str
    inputs: frozenset[int]
    note: str = ""


@dataclass(frozen=True)
class OpFailure:
    """A known condition under which a registered gradient builder still fails.

    Attributes:
        op_type: The operator (the node's own, or the one the trainer rewrites it to).
        when: Conditions that must all hold.
        reason: What goes wrong, in one sentence.
        hint: What to do about it.
        trainer_message: A regular expression matching the trainer's own error
            message, so that people (and the agreement checks) recognise it.
        domain: Restrict to this domain (``None``: any domain the trainer would use
            this operator's builder for).
        scope: ``path``: the failure happens when the node is on the gradient path;
            ``graph``: anywhere in the model (the trainer's graph optimizer fails on
            it before any gradient is built). Conditions of a ``graph`` failure cannot
            use gradient information.
        effect: ``fails``: the trainer refuses (building the gradient, or running it);
            ``wrong-gradient``: it builds and runs a gradient that is wrong.
    """

    op_type: str
    when: tuple[Predicate, ...]
    reason: str
    hint: str
    trainer_message: str | None = None
    domain: str | None = None
    scope: Literal["path", "graph"] = "path"
    effect: Literal["fails", "wrong-gradient"] = "fails"

    def matches(self, site: NodeSite) -> bool:
        """Whether every condition holds for ``site``."""
        return all(predicate.matches(site) for predicate in self.when)

    def describe(self) -> str:
        """The conditions in words."""
        return " and ".join(predicate.describe() for predicate in self.when) or "always"


@dataclass(frozen=True)
class TrainerFailure:
    """How a trainer reacts to a weight- or loss-level problem (see :data:`TrainerFailureKind`).

    Attributes:
        kind: The problem.
        reason: What the trainer does, in one sentence.
        hint: What to do about it.
        trainer_message: A regular expression matching the trainer's error message.
    """

    kind: TrainerFailureKind
    reason: str
    hint: str
    trainer_message: str | None = None


# ============================================================================ rules
@dataclass(frozen=True)
class GradientRules:
    """What one trainer, at one release, can differentiate.

    Attributes:
        name: The rule set's name, as users pick it (``onnxruntime-training``).
        trainer: The trainer's name.
        version: The trainer release these rules describe.
        builders: The ``(domain, op_type)`` pairs with a gradient builder (``""`` is
            the default ONNX domain; ``ai.onnx`` is accepted and normalized).
        lookup: How the trainer finds a builder (see :data:`Lookup`).
        stop_edges: Non-differentiable inputs, per operator.
        inputs_without_gradient: Inputs the trainer traverses but gives no gradient.
        op_failures: Known conditions under which a registered builder fails.
        trainer_failures: How the trainer treats weight- and loss-level problems;
            problems it does not list are reported as warnings.
        rewrites: Operators the trainer replaces before differentiating, mapped to
            what it replaces them with (both ``(domain, op_type)``).
        deferred_ops: Operators whose gradients the trainer builds after all others;
            it decides which failure the trainer reports first.
        differentiable_types: Element types gradients flow through.
        loss_types: Element types the trainer accepts for the loss (``None``: any
            differentiable type).
        resolves_constant_ifs: Whether the trainer replaces an ``If`` whose condition
            folds to a constant by the branch it takes before differentiating.
        default: Whether this is the rule set used when none is named.
        description: One line about the rules.
        source: Where the facts come from.
    """

    name: str
    trainer: str
    version: str
    builders: frozenset[tuple[str, str]]
    lookup: Lookup = "op_type"
    stop_edges: tuple[StopEdges, ...] = ()
    inputs_without_gradient: tuple[InputsWithoutGradient, ...] = ()
    op_failures: tuple[OpFailure, ...] = ()
    trainer_failures: tuple[TrainerFailure, ...] = ()
    rewrites: Mapping[tuple[str, str], tuple[str, str]] = field(
        default_factory=lambda: MappingProxyType({}))
    deferred_ops: frozenset[str] = frozenset()
    differentiable_types: frozenset[int] = DIFFERENTIABLE_TYPES
    loss_types: frozenset[int] | None = None
    resolves_constant_ifs: bool = False
    default: bool = False
    description: str = ""
    source: str = ""
    _by_op_type: Mapping[str, tuple[str, str]] = field(
        default_factory=lambda: MappingProxyType({}), init=False, repr=False, compare=False)
    _stops: Mapping[str, tuple[StopEdges, ...]] = field(
        default_factory=lambda: MappingProxyType({}), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.lookup not in ("op_type", "domain"):
            raise PluginError(f"gradient rules {self.name!r}: lookup must be 'op_type' or "
                              f"'domain', not {self.lookup!r}")
        builders = frozenset((normalize_domain(d), op) for d, op in self.builders)
        object.__setattr__(self, "builders", builders)
        rewrites = {(normalize_domain(d), op): (normalize_domain(d2), op2)
                    for (d, op), (d2, op2) in dict(self.rewrites).items()}
        object.__setattr__(self, "rewrites", MappingProxyType(rewrites))
        by_op_type: dict[str, tuple[str, str]] = {}
        for domain, op_type in sorted(builders):
            by_op_type.setdefault(op_type, (domain, op_type))
        object.__setattr__(self, "_by_op_type", MappingProxyType(by_op_type))
        stops: dict[str, list[StopEdges]] = {}
        for entry in self.stop_edges:
            stops.setdefault(entry.op_type, []).append(entry)
        object.__setattr__(self, "_stops", MappingProxyType(
            {op: tuple(entries) for op, entries in stops.items()}))
        # Answers that depend only on (domain, op_type), asked for every node of a model.
        object.__setattr__(self, "_memo", {})

    def _memoized(self, key: tuple[Any, ...], compute: Callable[..., Any], *args: Any) -> Any:
        """``compute(*args)``, once per ``key`` (no closure made per question: hot)."""
        memo: dict[tuple[Any, ...], Any] = self._memo  # type: ignore[attr-defined]
        try:
            return memo[key]
        except KeyError:
            value = memo[key] = compute(*args)
            return value

    # --------------------------------------------------------------- lookups
    @property
    def label(self) -> str:
        """``trainer version`` for messages (``onnxruntime-training 1.19.2``)."""
        return f"{self.trainer} {self.version}".strip()

    def trainer_view(self, domain: str, op_type: str) -> tuple[str, str]:
        """The ``(domain, op_type)`` the trainer differentiates for a node (after rewrites)."""
        memo: dict[tuple[Any, ...], Any] = self._memo  # type: ignore[attr-defined]
        found: tuple[str, str] | None = memo.get(("view", domain, op_type))
        if found is None:
            key = (normalize_domain(domain), op_type)
            found = memo[("view", domain, op_type)] = self.rewrites.get(key, key)
        return found

    def builder_for(self, domain: str, op_type: str) -> tuple[str, str] | None:
        """The registered ``(domain, op_type)`` whose builder the trainer uses, or ``None``.

        With ``lookup="op_type"`` a node of another domain gets the builder of the
        registered operator of the same name (the trainer ignores the domain).
        """
        found: tuple[str, str] | None = self._memoized(
            ("builder", domain, op_type), self._builder_for, domain, op_type)
        return found

    def _builder_for(self, domain: str, op_type: str) -> tuple[str, str] | None:
        key = self.trainer_view(domain, op_type)
        if key in self.builders:
            return key
        if self.lookup == "op_type":
            return self._by_op_type.get(key[1])
        return None

    def stop_inputs(self, site: NodeSite) -> frozenset[int]:
        """The input positions of a node that stop gradients."""
        node = site.node
        _, op_type = self.trainer_view(node.domain, node.op_type)
        entries = self._stops.get(op_type, ())
        if not entries:
            return _NOTHING
        stopped: set[int] = set()
        for entry in entries:
            if all(predicate.matches(site) for predicate in entry.when):
                if entry.inputs is None:
                    return frozenset(range(len(node.inputs)))
                stopped.update(entry.inputs)
        return frozenset(stopped)

    def has_stop_edges(self, domain: str, op_type: str) -> bool:
        """Whether any input of such a node can stop gradients.

        When not, :meth:`stop_inputs` gives nothing for it, whatever the node.
        """
        found: bool = self._memoized(("stops", domain, op_type), self._has_stops, domain, op_type)
        return found

    def inputs_given_gradient(self, site: NodeSite) -> frozenset[int]:
        """The input positions whose gradient the node's builder produces."""
        node = site.node
        domain, op_type, count = node.domain, node.op_type, len(node.inputs)
        if not self.has_stop_edges(domain, op_type):  # the answer depends on the operator
            given: frozenset[int] = self._memoized(
                ("given", domain, op_type, count), self._given, domain, op_type, count)
            return given
        excluded = self._without(domain, op_type) | self.stop_inputs(site)
        return frozenset(i for i in range(count) if i not in excluded)

    def _has_stops(self, domain: str, op_type: str) -> bool:
        return bool(self._stops.get(self.trainer_view(domain, op_type)[1]))

    def _given(self, domain: str, op_type: str, count: int) -> frozenset[int]:
        return frozenset(range(count)) - self._without(domain, op_type)

    def _without(self, domain: str, op_type: str) -> frozenset[int]:
        without: frozenset[int] = self._memoized(
            ("without", domain, op_type), self._inputs_without_gradient, domain, op_type)
        return without

    def _inputs_without_gradient(self, domain: str, node_op_type: str) -> frozenset[int]:
        _, op_type = self.trainer_view(domain, node_op_type)
        excluded: set[int] = set()
        for entry in self.inputs_without_gradient:
            if entry.op_type in (op_type, node_op_type):
                excluded.update(entry.inputs)
        return frozenset(excluded)

    def failures_for(self, site: NodeSite, scope: Literal["path", "graph"] = "path"
                     ) -> list[OpFailure]:
        """The known failures of ``scope`` that apply to a node.

        ``path`` failures are those of a registered builder on the differentiable
        path; ``graph`` failures hit a node wherever it is.
        """
        node = site.node
        candidates: tuple[OpFailure, ...] = self._memoized(
            ("failures", node.domain, node.op_type, scope), self._failure_candidates,
            node.domain, node.op_type, scope)
        if not candidates:
            return []
        return [failure for failure in candidates if failure.matches(site)]

    def may_fail(self, domain: str, op_type: str,
                 scope: Literal["path", "graph"] = "path") -> bool:
        """Whether :meth:`failures_for` can find anything for such a node.

        Only the operator counts, not the conditions: when not, no site is needed.
        """
        candidates: tuple[OpFailure, ...] = self._memoized(
            ("failures", domain, op_type, scope), self._failure_candidates, domain, op_type,
            scope)
        return bool(candidates)

    def _failure_candidates(self, node_domain: str, node_op_type: str, scope: str
                            ) -> tuple[OpFailure, ...]:
        """The failures of ``scope`` for an operator, before their conditions are checked."""
        names = {node_op_type, self.trainer_view(node_domain, node_op_type)[1]}
        builder = self.builder_for(node_domain, node_op_type)
        if scope == "path":
            if builder is None:
                return ()
            names.add(builder[1])
        domain = builder[0] if builder is not None else normalize_domain(node_domain)
        return tuple(failure for failure in self.op_failures
                     if failure.scope == scope and failure.op_type in names
                     and (failure.domain is None
                          or normalize_domain(failure.domain) == domain))

    def trainer_failure(self, kind: TrainerFailureKind) -> TrainerFailure | None:
        """How the trainer treats a weight- or loss-level problem, if it says."""
        for failure in self.trainer_failures:
            if failure.kind == kind:
                return failure
        return None

    def is_differentiable_type(self, elem_type: int | None) -> bool:
        """Whether gradients flow through values of this element type (unknown: yes)."""
        return elem_type is None or elem_type in self.differentiable_types

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (for listings and reports)."""
        return {"name": self.name, "trainer": self.trainer, "version": self.version,
                "default": self.default, "lookup": self.lookup,
                "builders": len(self.builders), "stop_edges": len(self.stop_edges),
                "op_failures": len(self.op_failures), "description": self.description}

    # --------------------------------------------------------------- loading
    @classmethod
    def from_toml(cls, path: str | Path, *, checks: Mapping[str, Check] | None = None,
                  **overrides: Any) -> GradientRules:
        """Read a rule set from a TOML file.

        The format (the built-in rules are an example:
        ``graphpass/training/rules/data/onnxruntime_training.toml``)::

            name = "mytrainer"
            trainer = "mytrainer"
            version = "2.0"
            lookup = "domain"

            [builders]
            "ai.onnx" = ["Add", "MatMul", "Relu"]

            [[stop_edges]]
            op_type = "Gather"
            inputs = [1]

            [[op_failures]]
            op_type = "Pad"
            when = [{ attribute = "mode", not_in = ["constant"], default = "constant" }]
            reason = "..."
            hint = "..."

        Conditions: ``{ attribute, in | not_in, default }``, ``{ attribute, missing =
        true }``, ``{ inputs_fewer_than }``, ``{ input_present }``,
        ``{ outputs_fewer_than }``, ``{ input_needs_gradient }``, ``{ input, type_in |
        type_not_in | rank_in }``, ``{ check = "name" }`` (a :class:`Check` from
        ``checks``). Element types are names (``"FLOAT"``) or numbers.

        Args:
            path: The ``.toml`` file.
            checks: Named :class:`Check` conditions the file may refer to.
            **overrides: Fields to set instead of the file's values (``default=False``).

        Raises:
            PluginError: The file cannot be read or does not describe a rule set.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise PluginError(f"cannot read gradient rules from {path}: {error}") from None
        return cls.from_toml_text(text, checks=checks, where=str(path), **overrides)

    @classmethod
    def from_toml_text(cls, text: str, *, checks: Mapping[str, Check] | None = None,
                       where: str = "<text>", **overrides: Any) -> GradientRules:
        """Read a rule set from TOML text (the format of :meth:`from_toml`).

        Raises:
            PluginError: The text does not describe a rule set.
        """
        try:
            data = tomllib.loads(text)
            return _rules_from_data(data, dict(checks or {}), overrides)
        except tomllib.TOMLDecodeError as error:
            raise PluginError(f"cannot read gradient rules from {where}: {error}") from None
        except (KeyError, TypeError, ValueError) as error:
            raise PluginError(f"gradient rules in {where} are malformed: {error}",
                              hint="see `graphpass.GradientRules.from_toml` for "
                                   "the format") from None


def _predicate(entry: Mapping[str, Any], checks: Mapping[str, Check]) -> Predicate:
    if "check" in entry:
        name = entry["check"]
        if name not in checks:
            raise ValueError(f"unknown check {name!r} (known: {', '.join(sorted(checks))})")
        return checks[name]
    if "attribute" in entry:
        name = str(entry["attribute"])
        if entry.get("missing"):
            return AttributeMissing(name)
        if "in" in entry:
            return AttributeIn(name, tuple(entry["in"]), entry.get("default"))
        if "not_in" in entry:
            return AttributeNotIn(name, tuple(entry["not_in"]), entry.get("default"))
        raise ValueError(f"condition on attribute {name!r} needs 'in', 'not_in' or 'missing'")
    if "input" in entry:
        index = int(entry["input"])
        if "type_in" in entry:
            return InputTypeIn(index, frozenset(_elem_type(t) for t in entry["type_in"]))
        if "type_not_in" in entry:
            return InputTypeNotIn(index, frozenset(_elem_type(t) for t in entry["type_not_in"]))
        if "rank_in" in entry:
            return InputRankIn(index, frozenset(int(r) for r in entry["rank_in"]))
        raise ValueError(f"condition on input {index} needs 'type_in', 'type_not_in' or "
                         "'rank_in'")
    if "input_present" in entry:
        return InputPresent(int(entry["input_present"]))
    if "inputs_fewer_than" in entry:
        return InputsFewerThan(int(entry["inputs_fewer_than"]))
    if "outputs_fewer_than" in entry:
        return OutputsFewerThan(int(entry["outputs_fewer_than"]))
    if "input_needs_gradient" in entry:
        return InputNeedsGradient(int(entry["input_needs_gradient"]))
    raise ValueError(f"unknown condition {dict(entry)!r}")


def _rules_from_data(data: Mapping[str, Any], checks: Mapping[str, Check],
                     overrides: Mapping[str, Any]) -> GradientRules:
    def when(entry: Mapping[str, Any]) -> tuple[Predicate, ...]:
        return tuple(_predicate(item, checks) for item in entry.get("when", ()))

    builders = frozenset((normalize_domain(domain), str(op_type))
                         for domain, op_types in data.get("builders", {}).items()
                         for op_type in op_types)
    stop_edges = tuple(
        StopEdges(str(entry["op_type"]),
                  None if entry.get("inputs") == "*" else frozenset(entry["inputs"]),
                  when(entry), str(entry.get("note", "")))
        for entry in data.get("stop_edges", ()))
    without_gradient = tuple(
        InputsWithoutGradient(str(entry["op_type"]), frozenset(entry["inputs"]),
                              str(entry.get("note", "")))
        for entry in data.get("inputs_without_gradient", ()))
    op_failures = tuple(
        OpFailure(str(entry["op_type"]), when(entry), str(entry["reason"]), str(entry["hint"]),
                  entry.get("trainer_message"), entry.get("domain"),
                  entry.get("scope", "path"), entry.get("effect", "fails"))
        for entry in data.get("op_failures", ()))
    trainer_failures = tuple(
        TrainerFailure(entry["kind"], str(entry["reason"]), str(entry["hint"]),
                       entry.get("trainer_message"))
        for entry in data.get("trainer_failures", ()))
    rewrites = {_split_qualified(source): _split_qualified(target)
                for source, target in data.get("rewrites", {}).items()}
    types = data.get("differentiable_types")
    loss_types = data.get("loss_types")
    fields: dict[str, Any] = {
        "name": str(data["name"]),
        "trainer": str(data.get("trainer", data["name"])),
        "version": str(data.get("version", "")),
        "builders": builders,
        "lookup": data.get("lookup", "op_type"),
        "stop_edges": stop_edges,
        "inputs_without_gradient": without_gradient,
        "op_failures": op_failures,
        "trainer_failures": trainer_failures,
        "rewrites": rewrites,
        "deferred_ops": frozenset(data.get("deferred_ops", ())),
        "differentiable_types": frozenset(_elem_type(t) for t in types) if types
        else DIFFERENTIABLE_TYPES,
        "loss_types": frozenset(_elem_type(t) for t in loss_types) if loss_types else None,
        "resolves_constant_ifs": bool(data.get("resolves_constant_ifs", False)),
        "default": bool(data.get("default", False)),
        "description": str(data.get("description", "")),
        "source": str(data.get("source", "")),
    }
    fields.update(overrides)
    return GradientRules(**fields)


def _elem_type(value: int | str) -> int:
    """An element type from its number or its name (``FLOAT``, ``float16``)."""
    if isinstance(value, int):
        return value
    return int(onnx.TensorProto.DataType.Value(str(value).upper()))


# ========================================================================== weights
def weight_matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether the ``trainable`` or ``frozen`` option's ``patterns`` name weight ``name``.

    A pattern names a weight when it is the name itself (which may hold ``[``) or an
    ``fnmatch`` pattern matching it. The one reading of those options: the lint, the
    training graphs and ``restore-parameters`` all go through it.
    """
    return any(name == pattern or fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(frozen=True)
class WeightSelection:
    """The weights ``trainable`` and ``frozen`` options pick (see :func:`select_weights`).

    Attributes:
        candidates: Every initializer and graph input name (initializers first).
        chosen: The candidates ``trainable`` names (of any element type) or, when it
            names none, the default trainable weights, frozen ones included.
        frozen: The candidates ``frozen`` names and the float weights left out of the
            default, in the order of ``candidates``.
        left_out: The float weights left out of the default because torch's export
            record marks them as buffers or constants, with what it says they are
            (empty when ``trainable`` names weights).
        recorded: The default's weights frozen because the checkpoint records them as
            parameters torch does not train (``ReconcileResult.frozen``; empty when
            ``trainable`` names weights), also in ``frozen``.
    """

    candidates: tuple[str, ...]
    chosen: tuple[str, ...]
    frozen: tuple[str, ...]
    left_out: Mapping[str, StateKind]
    recorded: tuple[str, ...] = ()

    @property
    def trainable(self) -> list[str]:
        """The chosen weights that are not frozen, in order."""
        frozen = frozenset(self.frozen)
        return [name for name in self.chosen if name not in frozen]

    def matching_nothing(self, patterns: Iterable[str]) -> list[str]:
        """The ``patterns`` that match no candidate."""
        return [pattern for pattern in patterns
                if not any(weight_matches(name, (pattern,)) for name in self.candidates)]


def select_weights(graph: Graph, trainable: Sequence[str] = (),
                   frozen: Sequence[str] = (), *,
                   recorded_frozen: Collection[str] = ()) -> WeightSelection:
    """Pick the weights to train in ``graph``.

    Args:
        graph: The main graph.
        trainable: Initializer (or graph input) names or ``fnmatch`` patterns. None:
            every float initializer except those torch's export record marks as
            buffers or constants (:func:`graphpass.torch._export_record.default_trainable`).
        frozen: Names or patterns of weights to leave out.
        recorded_frozen: Weights the checkpoint records as parameters torch does not
            train (``ReconcileResult.frozen``): left out of the default, ignored when
            ``trainable`` names weights (the user's request wins over the record).

    Returns:
        The selection; element types are not checked beyond the default's.
    """
    candidates = tuple(dict.fromkeys([*graph.initializers, *graph.input_names]))
    left_out: dict[str, StateKind] = {}
    recorded: tuple[str, ...] = ()
    if trainable:
        chosen = [name for name in candidates if weight_matches(name, trainable)]
    else:
        chosen, left_out = default_trainable(graph)
        record = frozenset(recorded_frozen)
        recorded = tuple(name for name in chosen if name in record
                         and not weight_matches(name, frozen))
    fixed = tuple(name for name in candidates if weight_matches(name, frozen) or name in left_out
                  or name in recorded)
    return WeightSelection(candidates, tuple(chosen), fixed, MappingProxyType(left_out),
                           recorded)


@dataclass(frozen=True)
class TrainableWeights:
    """The weights a trainer trains and keeps fixed (see :func:`trainable_weights`).

    Attributes:
        trainable: The weights to train, in order.
        frozen: The weights kept fixed.
        findings: One warning per problem of the request: a ``trainable`` or ``frozen``
            pattern that matches nothing (its ``data`` says ``{"selection":
            "no-match"}``), a weight named in ``trainable`` that cannot train
            (``{"selection": "not-float"}``); ``value`` is the pattern or the weight.
        selection: What the options picked, before element types were looked at.
    """

    trainable: list[str]
    frozen: list[str]
    findings: list[Finding]
    selection: WeightSelection


@dataclass(frozen=True)
class SelectionReport:
    """The problems of a ``trainable``/``frozen`` request already reported: an analysis.

    ``lint-gradients`` gives it; ``build-training-graph`` asks for it, so that a problem
    of the same request (a pattern that matches nothing, a weight that cannot train) is
    reported once. Removing what nothing reads leaves it true (a pattern that matched
    nothing still matches nothing), so ``remove-unused`` preserves it; the weights each
    pass trains are chosen again by :func:`trainable_weights` from the model it is given.

    Attributes:
        trainable_patterns: The ``trainable`` option of the request.
        frozen_patterns: The ``frozen`` option of the request.
        reported: ``(problem, value)`` of each problem reported (``problem``:
            ``no-match`` or ``not-float``; ``value``: the pattern or the weight).
    """

    trainable_patterns: tuple[str, ...]
    frozen_patterns: tuple[str, ...]
    reported: frozenset[tuple[str, str]] = frozenset()

    def asked(self, trainable: Sequence[str], frozen: Sequence[str]) -> bool:
        """Whether this report is of the request ``trainable``/``frozen``."""
        return (self.trainable_patterns, self.frozen_patterns) == (tuple(trainable),
                                                                  tuple(frozen))


def trainable_weights(graph: Graph, trainable: Sequence[str] = (), frozen: Sequence[str] = (),
                      *, codes: Mapping[str, str], trainer: str,
                      types: Collection[int] = DIFFERENTIABLE_TYPES,
                      initializers_only: bool = False,
                      reconciled: ReconcileResult | None = None) -> TrainableWeights:
    """The weights to train and to keep fixed, and the findings of the request.

    The one selection of ``lint-gradients``, ``build-training-graph`` and
    ``emit-training-artifacts`` (:func:`select_weights`, then element types). When the
    model was filled from a checkpoint that records which parameters torch does not
    train (``graphpass.torch.save_state``), the default leaves those out too
    (``reconciled.frozen``; ``selection.recorded`` names them).

    Args:
        graph: The main graph.
        trainable: The ``trainable`` option: names or ``fnmatch`` patterns (none: the
            default trainable weights, whose non-float ones are left out silently).
        frozen: The ``frozen`` option: names or patterns.
        codes: The finding code of each problem: ``no-match`` and ``not-float``.
        trainer: Who trains, for messages (``onnxruntime-training``).
        types: The element types the trainer trains.
        initializers_only: Whether only initializers train and freeze (graph inputs
            that stand for weights do not).
        reconciled: What ``reconcile-initializers`` filled the model from (its
            analysis), if it ran: its ``frozen`` weights are left out of the default.
    """
    findings: list[Finding] = []
    selection = select_weights(graph, trainable, frozen,
                               recorded_frozen=reconciled.frozen if reconciled else ())
    parameters = signature_parameters(graph)
    for option, patterns in (("trainable", trainable), ("frozen", frozen)):
        for pattern in selection.matching_nothing(patterns):
            if option == "frozen" and any(weight_matches(p, (pattern,)) for p in parameters):
                continue  # a torch parameter the export folded away: frozen on purpose
            findings.append(Finding(
                codes["no-match"], Severity.WARNING,
                f"{option} pattern {pattern!r} matches no initializer or graph input",
                value=pattern, data={"selection": "no-match", "option": option},
                hint="check the spelling; patterns use fnmatch syntax (* ? [...])"))
    initializers = graph.initializers
    chosen: list[str] = []
    for name in selection.trainable:
        is_input = name not in initializers
        elem_type = graph.value(name).elem_type if is_input else initializers[name].dtype
        if (elem_type in types or elem_type is None) and not (is_input and initializers_only):
            chosen.append(name)  # an unknown type may be one the trainer trains
        elif trainable:
            what = "a graph input, not an initializer" if is_input and initializers_only \
                else dtype_name(elem_type or 0)
            findings.append(Finding(
                codes["not-float"], Severity.WARNING,
                f"{name!r} is {what}, which {trainer} cannot train; it is left out",
                value=name, data={"selection": "not-float"},
                hint="only float, float16, double and bfloat16 weights get gradients"))
    fixed = [name for name in selection.frozen
             if name in initializers or not initializers_only]
    return TrainableWeights(chosen, fixed, findings, selection)
