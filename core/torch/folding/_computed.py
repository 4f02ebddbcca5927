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
  index selection the values show.

Any other FX node in the record, or a candidate that does not reproduce the constant,
leaves the fold without a recipe (refused, as before).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from graphpass.ir import Node
from graphpass.torch.folding._recipes import Copy, Recipe, _constant, close
from graphpass.torch.folding._search import locate, selection

__all__ = ["COMPUTED_RTOL", "EPSILONS", "Computed", "computation_steps", "computed_recipe"]

COMPUTED_RTOL: Final = 1e-6
"""How far an element of the constant may be from the float64 computation's, relative to
the largest magnitude: float32 rounding of the exporter's own arithmetic (measured: 6e-8 on
DeBERTa's projections, 1e-7 on BiT's standardization)."""

EPSILONS: Final = (1e-5, 1e-6, 1e-8, 1e-10)
"""The epsilons tried for a standardization (torch's default, BiT's and others')."""

_LINEAR: Final = re.compile(r"(linear|addmm|mm|matmul)(_\d+)?")
_STANDARDIZE: Final = re.compile(r"(getitem|_native_batch_norm_legit|native_batch_norm|"
                                 r"batch_norm)(_\d+)?")
_SCALE: Final = re.compile(r"(div|mul|sqrt|scalar_tensor_default|reciprocal)(_\d+)?")
_SHAPE: Final = re.compile(r"(view|reshape|_unsafe_view|permute|transpose|t|numpy_T|clone|"
                           r"contiguous|slice|select|unsqueeze|squeeze|expand|repeat|alias|"
                           r"unflatten|flatten|getitem|lift_fresh_copy|detach)(_\d+)?")
"""FX nodes that only select elements (their map is read from the values)."""


