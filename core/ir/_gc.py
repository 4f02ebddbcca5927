"""Pausing Python's cyclic garbage collector during bulk work on the IR.

Loading, copying or writing a large model allocates millions of small container
objects that all stay alive. With the collector running, each allocation burst
triggers collections that scan the ever-growing set of live objects again: loading
got slower per node the bigger the model was (0.86 s for 100k nodes, 5.4 s for 400k).
Nothing created during a conversion is garbage, so :func:`paused_gc` switches the
collector off for the block.

On exit, the block's objects are moved straight to the oldest generation
(``gc.freeze()`` then ``gc.unfreeze()``): otherwise the next young collection would
scan them all at once (a quarter of the time of loading a model) and later ones
again. Objects moved that way never count towards CPython's trigger for a full
collection, though, so a model dropped later would stay in memory until unrelated
activity caused one: loading and dropping models in a loop grew without bound.
:func:`paused_gc` therefore keeps its own account. A block that made a model, a
copy or a graph names it (:attr:`Block.owner`); the account holds a weak reference
to it, so it knows which large blocks died with their owner. Objects of blocks
whose owner is gone, or that named none, may be garbage; once they outnumber the
objects found alive by the last full collection (and at least :data:`_MIN_BATCH`),
it runs one. Each object is scanned about once by those collections, memory
held by dropped models stays within about twice what is alive, and a model that
stays alive (loaded, copied by the pass manager, saved) is never scanned at all.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["Block", "paused_gc", "sparing_older_objects"]

_MIN_BATCH: Final = 1_000_000
"""Objects that may be garbage before a full collection is considered."""

_OWNED_MIN: Final = 50_000
"""Blocks smaller than this are accounted as if they named no owner (kept in no list)."""


class Block:
    """What the code inside :func:`paused_gc` tells the account about its objects.

    Attributes:
        owner: The object that keeps the block's objects alive (a loaded model, a
            copy), or ``None``. While it lives, they count as alive.
    """

    __slots__ = ("owner",)

    def __init__(self) -> None:
        self.owner: object | None = None


class _Account:
    """Objects moved to the oldest generation, and what is known of them.

    ``moved_since_collection`` counts objects of blocks without an (alive) owner since
    the last full collection, ``alive_after_collection`` estimates the objects alive
    after it that belong to no block in ``owned``, and ``owned`` lists the large
    blocks with an owner: a weak reference to it and the block's object count.
    """

    moved_since_collection = 0
    alive_after_collection = 0
    sparing = False  # inside sparing_older_objects: older objects are frozen
    owned: list[tuple[weakref.ref[object], int]] = []  # noqa: RUF012 - one per process


@contextmanager
def paused_gc() -> Iterator[Block]:
    """Disable the cyclic garbage collector inside the block (nesting is fine).

    The collector is re-enabled on exit only if it was enabled on entry, so an
    application that manages the collector itself is left alone; the block's
    objects are moved to the oldest generation only when the application keeps
    no frozen objects of its own (``gc.unfreeze`` would release them).

    Yields:
        A :class:`Block`; set its ``owner`` to what keeps the new objects alive.
    """
    block = Block()
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield block
    finally:
        if was_enabled:
            if _Account.sparing or not gc.get_freeze_count():
                _move_to_oldest_generation(block.owner)
            gc.enable()


@contextmanager
def sparing_older_objects() -> Iterator[None]:
    """Inside the block, the collector scans only the objects created in it.

    A pass that allocates as it goes triggers collections; each full one would scan
    the whole model again (a model of 100k nodes is a million objects, and the pass
    manager holds two). The objects that exist on entry are frozen (``gc.freeze``)
    for the block, so collections scan only what the block makes, and put back into
    the oldest generation on exit. Garbage among the frozen objects (nodes a pass
    removed, say) waits for a collection after the block. Nothing happens when the
    collector is off or the application keeps frozen objects of its own.
    """
    if not gc.isenabled() or gc.get_freeze_count() or _Account.sparing:
        yield
        return
    gc.freeze()
    _Account.sparing = True
    try:
        yield
    finally:
        _Account.sparing = False
        gc.unfreeze()


def _move_to_oldest_generation(owner: object | None) -> None:
    moved = gc.get_count()[0]  # objects allocated (net) since the last collection
    gc.freeze()
    if not _Account.sparing:  # (while sparing, they join the frozen objects)
        gc.unfreeze()
    account = _Account
    if owner is not None and moved >= _OWNED_MIN:
        try:
            account.owned.append((weakref.ref(owner), moved))
        except TypeError:  # cannot be referenced weakly: count it as unowned
            account.moved_since_collection += moved
    else:
        account.moved_since_collection += moved
    maybe_garbage = account.moved_since_collection
    for reference, count in account.owned:
        if reference() is None:
            maybe_garbage += count
    if maybe_garbage > max(_MIN_BATCH, account.alive_after_collection) \
            and not account.sparing:
        found = gc.collect()
        account.owned = [(r, count) for r, count in account.owned if r() is not None]
        account.alive_after_collection = max(
            0, account.alive_after_collection + maybe_garbage - found)
        account.moved_since_collection = 0
