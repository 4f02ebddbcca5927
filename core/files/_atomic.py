"""Atomic writes: the one module that puts files and folders into place on disk.

Every writer of graphpass goes through here (``tests/test_architecture.py`` checks that
no other module renames files or makes temporaries for its outputs):

* :func:`replace_file`: a file replaced whole (the metrics log, the plot, checkpoints,
  a snapshot's pointer, the artifacts' rewritten models);
* :func:`replace_folder`: a folder replaced whole (the training-graph directory, the
  onnxruntime-training artifacts), and :func:`recover_folder`, which completes a
  replacement a kill interrupted;
* :func:`new_folder`: a folder put under a name that is free (a state's snapshot);
* :func:`temporary_folder` and :func:`new_temporary`: temporaries that carry their
  owner (the output's name) and their process, so that the next write of that output
  removes what a killed one left;
* :func:`publish`, :class:`Lock`, :func:`sync`, :func:`sync_file`,
  :func:`sync_folders`: the pieces ``save``'s commit protocol
  (:mod:`graphpass.files._commit`) builds a model and its data files from.

A reader that opens an output at any moment, also after the writer was killed or the
machine lost power at any point, finds the whole previous content or the whole new
one. For a file: write a temporary next to it, ``fsync`` it, rename it over the file
(atomic), ``fsync`` the folder. For a folder: write and sync a temporary folder, then
exchange it with the old one in one step (Linux's ``renameat2(RENAME_EXCHANGE)``);
where the system has no exchange, a marker file names both folders before the old one
is renamed aside, and whoever opens the folder next (:func:`recover_folder`) finishes
the replacement. ``docs/guarantees.md`` gives the protocols with their reasons.

Temporaries are named ``.<output name>.<pid>.<random>.graphpass-tmp``: a write removes
the temporaries of its output whose process is gone.

:func:`crash_point` marks each step. Test hooks: ``GRAPHPASS_TEST_KILL_AT=<n>`` kills the
process (``SIGKILL``) at the n-th step (or the first step of that name),
``GRAPHPASS_TEST_STEPS=<file>`` appends each step's number, name and time
(``time.monotonic``) to a file, and ``GRAPHPASS_TEST_NO_EXCHANGE=1`` makes
:func:`replace_folder` take the way of systems without an exchange.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from graphpass.errors import ModelSaveError

__all__ = ["KILL_AT_ENV", "NO_EXCHANGE_ENV", "STEPS_ENV", "TEMPORARY_SUFFIX", "Lock",
           "crash_point", "identity", "is_temporary", "new_folder", "new_temporary",
           "own_temporaries", "owner_of", "pid_of", "process_runs", "publish",
           "recover_folder", "remove_folder", "remove_stale", "replace_file", "replace_folder",
           "sync", "sync_file", "sync_folders", "temporaries", "temporary_folder"]

KILL_AT_ENV: Final = "GRAPHPASS_TEST_KILL_AT"
"""Test hook: ``SIGKILL`` the process at the n-th :func:`crash_point` (or the step of that name)."""
STEPS_ENV: Final = "GRAPHPASS_TEST_STEPS"
"""Test hook: append ``<n> <step> <monotonic time>`` to this file at every :func:`crash_point`."""
NO_EXCHANGE_ENV: Final = "GRAPHPASS_TEST_NO_EXCHANGE"
"""Test hook: ``1`` makes :func:`replace_folder` act as on a system without an exchange."""

TEMPORARY_SUFFIX: Final = ".graphpass-tmp"
_TEMPORARY: Final = re.compile(r"^\.(?P<owner>.+)\.(?P<pid>\d+)\.[^.]+\.graphpass-tmp$")
"""``.<output name>.<pid>.<random>.graphpass-tmp``: a file or folder of a write of that output."""
_LOCK_SUFFIX: Final = ".graphpass-lock"
_MARKER_SUFFIX: Final = ".graphpass-swap"
_UNSUPPORTED: Final = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.ENOLCK}
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2

_steps_taken = 0


# ===================================================================== test hooks
def crash_point(step: str) -> None:
    """A point of a write where a test may kill the process (see the module doc)."""
    kill_at = os.environ.get(KILL_AT_ENV)
    log = os.environ.get(STEPS_ENV)
    if kill_at is None and log is None:
        return
    global _steps_taken
    _steps_taken += 1
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{_steps_taken} {step} {time.monotonic():.6f}\n")
    if kill_at in (str(_steps_taken), step):
        if hasattr(signal, "SIGKILL"):
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(137)  # pragma: no cover - no SIGKILL on this system


# ===================================================================== temporaries
def is_temporary(path: Path) -> bool:
    """Whether ``path`` is named like a temporary of a write in progress (or of a killed one)."""
    return _TEMPORARY.match(path.name) is not None


def owner_of(path: Path) -> str:
    """The output a temporary belongs to (``""`` for another name)."""
    match = _TEMPORARY.match(path.name)
    return match["owner"] if match else ""


def pid_of(path: Path) -> int:
    """The process that made a temporary (this process for another name)."""
    match = _TEMPORARY.match(path.name)
    return int(match["pid"]) if match else os.getpid()


def temporaries(folder: Path) -> list[Path]:
    """The temporaries in ``folder``, of any output and process."""
    try:
        return [Path(entry.path) for entry in os.scandir(folder)
                if entry.name.endswith(TEMPORARY_SUFFIX) and _TEMPORARY.match(entry.name)]
    except OSError:
        return []


def own_temporaries(folder: Path, owner: str | None = None) -> list[Path]:
    """This process's temporaries in ``folder`` (of the output ``owner``, if given)."""
    pid = os.getpid()
    return [path for path in temporaries(folder)
            if pid_of(path) == pid and (owner is None or owner_of(path) == owner)]


