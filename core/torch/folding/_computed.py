"""Folds computed over parameters, recovered from torch's record and the parameters' values.

The default optimizer of ``torch.onnx.export(..., dynamo=True)`` folds whatever depends on
parameters alone, arithmetic included: DeBERTa's relative position projections
(``pos_proj(rel_embeddings)``, then viewed, permuted and scaled), BiT's weight
standardization (``batch_norm(w.reshape(1, O, -1), None, None, training=True)``). Its
record names every parameter the constant was computed from and the FX nodes folded
(``linear_1``, ``permute_3``, ``getitem``, ``div_2``), not their arguments.

:func:`computed_recipe` evaluates, in float64, the computations those names allow over
the recorded parameters (each reading every one of them), lets the index selection of
:mod:`~graphpass.torch.folding._search` map the result onto the constant, up to float32
rounding, and returns the one that reproduces it (:class:`Computed`). The operators are
few and their semantics fixed:

* ``linear`` (also ``addmm``, ``mm``, ``matmul``) of a 2-D parameter by a weight, with the
  weight's bias when one is recorded: ``x @ W.T + b``;
* the standardization of a batch norm without running statistics (``getitem`` of
  ``_native_batch_norm_legit``, or a ``batch_norm`` node): each output channel of a weight
  less its mean, over the square root of its biased variance plus an epsilon; the epsilon
  is not recorded, so the one of :data:`EPSILONS` nearest the constant is taken;
* ``div`` or ``mul`` by one number (a recorded scalar, or a ``sqrt`` of one): read from the
  values, as the factor that puts every element of the constant on an element of the result;
* shape FX nodes (``view``, ``permute``, ``slice``, ``repeat``, ``clone`` ...): whatever
  index selection the values show;
* a contraction (``einsum``, ``matmul``, ``linear`` ...) folded from one parameter and
  named as the constant itself, or followed by shape nodes: the parameter contracted with
  a table the exporter computed from no parameter (the sinusoidal relative positions of
  Funnel, XLNet and Transformer-XL: ``einsum("td,dnh->tnh", table, r_kernel)``). The
  record names the operators that built the table (``arange``, ``sin``, ``cat`` ...), not
  its values; they are read back from the constant by solving ``table @ parameter =
  constant``, which has one solution when the parameter, viewed as a matrix over the axes
  the constant keeps, has full row rank (:func:`contraction_recipes`). The parameter's
  values must be the export's own (a checkpoint changed since gives another table). Where
  one square parameter alone gives the constant the values cannot check the contraction's
  form: the record is then the evidence (the constant is named after the contraction, and
  nothing but a scale, which the table takes up, acts on the parameter before it); a
  constant named after a shape node needs the values' check.

Any other FX node in the record, or a candidate that does not reproduce the constant,
leaves the fold without a recipe (refused, as before).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from graphpass.ir import Node
from graphpass.torch._export_record import fx_operator
from graphpass.torch.folding._recipes import Copy, Recipe, Reshape, Select, _constant, close
from graphpass.torch.folding._search import locate, selection

__all__ = [
    "COMPUTED_RTOL",
    "ELEMENTWISE",
    "EPSILONS",
    "FLOAT_COMPUTATIONS",
    "IDENTITIES",
    "MAX_CONDITION",
    "MAX_ELEMENTWISE_ORDERS",
    "SELECTIONS",
    "Computed",
    "Contract",
    "ContractionFold",
    "Contractions",
    "Elementwise",
    "Linear",
    "Standardize",
    "computation_steps",
    "computed_recipe",
    "contraction_output",
    "contraction_recipes",
]

COMPUTED_RTOL: Final = 1e-6
"""How far an element of the constant may be from the float64 computation's, relative to
the largest magnitude: float32 rounding of the exporter's own arithmetic (measured: 6e-8 on
DeBERTa's projections, 1e-7 on BiT's standardization)."""

MAX_CONDITION: Final = 100.0
"""The largest condition number of the contracted parameters from which a table is read
back: the constant's float32 rounding grows at most that much in the table, and in the
gradients that flow through it (measured on Funnel: a table read from one 32 x 32 kernel of
condition number 230 moves ten AdamW steps 2.2e-4 from torch's; two kernels together,
29, stay within 1e-5)."""

EPSILONS: Final = (1e-5, 1e-6, 1e-8, 1e-10)
"""The epsilons tried for a standardization (torch's default, BiT's and others')."""

_LINEAR: Final = frozenset({"linear", "addmm", "mm", "matmul"})
_STANDARDIZE: Final = frozenset({"getitem", "_native_batch_norm_legit", "native_batch_norm",
                                 "batch_norm"})
_SCALE: Final = frozenset({"div", "mul", "sqrt", "scalar_tensor_default", "reciprocal"})
SELECTIONS: Final = frozenset({
    "view", "reshape", "_unsafe_view", "permute", "transpose", "t", "numpy_T", "clone",
    "contiguous", "slice", "select", "unsqueeze", "squeeze", "expand", "expand_as",
    "broadcast_to", "repeat", "alias", "unflatten", "flatten", "lift_fresh_copy", "detach",
    "index", "index_select", "gather", "embedding", "cat", "concat", "stack", "split",
    "split_with_sizes", "chunk", "narrow", "unbind", "getitem", "roll", "flip", "movedim",
    "_to_copy"})
"""FX operators that only select elements: every element of their output is a copy of one
of their input's (their map is read from the values)."""
IDENTITIES: Final = frozenset({"alias", "clone", "contiguous", "detach", "lift_fresh_copy"})
"""FX operators whose output is their input: same shape, same elements in order (a slice of
a whole axis is traced as ``alias``)."""
_IN_ORDER: Final = IDENTITIES | {"view", "reshape", "_unsafe_view", "unsqueeze", "squeeze",
                                 "unflatten", "flatten", "_to_copy"}
"""Shape FX operators that keep the elements in order (row-major): a chain of them is a
``Reshape``, known without locating values (which repeat in a fresh Mamba's ``A_log``)."""
_CONTRACTIONS: Final = frozenset({"einsum", "matmul", "mm", "bmm", "linear", "tensordot"})
"""FX operators linear in each operand: a constant named after one, folded from one
parameter, is that parameter contracted with a table computed from no parameter."""
_LINEAR_MAPS: Final = frozenset({
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
    "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "avg_pool1d", "avg_pool2d",
    "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool3d"})
"""FX operators linear in their one tensor, mixing positions by weights computed from no
parameter, the same for every channel: an interpolation (ViTDet's position embeddings
resized to the grid) or an average pool. Over a parameter they are a contraction of it
with a table of those weights, whose output's axes the constant holds permuted."""


def _sigmoid(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * x)))


