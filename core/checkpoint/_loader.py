"""Checkpoint loaders and :func:`open_checkpoint`, which picks one by the file's content.

A loader is any object with a ``name``, a one-line ``description``, ``can_load(path)``
(which looks at the content: magic bytes, a header, a JSON index) and
``load(path) -> Checkpoint``. Plugins give loaders through the
``graphpass_checkpoint_loaders`` hook; :class:`CheckpointLoader` is a convenient
base class. A loader that opens other files with the other loaders (the sharded
loader opens each shard) sets ``uses_loaders = True``; :func:`open_checkpoint` then
calls ``load(path, loaders)`` with the loaders it is trying::

    class MyLoader(graphpass.checkpoint.CheckpointLoader):
        name = "my-format"
        description = "My company's weight files (.mw)"

        def can_load(self, path):
            return read_magic(path, 4) == b"MW01"

        def load(self, path):
            return graphpass.checkpoint.Checkpoint([...], path=path, format=self.name)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from graphpass.checkpoint._checkpoint import Checkpoint
from graphpass.errors import CheckpointError, GraphpassError
from graphpass.framework import default_registry

if TYPE_CHECKING:
    from graphpass.framework import Registry

__all__ = ["CheckpointLoader", "open_checkpoint", "read_magic"]


class CheckpointLoader:
    """Base class of checkpoint loaders.

    Attributes:
        name: The loader's name (``safetensors``, ``torch`` ...), unique in the registry.
        description: One line: the format and the usual file names.
        uses_loaders: Whether :meth:`load` takes a second argument, the loaders
            :func:`open_checkpoint` is trying (for a format made of other files).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    uses_loaders: ClassVar[bool] = False

    def can_load(self, path: Path) -> bool:
        """Whether this loader reads ``path``. Must be cheap and must not raise."""
        raise NotImplementedError

    def load(self, path: Path) -> Checkpoint:
        """Open ``path`` and describe its tensors without reading their data.

        Raises:
            CheckpointError: The file is corrupt, truncated or unsupported.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<checkpoint loader {self.name}>"


def read_magic(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of ``path`` (fewer for a short file, empty on error).

    Empty, too, for anything but a regular file: a folder, or a pipe or device, which
    could block or never end.
    """
    if not path.is_file():
        return b""
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def open_checkpoint(path: str | os.PathLike[str], loaders: Sequence[Any] | None = None, *,
                    registry: Registry | None = None) -> Checkpoint:
    """Open a checkpoint with the loader that recognises its content.

    Nothing but headers is read: entries reference their bytes until used.

    Args:
        path: A checkpoint file (``.safetensors``, ``.pt``/``.pth``/``.bin``,
            ``.npz``), a sharded checkpoint's index JSON, or a folder of shards.
        loaders: The loaders to try, in order; by default ``registry``'s.
        registry: Whose loaders to try when ``loaders`` is not given; by default the
            one of the built-in and installed plugins
            (:func:`~graphpass.framework._plugin_loading.default_registry`).

    Returns:
        The checkpoint: a read-only mapping of keys to
        :class:`~graphpass.checkpoint.CheckpointEntry` (``dtype``, ``shape``,
        ``tensor(name)``).

    Raises:
        CheckpointError: The path is missing, no loader recognises the content (the
            message lists the loaders), or the file is corrupt or unsafe.
    """
    file_path = Path(path)
    where = str(file_path)
    if not file_path.exists():
        raise CheckpointError("no such checkpoint file or folder", where=where,
                              hint="check the path (relative paths in a pipeline file are "
                                   "relative to that file)")
    if loaders is None:
        loaders = (registry if registry is not None else default_registry()).loaders()
    for loader in loaders:
        try:
            recognised = bool(loader.can_load(file_path))
        except Exception:  # a plugin's sniffing must not break the others
            recognised = False
        if not recognised:
            continue
        try:
            if getattr(loader, "uses_loaders", False):
                checkpoint = loader.load(file_path, loaders)
            else:
                checkpoint = loader.load(file_path)
        except GraphpassError as error:
            raise CheckpointError(error.message, where=error.where or where,
                                  hint=error.hint) from None
        except Exception as error:
            raise CheckpointError(
                f"the {loader.name} loader failed: {type(error).__name__}: {error}",
                where=where, hint="the file may be corrupt or truncated") from None
        if not isinstance(checkpoint, Checkpoint):
            raise CheckpointError(f"the {loader.name} loader returned "
                                  f"{type(checkpoint).__name__}, not a Checkpoint", where=where)
        return checkpoint
    raise CheckpointError(
        f"unknown checkpoint format ({_describe_content(file_path)})",
        where=where,
        hint="graphpass reads: " + "; ".join(
            f"{loader.name} ({loader.description})" for loader in loaders)
        + ". A plugin can add a loader (hook graphpass_checkpoint_loaders)."
        + _suffix_hint(file_path))


def _describe_content(path: Path) -> str:
    if path.is_dir():
        return "a folder with no checkpoint shards or index"
    if not path.is_file():
        return "not a regular file"
    head = read_magic(path, 16)
    if not head:
        return "the file is empty"
    if head[:1] == b"\x80" and len(head) > 1 and head[1] <= 5:
        return "a Python pickle that is not a torch.save checkpoint; graphpass never " \
               "unpickles arbitrary objects"
    return f"it starts with bytes {head[:8].hex(' ')}"


def _suffix_hint(path: Path) -> str:
    suffix = path.suffix.lower()
    known = {".safetensors": "safetensors", ".pt": "torch", ".pth": "torch", ".bin": "torch",
             ".npz": "numpy", ".json": "sharded index"}
    if suffix in known:
        return (f" The name ends in {suffix}, but the content is not a {known[suffix]} file: "
                "it is probably truncated or corrupt.")
    return ""