def new_temporary(folder: Path, owner: str, *, is_folder: bool = False) -> Path:
    """A new, empty temporary file (or folder) in ``folder``, of the output named ``owner``."""
    prefix, suffix = f".{owner}.{os.getpid()}.", TEMPORARY_SUFFIX
    if is_folder:
        return Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=folder))
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    os.close(handle)
    return Path(name)


def remove_stale(folder: Path, owner: str) -> bool:
    """Remove the temporaries of ``owner``'s writes whose process is gone; whether any was."""
    removed = False
    for path in temporaries(folder):
        if owner_of(path) == owner and not process_runs(pid_of(path)):
            remove_folder(path) if path.is_dir() and not path.is_symlink() else _unlink(path)
            removed = True
            crash_point("stale temporary removed")
    return removed


@contextlib.contextmanager
def temporary_folder(folder: Path, owner: str) -> Iterator[Path]:
    """A temporary folder in ``folder`` for a write of ``owner``, removed at the end.

    The stale temporaries of ``owner`` go first. What :func:`replace_folder` or
    :func:`new_folder` took from it is not there any more to remove.
    """
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale(folder, owner)
    scratch = new_temporary(folder, owner, is_folder=True)
    try:
        crash_point("temporary folder created")
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def process_runs(pid: int) -> bool:
    """Whether the process ``pid`` runs (where that cannot be asked: yes)."""
    if os.name != "posix" or pid == os.getpid():
        return True  # (elsewhere: no cheap, safe way to ask)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it runs, as another user
    return True


# ===================================================================== files
def replace_file(path: str | os.PathLike[str], content: bytes | str | Callable[[Path], None],
                 *, step: str = "file") -> Path:
    """Replace ``path`` with new content, atomically and durably.

    Args:
        path: The file (its folder must exist).
        content: The bytes, the text (UTF-8), or a function that writes the file it is
            given (``safetensors``' ``save_file``, matplotlib's ``savefig`` ...).
        step: What the file is, in the names of the :func:`crash_point` steps.

    A link is followed: the file it leads to is replaced. A path that is not a regular
    file (a pipe, ``/dev/stdout``) is written as it is, since nothing can replace it.

    Returns:
        ``path``.

    Raises:
        OSError: The file cannot be written; ``path`` is then as it was, and no
            temporary is left.
    """
    target = Path(path)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None  # nothing there yet (or nothing readable: the write will say)
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
    if mode is not None and not stat.S_ISREG(mode):  # a pipe, a device (/dev/stdout)
        _write(target, content)  # nothing there to replace
        return target
    if target.is_symlink():
        target = Path(os.path.realpath(target))  # the file the link leads to
    folder = target.parent
    remove_stale(folder, target.name)
    # A writer function gets its file inside a temporary folder of ours, under the
    # file's own name: what it makes beside the file (safetensors writes a ``.tmpXXXX``
    # and renames it) is ours to remove too, and its suffix tells the format.
    scratch = new_temporary(folder, target.name, is_folder=True) if callable(content) else None
    tmp = scratch / target.name if scratch else new_temporary(folder, target.name)
    try:
        crash_point(f"{step} temporary created")
        _write(tmp, content)
        crash_point(f"{step} written")
        sync_file(tmp)
        crash_point(f"{step} synced")
        publish(tmp, target)
    except BaseException:
        _unlink(tmp)
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    crash_point(f"{step} renamed into place")
    sync_folders([folder])
    crash_point(f"{step} folder synced")
    return target


