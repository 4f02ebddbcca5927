"""Replacing a model file and its data files as one: the commit protocol of ``save``.

A reader that opens the output at any moment, including after the writer was killed
or the machine lost power at any point, finds the complete previous model with its
data, or the complete new model with its data. ``docs/guarantees.md`` gives the
protocol with its reasons; in short:

1. Lock the output (``flock`` on ``.<name>.graphpass-lock`` next to it): writers of
   the same output take turns. Readers take no lock.
2. Read which data files the current output model references, and remove this
   output's stale files (temporaries of killed saves, data files no model uses).
3. Choose each data file's name: the one asked for (``m.onnx.data``) unless a model
   in the folder (the current output among them) references it, else the first free
   one of ``m.onnx.1.data``, ``m.onnx.2.data`` ... A data file that a model
   references is never written, replaced or removed while that model is there.
4. Write each data file under a hidden temporary name, ``fsync`` it, rename it to its
   name, ``fsync`` the folder.
5. Write the model the same way; its rename is the moment the new pair appears.
6. Remove the data files the previous model referenced and nothing references now.

:func:`~graphpass.files._atomic.crash_point` marks each step (the test hooks
``GRAPHPASS_TEST_KILL_AT`` and ``GRAPHPASS_TEST_STEPS``). The pieces (temporaries named
after their output and process, the lock, ``fsync``, the rename into place) are
:mod:`graphpass.files._atomic`'s, which every writer of graphpass uses.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import onnx
from google.protobuf.message import DecodeError, Message

from graphpass.errors import ModelSaveError
from graphpass.files._atomic import (
    Lock,
    crash_point,
    is_temporary,
    new_temporary,
    own_temporaries,
    owner_of,
    pid_of,
    process_runs,
    publish,
    sync,
    sync_file,
    sync_folders,
    temporaries,
)
from graphpass.files._atomic import identity as _identity

__all__ = ["Transaction", "name_variant"]

_NO_TENSORS: Final = frozenset({"onnx.TypeProto", "onnx.ValueInfoProto", "onnx.OperatorSetIdProto",
                                "onnx.StringStringEntryProto", "onnx.TensorShapeProto"})
"""Messages that hold no tensor: the walk for external data locations skips them."""
_MAX_VARIANTS: Final = 1000

_Identity = tuple[int, int]


def name_variant(path: Path, number: int) -> Path:
    """``m.onnx.data`` for 0, ``m.onnx.1.data`` for 1 ...: the names a data file can take."""
    if number == 0:
        return path
    if path.suffix:
        return path.with_name(f"{path.stem}.{number}{path.suffix}")
    return path.with_name(f"{path.name}.{number}")


class Transaction:
    """One save of one output: its lock, its temporary files, and the commit.

    ```python
    with Transaction(out_path, input_path) as transaction:
        transaction.prepare(destinations, reads)           # choose the names
        final = transaction.name_for(destination)          # m.onnx.data or m.onnx.1.data
        tmp = transaction.new_file(final.parent)           # write the data there ...
        transaction.add_data(tmp, final)                   # ... and hand it over
        transaction.commit(model_bytes)                    # the model, last
    ```

    Any exception before :meth:`commit` removes the temporary files and changes
    nothing on disk.
    """

    def __init__(self, out_path: Path, input_path: Path | None = None):
        self.out_path = out_path
        self.out_dir = out_path.parent
        self._in_place = input_path is not None and _identity(input_path) is not None and (
            _identity(input_path) == _identity(out_path))
        self._lock = Lock(self.out_dir, out_path.name)
        self._temporaries: list[Path] = []
        self._data: list[tuple[Path, Path]] = []
        self._chosen: dict[Path, Path] = {}
        self._renamed: dict[Path, Path] = {}
        self._folders: set[Path] = {self.out_dir}
        self._protected: set[_Identity] = set()
        self._previous: set[_Identity] = set()
        self._neighbours = _Neighbours(out_path)

    def __enter__(self) -> Transaction:
        self._lock.acquire()
        crash_point("locked")
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        try:
            self._removetemporaries(look=kind is not None)
        finally:
            self._lock.release()

    def _removetemporaries(self, *, look: bool) -> None:
        """Remove this save's temporary files: the recorded ones and, if ``look``, any other.

        A ``KeyboardInterrupt`` can land between ``mkstemp`` creating a file and
        :meth:`new_file` recording it. The file is still named after this output and
        this process, and while the lock is held no other save of the output runs, so a
        save that ends by an exception looks for such files in its folders.
        """
        unrecorded = [path for folder in sorted(self._folders)
                      for path in own_temporaries(folder, self.out_path.name)] if look else []
        for tmp in dict.fromkeys([*self._temporaries, *unrecorded]):
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._temporaries.clear()

    # ------------------------------------------------------------------ preparing
    def prepare(self, destinations: Iterable[Path], reads: Iterable[Path]) -> None:
        """Learn what the models in the folder reference, tidy up, and name the data files.

        Args:
            destinations: The data files the save means to write.
            reads: The files the model reads its weights from: never removed, unless
                the save writes over its own input.

        Each destination gets a name (:meth:`name_for`): itself, or the first free
        variant (:func:`name_variant`) when a model references it or it is read.
        """
        destinations = list(dict.fromkeys(destinations))
        self._folders.update(d.parent for d in destinations)
        self._previous = _references(self.out_path)
        read = {i for i in map(_identity, reads) if i is not None}
        self._protected = set() if self._in_place else read
        self._remove_stale(destinations, self._previous | read)
        self._remove_stale_of_other_outputs()
        taken: set[Path] = set()
        for destination in destinations:
            name = self._free_name(destination, self._previous | read, taken)
            taken.add(name.resolve())
            self._chosen[destination.resolve()] = name

    def name_for(self, destination: Path, *, relocate: bool = False) -> Path:
        """The name :meth:`prepare` chose for a destination.

        Args:
            destination: A path given to :meth:`prepare`.
            relocate: Whether :meth:`commit` rewrites the model's references to
                ``destination`` (for copies, whose tensors keep their location);
                otherwise the caller writes the chosen name into the model.
        """
        name = self._chosen.get(destination.resolve(), destination)
        if relocate and name != destination:
            self._renamed[destination.resolve()] = name
        return name

    def _free_name(self, destination: Path, referenced: set[_Identity],
                   taken: set[Path]) -> Path:
        out = self.out_path.resolve()
        for number in range(_MAX_VARIANTS):
            name = name_variant(destination, number)
            resolved = name.resolve()
            if resolved in taken or resolved == out or name.is_dir() or name.is_symlink():
                continue
            identity = _identity(name)
            if identity is None or (identity not in referenced
                                    and self._neighbours.referencing(identity) is None):
                return name
        raise ModelSaveError(f"no free name for the data file {destination.name!r}: "
                             f"{_MAX_VARIANTS} variants are taken", where=str(self.out_path))

    def new_file(self, folder: Path | None = None) -> Path:
        """A new, empty temporary file in ``folder`` (the output folder by default)."""
        folder = folder or self.out_dir
        path = new_temporary(folder, self.out_path.name)
        self._temporaries.append(path)
        self._folders.add(folder)
        crash_point("temporary created")
        return path

    def add_data(self, tmp: Path, final: Path) -> None:
        """Hand over a written data file (from :meth:`new_file`): synced now, named at commit."""
        crash_point("data written")
        sync_file(tmp)
        self._data.append((tmp, final))
        crash_point("data synced")

    # ------------------------------------------------------------------ committing
    def commit(self, model_bytes: bytes | Sequence[bytes], *,
               references_data: bool | None = None) -> None:
        """Name the data files, then put the model in place, then remove the old data.

        External data locations that name a destination which got another name
        (:meth:`prepare`) are rewritten to it first.

        Args:
            model_bytes: The serialized model, or its pieces in order (written one
                after another; joined only if the model has external data to read).
            references_data: Whether the model names external data files, if the
                caller knows (the save does: it wrote the tensors); ``None``: look for
                locations in its pieces (a loop over every piece).

        Raises:
            OSError: A rename failed; the previous output is whole, since only files
                that no model references were replaced.
        """
        chunks = [model_bytes] if isinstance(model_bytes, bytes) else list(model_bytes)
        # The pieces are whole messages, so an external location is never split.
        if len(chunks) > 1 and (self._renamed or (
                references_data if references_data is not None
                else any(b"location" in chunk for chunk in chunks))):
            chunks = [b"".join(chunks)]
        if len(chunks) == 1:
            chunks = [_relocated(chunks[0], self.out_dir, self._renamed)]
        for tmp, final in self._data:
            publish(tmp, final)
            self._temporaries.remove(tmp)
            crash_point("data renamed into place")
        if self._data:
            sync_folders(final.parent for _, final in self._data)
            crash_point("data folders synced")
        tmp = self.new_file()
        with open(tmp, "wb") as handle:
            handle.writelines(chunks)
            handle.flush()
            crash_point("model written")
            sync(handle.fileno())
        crash_point("model synced")
        publish(tmp, self.out_path)
        self._temporaries.remove(tmp)
        crash_point("model renamed into place")
        sync_folders([self.out_dir])
        crash_point("model folder synced")
        # The new pair is in place: what follows only frees space, and a failure
        # leaves files that the next save of this output removes.
        with contextlib.suppress(OSError):
            current = _references_in(chunks[0], self.out_dir) if len(chunks) == 1 else set()
            self._remove_old_data(current)

    def _remove_old_data(self, current: set[_Identity]) -> None:
        """Remove what the previous model referenced and no model in the folder does."""
        removed = False
        for path in self._previous_paths():
            identity = _identity(path)
            if identity is None or identity in current or identity in self._protected:
                continue
            if self._neighbours.referencing(identity) is not None:
                continue
            path.unlink()
            removed = True
            crash_point("old data removed")
        if removed:
            sync_folders(self._folders)

    def _previous_paths(self) -> list[Path]:
        """The files the previous model referenced, as paths inside the output folder."""
        wanted = set(self._previous)
        found: list[Path] = []
        for folder in sorted(self._folders):
            with contextlib.suppress(OSError):
                for entry in os.scandir(folder):
                    if entry.is_file(follow_symlinks=False) and (
                            _identity(Path(entry.path)) in wanted):
                        found.append(Path(entry.path))
        return found

    # ------------------------------------------------------------------ tidying up
    def _remove_stale(self, destinations: list[Path], referenced: set[_Identity]) -> None:
        """Remove this output's files that no model references.

        Those are its temporaries whose process is gone, and the data files named like
        the ones it writes (``m.onnx.data``, ``m.onnx.1.data`` ...), left behind when a
        save was killed before it removed the previous data.
        """
        owner = self.out_path.name
        candidates = [path for folder in sorted(self._folders) for path in temporaries(folder)
                      if owner_of(path) == owner and not process_runs(pid_of(path))]
        for family in {self.out_dir / f"{owner}.data", *destinations}:
            candidates.extend(_variants_on_disk(family))
        removed = False
        for path in dict.fromkeys(candidates):
            identity = _identity(path)
            if identity is None or identity in referenced or path.is_symlink():
                continue
            if self._neighbours.referencing(identity) is not None:
                continue
            with contextlib.suppress(OSError):
                path.unlink()
                removed = True
                crash_point("stale file removed")
        if removed:
            sync_folders(self._folders)

    def _remove_stale_of_other_outputs(self) -> None:
        """Remove temporaries of killed saves of other outputs in the folder, when idle."""
        owners: dict[str, list[Path]] = {}
        for path in temporaries(self.out_dir):
            owner = owner_of(path)
            if owner != self.out_path.name and not process_runs(pid_of(path)):
                owners.setdefault(owner, []).append(path)
        for owner, paths in owners.items():
            lock = Lock(self.out_dir, owner)
            if not lock.acquire(blocking=False):
                continue  # a save of that output runs
            try:
                referenced = _references(self.out_dir / owner)
                for path in paths:
                    identity = _identity(path)
                    if identity is not None and identity not in referenced and (
                            self._neighbours.referencing(identity) is None):
                        with contextlib.suppress(OSError):
                            path.unlink()
                            crash_point("stale file removed")
            finally:
                lock.release()


# ====================================================================== references
class _Neighbours:
    """The other model files (``*.onnx``) in the output folder, and what they reference."""

    def __init__(self, out_path: Path):
        self.out_path = out_path
        self._references: list[tuple[Path, set[_Identity]]] | None = None

    def referencing(self, identity: _Identity) -> Path | None:
        """A model in the folder that references the file with this identity, if any."""
        if self._references is None:
            own = _identity(self.out_path)
            self._references = []
            with contextlib.suppress(OSError):
                for path in sorted(self.out_path.parent.glob("*.onnx")):
                    if path.name == self.out_path.name or is_temporary(path) or (
                            own is not None and _identity(path) == own):
                        continue
                    self._references.append((path, _references(path)))
        for path, referenced in self._references:
            if identity in referenced:
                return path
        return None


_SEEN: dict[tuple[int, ...], set[Path]] = {}
"""What model files referenced, by their identity, size and times (one process reads a
file once while it does not change: batch runs save many models into one folder)."""


def _references(model_path: Path) -> set[_Identity]:
    """The identities of the existing files a model file references as external data.

    A file that is not a model (or not there) references nothing. A model without the
    bytes ``location`` has no external data and is not parsed. Reading a model costs
    about a second per gigabyte (once per process while the file does not change).
    """
    try:
        status = model_path.stat()
    except (OSError, ValueError):
        return set()
    key = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
           status.st_ctime_ns)
    if key not in _SEEN:
        if len(_SEEN) > 4096:
            _SEEN.clear()
        _SEEN[key] = _read_locations(model_path)
    # The files at those paths now (they may have been replaced since).
    return {i for i in map(_identity, _SEEN[key]) if i is not None}


def _read_locations(model_path: Path) -> set[Path]:
    """The paths of the files a model file's external data locations name."""
    try:
        if not model_path.is_file() or model_path.stat().st_size == 0:
            return set()
        with open(model_path, "rb") as handle, \
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            if mapped.find(b"location") < 0:
                return set()
            data = mapped[:]
        folders = {model_path.parent, model_path.resolve().parent}
    except (OSError, ValueError):
        return set()
    # onnx resolves locations next to the path it was given, graphpass next to the file
    # a link leads to: a model reached through a link references both.
    return {folder / location for location in _locations_in(data) for folder in folders}


