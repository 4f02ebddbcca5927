"""Sharded checkpoints: an index JSON, or a folder of shards.

The index (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``) is a
JSON object whose ``weight_map`` says which shard holds each key; every shard is opened
with the loader that recognises its content (among the loaders
:func:`~graphpass.checkpoint.open_checkpoint` is trying), and the shards are joined into one
:class:`~graphpass.checkpoint.Checkpoint` (a key in two shards is an error). A
folder is read through its index when it has one; otherwise all its shards of one
format are joined (safetensors first, then torch files, then ``.npz``).

Shards are read only inside the checkpoint's folder: a ``weight_map`` entry that is
absolute, climbs out with ``..``, or is a link (or goes through a linked folder) that
resolves outside the folder is refused before anything is opened, as is a shard that
is not a regular file (a pipe would block). The one exception is the layout of the
Hugging Face cache, where every file of ``<repo>/snapshots/<revision>/`` is a link to
``<repo>/blobs/<hash>``.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from graphpass.checkpoint._checkpoint import MAX_TENSORS, Checkpoint, CheckpointEntry
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
        except RecursionError:
            raise CheckpointError("the index JSON nests too deeply to read", where=where,
                                  hint="this is not a sharded checkpoint index") from None
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise CheckpointError("the JSON has no \"weight_map\" of keys to shard files",
                                  where=where, hint="this is not a sharded checkpoint index")
        if len(weight_map) > MAX_TENSORS:
            raise CheckpointError(f"the index maps {len(weight_map)} keys, more than graphpass "
                                  f"accepts in one checkpoint ({MAX_TENSORS})", where=where)
        by_shard: dict[str, list[str]] = {}
        for key, shard in weight_map.items():
            by_shard.setdefault(shard, []).append(key)
        entries: list[CheckpointEntry] = []
        parts: list[Checkpoint] = []
        for shard, keys in by_shard.items():
            shard_path = _shard_path(path, shard)
            part = open_checkpoint(shard_path, shard_loaders)
            parts.append(part)
            for key in keys:
                if key not in part:
                    raise CheckpointError(
                        f"the index puts {key!r} in shard {shard!r}, which has no such tensor",
                        where=where, hint="the index and the shards do not belong together")
                entries.append(part[key])
        given = index.get("metadata")
        metadata = {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}
        combined = Checkpoint.combine(parts, path=path)
        return Checkpoint(entries, path=path, format=f"sharded {combined.format}",
                          files=combined.files, metadata={**combined.metadata, **metadata},
                          skipped=combined.skipped)

    def _load_folder(self, path: Path, shard_loaders: Sequence[Any]) -> Checkpoint:
        for name in _INDEX_PREFERENCE:
            if (path / name).is_file():
                return self._load_index(_shard_path(path / name, name, what="index"),
                                        shard_loaders)
        indexes = sorted(path.glob("*.index.json"))
        if indexes:
            return self._load_index(_shard_path(indexes[0], indexes[0].name, what="index"),
                                    shard_loaders)
        for patterns in _SHARD_PATTERNS:
            shards = sorted({_shard_path(p, p.name) for pattern in patterns
                             for p in path.glob(pattern) if p.is_file()})
            if shards:
                parts = [open_checkpoint(shard, shard_loaders) for shard in shards]
                formats = "+".join(sorted({part.format for part in parts}))
                return Checkpoint.combine(parts, path=path, format=f"sharded {formats}")
        raise CheckpointError("the folder holds no checkpoint shards or index", where=str(path),
                              hint="expected *.safetensors, *.bin/*.pt/*.pth or *.npz files, "
                                   "or a *.index.json")


def _shard_path(index: Path, shard: str, *, what: str = "shard") -> Path:
    """``index``'s folder / ``shard``, if it is a regular file inside that folder.

    Raises:
        CheckpointError: The name is empty, absolute, climbs out or holds a NUL; the
            file is missing or not a regular file; or a link leads outside the folder.
    """
    where = str(index)
    folder = index.parent
    if not shard or "\0" in shard or Path(shard).is_absolute() or ".." in Path(shard).parts:
        raise CheckpointError(f"the index names {what} {shard!r}, which is not a plain name "
                              "inside its folder", where=where,
                              hint="a shard is named relative to the index's folder")
    path = folder / shard
    target = path.resolve()
    if not _inside(target, folder.resolve()) and not _hugging_face_blob(path, target):
        raise CheckpointError(
            f"{what} {shard!r} is a link (or inside a linked folder) that leads outside the "
            f"checkpoint's folder, to {str(target)!r}", where=where,
            hint="graphpass reads a checkpoint's shards only from its own folder; copy the "
                 "shard there")
    try:
        mode = os.stat(target).st_mode
    except OSError:
        raise CheckpointError(f"{what} {shard!r} named by the index is missing", where=where,
                              hint="download or copy every shard next to the index") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{what} {shard!r} is not a regular file", where=where,
                              hint="a shard is a checkpoint file (a pipe or a folder is not)")
    return path


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _hugging_face_blob(path: Path, target: Path) -> bool:
    """Whether ``path`` is in ``<repo>/snapshots/<rev>/`` and ``target`` in ``<repo>/blobs``."""
    folder = path.parent.resolve()
    for ancestor in (folder, *folder.parents):
        if ancestor.parent.name == "snapshots":
            return target.parent == ancestor.parent.parent / "blobs"
    return False