def _softplus(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(np.logaddexp(0.0, x))


ELEMENTWISE: Final[Mapping[str, tuple[Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]],
                                      str]]] = {
    "exp": (np.exp, "Exp"), "neg": (np.negative, "Neg"), "log": (np.log, "Log"),
    "sigmoid": (_sigmoid, "Sigmoid"), "tanh": (np.tanh, "Tanh"), "abs": (np.abs, "Abs"),
    "softplus": (_softplus, "Softplus"), "sin": (np.sin, "Sin"), "cos": (np.cos, "Cos"),
}
"""FX operators that apply one function to every element (``exp``, ``neg``, ``sigmoid``
...): the function in float64 and the ONNX operator that computes it."""
FLOAT_COMPUTATIONS: Final = (frozenset(ELEMENTWISE) - {"neg", "abs"}) | _LINEAR | \
    _CONTRACTIONS | _LINEAR_MAPS | (_STANDARDIZE - {"getitem"})
"""FX operators that compute floats from floats, never indices: a fold whose record names
one is no selection of its parameter (an ``arange``, an ``add`` or a ``neg`` may compute the
indices a position table is read at)."""
MAX_ELEMENTWISE_ORDERS: Final = 24
"""The most orders of a record's elementwise operators tried (four distinct ones): the
record names them, not their order."""


