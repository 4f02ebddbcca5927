"""Sharded checkpoints: an index JSON, or a folder of shards.

The index (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``) is a
JSON object whose ``weight_map`` says which shard holds each key; every shard is opened
with the loader that recognises its content (among the loaders
:func:`~graphpass.checkpoint.open_checkpoint` is trying), and the shards are joined into one
:class:`~graphpass.checkpoint.Checkpoint` (a key in two shards is an error). A
folder is read through its index when it has one; otherwise all its shards of one
format are joined (safetensors first, then torch files, then ``.npz``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from graphpass.checkpoint._checkpoint import Checkpoint, CheckpointEntry
from graphpass.checkpoint._loader import CheckpointLoader, open_checkpoint, read_magic
from graphpass.checkpoint._numpy import NumpyLoader
from graphpass.checkpoint._safetensors import SafetensorsLoader
from graphpass.checkpoint._torch import TorchLoader
from graphpass.errors import CheckpointError

__all__ = ["ShardedLoader"]

_INDEX_PREFERENCE: Final = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SHARD_PATTERNS: Final = (("*.safetensors",), ("*.bin", "*.pt", "*.pth"), ("*.npz",))
_MAX_INDEX: Final = 64 * 1024 * 1024


class ShardedLoader(CheckpointLoader):
    """Reads sharded checkpoints through their index JSON, or a folder of shards."""

    name = "sharded"
    description = ("sharded checkpoints: an index JSON with a weight_map "
                   "(model.safetensors.index.json, pytorch_model.bin.index.json) or a folder "
                   "of shards")
    uses_loaders = True

    def __init__(self, shard_loaders: Sequence[Any] | None = None):
        """Create the loader.

        Args:
            shard_loaders: The loaders for the shards; by default the ones
                :func:`~graphpass.checkpoint.open_checkpoint` is trying.
        """
        self.shard_loaders = shard_loaders

    def can_load(self, path: Path) -> bool:
        """A folder, or a JSON object that mentions a ``weight_map``."""
        if path.is_dir():
            return True
        if not read_magic(path, 64).lstrip().startswith(b"{"):
            return False
        return b'"weight_map"' in read_magic(path, _MAX_INDEX)

    def load(self, path: Path, loaders: Sequence[Any] | None = None) -> Checkpoint:
        """Open every shard and join them.

        Args:
            path: The index JSON, or the folder.
            loaders: The loaders :func:`~graphpass.checkpoint.open_checkpoint` is
                trying; the shards are opened with them (but this one) unless the loader
                was made with its own ``shard_loaders``. Called without either, the
                built-in safetensors, torch and numpy loaders.
        """
        chosen = self.shard_loaders if self.shard_loaders is not None else loaders
        if chosen is None:
            chosen = [SafetensorsLoader(), TorchLoader(), NumpyLoader()]
        shard_loaders = [loader for loader in chosen if not isinstance(loader, ShardedLoader)]
        if path.is_dir():
            return self._load_folder(path, shard_loaders)
        return self._load_index(path, shard_loaders)

    def _load_index(self, path: Path, shard_loaders: Sequence[Any]) -> Checkpoint:
        where = str(path)
        try:
            if path.stat().st_size > _MAX_INDEX:
                raise CheckpointError("the index JSON is implausibly large", where=where)
            index = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(f"not a readable index JSON ({error})", where=where,
                                  hint="a sharded checkpoint's index is a JSON object with a "
                                       "\"weight_map\" of keys to shard files") from None
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise CheckpointError("the JSON has no \"weight_map\" of keys to shard files",
                                  where=where, hint="this is not a sharded checkpoint index")
        by_shard: dict[str, list[str]] = {}
        for key, shard in weight_map.items():
            by_shard.setdefault(shard, []).append(key)
        entries: list[CheckpointEntry] = []
        parts: list[Checkpoint] = []
        for shard, keys in by_shard.items():
            shard_path = path.parent / shard
            if Path(shard).is_absolute() or ".." in Path(shard).parts:
                raise CheckpointError(f"the index names shard {shard!r} outside its folder",
                                      where=where)
            if not shard_path.is_file():
                raise CheckpointError(f"shard {shard!r} named by the index is missing",
                                      where=where, hint="download or copy every shard next to "
                                                        "the index")
            part = open_checkpoint(shard_path, shard_loaders)
            parts.append(part)
            for key in keys:
                if key not in part:
                    raise CheckpointError(
                        f"the index puts {key!r} in shard {shard!r}, which has no such tensor",
                        where=where, hint="the index and the shards do not belong together")
                entries.append(part[key])
        metadata = {k: str(v) for k, v in (index.get("metadata") or {}).items()}
        combined = Checkpoint.combine(parts, path=path)
        return Checkpoint(entries, path=path, format=f"sharded {combined.format}",
                          files=combined.files, metadata={**combined.metadata, **metadata},
                          skipped=combined.skipped)

    def _load_folder(self, path: Path, shard_loaders: Sequence[Any]) -> Checkpoint:
        for name in _INDEX_PREFERENCE:
            if (path / name).is_file():
                return self._load_index(path / name, shard_loaders)
        indexes = sorted(path.glob("*.index.json"))
        if indexes:
            return self._load_index(indexes[0], shard_loaders)
        for patterns in _SHARD_PATTERNS:
            shards = sorted({p for pattern in patterns for p in path.glob(pattern) if p.is_file()})
            if shards:
                parts = [open_checkpoint(shard, shard_loaders) for shard in shards]
                formats = "+".join(sorted({part.format for part in parts}))
                return Checkpoint.combine(parts, path=path, format=f"sharded {formats}")
        raise CheckpointError("the folder holds no checkpoint shards or index", where=str(path),
                              hint="expected *.safetensors, *.bin/*.pt/*.pth or *.npz files, "
                                   "or a *.index.json")
