"""How a folded constant is computed from its one source, and finding that from the values.

Each :class:`Recipe` computes the constant with numpy (:meth:`Recipe.compute`, to compare
with the file), emits the nodes that compute it in the graph (:meth:`Recipe.nodes`), and
says whether the source's own values can be read back from the constant
(:meth:`Recipe.source_of`). :func:`matching_source` and :func:`nearest_rows` find a recipe
from values across tensors; :mod:`graphpass.torch.folding._search` finds one from one
source's values.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import onnx

from graphpass.ir import Node
from graphpass.torch.folding._values import StateValues

__all__ = ["FUSION_RTOL", "Affine", "Broadcast", "Copy", "Recipe", "Reshape", "Rows", "Select",
           "Transpose", "WeightNorm", "broadcasts", "close", "first_slice", "matching_source",
           "nearest_rows", "permutations"]

FUSION_RTOL: Final = 1e-4
"""Largest difference between a fused weight and the fusion of the checkpoint's tensors,
relative to the fused weight's largest magnitude: float32 rounding of the exporter's own
fusion (measured: 3e-7 on the zoo's convolutions)."""


class Recipe:
    """How a folded constant is computed from its one source (see the subclasses)."""

    kind: str = ""
    exact: bool = True
    """Whether :meth:`compute` gives the exporter's values bit for bit."""

    @property
    def reads(self) -> tuple[str, ...]:
        """Further state the recipe reads besides the source, by name.

        A reparametrization's other tensors; :meth:`compute` takes their values after the
        source's, in this order.
        """
        return ()

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The constant, computed from the source's values (and those of :attr:`reads`)."""
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

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(np.transpose(source, self.perm))

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return np.ascontiguousarray(np.transpose(constant, np.argsort(self.perm)))

    def nodes(self, source: str, output: str) -> list[Node]:
        return [Node("Transpose", [source], [output], name=f"{output}__transpose",
                     attributes={"perm": list(self.perm)})]

    def describe(self, source: str) -> str:
        return f"Transpose({source})"


@dataclass(frozen=True)
class Copy(Recipe):
    """``constant = source`` (a copy the exporter kept under another name)."""

    kind = "copy"

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return source

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return constant

    def nodes(self, source: str, output: str) -> list[Node]:
        return [Node("Identity", [source], [output], name=f"{output}__copy")]

    def describe(self, source: str) -> str:
        return f"Identity({source})"


@dataclass(frozen=True, eq=False)
class Rows(Recipe):
    """``constant = Gather(source, indices, axis=0)``: rows of a table (position embeddings)."""

    indices: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.int64))
    kind = "rows"

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.take(source, self.indices, axis=0)

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        flat = self.indices.reshape(-1)
        if shape is None or sorted(flat.tolist()) != list(range(shape[0])):
            return None  # the constant holds only some rows of the table
        rows = constant.reshape((flat.size, *constant.shape[self.indices.ndim:]))
        return np.ascontiguousarray(rows[np.argsort(flat)])

    def nodes(self, source: str, output: str) -> list[Node]:
        indices = _constant(f"{output}__rows", self.indices.astype(np.int64))
        return [indices, Node("Gather", [source, indices.outputs[0]], [output],
                              name=f"{output}__gather", attributes={"axis": 0})]

    def describe(self, source: str) -> str:
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
    source: tuple[int, ...] | None = None
    """The source's shape when the recipe read it from the constant (the export does not
    record it): the constant's shape with each repeated axis 1. ``None``: given apart."""
    kind = "broadcast"

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(np.broadcast_to(source, self.shape))

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        shape = shape if shape is not None else self.source
        if shape is None:
            return None
        return np.ascontiguousarray(first_slice(constant, shape))

    def nodes(self, source: str, output: str) -> list[Node]:
        shape = _constant(f"{output}__shape", np.array(self.shape, dtype=np.int64))
        return [shape, Node("Expand", [source, shape.outputs[0]], [output],
                            name=f"{output}__expand")]

    def describe(self, source: str) -> str:
        return f"Expand({source}, {list(self.shape)})"


@dataclass(frozen=True)
class Reshape(Recipe):
    """``constant = Reshape(source, shape)`` (also an ``Unsqueeze`` or ``Squeeze``)."""

    shape: tuple[int, ...] = ()
    source_shape: tuple[int, ...] = ()
    kind = "reshape"

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(source.reshape(self.shape))

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return np.ascontiguousarray(constant.reshape(self.source_shape))

    def nodes(self, source: str, output: str) -> list[Node]:
        shape = _constant(f"{output}__shape", np.array(self.shape, dtype=np.int64))
        return [shape, Node("Reshape", [source, shape.outputs[0]], [output],
                            name=f"{output}__reshape")]

    def describe(self, source: str) -> str:
        return f"Reshape({source}, {list(self.shape)})"