def _write(path: Path, content: bytes | str | Callable[[Path], None]) -> None:
    if callable(content):
        content(path)
        return
    with open(path, "wb") as handle:
        handle.write(content.encode("utf-8") if isinstance(content, str) else content)


def publish(tmp: Path, final: Path) -> None:
    """Rename a written and synced temporary file over ``final`` (with the usual mode).

    The caller syncs the folder when its protocol needs the rename to be durable.
    """
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, final)


# ===================================================================== folders
def new_folder(source: Path, name: Path, *, step: str = "folder") -> Path:
    """Sync the folder ``source`` (a temporary) and rename it to ``name``, which is free.

    Args:
        source: The written temporary folder (from :func:`temporary_folder`), beside ``name``.
        name: Where it goes; nothing may be there.
        step: What the folder is, in the names of the :func:`crash_point` steps.

    Raises:
        OSError: ``name`` is taken, or the folder cannot be synced or renamed.
    """
    _sync_tree(source)
    crash_point(f"{step} files synced")
    if name.exists() or name.is_symlink():
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(name))
    os.rename(source, name)
    crash_point(f"{step} folder renamed into place")
    sync_folders([name.parent])
    crash_point(f"{step} folder synced")
    return name


def replace_folder(path: str | os.PathLike[str], source: Path, *, step: str = "folder"
                   ) -> Path:
    """Replace the folder ``path`` by ``source`` (a temporary folder beside it) as one.

    A kill at any moment leaves the whole old folder or the whole new one at ``path``:
    the two are exchanged in one step where the system can (``renameat2`` with
    ``RENAME_EXCHANGE``, Linux 3.15+ on most filesystems); elsewhere a marker
    ``.<name>.graphpass-swap`` names both before the old one is renamed aside, and
    :func:`recover_folder` (called here, and by readers) finishes the replacement.
    Writers of one folder take turns (a lock beside it). The old folder is removed.

    Args:
        path: The folder to replace (or to create).
        source: The written temporary folder (from :func:`temporary_folder`), in the
            same folder as ``path``.
        step: What the folder is, in the names of the :func:`crash_point` steps.

    Raises:
        OSError: The folder cannot be replaced; ``path`` is then as it was.
    """
    target = Path(os.path.abspath(path))  # ("train/" and "." have a name and a parent)
    folder = target.parent
    _sync_tree(source)
    crash_point(f"{step} files synced")
    lock = Lock(folder, target.name)
    lock.acquire()
    try:
        crash_point(f"{step} locked")
        _recover(target)
        if not target.exists() and not target.is_symlink():
            os.rename(source, target)
            crash_point(f"{step} renamed into place")
            sync_folders([folder])
            crash_point(f"{step} parent synced")
            return target
        if not target.is_dir() or target.is_symlink():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(target))
        if _exchange(source, target):
            old = source
            crash_point(f"{step} exchanged")
            sync_folders([folder])
            crash_point(f"{step} parent synced")
        else:
            old = _swap_with_marker(source, target, step)
        remove_folder(old)
        crash_point(f"old {step} removed")
        return target
    finally:
        lock.release()


def recover_folder(path: str | os.PathLike[str]) -> None:
    """Finish a replacement of the folder ``path`` that a kill interrupted, if one was.

    Only where the system had no exchange can a kill leave such a replacement: the
    marker ``.<name>.graphpass-swap`` is then there. Cheap when it is not (one ``stat``).
    """
    target = Path(os.path.abspath(path))
    if not target.name or not _marker(target).exists():
        return
    lock = Lock(target.parent, target.name)
    lock.acquire()
    try:
        _recover(target)
    finally:
        lock.release()


def remove_folder(path: Path) -> None:
    """Remove a folder: renamed to a temporary name first, unless it has one.

    A kill while its files are removed then leaves a temporary that the next write of
    that name removes, never a partial folder under the name.
    """
    if not path.is_dir() or path.is_symlink():
        _unlink(path)
        return
    if not is_temporary(path):
        doomed = _aside(path)
        try:
            os.rename(path, doomed)
        except OSError:
            return
        path = doomed
    shutil.rmtree(path, ignore_errors=True)


