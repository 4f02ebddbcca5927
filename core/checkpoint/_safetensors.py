"""The safetensors loader: every tensor is a region of the file, nothing is read.

The ``safetensors`` library checks the header (valid JSON, offsets that cover the
file exactly, known dtypes); graphpass then reads the data offsets from the same
header and hands out file-region tensors, which are streamed when the model is
saved. Metadata written by ``safetensors.torch.save_model`` for tied weights
(``{"removed key": "kept key"}``) makes the removed key an alias of the kept one.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Final

from graphpass.checkpoint._checkpoint import Checkpoint, CheckpointEntry
from graphpass.checkpoint._dtypes import SAFETENSORS_DTYPES
from graphpass.checkpoint._loader import CheckpointLoader, read_magic
from graphpass.errors import CheckpointError

__all__ = ["SafetensorsLoader"]

_MAX_HEADER: Final = 100 * 1024 * 1024  # the limit the safetensors library enforces


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
        try:
            with safe_open(str(path), framework="numpy") as handle:  # validates the header
                metadata = dict(handle.metadata() or {})
        except SafetensorError as error:
            raise CheckpointError(f"not a valid safetensors file: {error}", where=where,
                                  hint="the file is truncated or corrupt; copy or save it "
                                       "again") from None
        header, data_start = _read_header(path)
        regions: dict[str, tuple[int, list[int], int, int]] = {}
        skipped: dict[str, str] = {}
        for key, info in header.items():
            if key == "__metadata__":
                continue
            dtype = SAFETENSORS_DTYPES.get(info["dtype"])
            if dtype is None:
                skipped[key] = f"element type {info['dtype']} has no ONNX equivalent"
                continue
            begin, end = info["data_offsets"]
            regions[key] = (dtype, info["shape"], data_start + begin, end - begin)
        for alias, kept in metadata.items():  # tied weights saved once by save_model
            if alias not in header and kept in regions:
                regions[alias] = regions[kept]
        entries = [CheckpointEntry.from_file_region(key, dtype, shape, path, offset, length)
                   for key, (dtype, shape, offset, length) in regions.items()]
        return Checkpoint(entries, path=path, format=self.name, metadata=metadata,
                          skipped=skipped)


def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    if not isinstance(header, dict):
        raise CheckpointError("the safetensors header is not a JSON object", where=str(path))
    return header, 8 + size