@dataclass(frozen=True, eq=False)
class Select(Recipe):
    """``constant = Gather(Reshape(source, [-1]), indices)``: any copy of source elements.

    Whatever chain of ``Gather``, ``Slice``, ``Transpose``, ``Reshape``, ``Expand``,
    ``Unsqueeze``, ``Squeeze`` or ``Concat`` over one source the exporter folded, every
    element of the constant is one element of the source: ``indices`` (the constant's
    shape) holds, for each, its position in the flattened source.
    """

    indices: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.int64))
    source_shape: tuple[int, ...] = ()
    kind = "selection"

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(source.reshape(-1)[self.indices])

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        size = int(np.prod(self.source_shape))
        flat = self.indices.reshape(-1)
        if np.unique(flat).size != size:
            return None  # the constant holds only some elements of the source
        values = np.empty(size, dtype=constant.dtype)
        values[flat] = constant.reshape(-1)
        return values.reshape(self.source_shape)

    def nodes(self, source: str, output: str) -> list[Node]:
        shape = _constant(f"{output}__flat_shape", np.array([-1], dtype=np.int64))
        indices = _constant(f"{output}__elements", self.indices.astype(np.int64))
        flat = f"{output}__flat"
        return [shape, Node("Reshape", [source, shape.outputs[0]], [flat],
                            name=f"{output}__flatten"),
                indices, Node("Gather", [flat, indices.outputs[0]], [output],
                              name=f"{output}__gather", attributes={"axis": 0})]

    def describe(self, source: str) -> str:
        return (f"Gather(Reshape({source}, [-1]), {self.indices.size} element indices "
                f"{list(self.indices.shape)})")


@dataclass(frozen=True, eq=False)
class SelectSeveral(Recipe):
    """``constant = Gather(Concat(flat source, flat others...), indices)``.

    Copies of the elements of several tensors (``Concat`` of a transposed weight and
    another weight): the index selection of :class:`Select` over the flattened sources
    laid end to end, the source first, then :attr:`reads` in order; ``indices`` (the
    constant's shape) holds each element's position there.
    """

    others: tuple[str, ...] = ()
    indices: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.int64))
    kind = "selection"

    @property
    def reads(self) -> tuple[str, ...]:
        return self.others

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if len(others) != len(self.others):
            raise ValueError(f"the selection reads {len(self.others)} more tensors")
        pool = np.concatenate([np.ascontiguousarray(v).reshape(-1) for v in (source, *others)])
        return np.ascontiguousarray(pool[self.indices])

    def nodes(self, source: str, output: str) -> list[Node]:
        shape = _constant(f"{output}__flat_shape", np.array([-1], dtype=np.int64))
        indices = _constant(f"{output}__elements", self.indices.astype(np.int64))
        nodes = [shape, indices]
        flats = []
        for k, name in enumerate((source, *self.others)):
            flats.append(f"{output}__flat{k}")
            nodes.append(Node("Reshape", [name, shape.outputs[0]], [flats[-1]],
                              name=f"{output}__flatten{k}"))
        nodes += [Node("Concat", flats, [f"{output}__pool"], name=f"{output}__concat",
                       attributes={"axis": 0}),
                  Node("Gather", [f"{output}__pool", indices.outputs[0]], [output],
                       name=f"{output}__gather", attributes={"axis": 0})]
        return nodes

    def describe(self, source: str) -> str:
        return (f"Gather(Concat of {', '.join((source, *self.others))} flattened, "
                f"{self.indices.size} element indices {list(self.indices.shape)})")


