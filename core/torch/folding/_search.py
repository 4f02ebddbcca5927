"""Finding, from the values, how a folded constant is computed from its one source.

Two general rules cover what torch's exporters fold from one tensor:

* **index selection**: any chain of ``Gather``, ``Slice``, ``Transpose``, ``Reshape``,
  ``Expand``, ``Unsqueeze``, ``Squeeze`` or ``Concat`` over one source makes every element
  of the constant a copy of one element of the source. :func:`locate` finds each element
  in the source (weights from training or random initialisation are almost all distinct),
  and :func:`smallest_recipe` turns the map into the smallest equivalent: a known shape op
  (:class:`Copy`, :class:`Reshape`, :class:`Transpose`, :class:`Broadcast`, :class:`Rows`)
  when the map is one, else a ``Gather`` over the flattened source (:class:`Select`);
* **affine**: ``a * select(w) + b`` with ``a`` and ``b`` one number or one per channel
  (a scaling ``W * k``, RMSNorm's ``1 + w``), for the shape ops a constant's shape allows.

Where the source repeats values, an element can be the copy of several. A shape op the
values allow decides, when it is the only one; then the rows an index tensor recorded
with the fold reads (``relative_position_index``); then a map affine in the constant's
coordinates (what chains of slices, transposes and broadcasts give) that the unrepeated
elements determine and every element's value agrees with; else the search refuses,
naming the ambiguity (:attr:`Found.problem`), rather than train the wrong element.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphpass.torch.folding._recipes import (
    Affine,
    Broadcast,
    Copy,
    Recipe,
    Reshape,
    Rows,
    Select,
    Transpose,
    broadcasts,
    close,
    permutations,
)

__all__ = ["Found", "Located", "locate", "recipe_by_value", "selection", "shape_ops",
           "smallest_recipe"]


@dataclass
class Found:
    """What :func:`recipe_by_value` found.

    Attributes:
        recipe: The recipe, or ``None``.
        problem: Why none is given although the values are copies of the source's (an
            ambiguity), else ``None``.
        inferred: Whether the recipe rests on an assumption the values cannot check (the
            scale of an offset on a source whose values are all equal).
        how: A note on how it was decided, for the report (``""``: by the values alone).
    """

    recipe: Recipe | None = None
    problem: str | None = None
    inferred: bool = False
    how: str = ""


def recipe_by_value(constant: np.ndarray[Any, Any], source: np.ndarray[Any, Any], *,
                    rows_read: np.ndarray[Any, Any] | None = None) -> Found:
    """How ``constant`` is computed from ``source``'s values (see the module documentation).

    Args:
        constant: The folded constant.
        source: The values it was folded from.
        rows_read: The rows of ``source`` an index tensor recorded with the fold reads
            (``None``: none recorded); they decide between repeated rows.
    """
    if constant.dtype != source.dtype or source.size == 0:
        return Found()
    matching = [recipe for recipe in shape_ops(source.shape, constant.shape)
                if np.array_equal(recipe.compute(source), constant)]
    distinct = _distinct_maps(matching, source.shape)
    if len(distinct) == 1:
        return Found(distinct[0])
    if len(distinct) > 1:
        shown = " and ".join(r.describe("source") for r in distinct[:2])
        return Found(problem=f"its values are both {shown} (the source repeats values), so "
                             "which elements it copies is ambiguous")
    located = locate(constant, source)
    if located is not None and (source.size == 1 or constant.size == 1
                                or not bool((constant == constant.reshape(-1)[0]).all())):
        # A constant of one repeated value (zeros, as a placeholder export holds) tells
        # nothing about where it came from, even where the source holds that value once.
        return _selection(located, source, rows_read)
    return _affine(constant, source)


def shape_ops(source: tuple[int, ...], target: tuple[int, ...]) -> list[Recipe]:
    """The known shape ops that turn a tensor of shape ``source`` into shape ``target``."""
    found: list[Recipe] = []
    if tuple(source) == tuple(target):
        found.append(Copy())
    elif int(np.prod(source)) == int(np.prod(target)):
        found.append(Reshape(tuple(target), tuple(source)))
    if len(source) == len(target) >= 2:
        found += [Transpose(perm) for perm in permutations(tuple(source), tuple(target))]
    if broadcasts(source, target) and tuple(source) != tuple(target) and \
            int(np.prod(source)) != int(np.prod(target)):
        found.append(Broadcast(tuple(target)))
    return found


def _distinct_maps(recipes: Sequence[Recipe], shape: tuple[int, ...]) -> list[Recipe]:
    """``recipes`` less those that copy the same elements as one before them."""
    positions = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    kept: list[Recipe] = []
    maps: list[np.ndarray[Any, Any]] = []
    for recipe in recipes:
        mapped = recipe.compute(positions)
        if not any(m.shape == mapped.shape and np.array_equal(m, mapped) for m in maps):
            kept.append(recipe)
            maps.append(mapped)
    return kept


@dataclass
class Located:
    """Where each element of a constant is in its source (:func:`locate`).

    Attributes:
        indices: For each element of the constant (its shape), a position in the flattened
            source holding its value (the first, where several do).
        ambiguous: For each element, whether several positions hold its value.
        start: For each element, where its value's run starts in ``order``.
        count: For each element, how many positions hold its value.
        order: The flattened source's positions sorted by value.
        tolerance: How far a value may be from the element it is taken for (``0``: bit for
            bit).
    """

    indices: np.ndarray[Any, Any]
    ambiguous: np.ndarray[Any, Any]
    start: np.ndarray[Any, Any]
    count: np.ndarray[Any, Any]
    order: np.ndarray[Any, Any]
    tolerance: float = 0.0


def locate(constant: np.ndarray[Any, Any], source: np.ndarray[Any, Any], *,
           tolerance: float = 0.0) -> Located | None:
    """Each element of ``constant`` in ``source`` (``None``: one is not there).

    Args:
        constant: The folded constant.
        source: The values it may copy.
        tolerance: ``0``: bit for bit, same dtype; else each element is the source values
            within ``tolerance`` of it (values the exporter computed in float32 and graphpass
            again in float64), and several there make it ambiguous.
    """
    if tolerance > 0:
        return _locate_near(constant, source, tolerance)
    if constant.dtype != source.dtype or source.size == 0:
        return None
    unsigned = f"u{source.dtype.itemsize}"
    bits = np.ascontiguousarray(source).reshape(-1).view(unsigned)
    wanted = np.ascontiguousarray(constant).reshape(-1).view(unsigned)
    order = np.argsort(bits, kind="stable")
    ordered = bits[order]
    start = np.searchsorted(ordered, wanted, side="left")
    count = np.searchsorted(ordered, wanted, side="right") - start
    if not bool((count > 0).all()):
        return None
    indices = order[np.minimum(start, bits.size - 1)].astype(np.int64)
    shape = constant.shape
    return Located(indices.reshape(shape), (count > 1).reshape(shape), start.reshape(shape),
                   count.reshape(shape), order)


def _locate_near(constant: np.ndarray[Any, Any], source: np.ndarray[Any, Any],
                 tolerance: float) -> Located | None:
    """:func:`locate` up to ``tolerance``: every source value that near is a candidate."""
    if source.size == 0 or source.dtype.kind != "f" or constant.dtype.kind != "f":
        return None
    values = np.ascontiguousarray(source, dtype=np.float64).reshape(-1)
    wanted = np.ascontiguousarray(constant, dtype=np.float64).reshape(-1)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    start = np.searchsorted(ordered, wanted - tolerance, side="left")
    count = np.searchsorted(ordered, wanted + tolerance, side="right") - start
    if not bool((count > 0).all()):
        return None
    indices = order[np.minimum(start, values.size - 1)].astype(np.int64)
    shape = constant.shape
    return Located(indices.reshape(shape), (count > 1).reshape(shape), start.reshape(shape),
                   count.reshape(shape), order, tolerance)


def selection(located: Located, source: np.ndarray[Any, Any]) -> Found:
    """The recipe copying the elements ``located`` found (:func:`locate`), or the ambiguity.

    Repeated values are decided as :func:`recipe_by_value` decides them, without an index
    tensor: by the one strided map the unrepeated elements determine.
    """
    return _selection(located, source, None)


def _selection(located: Located, source: np.ndarray[Any, Any],
               rows_read: np.ndarray[Any, Any] | None) -> Found:
    """The recipe of a constant whose every element is a copy of a source element."""
    indices = located.indices.copy()
    how = ""
    if bool(located.ambiguous.any()):
        row = max(int(np.prod(source.shape[1:])), 1)
        readable = None
        if rows_read is not None and source.ndim >= 1:
            readable = np.zeros(source.shape[0], dtype=bool)
            readable[rows_read[(rows_read >= 0) & (rows_read < source.shape[0])]] = True
        left = 0
        example: tuple[int, list[int]] | None = None
        flat = indices.reshape(-1)
        for element in np.flatnonzero(located.ambiguous.reshape(-1)):
            begin = int(located.start.reshape(-1)[element])
            candidates = located.order[begin:begin + int(located.count.reshape(-1)[element])]
            if readable is not None:
                candidates = candidates[readable[candidates // row]]
            if candidates.size == 1:
                flat[element] = int(candidates[0])
                continue
            left += 1
            if example is None:
                example = (int(element), sorted(int(c) for c in candidates))
        if left:
            strided = _strided_map(located, source)
            if strided is not None:
                return Found(smallest_recipe(strided, tuple(source.shape)), how=(
                    "a map affine in the constant's coordinates (a chain of slices, "
                    "transposes and broadcasts), the only one the unrepeated values allow, "
                    "decides between repeated values"))
            assert example is not None
            first, positions = example
            where = np.unravel_index(first, located.indices.shape)
            return Found(problem=(
                f"{left} of its {indices.size} elements are copies of values the source holds "
                f"at several places (element {list(map(int, where))} equals the source at "
                f"flat positions {positions[:4]}), and no shape op nor index tensor recorded "
                "with the fold decides which it copies"))
        how = "the rows the index tensor recorded with it reads decide between repeated values"
    return Found(smallest_recipe(indices, tuple(source.shape)), how=how)


def _strided_map(located: Located, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """The source positions of a strided map that decides between repeated values, if any.

    The map is ``base + sum(stride_k * i_k)`` over the constant's coordinates ``i``:
    slices, transposes, broadcasts, squeezes and unsqueezes, chained, copy the source by
    such a map. Where the elements found in one place determine it (their coordinates span
    every axis the constant varies along) and it puts each repeated element on a position
    that holds its value, it is the only map of that kind the values allow; else ``None``.
    """
    shape = located.indices.shape
    known = ~located.ambiguous.reshape(-1)
    if not bool(known.any()):
        return None
    coordinates = np.indices(shape).reshape(len(shape), -1).T.astype(np.float64)
    design = np.hstack([np.ones((coordinates.shape[0], 1)), coordinates])
    varying = [0, *(k + 1 for k, size in enumerate(shape) if size > 1)]
    design = design[:, varying]
    if np.linalg.matrix_rank(design[known]) < len(varying):
        return None  # the unrepeated elements leave the map open
    positions = located.indices.reshape(-1).astype(np.float64)
    solution, *_ = np.linalg.lstsq(design[known], positions[known], rcond=None)
    strides = np.round(solution)
    predicted = np.round(design @ strides).astype(np.int64)
    if not np.array_equal(predicted[known], located.indices.reshape(-1)[known]):
        return None
    flat = np.ascontiguousarray(source).reshape(-1)
    if predicted.min() < 0 or predicted.max() >= flat.size:
        return None
    if located.tolerance > 0:  # each element within the tolerance of its own value
        values = flat.astype(np.float64)
        near = values[located.order[located.start.reshape(-1)]]
        return predicted.reshape(shape) if bool(
            (np.abs(values[predicted] - near) <= 2 * located.tolerance).all()) else None
    unsigned = f"u{source.dtype.itemsize}"
    wanted = flat.view(unsigned)[located.order[located.start.reshape(-1)]]
    if not np.array_equal(flat.view(unsigned)[predicted], wanted):
        return None
    return predicted.reshape(shape)


def smallest_recipe(indices: np.ndarray[Any, Any], source_shape: tuple[int, ...]) -> Recipe:
    """The smallest recipe copying the source elements ``indices`` (flat positions) name."""
    positions = np.arange(int(np.prod(source_shape)), dtype=np.int64).reshape(source_shape)
    for recipe in shape_ops(source_shape, tuple(indices.shape)):
        mapped = recipe.compute(positions)
        if mapped.shape == indices.shape and np.array_equal(mapped, indices):
            return recipe
    rows = _rows(indices, source_shape)
    if rows is not None:
        return Rows(indices=rows)
    return Select(indices=indices.astype(np.int64), source_shape=tuple(source_shape))


def _rows(indices: np.ndarray[Any, Any], source_shape: tuple[int, ...]
          ) -> np.ndarray[Any, Any] | None:
    """Row numbers ``r`` with ``indices == positions[r]`` (a gather along axis 0), if any."""
    if len(source_shape) < 1:
        return None
    row_shape = tuple(source_shape[1:])
    lead = indices.ndim - len(row_shape)
    if lead < 1 or tuple(indices.shape[lead:]) != row_shape:
        return None
    size = max(int(np.prod(row_shape)), 1)
    flat = indices.reshape(-1, size)
    rows = flat[:, 0] // size
    if not np.array_equal(flat, rows[:, None] * size + np.arange(size)[None, :]):
        return None
    return rows.reshape(indices.shape[:lead])


def _affine(constant: np.ndarray[Any, Any], source: np.ndarray[Any, Any]) -> Found:
    """``a * op(source) + b`` for a shape op the shapes allow, per tensor or per channel."""
    if source.dtype.kind != "f":
        return Found()
    for inner in shape_ops(source.shape, constant.shape):
        selected = inner.compute(source).astype(np.float64)
        found = _fit(constant, source, selected, inner, axis=None)
        if found.recipe is not None:
            return found
        for axis in range(constant.ndim):
            found = _fit(constant, source, selected, inner, axis=axis)
            if found.recipe is not None:
                return found
    return Found()


def _fit(constant: np.ndarray[Any, Any], source: np.ndarray[Any, Any],
         selected: np.ndarray[Any, Any], inner: Recipe, *, axis: int | None) -> Found:
    """``scale`` and ``offset`` (per tensor, or per channel along ``axis``) that give it."""
    wanted = constant.astype(np.float64)
    shape: tuple[int, ...] = ()
    if axis is None:
        channels = 1
        s, c = selected.reshape(1, -1), wanted.reshape(1, -1)
    else:
        channels = constant.shape[axis]
        if channels < 2 or constant.size // channels < 2:
            return Found()
        shape = tuple(channels if k == axis else 1 for k in range(constant.ndim))
        s = np.moveaxis(selected, axis, 0).reshape(channels, -1)
        c = np.moveaxis(wanted, axis, 0).reshape(channels, -1)
    high, low = s.argmax(axis=1), s.argmin(axis=1)
    channel = np.arange(channels)
    span = s[channel, high] - s[channel, low]
    inferred = False
    if bool((span == 0).any()):
        # Every value of a channel is equal (a fresh RMSNorm's zeros): no scale can be read
        # from them. Only an offset of a whole tensor is taken, at scale 1 (``1 + w``).
        if axis is not None or not bool((c == c[:, :1]).all()):
            return Found()
        candidates = [(np.ones(channels), c[:, 0] - s[:, 0])]
        inferred = True
    else:
        pivot = s[channel, high]
        largest = np.where(np.abs(pivot) >= np.abs(s[channel, low]), high, low)
        at = s[channel, largest]
        candidates = []
        if bool((at != 0).all()):
            candidates.append((c[channel, largest] / at, np.zeros(channels)))
        candidates.append((np.ones(channels), c[channel, largest] - at))
        scale = (c[channel, high] - c[channel, low]) / span
        candidates.append((scale, c[channel, high] - scale * s[channel, high]))
    for scale, offset in candidates:
        if bool((scale == 0).any()) or (bool((scale == 1).all()) and bool((offset == 0).all())):
            continue
        recipe = Affine(inner=inner, scale=scale.astype(np.float32).reshape(shape),
                        offset=offset.astype(np.float32).reshape(shape))
        if close(recipe.compute(source), constant):
            how = ("every value of the source is equal, so the scale cannot be read from "
                   "them: 1 is taken (an offset, as x * (1 + w) writes it)") if inferred else ""
            return Found(recipe, inferred=inferred, how=how)
    return Found()
