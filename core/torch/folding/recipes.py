"""How a folded constant is computed from its one source, and finding that from the values.

Each :class:`Recipe` computes the constant with numpy (:meth:`Recipe.compute`, to compare
with the file), emits the nodes that compute it in the graph (:meth:`Recipe.nodes`), and
says whether the source's own values can be read back from the constant
(:meth:`Recipe.source_of`). :func:`recipe_by_value`, :func:`matching_source` and
:func:`nearest_rows` find a recipe from values.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import onnx

from graphpass.ir import Node
from graphpass.torch.folding.values import StateValues

__all__ = ["FUSION_RTOL", "Broadcast", "Copy", "Recipe", "Rows", "Scale", "Transpose",
           "broadcasts", "close", "first_slice", "matching_source", "nearest_rows",
           "recipe_by_value"]

FUSION_RTOL: Final = 1e-4
"""Largest difference between a fused weight and the fusion of the checkpoint's tensors,
relative to the fused weight's largest magnitude: float32 rounding of the exporter's own
fusion (measured: 3e-7 on the zoo's convolutions)."""


class Recipe:
    """How a folded constant is computed from its one source (see the subclasses)."""

    kind: str = ""
    exact: bool = True
    """Whether :meth:`compute` gives the exporter's values bit for bit."""

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The constant, computed from the source's values."""
        raise NotImplementedError

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        """The source's values recovered from the constant (``None``: not all are in it)."""
        return None

    def nodes(self, source: str, output: str) -> list[Node]:
        """Nodes computing ``output`` from ``source`` (small constants as ``Constant`` nodes).

        The indices, shapes and factors a recipe reads are ``Constant`` nodes, not
        initializers: whatever the exporter's records, no trainer takes them for weights.
        """
        raise NotImplementedError

    def describe(self, source: str) -> str:
        """``Transpose(W)``, ``Gather(W, rows 0..7)``, ..."""
        raise NotImplementedError

    def same_values(self, computed: np.ndarray[Any, Any],
                    constant: np.ndarray[Any, Any]) -> bool:
        """Whether a computed constant equals the folded one (exactly, for exact recipes)."""
        if computed.shape != constant.shape:
            return False
        if self.exact:
            return bool(np.array_equal(computed, constant))
        return close(computed, constant)


@dataclass(frozen=True)
class Transpose(Recipe):
    """``constant = Transpose(source, perm)``."""

    perm: tuple[int, ...] = (1, 0)
    kind = "transpose"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.ascontiguousarray(np.transpose(source, self.perm))

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return np.ascontiguousarray(np.transpose(constant, np.argsort(self.perm)))

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        return [Node("Transpose", [source], [output], name=f"{output}__transpose",
                     attributes={"perm": list(self.perm)})]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Transpose({source})"


@dataclass(frozen=True)
class Copy(Recipe):
    """``constant = source`` (a copy the exporter kept under another name)."""

    kind = "copy"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return source

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return constant

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        return [Node("Identity", [source], [output], name=f"{output}__copy")]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Identity({source})"


@dataclass(frozen=True, eq=False)
class Rows(Recipe):
    """``constant = Gather(source, indices, axis=0)``: rows of a table (position embeddings)."""

    indices: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.int64))
    kind = "rows"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.take(source, self.indices, axis=0)

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        flat = self.indices.reshape(-1)
        if shape is None or sorted(flat.tolist()) != list(range(shape[0])):
            return None  # the constant holds only some rows of the table
        rows = constant.reshape((flat.size, *constant.shape[self.indices.ndim:]))
        return np.ascontiguousarray(rows[np.argsort(flat)])

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        indices = _constant(f"{output}__rows", self.indices.astype(np.int64))
        return [indices, Node("Gather", [source, indices.outputs[0]], [output],
                              name=f"{output}__gather", attributes={"axis": 0})]

    def describe(self, source: str) -> str:  # noqa: D102
        flat = self.indices.reshape(-1).tolist()
        if flat == list(range(flat[0], flat[0] + len(flat))) if flat else False:
            rows = f"rows {flat[0]}..{flat[-1]}"
        else:
            rows = f"{len(flat)} rows"
        return f"Gather({source}, {rows})"


