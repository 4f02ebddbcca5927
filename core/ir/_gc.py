"""Pausing Python's cyclic garbage collector during bulk work on the IR.

Loading or writing a large model allocates millions of small container objects
that all stay alive. Each allocation burst triggers the cyclic collector, which
then scans the ever-growing set of live objects again and again: loading gets
slower per node the bigger the model is. Nothing created during a conversion is
garbage, so the collector is paused for its duration and restored afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block (nesting is fine).

    The collector is re-enabled on exit only if it was enabled on entry, so an
    application that manages the collector itself is left alone.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                # Move what the block allocated straight to the oldest generation:
                # otherwise the first collection after re-enabling scans all of it
                # at once (a sixth of the time of inlining a large model). Skipped
                # when the application keeps frozen objects of its own.
                gc.freeze()
                gc.unfreeze()
            gc.enable()
