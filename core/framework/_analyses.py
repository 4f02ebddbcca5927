"""Typed analyses: what one pass learns about the model and a later pass asks for.

A pass that learns a fact later passes need (which checkpoint key filled which
initializer, which weights train) returns it as a typed object, usually a frozen
dataclass, in :attr:`PassResult.analyses <graphpass.PassResult>`, and lists its type
in ``provides``. A later pass asks for it by type::

    reconciled = context.analysis(ReconcileResult)     # None when no valid one exists
    if reconciled is not None:
        keys = reconciled.keys

This is MLIR's ``getAnalysis<T>()`` and ``PreservedAnalyses``, and onnx-ir's
``requires``/``ensures``: an analysis describes the model as it was when the pass gave
it, so the manager drops every analysis when a pass changes the model, except those the
pass lists in ``preserves`` (it promises that what it changed leaves them true). An
analysis pass never changes the model, so it invalidates nothing. A dropped analysis is
absent, not recomputed: the pass that asks decides what to do without it (compute the
fact itself, or run without it).

``stats`` serve reports only: no pass reads another pass's stats or findings.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any, TypeVar

__all__ = ["Analyses"]

T = TypeVar("T")


class Analyses:
    """The valid analyses of a run, one per type.

    :class:`~graphpass.PassManager` keeps one per run (``context.analyses``); the run's
    result holds it at the end (``result.analysis(ReconcileResult)``).
    """

    def __init__(self) -> None:
        """An empty store."""
        self._by_type: dict[type[Any], object] = {}

    def get(self, kind: type[T]) -> T | None:
        """The valid analysis of type ``kind`` (exactly that type), or ``None``."""
        found = self._by_type.get(kind)
        return found if isinstance(found, kind) else None

    def put(self, analysis: object) -> None:
        """Keep ``analysis``, replacing an earlier one of the same type."""
        self._by_type[type(analysis)] = analysis

    def invalidate(self, preserved: Collection[type[Any]] = ()) -> list[type[Any]]:
        """Drop every analysis but those of the ``preserved`` types.

        Returns:
            The types dropped.
        """
        dropped = [kind for kind in self._by_type if kind not in preserved]
        for kind in dropped:
            del self._by_type[kind]
        return dropped

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_type

    def __iter__(self) -> Iterator[type[Any]]:
        return iter(list(self._by_type))

    def __len__(self) -> int:
        return len(self._by_type)

    def __repr__(self) -> str:
        return f"<analyses {', '.join(kind.__name__ for kind in self._by_type) or '(none)'}>"
