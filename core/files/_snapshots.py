"""A folder whose contents are replaced as one: numbered snapshots and a pointer file.

What ``graphpass train --state-dir DIR`` saves its state into, and anything else that
writes several files that must be read together. The folder holds one complete
snapshot (a sub-folder of files) and ``pointer.json`` naming it::

    DIR/pointer.json          {"snapshot": "step-40", ...}
    DIR/step-40/...           the files of the snapshot

A write follows the commit protocol of :func:`graphpass.save` (``docs/guarantees.md``),
with a folder in place of the data files and the pointer in place of the model:

1. Lock the folder (``flock`` on ``.pointer.json.graphpass-lock``): writers take turns.
2. Remove what no pointer names: snapshots a killed or finished write left behind,
   temporary folders of writes whose process is gone.
3. Write the new snapshot's files into a temporary folder, ``fsync`` each file and
   the folder, rename it to a name no snapshot has, ``fsync`` the folder above.
4. Write the pointer under a temporary name, ``fsync`` it, rename it into place (the
   commit), ``fsync`` the folder.
5. Remove the previous snapshot.

A reader that opens the folder at any moment (after a kill or a power loss at any
point) finds the pointer naming a complete snapshot: the previous one or the new
one. The steps are :mod:`graphpass.files._atomic`'s (:func:`~graphpass.files._atomic.new_folder`,
:func:`~graphpass.files._atomic.replace_file`), whose
:func:`~graphpass.files._atomic.crash_point` marks each one (the test hooks
``GRAPHPASS_TEST_KILL_AT`` and ``GRAPHPASS_TEST_STEPS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from graphpass.errors import ModelSaveError
from graphpass.files._atomic import (
    Lock,
    crash_point,
    is_temporary,
    new_folder,
    own_temporaries,
    pid_of,
    process_runs,
    remove_folder,
    replace_file,
    sync_folders,
    temporary_folder,
)

__all__ = ["MARKER", "POINTER", "read_snapshot", "write_snapshot"]

POINTER: Final = "pointer.json"
"""The file naming the current snapshot."""

MARKER: Final = ".graphpass-snapshot"
"""An empty file in every snapshot folder: what the tidying up may remove."""

_LOCK_NAME: Final = f".{POINTER}.graphpass-lock"
_SNAPSHOT_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def read_snapshot(directory: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]] | None:
    """The current snapshot folder and the pointer's record, or ``None`` if there is none.

    Raises:
        ModelSaveError: The pointer names a snapshot that is not there (the folder
            was changed by hand).
    """
    folder = Path(directory)
    try:
        record = json.loads((folder / POINTER).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ModelSaveError(f"cannot read {POINTER}: {error}", where=str(folder)) from None
    name = record.get("snapshot") if isinstance(record, dict) else None
    if not isinstance(name, str) or not _SNAPSHOT_NAME.match(name):
        raise ModelSaveError(f"{POINTER} names no snapshot", where=str(folder))
    snapshot = folder / name
    if not snapshot.is_dir():
        raise ModelSaveError(f"{POINTER} names {name!r}, which is not there",
                             where=str(folder), hint="the folder was changed by hand")
    return snapshot, record


def write_snapshot(directory: str | os.PathLike[str], name: str,
                   write: Callable[[Path], None], record: Mapping[str, Any] | None = None
                   ) -> Path:
    """Write a new snapshot into ``directory`` and make it the current one (atomically).

    Args:
        directory: The folder (made if missing).
        name: The snapshot's name (``step-40``); ``step-40.1`` ... if that is taken.
        write: Writes the snapshot's files into the folder it is given.
        record: More entries for the pointer (JSON-ready).

    Returns:
        The new snapshot's folder.

    Raises:
        ModelSaveError: The folder cannot be written; the previous snapshot is then
            still the current one. Whatever ``write`` raises, likewise.
    """
    folder = Path(directory)
    if not _SNAPSHOT_NAME.match(name):
        raise ValueError(f"not a snapshot name: {name!r}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ModelSaveError(f"cannot create the folder ({error.strerror})",
                             where=str(folder)) from None
    lock = Lock(folder, POINTER)
    lock.acquire()
    try:
        crash_point("state locked")
        previous = _current_name(folder)
        _refuse_foreign(folder)
        _remove_unreferenced(folder, previous)
        snapshot = _write_folder(folder, name, write)
        try:
            _write_pointer(folder, {**(record or {}), "snapshot": snapshot.name})
        except BaseException:
            if _current_name(folder) != snapshot.name:
                remove_folder(snapshot)
            raise
        if previous is not None and previous != snapshot.name:
            remove_folder(folder / previous)
            crash_point("old state removed")
            with contextlib.suppress(OSError):
                sync_folders([folder])
        return snapshot
    except BaseException as error:
        _remove_own_temporaries(folder)
        if isinstance(error, OSError):
            raise ModelSaveError(f"cannot write ({error.strerror or error})",
                                 where=str(folder)) from None
        raise
    finally:
        lock.release()


def _remove_own_temporaries(folder: Path) -> None:
    """Remove every temporary of this process in ``folder`` (its writer holds the lock).

    Ctrl-C can land between ``mkstemp``/``mkdtemp`` creating one and the write
    knowing its name, so a write that ends by an exception looks for them by name.
    """
    for path in own_temporaries(folder):
        remove_folder(path)


def _current_name(folder: Path) -> str | None:
    try:
        found = read_snapshot(folder)
    except ModelSaveError:
        return None  # an unreadable pointer: the write replaces it
    return found[0].name if found is not None else None


def _is_snapshot(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and (path / MARKER).is_file()


def _refuse_foreign(folder: Path) -> None:
    """Refuse a folder holding anything but snapshots, their pointer and temporaries."""
    foreign = sorted(entry.name for entry in os.scandir(folder)
                     if entry.name not in (POINTER, _LOCK_NAME)
                     and not is_temporary(Path(entry.path))
                     and not _is_snapshot(Path(entry.path)))
    if foreign:
        raise ModelSaveError(
            f"refusing to write a state into a folder that holds other files "
            f"({', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''})",
            where=str(folder), hint="give a new or empty folder, or one that a state was "
                                    "saved into before")


def _remove_unreferenced(folder: Path, current: str | None) -> None:
    """Remove snapshots no pointer names and temporaries of writes that are gone."""
    removed = False
    for entry in list(os.scandir(folder)):
        path = Path(entry.path)
        if entry.name == current:
            continue
        if is_temporary(path):
            if process_runs(pid_of(path)):
                continue  # (never: writers hold the lock)
        elif not _is_snapshot(path):
            continue
        remove_folder(path)
        removed = True
        crash_point("stale state removed")
    if removed:
        sync_folders([folder])


def _write_folder(folder: Path, name: str, write: Callable[[Path], None]) -> Path:
    with temporary_folder(folder, name) as scratch:
        crash_point("state folder created")
        write(scratch)
        (scratch / MARKER).touch()
        crash_point("state files written")
        return new_folder(scratch, _free_name(folder, name), step="state")


def _free_name(folder: Path, name: str) -> Path:
    for number in range(1000):
        candidate = folder / (name if number == 0 else f"{name}.{number}")
        if not candidate.exists() and not candidate.is_symlink():
            return candidate
    raise ModelSaveError(f"no free name for the snapshot {name!r}", where=str(folder))


def _write_pointer(folder: Path, record: Mapping[str, Any]) -> None:
    replace_file(folder / POINTER, json.dumps(dict(record), indent=1) + "\n", step="pointer")