@dataclass(frozen=True, eq=False)
class Affine(Recipe):
    """``constant = inner(source) * scale + offset``: a scaling or an offset folded in.

    ``scale`` and ``offset`` are one number or one per channel (shaped to broadcast along
    one axis of the constant): ``W * k``, RMSNorm's ``1 + w``, a per-channel ``a * w + b``.
    """

    inner: Recipe = field(default_factory=Copy)
    scale: np.ndarray[Any, Any] = field(default_factory=lambda: np.ones((), np.float32))
    offset: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros((), np.float32))
    kind = "affine"
    exact = False

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        selected = self.inner.compute(source, *others)
        dtype = selected.dtype
        return np.asarray(selected * self.scale.astype(dtype) + self.offset.astype(dtype),
                          dtype=dtype)

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        if not bool(np.all(self.scale != 0)):
            return None
        dtype = constant.dtype
        selected = ((constant - self.offset.astype(dtype)) / self.scale.astype(dtype))
        return self.inner.source_of(np.asarray(selected, dtype=dtype), shape)

    def nodes(self, source: str, output: str) -> list[Node]:
        nodes: list[Node] = []
        current = source
        if not isinstance(self.inner, Copy):
            current = f"{output}__selected"
            nodes += self.inner.nodes(source, current)
        steps = [(self.scale, "Mul", "scale", 1.0), (self.offset, "Add", "offset", 0.0)]
        steps = [step for step in steps if not bool(np.all(step[0] == step[3]))]
        for number, (values, op_type, word, _) in enumerate(steps):
            factor = _constant(f"{output}__{word}", values.astype(np.float32))
            result = output if number == len(steps) - 1 else f"{output}__{op_type.lower()}"
            nodes += [factor, Node(op_type, [current, factor.outputs[0]], [result],
                                   name=f"{output}__{word}ed")]
            current = result
        if not steps:
            nodes.append(Node("Identity", [current], [output], name=f"{output}__copy"))
        return nodes

    def describe(self, source: str) -> str:
        text = source if isinstance(self.inner, Copy) else self.inner.describe(source)
        if not bool(np.all(self.scale == 1.0)):
            text = f"{text} * {_number(self.scale)}"
        if not bool(np.all(self.offset == 0.0)):
            text = f"{text} + {_number(self.offset)}"
        return text


@dataclass(frozen=True, eq=False)
class WeightNorm(Recipe):
    """``constant = inner(g * v / ||v||)``: ``torch.nn.utils.parametrizations.weight_norm``.

    The source is the direction ``v`` (``...parametrizations.weight.original1``); the
    magnitude ``g`` (``...original0``) is read too (:attr:`reads`). The norm is taken over
    every axis but ``dim`` (all of them when ``dim`` is ``None``), as torch's
    ``_weight_norm`` does; ``inner`` is what the exporter folded on top (the transpose an
    ``nn.Linear`` reads).
    """

    magnitude: str = ""
    dim: int | None = 0
    inner: Recipe = field(default_factory=Copy)
    kind = "weight-norm"
    exact = False

    rank: int = 2

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.magnitude,)

    def axes(self, ndim: int) -> list[int]:
        """The axes the norm is taken over."""
        return [k for k in range(ndim) if k != self.dim]

    def weight(self, direction: np.ndarray[Any, Any],
               magnitude: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``g * v / ||v||`` (in float64, then cast), before :attr:`inner`."""
        v = direction.astype(np.float64)
        norm = np.sqrt(np.square(v).sum(axis=tuple(self.axes(v.ndim)), keepdims=True))
        return np.asarray(v * (magnitude.astype(np.float64) / norm), dtype=direction.dtype)

    def compute(self, source: np.ndarray[Any, Any],
                *others: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if len(others) != 1:
            raise ValueError(f"a weight norm reads {self.magnitude!r} too")
        return self.inner.compute(self.weight(source, others[0]))

    def nodes(self, source: str, output: str) -> list[Node]:
        axes = _constant(f"{output}__norm_axes", np.array(self.axes(self.rank), np.int64))
        weight = output if isinstance(self.inner, Copy) else f"{output}__weight"
        nodes = [
            axes,
            Node("ReduceL2", [source, axes.outputs[0]], [f"{output}__norm"],
                 name=f"{output}__norm", attributes={"keepdims": 1}),
            Node("Div", [self.magnitude, f"{output}__norm"], [f"{output}__factor"],
                 name=f"{output}__divide"),
            Node("Mul", [source, f"{output}__factor"], [weight], name=f"{output}__weigh")]
        if not isinstance(self.inner, Copy):
            nodes += self.inner.nodes(weight, output)
        return nodes

    def describe(self, source: str) -> str:
        text = f"weight_norm({self.magnitude}, {source}, dim={self.dim})"
        return text if isinstance(self.inner, Copy) else self.inner.describe(text)


def _number(values: np.ndarray[Any, Any]) -> str:
    if values.size == 1:
        return f"{float(values.reshape(-1)[0]):g}"
    return f"{values.size} per-channel values"


def _constant(name: str, value: np.ndarray[Any, Any]) -> Node:
    return Node("Constant", [], [name], name=name,
                attributes={"value": onnx.numpy_helper.from_array(value, name)})


def matching_source(constant: np.ndarray[Any, Any],
                     values: StateValues) -> tuple[str, Recipe] | None:
    """The one tensor of ``values`` that a transpose or copy turns into ``constant``."""
    found: list[tuple[str, Recipe]] = []
    if constant.ndim == 2:
        found = [(name, Transpose((1, 0))) for name in values.with_values(constant.T)]
    if not found:
        found = [(name, Copy()) for name in values.with_values(constant)]
    return found[0] if len(found) == 1 else None


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


def permutations(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The axis orders, other than the identity, that turn shape ``source`` into ``target``."""
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
