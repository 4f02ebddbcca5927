"""Values of torch state by name, read on demand: the file's, or a checkpoint's."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from graphpass.ir import Graph
from graphpass.torch._export_record import TRAINABLE_TYPES

__all__ = ["StateValues"]


class StateValues:
    """Values of torch state by name, read on demand (the file's, or a checkpoint's).

    Args:
        shapes: Every name this source knows, with its shape and ONNX element type.
        load: Reads a name's values (called at most once a name).
    """

    def __init__(self, shapes: Mapping[str, tuple[tuple[int, ...], int]],
                 load: Callable[[str], np.ndarray[Any, Any]]) -> None:
        self._shapes = dict(shapes)
        self._load = load
        self._cache: dict[str, np.ndarray[Any, Any]] = {}
        self._by_shape: dict[tuple[int, ...], list[str]] | None = None
        self._digests: dict[tuple[int, ...], dict[bytes, list[str]]] = {}

    @classmethod
    def of_initializers(cls, graph: Graph, names: Iterable[str]) -> StateValues:
        """The values of ``graph``'s initializers called ``names``."""
        tensors = graph.initializers
        shapes = {n: (tuple(int(d) for d in tensors[n].shape), tensors[n].dtype)
                  for n in names if n in tensors}
        return cls(shapes, lambda name: tensors[name].numpy())

    @classmethod
    def empty(cls) -> StateValues:
        """A source that knows nothing."""
        return cls({}, lambda name: np.zeros(0))

    def __contains__(self, name: object) -> bool:
        return name in self._shapes

    def names(self) -> list[str]:
        """Every name this source knows."""
        return list(self._shapes)

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of ``name`` (``None``: unknown here)."""
        known = self._shapes.get(name)
        return known[0] if known is not None else None

    def dtype(self, name: str) -> int | None:
        """The ONNX element type of ``name`` (``None``: unknown here)."""
        known = self._shapes.get(name)
        return known[1] if known is not None else None

    def value(self, name: str) -> np.ndarray[Any, Any] | None:
        """The values of ``name`` (``None``: unknown here)."""
        if name not in self._shapes:
            return None
        if name not in self._cache:
            self._cache[name] = np.asarray(self._load(name))
        return self._cache[name]

    def equals(self, name: str, values: np.ndarray[Any, Any]) -> bool | None:
        """Whether ``name`` holds ``values`` bit for bit (``None``: unknown here).

        Reads the tensor without keeping it, so that comparing every weight holds one at a
        time.
        """
        if name not in self._shapes:
            return None
        saved = self._cache.get(name)
        return bool(np.array_equal(values, saved if saved is not None else self._load(name)))

    def with_shape(self, shape: tuple[int, ...]) -> list[str]:
        """The names of float tensors of ``shape``."""
        if self._by_shape is None:
            self._by_shape = {}
            for name, (dims, dtype) in self._shapes.items():
                if dtype in TRAINABLE_TYPES:
                    self._by_shape.setdefault(dims, []).append(name)
        return list(self._by_shape.get(shape, ()))

    def with_values(self, values: np.ndarray[Any, Any]) -> list[str]:
        """The names of float tensors holding exactly ``values`` (same shape and bytes).

        Each tensor of that shape is read and hashed once (and not kept), so that finding the
        sources of many folded copies takes one pass over the candidates.
        """
        shape = tuple(int(d) for d in values.shape)
        index = self._digests.get(shape)
        if index is None:
            index = {}
            for name in self.with_shape(shape):
                array = self._cache.get(name)
                index.setdefault(_digest(np.asarray(self._load(name)) if array is None
                                         else array), []).append(name)
            self._digests[shape] = index
        found = []
        for name in index.get(_digest(values), ()):
            candidate = self.value(name)
            if candidate is not None and candidate.dtype == values.dtype and \
                    np.array_equal(candidate, values):
                found.append(name)
        return found


def _digest(array: np.ndarray[Any, Any]) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).digest()
