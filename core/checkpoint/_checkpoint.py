"""Checkpoints: a read-only mapping of keys to lazy tensor entries.

A :class:`Checkpoint` knows every key's element type and shape without reading
tensor data. Each :class:`CheckpointEntry` points at its bytes (a region of a
file, for safetensors, torch zip and uncompressed ``.npz`` files) or knows how to
load them on demand; :meth:`CheckpointEntry.tensor` turns it into a
:class:`graphpass.Tensor` that still reads nothing until the model is saved.
"""

from __future__ import annotations

import operator
import os
import struct
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from graphpass.errors import CheckpointError
from graphpass.ir import Tensor, dtype_name, dtype_size, numpy_dtype

__all__ = ["MAX_TENSORS", "Checkpoint", "CheckpointEntry", "check_member_count"]


class CheckpointEntry:
    """One tensor of a checkpoint: its key, element type, shape, and where its bytes are.

    Attributes:
        key: The key in the checkpoint (``transformer.h.0.attn.c_attn.weight``).
        dtype: The ONNX element type (``onnx.TensorProto.FLOAT`` ...).
        shape: The dimensions.
        file: The file that holds the bytes.
        storage: An identity of the bytes: two entries with equal ``storage`` share
            their data (tied weights saved once).
    """

    __slots__ = ("_length", "_load", "_offset", "dtype", "file", "key", "shape", "storage")

    def __init__(
        self,
        key: str,
        dtype: int,
        shape: Iterable[int],
        *,
        file: str | os.PathLike[str],
        offset: int | None = None,
        length: int | None = None,
        load: Callable[[], np.ndarray[Any, Any]] | None = None,
        storage: Hashable | None = None,
    ):
        """Describe an entry; use :meth:`from_file_region` or :meth:`from_loader`.

        Args:
            key: The key.
            dtype: The ONNX element type.
            shape: The dimensions.
            file: The file holding the bytes.
            offset: Where the raw little-endian bytes start in ``file``.
            length: How many bytes they take.
            load: Instead of a file region, a function that returns the data as an array.
            storage: The identity of the bytes (defaults to the file region, or to the
                entry itself for loaded data).
        """
        if (offset is None) == (load is None):
            raise ValueError("give either a file region (offset, length) or a load function")
        self.key = key
        self.dtype = int(dtype)
        self.file = Path(file)
        self.shape: tuple[int, ...] = _checked_shape(key, shape, self.file)
        self._offset = offset
        self._length = length
        if offset is not None:
            _check_region(self, offset, length)
        self._load = load
        if storage is None:
            storage = ("array", id(self)) if offset is None else (str(self.file), offset, length)
        self.storage = storage

    @classmethod
    def from_file_region(cls, key: str, dtype: int, shape: Iterable[int],
                         path: str | os.PathLike[str], offset: int, length: int) -> CheckpointEntry:
        """An entry whose raw little-endian bytes lie at ``offset`` in ``path``."""
        return cls(key, dtype, shape, file=path, offset=int(offset), length=int(length))

    @classmethod
    def from_loader(cls, key: str, dtype: int, shape: Iterable[int],
                    load: Callable[[], np.ndarray[Any, Any]], *, file: str | os.PathLike[str],
                    storage: Hashable | None = None) -> CheckpointEntry:
        """An entry whose data ``load()`` returns when needed (compressed or pickled data)."""
        return cls(key, dtype, shape, file=file, load=load, storage=storage)

    # ---------------------------------------------------------------- properties
    @property
    def dtype_name(self) -> str:
        """The ONNX name of the element type (``FLOAT``, ``BFLOAT16`` ...)."""
        return dtype_name(self.dtype)

    @property
    def size(self) -> int:
        """The number of elements."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        """The size of the data in bytes."""
        if self._length is not None:
            return self._length
        return int(self.size * dtype_size(self.dtype) + 0.5)

    @property
    def is_file_region(self) -> bool:
        """Whether the bytes are a plain region of :attr:`file` (streamed, never held)."""
        return self._offset is not None

    # ---------------------------------------------------------------------- data
    def tensor(self, name: str | None = None) -> Tensor:
        """Return the data as a lazy :class:`graphpass.Tensor` called ``name``.

        A file-region entry gives a tensor that references the checkpoint file: the
        bytes are read (in chunks) only when the model is saved or run.

        Raises:
            CheckpointError: The data cannot be loaded, or is not what the header says.
        """
        tensor_name = self.key if name is None else name
        if self._offset is not None:
            assert self._length is not None
            return Tensor.from_file_region(tensor_name, self.dtype, self.shape, self.file,
                                           self._offset, self._length)
        return Tensor.from_array(tensor_name, self._loaded(), self.dtype)

    def numpy(self) -> np.ndarray[Any, Any]:
        """Return the data as a numpy array (memory-mapped for file regions)."""
        if self._offset is not None:
            return self.tensor().numpy()
        return self._loaded()

    def _loaded(self) -> np.ndarray[Any, Any]:
        assert self._load is not None
        try:
            array = np.asarray(self._load())
        except CheckpointError:
            raise
        except Exception as error:  # a broken file surfaces here, on first use
            raise CheckpointError(f"cannot read tensor {self.key!r} ({error})",
                                  where=str(self.file)) from None
        if tuple(array.shape) != self.shape or array.dtype != numpy_dtype(self.dtype):
            raise CheckpointError(
                f"tensor {self.key!r} holds {array.dtype}{list(array.shape)}, but the file "
                f"says {self.dtype_name}{list(self.shape)}",
                where=str(self.file), hint="the checkpoint is corrupt; write it again")
        return array

    def __repr__(self) -> str:
        where = "file region" if self.is_file_region else "loaded on demand"
        return f"CheckpointEntry({self.key!r}, {self.dtype_name}, {list(self.shape)}, {where})"


class Checkpoint(Mapping[str, CheckpointEntry]):
    """A checkpoint: keys mapped to lazy entries. Read-only; reads no tensor data.

    ```python
    checkpoint = graphpass.checkpoint.open_checkpoint("model.safetensors")
    for key, entry in checkpoint.items():
        print(key, entry.dtype_name, entry.shape)
    weight = checkpoint["lm_head.weight"].tensor("lm_head.weight")   # lazy Tensor
    ```

    Attributes:
        path: The file or folder the checkpoint was opened from.
        format: The name of the loader that read it (``safetensors``, ``torch`` ...).
        files: Every file holding data (several for a sharded checkpoint).
        metadata: Free-form string metadata stored with the checkpoint.
        skipped: Keys the loader could not represent (with the reason), e.g. a tensor
            of an element type ONNX lacks or a non-tensor value.
    """

    def __init__(
        self,
        entries: Iterable[CheckpointEntry],
        *,
        path: str | os.PathLike[str],
        format: str,
        files: Iterable[str | os.PathLike[str]] = (),
        metadata: Mapping[str, str] | None = None,
        skipped: Mapping[str, str] | None = None,
    ):
        """Collect entries.

        Raises:
            CheckpointError: Two entries have the same key.
        """
        self.path = Path(path)
        self.format = format
        self._entries: dict[str, CheckpointEntry] = {}
        for entry in entries:
            if entry.key in self._entries:
                first = self._entries[entry.key].file
                raise CheckpointError(
                    f"key {entry.key!r} appears twice (in {str(first)!r} and {str(entry.file)!r})",
                    where=str(self.path),
                    hint="a checkpoint must give every key once; remove the duplicate shard")
            self._entries[entry.key] = entry
        _check_regions_fit(self._entries.values())
        self.files: tuple[Path, ...] = tuple(Path(f) for f in files) or (self.path,)
        self.metadata: Mapping[str, str] = MappingProxyType(dict(metadata or {}))
        self.skipped: Mapping[str, str] = MappingProxyType(dict(skipped or {}))
        self._by_storage: dict[Hashable, list[str]] | None = None

    @classmethod
    def combine(cls, parts: Iterable[Checkpoint], *, path: str | os.PathLike[str],
                format: str | None = None, overlap: bool = False) -> Checkpoint:
        """Join several checkpoints (shards, or checkpoints given together) into one.

        Args:
            parts: The checkpoints, in the order given.
            path: The combined checkpoint's path (for messages).
            format: Its format's name (default: the parts' formats joined by ``+``).
            overlap: Whether the parts may give the same key (checkpoints a user gives
                together, such as the original checkpoint and the module's full state):
                the same key with equal dtype, shape and bytes is no conflict, and the
                first part's entry is kept. Shards (``False``) give every key once.

        Raises:
            CheckpointError: A key appears in more than one part (with ``overlap``: with
                different values in two parts, naming the key and both files).
        """
        parts = list(parts)
        metadata: dict[str, str] = {}
        skipped: dict[str, str] = {}
        files: list[Path] = []
        for part in parts:
            metadata.update(part.metadata)
            skipped.update(part.skipped)
            files.extend(f for f in part.files if f not in files)
        formats = sorted({part.format for part in parts})
        entries: list[CheckpointEntry] = []
        if overlap:
            kept: dict[str, tuple[Checkpoint, CheckpointEntry]] = {}
            conflicts: list[str] = []
            for part in parts:
                for entry in part.values():
                    first = kept.get(entry.key)
                    if first is None:
                        kept[entry.key] = (part, entry)
                        entries.append(entry)
                    elif not _same_values(first[1], entry):
                        conflicts.append(f"{entry.key!r} ({first[1].dtype_name}"
                                         f"{list(first[1].shape)} in {str(first[0].path)!r}, "
                                         f"{entry.dtype_name}{list(entry.shape)} in "
                                         f"{str(part.path)!r})")
            if conflicts:
                shown = "; ".join(conflicts[:4]) + (
                    f"; and {len(conflicts) - 4} more" if len(conflicts) > 4 else "")
                raise CheckpointError(
                    f"the checkpoints given together hold different values under the same "
                    f"key{'s' * (len(conflicts) != 1)}: {shown}",
                    where=str(path),
                    hint="give each key's values once: pass one of the two files alone (a "
                         "graphpass.torch.save_state file holds every parameter and buffer "
                         "already), or save both from the same module")
        else:
            entries = [entry for part in parts for entry in part.values()]
        return cls(entries, path=path, format=format or "+".join(formats), files=files,
                   metadata=metadata, skipped=skipped)

    def __getitem__(self, key: str) -> CheckpointEntry:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """The size of all tensor data in bytes (shared data counted once)."""
        seen: dict[Hashable, int] = {}
        for entry in self._entries.values():
            seen.setdefault(entry.storage, entry.nbytes)
        return sum(seen.values())

    def aliases(self, key: str) -> list[str]:
        """The other keys that share ``key``'s data (tied weights saved once)."""
        if self._by_storage is None:
            self._by_storage = {}
            for name, entry in self._entries.items():
                self._by_storage.setdefault(entry.storage, []).append(name)
        return [k for k in self._by_storage[self._entries[key].storage] if k != key]

    def __repr__(self) -> str:
        return f"<Checkpoint {self.format} {str(self.path)!r}: {len(self)} tensors>"


MAX_TENSORS: Final = 200_000
"""The most tensors (or archive members) one checkpoint file may hold; models have thousands."""
_MAX_BYTES = 2**62
"""No tensor of a checkpoint holds more bytes than this (a shape past it is a lie)."""


def _checked_shape(key: str, shape: Iterable[object], file: Path) -> tuple[int, ...]:
    """The dimensions as ints, each a whole number >= 0; their product below 2**62."""
    try:
        given = list(shape) if not isinstance(shape, (str, bytes, dict)) else None
    except TypeError:
        given = None
    if given is None:
        raise CheckpointError(f"tensor {key!r} has a shape that is not a list ({shape!r:.100})",
                              where=str(file), hint="the checkpoint's header is corrupt")
    dims: list[int] = []
    count = 1
    for dim in given:
        try:
            if isinstance(dim, bool):
                raise TypeError
            value = operator.index(dim)  # type: ignore[arg-type]
        except TypeError:
            raise CheckpointError(f"tensor {key!r} has a dimension that is not a whole number "
                                  f"({dim!r})", where=str(file),
                                  hint="the checkpoint's header is corrupt") from None
        if value < 0:
            raise CheckpointError(f"tensor {key!r} has a negative dimension ({value})",
                                  where=str(file), hint="the checkpoint's header is corrupt")
        dims.append(value)
        count *= value
        if count > _MAX_BYTES:
            raise CheckpointError(f"tensor {key!r} claims a shape of more than 2**62 elements",
                                  where=str(file), hint="the checkpoint's header is corrupt")
    return tuple(dims)


def _check_region(entry: CheckpointEntry, offset: int, length: int | None) -> None:
    """A file region's bytes are exactly what its element type and shape need."""
    bits = round(dtype_size(entry.dtype) * 8)
    expected = (entry.size * bits + 7) // 8
    if not isinstance(offset, int) or offset < 0 or length != expected or bits == 0:
        raise CheckpointError(
            f"tensor {entry.key!r} ({entry.dtype_name}{list(entry.shape)}, {expected} bytes) is "
            f"said to take {length} bytes at offset {offset}", where=str(entry.file),
            hint="the checkpoint's header lies about its tensors; write the checkpoint again")


def _check_regions_fit(entries: Iterable[CheckpointEntry]) -> None:
    """Every file region ends inside its file (one ``stat`` per file)."""
    sizes: dict[Path, int] = {}
    for entry in entries:
        if entry._offset is None:
            continue
        if entry.file not in sizes:
            try:
                sizes[entry.file] = entry.file.stat().st_size
            except OSError as error:
                raise CheckpointError(f"cannot read the file ({error.strerror})",
                                      where=str(entry.file)) from None
        assert entry._length is not None
        if entry._offset + entry._length > sizes[entry.file]:
            raise CheckpointError(
                f"tensor {entry.key!r} would end at byte {entry._offset + entry._length}, past "
                f"the end of the file ({sizes[entry.file]} bytes)", where=str(entry.file),
                hint="the file is truncated, or its header lies; copy or save it again")


def check_member_count(path: Path) -> None:
    """Refuse a zip archive with more than :data:`MAX_TENSORS` members, before listing them.

    Reads the end-of-central-directory record (zip64 too); a file without one is left
    to the zip reader, which reports it.

    Raises:
        CheckpointError: The archive says it has too many members.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            handle.seek(max(0, size - 65_557))
            tail = handle.read()
    except OSError:
        return
    spot = tail.rfind(b"PK\x05\x06")
    if spot < 0 or spot + 22 > len(tail):
        return
    (count,) = struct.unpack("<H", tail[spot + 10:spot + 12])
    zip64 = tail.rfind(b"PK\x06\x06", 0, spot)
    if count == 0xFFFF and zip64 >= 0 and zip64 + 40 <= len(tail):
        (count,) = struct.unpack("<Q", tail[zip64 + 32:zip64 + 40])
    if count > MAX_TENSORS + 16:
        raise CheckpointError(f"the archive has {count} members, more than graphpass accepts "
                              f"in one checkpoint file ({MAX_TENSORS} tensors)", where=str(path),
                              hint="split the checkpoint into shards with an index")


def _same_values(first: CheckpointEntry, second: CheckpointEntry) -> bool:
    """Whether two entries hold the same tensor: dtype, shape and bytes."""
    if first.storage == second.storage:
        return True
    if first.dtype != second.dtype or first.shape != second.shape:
        return False
    return bool(np.ascontiguousarray(first.numpy()).tobytes()
                == np.ascontiguousarray(second.numpy()).tobytes())