@dataclass(frozen=True, eq=False)
class Computed(Recipe):
    """``constant = inner(scale * operation(source, reads...))``.

    ``operation`` is ``linear`` (the source is the weight ``W``; :attr:`others` the input
    ``x`` and, if any, the bias ``b``: ``x @ W.T + b``) or ``standardize`` (each output
    channel of the source less its mean, over ``sqrt(biased variance + epsilon)``);
    ``inner`` is the index selection the exporter folded after it.
    """

    operation: str = "linear"
    others: tuple[str, ...] = ()
    epsilon: float = 0.0
    scale: float = 1.0
    inner: Recipe = field(default_factory=Copy)
    rank: int = 2
    kind = "computed"
    exact = False

    @property
    def reads(self) -> tuple[str, ...]:
        return self.others

    def value(self, source: np.ndarray[Any, Any],
              *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``scale * operation(...)`` in float64, before :attr:`inner`."""
        if len(others) != len(self.others):
            raise ValueError(f"the computation reads {len(self.others)} more tensors")
        weight = source.astype(np.float64)
        if self.operation == "linear":
            result = others[0].astype(np.float64) @ weight.T
            if len(others) > 1:
                result = result + others[1].astype(np.float64)
        else:
            rows = weight.reshape(weight.shape[0], -1)
            centered = rows - rows.mean(axis=1, keepdims=True)
            variance = np.square(centered).mean(axis=1, keepdims=True)
            result = (centered / np.sqrt(variance + self.epsilon)).reshape(weight.shape)
        return np.asarray(result * self.scale)

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(self.inner.compute(self.value(source, *others)),
                                    dtype=source.dtype)

    def nodes(self, source: str, output: str) -> list[Node]:
        result = output if isinstance(self.inner, Copy) and self.scale == 1.0 \
            else f"{output}__computed"
        nodes: list[Node] = []
        if self.operation == "linear":
            nodes.append(Node("Gemm", [self.others[0], source, *self.others[1:]], [result],
                              name=f"{output}__linear", attributes={"transB": 1}))
        else:
            axes = _constant(f"{output}__axes", np.arange(1, self.rank, dtype=np.int64))
            epsilon = _constant(f"{output}__epsilon", np.array(self.epsilon, np.float32))
            nodes += [
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
        if self.operation == "linear":
            text = f"linear({', '.join((self.others[0], source, *self.others[1:]))})"
        else:
            text = f"standardize({source} per output channel, eps={self.epsilon:g})"
        if self.scale != 1.0:
            text = f"{text} * {self.scale:.7g}"
        return text if isinstance(self.inner, Copy) else self.inner.describe(text)


def computation_steps(steps: Sequence[str]) -> set[str] | None:
    """The operations a fold's FX nodes allow (``linear``, ``standardize``, ``scale``).

    ``None`` when one of them is none of the operators :func:`computed_recipe` knows.
    """
    allowed: set[str] = set()
    for step in steps:
        if _LINEAR.fullmatch(step):
            allowed.add("linear")
        elif _SCALE.fullmatch(step):
            allowed.add("scale")
        elif _STANDARDIZE.fullmatch(step):
            allowed.add("standardize")
        elif not _SHAPE.fullmatch(step):
            return None
    return allowed


def computed_recipe(constant: np.ndarray[Any, Any],
                    parameters: Mapping[str, np.ndarray[Any, Any]],
                    steps: Sequence[str]) -> tuple[str, Computed] | None:
    """The computation over every one of ``parameters`` that ``steps`` allow and gives it.

    Args:
        constant: The folded constant.
        parameters: The values of every parameter torch's record says it was folded from.
        steps: The FX nodes the record names (the constant's own among them).

    Returns:
        The source (the parameter the recipe computes from; the others are its
        :attr:`~Computed.reads`) and the recipe; ``None`` when no candidate reproduces
        the constant within :data:`COMPUTED_RTOL`.
    """
    allowed = computation_steps(steps)
    if allowed is None or constant.dtype.kind != "f" or constant.size < 2 or \
            any(v.dtype.kind != "f" for v in parameters.values()):
        return None
    scaled = "scale" in allowed
    for source, recipe in _candidates(parameters, allowed):
        reads = [parameters[name] for name in recipe.others]
        epsilons = EPSILONS if recipe.operation == "standardize" else (0.0,)
        found: list[tuple[float, Computed]] = []
        for epsilon in epsilons:
            candidate = Computed(recipe.operation, recipe.others, epsilon=epsilon,
                                 rank=recipe.rank)
            fitted = _fit(constant, candidate, parameters[source], reads, scaled=scaled)
            if fitted is not None:
                error = float(np.abs(fitted.compute(parameters[source], *reads)
                                     .astype(np.float64) - constant).max())
                found.append((error, fitted))
        if found:
            return source, min(found, key=lambda item: item[0])[1]
    return None


def _candidates(parameters: Mapping[str, np.ndarray[Any, Any]],
                allowed: set[str]) -> list[tuple[str, Computed]]:
    """Every computation ``allowed`` over exactly ``parameters`` (the source first)."""
    names = sorted(parameters)
    found: list[tuple[str, Computed]] = []
    if "standardize" in allowed and len(names) == 1 and parameters[names[0]].ndim >= 2:
        found.append((names[0], Computed("standardize", rank=parameters[names[0]].ndim)))
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
                found.append((weight, Computed("linear", (table, *rest))))
    return found


def _fit(constant: np.ndarray[Any, Any], recipe: Computed, source: np.ndarray[Any, Any],
         reads: list[np.ndarray[Any, Any]], *, scaled: bool) -> Computed | None:
    """``recipe`` with the scale and index selection that give ``constant``, if any."""
    value = recipe.value(source, *reads)
    for factor in _scales(constant, value) if scaled else [1.0]:
        result = value * factor
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
        fitted = Computed(recipe.operation, recipe.others, epsilon=recipe.epsilon,
                          scale=scale, inner=inner, rank=recipe.rank)
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