@dataclass(frozen=True, eq=False)
class Computed(Recipe):
    """``constant = inner(scale * operation(source, reads...))``, by value up to float32.

    The subclasses are the operations: :class:`Linear`, :class:`Standardize`,
    :class:`Contract` and :class:`Elementwise`; ``inner`` is the index selection the
    exporter folded after the operation.
    """

    scale: float = 1.0
    inner: Recipe = field(default_factory=Copy)
    kind = "computed"
    exact = False

    def value(self, source: np.ndarray[Any, Any],
              *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``scale * operation(...)`` in float64, before :attr:`inner`."""
        if len(others) != len(self.reads):
            raise ValueError(f"the computation reads {len(self.reads)} more tensors")
        return np.asarray(self._operation(source.astype(np.float64), *others) * self.scale)

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(self.inner.compute(self.value(source, *others)),
                                    dtype=source.dtype)

    def nodes(self, source: str, output: str) -> list[Node]:
        result = output if isinstance(self.inner, Copy) and self.scale == 1.0 \
            else f"{output}__computed"
        nodes = self._operation_nodes(source, result, output)
        current = result
        if self.scale != 1.0:
            scaled = output if isinstance(self.inner, Copy) else f"{output}__scaled"
            factor = _constant(f"{output}__scale", np.array(self.scale, np.float32))
            nodes += [factor, Node("Mul", [current, factor.outputs[0]], [scaled],
                                   name=f"{output}__scale")]
            current = scaled
        if not isinstance(self.inner, Copy):
            nodes += self.inner.nodes(current, output)
        return nodes

    def describe(self, source: str) -> str:
        text = self._operation_text(source)
        if self.scale != 1.0:
            text = f"{text} * {self.scale:.7g}"
        return text if isinstance(self.inner, Copy) else self.inner.describe(text)

    def _operation(self, weight: np.ndarray[Any, Any],
                   *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The operation over the source (float64) and :attr:`reads`' values."""
        raise NotImplementedError

    def _operation_nodes(self, source: str, result: str, output: str) -> list[Node]:
        """The nodes that compute the operation into ``result`` (names after ``output``)."""
        raise NotImplementedError

    def _operation_text(self, source: str) -> str:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Linear(Computed):
    """``x @ W.T + b``.

    The source is the weight ``W``; :attr:`others` are ``x`` and, if any, the bias ``b``.
    """

    others: tuple[str, ...] = ()

    @property
    def reads(self) -> tuple[str, ...]:
        return self.others

    def _operation(self, weight: np.ndarray[Any, Any],
                   *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        result = others[0].astype(np.float64) @ weight.T
        return np.asarray(result + others[1].astype(np.float64) if len(others) > 1 else result)

    def _operation_nodes(self, source: str, result: str, output: str) -> list[Node]:
        return [Node("Gemm", [self.others[0], source, *self.others[1:]], [result],
                     name=f"{output}__linear", attributes={"transB": 1})]

    def _operation_text(self, source: str) -> str:
        return f"linear({', '.join((self.others[0], source, *self.others[1:]))})"


@dataclass(frozen=True, eq=False)
class Standardize(Computed):
    """A standardization per output channel.

    Each output channel (first axis) of the source, of :attr:`rank` axes, less its mean,
    over ``sqrt(biased variance + epsilon)``.
    """

    epsilon: float = 0.0
    rank: int = 2

    def _operation(self, weight: np.ndarray[Any, Any],
                   *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        rows = weight.reshape(weight.shape[0], -1)
        centered = rows - rows.mean(axis=1, keepdims=True)
        variance = np.square(centered).mean(axis=1, keepdims=True)
        return np.asarray(centered / np.sqrt(variance + self.epsilon)).reshape(weight.shape)

    def _operation_nodes(self, source: str, result: str, output: str) -> list[Node]:
        axes = _constant(f"{output}__axes", np.arange(1, self.rank, dtype=np.int64))
        epsilon = _constant(f"{output}__epsilon", np.array(self.epsilon, np.float32))
        return [
            axes, epsilon,
            Node("ReduceMean", [source, axes.outputs[0]], [f"{output}__mean"],
                 name=f"{output}__mean", attributes={"keepdims": 1}),
            Node("Sub", [source, f"{output}__mean"], [f"{output}__centered"],
                 name=f"{output}__center"),
            Node("Mul", [f"{output}__centered", f"{output}__centered"],
                 [f"{output}__squared"], name=f"{output}__square"),
            Node("ReduceMean", [f"{output}__squared", axes.outputs[0]],
                 [f"{output}__variance"], name=f"{output}__variance",
                 attributes={"keepdims": 1}),
            Node("Add", [f"{output}__variance", epsilon.outputs[0]],
                 [f"{output}__shifted"], name=f"{output}__shift"),
            Node("Sqrt", [f"{output}__shifted"], [f"{output}__deviation"],
                 name=f"{output}__deviation"),
            Node("Div", [f"{output}__centered", f"{output}__deviation"], [result],
                 name=f"{output}__standardize")]

    def _operation_text(self, source: str) -> str:
        return f"standardize({source} per output channel, eps={self.epsilon:g})"


@dataclass(frozen=True, eq=False)
class Contract(Computed):
    """:attr:`table` ``@ M``, the table read back from the constant.

    ``M`` is the source viewed as a matrix of :attr:`rows` rows (its leading axes kept, its
    trailing ones contracted), transposed when :attr:`transposed`.
    """

    table: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros((0, 0)))
    rows: int = 0
    transposed: bool = False

    def _operation(self, weight: np.ndarray[Any, Any],
                   *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.asarray(self.table.astype(np.float64)
                          @ _matrix(weight, self.rows, self.transposed))

    def _operation_nodes(self, source: str, result: str, output: str) -> list[Node]:
        table = _constant(f"{output}__table", self.table)
        shape = _constant(f"{output}__matrix_shape", np.array([self.rows, -1], np.int64))
        return [table, shape,
                Node("Reshape", [source, shape.outputs[0]], [f"{output}__matrix"],
                     name=f"{output}__matrix"),
                Node("Gemm", [table.outputs[0], f"{output}__matrix"], [result],
                     name=f"{output}__contract", attributes={"transB": int(self.transposed)})]

    def _operation_text(self, source: str) -> str:
        matrix = f"{source}{'.T' if self.transposed else ''}"
        return (f"a {list(self.table.shape)} table (computed from no parameter, read back "
                f"from the constant) @ {matrix} as a matrix of {self.rows} "
                f"{'columns' if self.transposed else 'rows'}")


@dataclass(frozen=True, eq=False)
class Elementwise(Computed):
    """Functions applied in order to every element of the source: Mamba's ``-exp(A_log)``.

    :attr:`functions` are FX operator names of :data:`ELEMENTWISE`.
    """

    functions: tuple[str, ...] = ()

    def _operation(self, weight: np.ndarray[Any, Any],
                   *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        result = weight
        with np.errstate(all="ignore"):
            for function in self.functions:
                result = ELEMENTWISE[function][0](result)
        return result

    def _operation_nodes(self, source: str, result: str, output: str) -> list[Node]:
        nodes = []
        current = source
        for index, function in enumerate(self.functions):
            last = index == len(self.functions) - 1
            produced = result if last else f"{output}__{function}_{index}"
            nodes.append(Node(ELEMENTWISE[function][1], [current], [produced],
                              name=f"{output}__{function}_{index}"))
            current = produced
        return nodes

    def _operation_text(self, source: str) -> str:
        text = source
        for function in self.functions:
            text = f"{function}({text})"
        return text


def computation_steps(steps: Sequence[str]) -> set[str] | None:
    """The operations a fold's FX nodes allow.

    ``linear``, ``standardize``, ``scale``, ``elementwise``; ``None`` when one of them is
    none of the operators :func:`computed_recipe` knows.
    """
    allowed: set[str] = set()
    for step in steps:
        operator = fx_operator(step)
        if operator in _LINEAR:
            allowed.add("linear")
        elif operator in _SCALE:
            allowed.add("scale")
        elif operator in _STANDARDIZE:
            allowed.add("standardize")
        elif operator in ELEMENTWISE:
            allowed.add("elementwise")
        elif operator not in SELECTIONS:
            return None
    return allowed


def computed_recipe(constant: np.ndarray[Any, Any],
                    parameters: Mapping[str, np.ndarray[Any, Any]],
                    steps: Sequence[str]) -> tuple[str, Computed] | None:
    """The computation over every one of ``parameters`` that ``steps`` allow and gives it.

    Args:
        constant: The folded constant.
        parameters: The values of every parameter torch's record says it was folded from.
        steps: The FX nodes the record names, the constant's own first.

    Returns:
        The source (the parameter the recipe computes from; the others are its
        :attr:`~Computed.reads`) and the recipe; ``None`` when no candidate reproduces
        the constant within :data:`COMPUTED_RTOL`.
    """
    if constant.dtype.kind != "f" or constant.size < 2 or \
            any(v.dtype.kind != "f" for v in parameters.values()):
        return None
    allowed = computation_steps(steps)
    scaled = allowed is not None and "scale" in allowed
    for source, variants in _candidates(parameters, steps, allowed) \
            if allowed is not None else []:
        found: list[tuple[float, Computed]] = []
        for candidate in variants:
            reads = [parameters[name] for name in candidate.reads]
            fitted = _fit(constant, candidate, parameters[source], reads, scaled=scaled,
                          in_order=_keeps_order(steps))
            if fitted is not None:
                error = float(np.abs(fitted.compute(parameters[source], *reads)
                                     .astype(np.float64) - constant).max())
                found.append((error, fitted))
        if found:
            return source, min(found, key=lambda item: item[0])[1]
    return None


def _matrix(weight: np.ndarray[Any, Any], rows: int,
            transposed: bool) -> np.ndarray[Any, Any]:
    """``weight`` as a matrix of ``rows`` rows (its leading axes), transposed if asked."""
    matrix = weight.reshape(rows, -1)
    return matrix.T if transposed else matrix


def contraction_output(steps: Sequence[str]) -> str | None:
    """How a fold's record (its own FX node first) says it is a contraction's output.

    ``"direct"``: the constant is named after the contraction; ``"selected"``: after a shape
    FX node, with exactly one contraction among the nodes folded (``permute(einsum(...))``,
    ``view(linear(...))``), or after a linear map (:data:`_LINEAR_MAPS`), or a shape node of
    one, its only one (``permute(upsample_bicubic2d(...))``): their output holds the
    contracted axes first, so its axes are permuted; ``None``: neither.
    """
    if not steps:
        return None
    first = fx_operator(steps[0])
    if first in _CONTRACTIONS:
        return "direct"
    mixing = [fx_operator(step) for step in steps
              if fx_operator(step) in _CONTRACTIONS | _LINEAR_MAPS]
    if len(mixing) == 1 and (first in SELECTIONS or first in _LINEAR_MAPS):
        return "selected"
    return None


@dataclass(frozen=True)
class ContractionFold:
    """A fold that contracts one parameter with a table computed from no parameter.

    Attributes:
        constant: The folded constant.
        weight: The export's own values of the parameter.
        linear: Whether the contraction is a ``linear`` (it contracts the weight's trailing
            axes).
        direct: Whether the constant is the contraction's output itself; else an index
            selection of it (:func:`contraction_output`).
    """

    constant: np.ndarray[Any, Any]
    weight: np.ndarray[Any, Any]
    linear: bool = False
    direct: bool = True


@dataclass(frozen=True)
class Contractions:
    """What :func:`contraction_recipes` found: a recipe or the reason none, per fold."""

    recipes: dict[str, Contract]
    problems: dict[str, str]


_Form = tuple[int, bool, tuple[int, ...]]
"""Rows of the weight's matrix view, whether it is transposed, and the axes of the constant
in the order of the contraction's output."""


def contraction_recipes(folds: Mapping[str, ContractionFold]) -> Contractions:
    """Tables read back for folds that contract one parameter with a parameter-free table.

    Args:
        folds: The folds, by name.

    Returns:
        The recipe of each fold whose table the values determine, and for the others why
        not.

    The axes of the parameter the contraction keeps are the last axes of its output: its
    trailing axes (``x @ W``, ``einsum("td,dnh->tnh")``) or its leading ones (``x @ W.T``).
    A constant named after the contraction is its output; one named after a shape node is
    its output with its axes permuted or viewed, and every order of its axes whose last ones
    hold as many elements as the kept axes is tried. Folds of one form whose tables are the
    same (layers that read one position table) are solved together: a table that reproduces
    several constants from several parameters is overdetermined, so the values check it,
    and float32 rounding averages out. A table is read back when the parameters stacked,
    viewed as matrices, have full row rank and a condition number of at most
    :data:`MAX_CONDITION`; for a constant named after a shape node, only where the values
    check it (overdetermined). A fold with more than one form that reproduces it gets no
    recipe.
    """
    forms: dict[tuple[Any, ...], list[str]] = {}
    problems: dict[str, str] = {}
    for name, fold in folds.items():
        for form in _forms(fold):
            key = (fold.constant.shape, fold.weight.shape, fold.weight.dtype.str, form)
            forms.setdefault(key, []).append(name)
        problems[name] = (f"it is a contraction of it, but no order of the axes of its shape "
                          f"{list(fold.constant.shape)} ends with axes kept from "
                          f"{list(fold.weight.shape)}")
    found: dict[str, list[Contract]] = {}
    conditions: dict[str, float] = {}
    unsolved: list[tuple[list[str], _Form, float]] = []
    for (_, _, _, form), names in forms.items():
        left = list(names)
        while left:
            group = [left.pop(0)]
            for name in list(left):
                if _shared_table([folds[n] for n in (group[0], name)], form)[0] is not None:
                    group.append(name)
                    left.remove(name)
            table, condition = _shared_table([folds[n] for n in group], form)
            _fit_table(folds, group, form, table, condition, found, conditions, problems)
            if table is None:
                unsolved.append((group, form, condition))
    recipes = _chosen(folds, found, problems)
    known = [recipe.table for recipe in recipes.values()]
    for group, form, condition in unsolved:
        table = _rows_held_elsewhere([folds[n] for n in group], form, condition, known)
        if table is not None:
            _fit_table(folds, group, form, table, condition, found, conditions, problems)
    return Contractions(_chosen(folds, found, problems), problems)


def _fit_table(folds: Mapping[str, ContractionFold], group: Sequence[str], form: _Form,
               table: np.ndarray[Any, Any] | None, condition: float,
               found: dict[str, list[Contract]], conditions: dict[str, float],
               problems: dict[str, str]) -> None:
    """Add to ``found`` the recipe ``table`` gives each fold of ``group`` it reproduces.

    A fold it does not reproduce gets, in ``problems``, why no table was read back, from
    the form that came nearest (the smallest condition number).
    """
    rows, transposed, _ = form
    for name in group:
        fold = folds[name]
        fitted = None if table is None else Contract(
            table=table, rows=rows, transposed=transposed,
            inner=_layout(fold.constant.shape, form, table.shape[0]))
        if fitted is not None and not close(fitted.compute(fold.weight), fold.constant):
            fitted = None
        if fitted is not None:
            found.setdefault(name, []).append(fitted)
        elif condition < conditions.get(name, float("inf")) or name not in conditions:
            conditions[name] = condition
            problems[name] = _unsolved(condition, len(group), fold.direct)


def _chosen(folds: Mapping[str, ContractionFold], found: Mapping[str, list[Contract]],
            problems: dict[str, str]) -> dict[str, Contract]:
    """The recipe of each fold ``found`` gives one way of contracting.

    ``problems`` says why not for the others, and loses the folds that got one.
    """
    recipes = {}
    for name, candidates in found.items():
        ways = _distinct_maps(candidates, folds[name].weight)
        if len(ways) == 1:
            recipes[name] = ways[0]
            problems.pop(name, None)
        else:
            problems[name] = (f"it is a contraction of it with a table computed from no "
                              f"parameter, and {len(ways)} ways of contracting the "
                              f"parameter's axes give its values")
    return recipes


def _distinct_maps(candidates: Sequence[Contract],
                   weight: np.ndarray[Any, Any]) -> list[Contract]:
    """``candidates`` less those that compute what an earlier one does from any weight.

    Orders of the output's axes that differ only in how its rows are laid out give tables
    whose rows differ as much: one linear map of the weight. Two candidates are the same map
    when they agree on a random weight too.
    """
    probe = np.random.default_rng(0).standard_normal(weight.shape).astype(weight.dtype)
    ways: list[tuple[Contract, np.ndarray[Any, Any]]] = []
    for candidate in candidates:
        value = candidate.compute(probe)
        if not any(value.shape == seen.shape and close(value, seen) for _, seen in ways):
            ways.append((candidate, value))
    return [candidate for candidate, _ in ways]


def _unsolved(condition: float, readers: int, direct: bool) -> str:
    """Why no table was read back for a contraction fold."""
    what = "it is a contraction of it with a table computed from no parameter"
    others = "no other fold reads the same table" if readers == 1 else \
        f"{readers} folds read the same table"
    if not np.isfinite(condition):
        return f"{what}, which the constant does not determine (more contracted elements " \
               f"than kept, or a singular parameter; {others})"
    if condition > MAX_CONDITION:
        return (f"{what}, which the constant determines only to {condition:.0f} times "
                f"float32 rounding: the parameter, as the matrix contracted, has condition "
                f"number {condition:.0f}, more than {MAX_CONDITION:.0f}, {others}, and "
                f"not every row of the table is one other folds' tables determine")
    if not direct and readers == 1:
        return (f"{what} and then viewed or permuted; one square system gives any constant "
                f"a table, so the values cannot check the contraction, and {others}")
    return f"{what}, and no one table gives the constant from it within float32 rounding"


def _forms(fold: ContractionFold) -> list[_Form]:
    """How the contraction's output can hold ``fold``'s constant."""
    weight, constant = fold.weight.shape, fold.constant.shape
    orders = [tuple(range(len(constant)))] if fold.direct or len(constant) > 4 else \
        list(itertools.permutations(range(len(constant))))
    found = []
    for split in range(1, len(weight)):
        lead, trail = weight[:split], weight[split:]
        ways = [(True, lead)] if fold.linear else [(False, trail), (True, lead)]
        for transposed, kept in ways:
            for order in orders:
                shape = tuple(constant[axis] for axis in order)
                if fold.direct:
                    fits = len(shape) > len(kept) and shape[-len(kept):] == kept
                else:
                    fits = any(math.prod(shape[start:]) == math.prod(kept)
                               for start in range(1, len(shape)))
                if fits:
                    found.append((math.prod(lead), transposed, order))
    return found


def _layout(shape: tuple[int, ...], form: _Form, rows: int) -> Recipe:
    """The map from the contraction's output, ``rows`` by the kept elements, to ``shape``.

    Known from the form, not searched in the values: a table read from a batch-broadcast
    position table (XLNet's) repeats rows, which locating values cannot tell apart.
    """
    order = form[2]
    kept = math.prod(shape) // rows
    if order == tuple(range(len(shape))):
        return Copy() if shape == (rows, kept) else Reshape(shape=shape,
                                                              source_shape=(rows, kept))
    ordered = tuple(shape[axis] for axis in order)
    indices = np.arange(math.prod(shape), dtype=np.int64).reshape(ordered)
    return Select(indices=np.ascontiguousarray(indices.transpose(np.argsort(order))),
                  source_shape=(rows, kept))


def _shared_table(systems: Sequence[ContractionFold],
                  form: _Form) -> tuple[np.ndarray[Any, Any] | None, float]:
    """The one table that gives every constant from its weight, and the condition number.

    The table is ``None`` where the values do not determine it.
    """
    matrix, wanted = _system(systems, form)
    contracted, columns = matrix.shape
    if contracted > columns:
        return None, float("inf")
    singular = np.linalg.svd(matrix, compute_uv=False)
    condition = float(singular[0] / singular[-1]) if singular[-1] > 0 else float("inf")
    square_selected = contracted == columns and not all(fold.direct for fold in systems)
    if condition > MAX_CONDITION or square_selected:  # a square system fits any constant
        return None, condition
    table = np.linalg.lstsq(matrix.T, wanted.T, rcond=None)[0].T
    # zero within rounding is zero: an interpolation's table never reads a class token's
    # row, whose gradient must then be 0, as torch's (AdamW makes noise of it a full step)
    table[np.abs(table) <= COMPUTED_RTOL * float(np.abs(table).max(initial=0.0))] = 0.0
    if not _reproduces(table, matrix, wanted):
        return None, condition
    return np.ascontiguousarray(table, dtype=systems[0].weight.dtype), condition


def _system(systems: Sequence[ContractionFold],
            form: _Form) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``matrix`` and ``wanted`` of ``table @ matrix = wanted``, in float64, for ``form``.

    The parameters as matrices (contracted by kept elements) side by side, and the constants
    as the contraction's output (rows by kept elements), side by side alike.
    """
    rows, transposed, order = form
    matrices = [_matrix(fold.weight.astype(np.float64), rows, transposed) for fold in systems]
    wanted = [fold.constant.astype(np.float64).transpose(order).reshape(-1, m.shape[1])
              for fold, m in zip(systems, matrices, strict=True)]
    return np.concatenate(matrices, axis=1), np.concatenate(wanted, axis=1)


def _reproduces(table: np.ndarray[Any, Any], matrix: np.ndarray[Any, Any],
                wanted: np.ndarray[Any, Any]) -> bool:
    """Whether ``table @ matrix`` is ``wanted`` within :data:`COMPUTED_RTOL`."""
    largest = max(float(np.abs(wanted).max(initial=0.0)), 1e-30)
    return float(np.abs(table @ matrix - wanted).max(initial=0.0)) <= COMPUTED_RTOL * largest


def _rows_held_elsewhere(systems: Sequence[ContractionFold], form: _Form, condition: float,
                         known: Sequence[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any] | None:
    """The table of ``systems`` built from rows of ``known`` tables, where every row is one.

    A table that only ill-conditioned parameters determine is known from them only to
    ``condition`` times float32 rounding, too coarse to train from. Tables computed from no
    parameter often share rows: one position table gathered at the positions each layer
    reads (Funnel's pooled attention reads its block's positions and one more). Each row of
    the rough solution is looked up among the rows of the tables other folds determine
    (read back with a condition number of at most :data:`MAX_CONDITION`) and taken from
    there: a copy of one row or, where none is one, a row up to the sign of each element
    (a sinusoid's sine half is odd: position ``-p``'s row is ``p``'s with it negated). It
    must lie within the rough solution's error, and no other row within twice that. A row
    that matches no row, or more than one, leaves the table unsolved (``None``); so does a
    table that does not reproduce the constants.
    """
    rows = form[0]
    candidates = [table.astype(np.float64) for table in known if table.shape[1] == rows]
    if not np.isfinite(condition) or not candidates:
        return None
    matrix, wanted = _system(systems, form)
    rough = np.linalg.lstsq(matrix.T, wanted.T, rcond=None)[0].T
    pool = np.unique(np.concatenate(candidates), axis=0)
    scale = max(float(np.abs(pool).max(initial=0.0)), float(np.abs(rough).max(initial=0.0)))
    error = condition * COMPUTED_RTOL * scale        # how far the rough rows may be off
    same = MAX_CONDITION * COMPUTED_RTOL * scale     # how far two known rows of one value are
    table = np.empty_like(rough)
    for index, row in enumerate(rough):
        decided = np.abs(row) > error                # the elements whose sign the row shows
        near = pool[np.abs(np.abs(pool) - np.abs(row)).max(axis=1) <= 2 * error]
        flips = decided & (np.sign(near) != np.sign(row))
        plain = near[~flips.any(axis=1)]
        chosen = plain if len(plain) else np.where(flips, -near, near)
        if not len(chosen) or float(np.abs(chosen - chosen[0]).max()) > same \
                or float(np.abs(chosen[0] - row).max()) > error:
            return None
        table[index] = chosen[0]
    if not _reproduces(table, matrix, wanted):
        return None
    return np.ascontiguousarray(table, dtype=systems[0].weight.dtype)


def _candidates(parameters: Mapping[str, np.ndarray[Any, Any]], steps: Sequence[str],
                allowed: set[str]) -> list[tuple[str, list[Computed]]]:
    """Every computation ``allowed`` over exactly ``parameters``.

    Each with its source and its variants, of which the best-fitting one is taken (a
    standardization's epsilon, the order of elementwise functions). A record naming
    elementwise functions allows only them, all of them, over one parameter.
    """
    names = sorted(parameters)
    found: list[tuple[str, list[Computed]]] = []
    if "elementwise" in allowed:  # every function the record names, on one parameter
        functions = [operator for operator in map(fx_operator, steps)
                     if operator is not None and operator in ELEMENTWISE]
        orders = list(itertools.islice(dict.fromkeys(itertools.permutations(functions)),
                                       MAX_ELEMENTWISE_ORDERS + 1))
        if len(names) == 1 and len(orders) <= MAX_ELEMENTWISE_ORDERS:
            found.append((names[0], [Elementwise(functions=order) for order in orders]))
        return found
    if "standardize" in allowed and len(names) == 1 and parameters[names[0]].ndim >= 2:
        rank = parameters[names[0]].ndim
        found.append((names[0], [Standardize(epsilon=epsilon, rank=rank)
                                 for epsilon in EPSILONS]))
    if "linear" in allowed and len(names) in (2, 3):
        for weight in names:
            w = parameters[weight]
            for table in names:
                x = parameters[table]
                if table == weight or w.ndim != 2 or x.ndim != 2 or x.shape[1] != w.shape[1]:
                    continue
                rest = [n for n in names if n not in (weight, table)]
                if rest and parameters[rest[0]].shape != (w.shape[0],):
                    continue
                found.append((weight, [Linear(others=(table, *rest))]))
    return found


def _keeps_order(steps: Sequence[str]) -> bool:
    """Whether every shape FX node of a fold's record keeps the elements in order."""
    return all(fx_operator(step) in _IN_ORDER for step in steps
               if fx_operator(step) in SELECTIONS)


def _fit(constant: np.ndarray[Any, Any], recipe: Computed, source: np.ndarray[Any, Any],
         reads: list[np.ndarray[Any, Any]], *, scaled: bool,
         in_order: bool = False) -> Computed | None:
    """``recipe`` with the scale and index selection that give ``constant``, if any.

    The selection is a ``Reshape`` when the record's shape nodes keep the elements in
    order (``in_order``), else the one the values show.
    """
    value = recipe.value(source, *reads)
    for factor in _scales(constant, value) if scaled else [1.0]:
        result = value * factor
        inner: Recipe | None
        if in_order:
            if result.size != constant.size:
                continue
            inner = Copy() if result.shape == constant.shape else Reshape(
                shape=tuple(constant.shape), source_shape=tuple(result.shape))
        else:
            tolerance = COMPUTED_RTOL * max(float(np.abs(result).max(initial=0.0)), 1e-30)
            located = locate(constant, result, tolerance=tolerance)
            if located is None:
                continue
            inner = selection(located, result).recipe
        if inner is None:
            continue
        scale = factor
        if factor != 1.0:  # the least-squares factor over every element, not one element's
            selected = inner.compute(value).astype(np.float64).reshape(-1)
            scale = float(selected @ constant.astype(np.float64).reshape(-1)
                          / max(float(selected @ selected), 1e-300))
        fitted = replace(recipe, scale=scale, inner=inner)
        if close(fitted.compute(source, *reads), constant):
            return fitted
    return None


def _scales(constant: np.ndarray[Any, Any], value: np.ndarray[Any, Any]) -> list[float]:
    """The factors ``k`` that put a few elements of ``constant`` on elements of ``k * value``.

    The constant's largest element is ``k`` times some element of the value: each element
    gives a candidate, kept when a few other elements of the constant, divided by it, are
    elements of the value too. 1 first, when it is one.
    """
    wanted = np.ascontiguousarray(constant, dtype=np.float64).reshape(-1)
    flat = np.ascontiguousarray(value, dtype=np.float64).reshape(-1)
    flat = flat[flat != 0]
    largest = float(np.abs(wanted).max(initial=0.0))
    if flat.size == 0 or largest == 0:
        return []
    ordered = np.sort(flat)
    tolerance = COMPUTED_RTOL * largest
    candidates = wanted[int(np.abs(wanted).argmax())] / flat
    probes = wanted[np.linspace(0, wanted.size - 1, num=min(8, wanted.size)).astype(int)]
    for probe in probes:
        if candidates.size == 0:
            break
        target = probe / candidates
        at = np.clip(np.searchsorted(ordered, target), 1, max(ordered.size - 1, 1))
        distance = np.minimum(np.abs(ordered[at] - target), np.abs(ordered[at - 1] - target))
        candidates = candidates[distance * np.abs(candidates) <= 2 * tolerance]
    found = sorted({float(f"{k:.6g}") for k in candidates.tolist()},
                   key=lambda k: (k != 1.0, abs(np.log(abs(k)))))
    exact = [float(k) for k in candidates.tolist()]
    refined = []
    for k in found[:8]:  # the candidate itself, not its rounding
        refined.append(1.0 if k == 1.0 else min(exact, key=lambda e: abs(e - k)))
    return refined