def _aside(path: Path) -> Path:
    """A fresh temporary name for the folder ``path`` (of the output ``path.name``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMPORARY_SUFFIX}")


def _exchange(source: Path, target: Path) -> bool:
    """Exchange two paths in one step; ``False`` where the system or filesystem cannot."""
    if os.environ.get(NO_EXCHANGE_ENV) == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False  # a C library without renameat2 (glibc before 2.28, musl before 1.2.3)
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target),
                 _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(target))


def _marker(target: Path) -> Path:
    return target.with_name(f".{target.name}{_MARKER_SUFFIX}")


def _swap_with_marker(source: Path, target: Path, step: str) -> Path:
    """The replacement without an exchange; returns where the old folder went.

    The marker names both folders; then the old one is renamed aside and the new one
    into place; then the marker goes. A kill between the two renames leaves no folder
    at ``target``, and the marker for :func:`recover_folder`.
    """
    folder = target.parent
    aside = _aside(target)
    replace_file(_marker(target), json.dumps({"new": source.name, "old": aside.name}),
                 step="swap marker")
    os.rename(target, aside)
    crash_point(f"old {step} renamed aside")
    try:
        os.rename(source, target)
    except BaseException:
        os.rename(aside, target)  # put the old folder back
        _unlink(_marker(target))
        raise
    crash_point(f"{step} renamed into place")
    sync_folders([folder])
    crash_point(f"{step} parent synced")
    _unlink(_marker(target))
    sync_folders([folder])
    crash_point("swap marker removed")
    return aside


def _recover(target: Path) -> None:
    """With the lock held: finish the replacement the marker describes, then remove it."""
    marker = _marker(target)
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        record = None
    except (OSError, ValueError):
        record = {}  # (written atomically: never torn; a hand-made file names nothing)
    if record is not None:
        if not target.exists() and not target.is_symlink():
            # Killed between the two renames. The new folder was whole and synced
            # before the marker was written: it goes into place; else the old one.
            for key in ("new", "old"):
                name = record.get(key) if isinstance(record, dict) else None
                if isinstance(name, str) and "/" not in name and (target.parent / name).is_dir():
                    os.rename(target.parent / name, target)
                    crash_point("interrupted replacement finished")
                    break
            sync_folders([target.parent])
        _unlink(marker)
        sync_folders([target.parent])
        crash_point("swap marker removed")
    remove_stale(target.parent, target.name)


def _sync_tree(folder: Path) -> None:
    """``fsync`` every file and folder under ``folder``, and ``folder`` itself."""
    folders = [folder]
    for root, names, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                sync_file(path)
        folders.extend(Path(root) / name for name in names)
    sync_folders(folders)


# ===================================================================== locking
class Lock:
    """An exclusive ``flock`` on ``.<name>.graphpass-lock`` in ``folder``, removed when released.

    The holder removes the file before letting go; a waiter that then gets the lock
    finds the path gone (or another file there) and tries again, so two processes
    never both hold it. Where locks are not supported, writes run unlocked.
    """

    def __init__(self, folder: Path, name: str):
        self.path = folder / f".{name}{_LOCK_SUFFIX}"
        self._descriptor: int | None = None

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock (waiting for it, or not); whether it was taken."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return True
        while True:
            try:
                descriptor = os.open(self.path, os.O_RDONLY | os.O_CREAT | _CLOEXEC | _NOFOLLOW,
                                     0o666)
            except OSError as error:
                if not blocking:
                    return False
                raise ModelSaveError(f"cannot create the lock file {str(self.path)!r} "
                                     f"({error.strerror})", where=str(self.path.parent)) from None
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(descriptor)
                return False
            except OSError as error:
                os.close(descriptor)
                if error.errno in _UNSUPPORTED:
                    return True  # no locks on this filesystem
                raise
            if identity(self.path) == _fidentity(descriptor):
                self._descriptor = descriptor
                return True
            os.close(descriptor)  # the previous holder removed it: lock the new one

    def release(self) -> None:
        """Remove the lock file and let go."""
        if self._descriptor is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._descriptor)
        self._descriptor = None


# ===================================================================== helpers
def identity(path: Path) -> tuple[int, int] | None:
    """The file's device and inode, or ``None`` if there is none at ``path``."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return status.st_dev, status.st_ino


def _fidentity(descriptor: int) -> tuple[int, int]:
    status = os.fstat(descriptor)
    return status.st_dev, status.st_ino


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sync(descriptor: int) -> None:
    """``fsync``; a filesystem that cannot is accepted, a failing disk is an error."""
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _UNSUPPORTED:
            raise


def sync_file(path: Path) -> None:
    """``fsync`` the file at ``path``."""
    descriptor = os.open(path, os.O_RDONLY | _CLOEXEC)
    try:
        sync(descriptor)
    finally:
        os.close(descriptor)


def sync_folders(folders: Iterable[Path]) -> None:
    """``fsync`` each folder (so that the renames and removals in it are durable)."""
    for folder in sorted(set(folders)):
        try:
            descriptor = os.open(folder, os.O_RDONLY | _CLOEXEC)
        except OSError:
            continue  # (Windows cannot open folders)
        try:
            sync(descriptor)
        finally:
            os.close(descriptor)