@dataclass(frozen=True)
class Broadcast(Recipe):
    """``constant = Expand(source, shape)``: one tensor repeated (a class token per example)."""

    shape: tuple[int, ...] = ()
    kind = "broadcast"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.ascontiguousarray(np.broadcast_to(source, self.shape))

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        if shape is None:
            return None
        return np.ascontiguousarray(first_slice(constant, shape))

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        shape = _constant(f"{output}__shape", np.array(self.shape, dtype=np.int64))
        return [shape, Node("Expand", [source, shape.outputs[0]], [output],
                            name=f"{output}__expand")]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Expand({source}, {list(self.shape)})"


@dataclass(frozen=True)
class Scale(Recipe):
    """``constant = source * factor`` (a scaling folded into a weight)."""

    factor: float = 1.0
    kind = "scale"
    exact = False

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.asarray(source * source.dtype.type(self.factor))

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return None  # dividing back is not exact

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        factor = _constant(f"{output}__factor", np.array(self.factor, np.float32))
        return [factor, Node("Mul", [source, factor.outputs[0]], [output],
                             name=f"{output}__scale")]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Mul({source}, {self.factor:g})"


def _constant(name: str, value: np.ndarray[Any, Any]) -> Node:
    return Node("Constant", [], [name], name=name,
                attributes={"value": onnx.numpy_helper.from_array(value, name)})


def recipe_by_value(constant: np.ndarray[Any, Any],
                     source: np.ndarray[Any, Any]) -> Recipe | None:
    """The recipe that computes ``constant`` from ``source``'s values, if any is known."""
    if constant.dtype != source.dtype:
        return None
    if constant.shape == source.shape:
        if np.array_equal(constant, source):
            return Copy()
        return _scale(constant, source)
    if constant.ndim == source.ndim >= 2:
        for perm in _permutations(source.shape, constant.shape):
            if np.array_equal(np.transpose(source, perm), constant):
                return Transpose(perm)
    if broadcasts(source.shape, constant.shape) and \
            np.array_equal(np.broadcast_to(source, constant.shape), constant):
        return Broadcast(tuple(constant.shape))
    indices = _row_indices(constant, source)
    return Rows(indices=indices) if indices is not None else None


def matching_source(constant: np.ndarray[Any, Any],
                     values: StateValues) -> tuple[str, Recipe] | None:
    """The one tensor of ``values`` that a transpose or copy turns into ``constant``."""
    found: list[tuple[str, Recipe]] = []
    if constant.ndim == 2:
        found = [(name, Transpose((1, 0))) for name in values.with_values(constant.T)]
    if not found:
        found = [(name, Copy()) for name in values.with_values(constant)]
    return found[0] if len(found) == 1 else None


def _scale(constant: np.ndarray[Any, Any], source: np.ndarray[Any, Any]) -> Recipe | None:
    if source.size == 0 or source.dtype.kind != "f":
        return None
    largest = int(np.argmax(np.abs(source)))
    pivot = float(source.reshape(-1)[largest])
    if pivot == 0.0:
        return None
    recipe = Scale(float(constant.reshape(-1)[largest]) / pivot)
    return recipe if recipe.factor != 1.0 and close(recipe.compute(source), constant) else None


