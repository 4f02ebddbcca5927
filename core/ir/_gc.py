"""Pausing Python's cyclic garbage collector during bulk work on the IR.

Loading, copying or writing a large model allocates millions of small container
objects that all stay alive. With the collector running, each allocation burst
triggers collections that scan the ever-growing set of live objects again: loading
got slower per node the bigger the model was (0.86 s for 100k nodes, 5.4 s for 400k).
Nothing created during a conversion is garbage, so :func:`paused_gc` switches the
collector off for the block.

On exit from a block that allocated fewer than :data:`_MIN_BATCH` objects (a
function body copied per call while inlining, a small model), those objects are
moved straight to the oldest generation (``gc.freeze()`` then ``gc.unfreeze()``):
otherwise every following young collection would scan them again, which costs a
sixth of the time of inlining a model with thousands of calls. Objects moved that
way never count towards CPython's trigger for a full collection, though, so a model
dropped later would stay in memory until unrelated activity caused one: loading
and dropping models in a loop grew without bound. :func:`paused_gc` therefore keeps
its own account, as CPython does for objects that age normally: once the objects it
moved outnumber those alive after its last full collection (and at least
:data:`_MIN_BATCH`), it runs one. Each object is scanned about once by those
collections, and memory held by dropped models stays within about twice what is
alive. A larger block (loading a big model) is left to age normally: the collector
scans it once soon after and counts it towards its next full collection, which is
cheaper than a full collection right away.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["paused_gc"]

_MIN_BATCH: Final = 1_000_000
"""Objects moved to the oldest generation before a full collection is considered."""


class _Account:
    """Objects moved to the oldest generation, and an estimate of those still alive."""

    moved_since_collection = 0
    alive_after_collection = 0


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block (nesting is fine).

    The collector is re-enabled on exit only if it was enabled on entry, so an
    application that manages the collector itself is left alone; the block's
    objects are moved to the oldest generation only when the application keeps
    no frozen objects of its own (``gc.unfreeze`` would release them).
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                _move_to_oldest_generation()
            gc.enable()


def _move_to_oldest_generation() -> None:
    moved = gc.get_count()[0]  # objects allocated (net) since the last collection
    if moved >= _MIN_BATCH:
        # A large block (loading a big model): let the collector age these objects
        # normally. It scans them once now and counts them towards its next full
        # collection, which costs less than the full collection this account would
        # have to run right away.
        return
    gc.freeze()
    gc.unfreeze()
    _Account.moved_since_collection += moved
    if _Account.moved_since_collection > max(_MIN_BATCH, _Account.alive_after_collection):
        found = gc.collect()
        _Account.alive_after_collection = max(
            0, _Account.alive_after_collection + _Account.moved_since_collection - found)
        _Account.moved_since_collection = 0