def _locations_in(model_bytes: bytes) -> set[str]:
    """The external data locations of a serialized model (none if it does not parse)."""
    if b"location" not in model_bytes:
        return set()
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(model_bytes)
    except (DecodeError, RuntimeError, ValueError, RecursionError):
        return set()
    return {location for tensor in _external_tensors(proto)
            if (location := _location(tensor)) and "\0" not in location}


def _references_in(model_bytes: bytes, folder: Path) -> set[_Identity]:
    """The identities of the existing files the serialized model references."""
    return {i for i in (_identity(folder / location) for location in _locations_in(model_bytes))
            if i is not None}


def _external_tensors(proto: Message) -> Iterator[onnx.TensorProto]:
    """Every tensor with external data, wherever it sits in the model."""
    stack = [proto]
    while stack:
        message = stack.pop()
        if isinstance(message, onnx.TensorProto):
            if message.data_location == onnx.TensorProto.EXTERNAL:
                yield message
            continue
        for field, value in message.ListFields():
            if field.message_type is None or field.message_type.full_name in _NO_TENSORS:
                continue
            if isinstance(value, Message):
                stack.append(value)
            else:
                stack.extend(value)


def _relocated(model_bytes: bytes, folder: Path, moves: Mapping[Path, Path]) -> bytes:
    """The model with external data locations in ``moves`` pointing at their new names."""
    if not moves:
        return model_bytes
    proto = onnx.ModelProto()
    proto.ParseFromString(model_bytes)
    changed = False
    for tensor in _external_tensors(proto):
        location = _location(tensor)
        target = moves.get((folder / location).resolve()) if location else None
        if target is None:
            continue
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = Path(os.path.relpath(target, folder)).as_posix()
                changed = True
    return proto.SerializeToString() if changed else model_bytes


def _location(tensor: onnx.TensorProto) -> str:
    for entry in tensor.external_data:
        if entry.key == "location":
            return str(entry.value)
    return ""


# ========================================================================= helpers
def _variants_on_disk(path: Path) -> list[Path]:
    """The existing regular files named like ``path`` or one of its variants."""
    if path.suffix:
        pattern = re.compile(re.escape(path.stem) + r"(\.\d+)?" + re.escape(path.suffix))
    else:
        pattern = re.compile(re.escape(path.name) + r"(\.\d+)?")
    try:
        return sorted(Path(entry.path) for entry in os.scandir(path.parent)
                      if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False))
    except OSError:
        return []