def _row_indices(constant: np.ndarray[Any, Any],
                 source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Indices ``i`` with ``constant == source[i]``, each row found exactly once in source."""
    if source.ndim < 1 or source.shape[0] == 0:
        return None
    row_shape = source.shape[1:]
    lead = constant.ndim - len(row_shape)
    if lead < 1 or tuple(constant.shape[lead:]) != tuple(row_shape):
        return None
    rows = np.ascontiguousarray(source).reshape(source.shape[0], -1)
    index: dict[bytes, int] = {}
    repeated: set[bytes] = set()
    for number, row in enumerate(rows):
        digest = hashlib.blake2b(row.tobytes(), digest_size=16).digest()
        if digest in index:
            repeated.add(digest)
        index[digest] = number
    wanted = np.ascontiguousarray(constant).reshape(-1, rows.shape[1])
    found = np.empty(len(wanted), dtype=np.int64)
    for number, row in enumerate(wanted):
        digest = hashlib.blake2b(row.tobytes(), digest_size=16).digest()
        if digest not in index or digest in repeated:
            return None
        found[number] = index[digest]
    return found.reshape(constant.shape[:lead])


_NEAR: Final = 0.25
"""A row matches its nearest row only when the next nearest is four times as far."""


def nearest_rows(constant: np.ndarray[Any, Any],
                  source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Indices of the rows of ``source`` nearest each row of ``constant``, if each is decisive.

    The rows a fold took from a table that the checkpoint changed since (fine-tuned
    position embeddings) are no longer equal to any row, but each is still far nearer its
    own row than any other. Decisive means: the nearest row is at most :data:`_NEAR` of the
    distance to the second nearest, and no two rows of the constant share their nearest row.
    """
    if source.ndim < 2 or source.shape[0] < 2 or source.dtype.kind != "f":
        return None
    row_shape = source.shape[1:]
    lead = constant.ndim - len(row_shape)
    if lead < 1 or tuple(constant.shape[lead:]) != tuple(row_shape):
        return None
    table = source.reshape(source.shape[0], -1).astype(np.float64)
    wanted = constant.reshape(-1, table.shape[1]).astype(np.float64)
    distances = (np.square(wanted).sum(1)[:, None] - 2 * wanted @ table.T
                 + np.square(table).sum(1)[None, :])
    order = np.argsort(distances, axis=1)[:, :2]
    nearest = np.take_along_axis(distances, order, axis=1).clip(min=0)
    if not bool((np.sqrt(nearest[:, 0]) <= _NEAR * np.sqrt(nearest[:, 1])).all()):
        return None
    found = order[:, 0].astype(np.int64)
    if len(set(found.tolist())) != len(found):
        return None
    return found.reshape(constant.shape[:lead])


def _permutations(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[int, ...]]:
    if len(source) > 4:
        return [tuple(reversed(range(len(source))))] if source[::-1] == target else []
    return [perm for perm in itertools.permutations(range(len(source)))
            if perm != tuple(range(len(source)))
            and tuple(source[p] for p in perm) == tuple(target)]


def broadcasts(source: Sequence[int], target: Sequence[int]) -> bool:
    """Whether a tensor of shape ``source`` broadcasts to ``target`` (numpy's rules)."""
    if len(source) > len(target):
        return False
    padded = (1,) * (len(target) - len(source)) + tuple(source)
    return all(s in (1, t) for s, t in zip(padded, target, strict=True))


def first_slice(constant: np.ndarray[Any, Any], shape: Sequence[int]) -> np.ndarray[Any, Any]:
    """The first slice of ``constant`` along the axes ``shape`` broadcasts, as ``shape``."""
    padded = (1,) * (constant.ndim - len(shape)) + tuple(shape)
    index = tuple(slice(0, 1) if s == 1 else slice(None) for s in padded)
    return constant[index].reshape(tuple(shape))


def close(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Whether ``a`` equals ``b`` up to :data:`FUSION_RTOL` of ``b``'s largest magnitude."""
    if a.shape != b.shape:
        return False
    scale = max(float(np.abs(b).max(initial=0.0)), 1e-30)
    return float(np.abs(a.astype(np.float64) - b).max(initial=0.0)) <= FUSION_RTOL * scale
