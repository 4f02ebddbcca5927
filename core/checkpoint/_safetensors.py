"""The safetensors loader: every tensor is a region of the file, nothing is read.

The ``safetensors`` library checks the header (valid JSON, offsets that cover the
file exactly, known dtypes); graphpass then reads the data offsets from the same
header, checks them again (its JSON parser is not the library's: a key given twice,
say, must not let the two disagree) and hands out file-region tensors, which are
streamed when the model is saved. A file of more than 200,000 tensors is refused
before its header becomes Python objects. Metadata written by
``safetensors.torch.save_model`` for tied weights (``{"removed key": "kept key"}``)
makes the removed key an alias of the kept one.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Final

from graphpass.checkpoint._checkpoint import MAX_TENSORS, Checkpoint, CheckpointEntry
from graphpass.checkpoint._dtypes import SAFETENSORS_DTYPES
from graphpass.checkpoint._loader import CheckpointLoader, read_magic
from graphpass.errors import CheckpointError

__all__ = ["SafetensorsLoader"]

_MAX_HEADER: Final = 100_000_000  # the limit the safetensors library enforces


class SafetensorsLoader(CheckpointLoader):
    """Reads ``.safetensors`` files lazily (file regions, never loaded into memory)."""

    name = "safetensors"
    description = "safetensors files (*.safetensors), read lazily as file regions"

    def can_load(self, path: Path) -> bool:
        """A file whose first 8 bytes give a plausible header size, followed by ``{``."""
        head = read_magic(path, 9)
        if len(head) < 9:
            return False
        (size,) = struct.unpack("<Q", head[:8])
        try:
            file_size = path.stat().st_size
        except OSError:
            return False
        return 2 <= size <= min(_MAX_HEADER, file_size - 8) and head[8:9] == b"{"

    def load(self, path: Path) -> Checkpoint:
        """Read the header; every tensor becomes a file-region entry."""
        from safetensors import SafetensorError, safe_open

        where = str(path)
        text, data_start = _header_bytes(path)
        # Each tensor has "data_offsets": counted in the bytes, before any parser builds
        # a million objects out of a 100 MB header.
        count = text.count(b'"data_offsets"')
        if count > MAX_TENSORS:
            raise CheckpointError(
                f"the file holds {count} tensors, more than the {MAX_TENSORS} graphpass "
                "accepts in one file", where=where,
                hint="split the checkpoint into shards with an index")
        try:
            with safe_open(str(path), framework="numpy") as handle:  # validates the header
                metadata = dict(handle.metadata() or {})
        except SafetensorError as error:
            raise CheckpointError(f"not a valid safetensors file: {error}", where=where,
                                  hint="the file is truncated or corrupt; copy or save it "
                                       "again") from None
        header = json.loads(text)
        del text
        if not isinstance(header, dict):
            raise CheckpointError("the safetensors header is not a JSON object", where=where)
        regions: dict[str, tuple[int, list[int], int, int]] = {}
        skipped: dict[str, str] = {}
        data_size = path.stat().st_size - data_start
        spans: list[tuple[int, int, str]] = []
        for key, info in header.items():
            if key == "__metadata__":
                continue
            begin, end = _offsets(key, info, data_size, where)
            spans.append((begin, end, key))
            dtype = SAFETENSORS_DTYPES.get(info.get("dtype"))
            if dtype is None:
                skipped[key] = f"element type {info.get('dtype')} has no ONNX equivalent"
                continue
            regions[key] = (dtype, info.get("shape"), data_start + begin, end - begin)
        _check_no_overlap(spans, where)
        for alias, kept in metadata.items():  # tied weights saved once by save_model
            if alias not in header and kept in regions:
                regions[alias] = regions[kept]
        entries = [CheckpointEntry.from_file_region(key, dtype, shape, path, offset, length)
                   for key, (dtype, shape, offset, length) in regions.items()]
        return Checkpoint(entries, path=path, format=self.name, metadata=metadata,
                          skipped=skipped)


def _offsets(key: str, info: Any, data_size: int, where: str) -> tuple[int, int]:
    """A tensor's ``data_offsets``, checked: two whole numbers inside the data section."""
    offsets = info.get("data_offsets") if isinstance(info, dict) else None
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size):
        raise CheckpointError(f"tensor {key!r} has data offsets {offsets!r} outside the data "
                              f"section of {data_size} bytes", where=where,
                              hint="the file's header is corrupt; save it again")
    return offsets[0], offsets[1]


def _check_no_overlap(spans: list[tuple[int, int, str]], where: str) -> None:
    previous_end, previous_key = 0, ""
    for begin, end, key in sorted(spans):
        if begin < previous_end:
            raise CheckpointError(f"tensors {previous_key!r} and {key!r} overlap", where=where,
                                  hint="the file's header is corrupt; save it again")
        if end > previous_end:
            previous_end, previous_key = end, key


def _header_bytes(path: Path) -> tuple[bytes, int]:
    """The header's JSON bytes (at most 100 MB: ``can_load`` checked), and where data starts."""
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        return handle.read(min(size, _MAX_HEADER)), 8 + size
