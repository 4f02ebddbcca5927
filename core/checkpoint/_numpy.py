"""The numpy loader: ``.npz`` archives (``numpy.savez``), never with pickles allowed.

An uncompressed member (``numpy.savez``) holding a C-ordered little-endian array
becomes a region of the archive, streamed when the model is saved. A compressed
member (``numpy.savez_compressed``) or a Fortran-ordered one is read on first use.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.lib import format as npy_format

from graphpass.checkpoint._checkpoint import Checkpoint, CheckpointEntry, check_member_count
from graphpass.checkpoint._dtypes import numpy_to_onnx
from graphpass.checkpoint._loader import CheckpointLoader, read_magic
from graphpass.errors import CheckpointError
from graphpass.ir import numpy_dtype

__all__ = ["NumpyLoader"]

_ZIP_MAGIC: Final = b"PK\x03\x04"
_LOCAL_HEADER: Final = struct.Struct("<4s5H3L2H")


class NumpyLoader(CheckpointLoader):
    """Reads ``.npz`` archives; each ``<key>.npy`` member is one tensor."""

    name = "numpy"
    description = "numpy archives (*.npz from numpy.savez / savez_compressed)"

    def can_load(self, path: Path) -> bool:
        """A zip archive whose first member is a ``.npy`` file."""
        head = read_magic(path, 512)
        if not head.startswith(_ZIP_MAGIC) or len(head) < 30:
            return False
        (length,) = struct.unpack("<H", head[26:28])
        return head[30:30 + length].endswith(b".npy")

    def load(self, path: Path) -> Checkpoint:
        """List the members; uncompressed C-ordered arrays become file regions."""
        where = str(path)
        entries: list[CheckpointEntry] = []
        skipped: dict[str, str] = {}
        check_member_count(path)
        try:
            with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
                for info in archive.infolist():
                    if not info.filename.endswith(".npy"):
                        skipped[info.filename] = "not a .npy member"
                        continue
                    key = info.filename[: -len(".npy")]
                    with archive.open(info) as member:
                        shape, fortran, dtype, header_size = _npy_header(member)
                    onnx_type = numpy_to_onnx(dtype)
                    if onnx_type is None:
                        skipped[key] = f"numpy dtype {dtype} has no ONNX equivalent"
                        continue
                    _check_member_size(key, shape, dtype, info.file_size - header_size, where)
                    plain = (info.compress_type == zipfile.ZIP_STORED and dtype.byteorder != ">"
                             and not (fortran and len(shape) > 1))
                    if plain:
                        offset = _data_offset(raw, info) + header_size
                        length = info.file_size - header_size
                        entries.append(CheckpointEntry.from_file_region(
                            key, onnx_type, shape, path, offset, length))
                    else:
                        entries.append(CheckpointEntry.from_loader(
                            key, onnx_type, shape, _member_loader(path, info.filename, onnx_type),
                            file=path))
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as error:
            raise CheckpointError(f"cannot read the numpy archive: {error}", where=where,
                                  hint="the file is truncated or corrupt; save it again") from None
        if not entries:
            raise CheckpointError("the archive holds no arrays", where=where)
        return Checkpoint(entries, path=path, format=self.name, skipped=skipped)


def _check_member_size(key: str, shape: tuple[int, ...], dtype: np.dtype[Any], size: int,
                       where: str) -> None:
    """The member holds exactly the bytes its header's shape needs (no more, no less).

    Checked before any data is read: a compressed member that claims more data than
    it holds (or a shape its data cannot fill) never gets to allocate it.
    """
    count = 1
    for dim in shape:
        if not isinstance(dim, int) or dim < 0:
            raise CheckpointError(f"array {key!r} has an impossible shape {shape}", where=where,
                                  hint="the archive is corrupt; save it again")
        count *= dim
    if count * dtype.itemsize != size:
        raise CheckpointError(
            f"array {key!r} ({dtype}{list(shape)}) needs {count * dtype.itemsize} bytes, but its "
            f"member holds {size}", where=where, hint="the archive is corrupt; save it again")


def _npy_header(member: Any) -> tuple[tuple[int, ...], bool, np.dtype[Any], int]:
    version = npy_format.read_magic(member)
    if version == (1, 0):
        shape, fortran, dtype = npy_format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, fortran, dtype = npy_format.read_array_header_2_0(member)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    return tuple(shape), bool(fortran), dtype, member.tell()


def _data_offset(raw: Any, info: zipfile.ZipInfo) -> int:
    """Where a stored member's bytes start: after its local header, name and extra field."""
    raw.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
    if fields[0] != _ZIP_MAGIC:
        raise ValueError(f"bad local header for {info.filename!r}")
    name_length, extra_length = int(fields[-2]), int(fields[-1])
    return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length


def _member_loader(path: Path, name: str, onnx_type: int) -> Any:
    def load() -> np.ndarray[Any, Any]:
        with zipfile.ZipFile(path) as archive, archive.open(name) as member:
            array = npy_format.read_array(member, allow_pickle=False)
        return np.ascontiguousarray(array, dtype=numpy_dtype(onnx_type).newbyteorder("="))

    return load
