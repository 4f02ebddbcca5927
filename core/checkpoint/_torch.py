"""The torch loader: ``torch.save`` checkpoints, read with ``weights_only=True`` only.

graphpass never unpickles arbitrary objects. A checkpoint that holds anything but
tensors and plain containers (a pickled ``nn.Module``, a custom class, a crafted
``__reduce__``) is refused by torch's ``weights_only`` unpickler, and graphpass
reports which globals it refused instead of falling back to unsafe loading.

The pickle is read with ``map_location="meta"``, which reads no tensor data but
tells where each storage starts in the zip file; a contiguous tensor then becomes
a region of the checkpoint file, streamed when the model is saved, exactly like
safetensors. Anything else (a strided view, a big-endian file, the legacy
non-zip format) is loaded on first use with ``torch.load(weights_only=True,
mmap=True)``.

Before torch reads anything, the zip archive is checked: every member stored
uncompressed (``torch.save`` never compresses; a compressed member could be a zip
bomb, and its bytes could not be referenced in place) and the byte order little-endian
(torch crashes with a segmentation fault reading a big-endian archive lazily). After,
every storage must fit in its record, and every tensor in its storage.
"""

from __future__ import annotations

import pickle
import re
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from graphpass.checkpoint._checkpoint import Checkpoint, CheckpointEntry, check_member_count
from graphpass.checkpoint._dtypes import torch_to_onnx
from graphpass.checkpoint._loader import CheckpointLoader, read_magic
from graphpass.errors import CheckpointError
from graphpass.ir import numpy_dtype

__all__ = ["TorchLoader"]

_ZIP_MAGIC: Final = b"PK\x03\x04"
_LEGACY_MAGIC: Final = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_WRAPPERS: Final = ("state_dict", "model_state_dict", "model", "module")
"""Sub-dictionaries that training scripts commonly wrap a state dict in."""


class TorchLoader(CheckpointLoader):
    """Reads ``torch.save`` checkpoints (needs torch), refusing anything but tensors."""

    name = "torch"
    description = ("torch.save checkpoints (*.pt, *.pth, *.bin), read with weights_only=True; "
                   "needs torch")

    def can_load(self, path: Path) -> bool:
        """A zip whose first record is ``<name>/data.pkl``, or the legacy torch magic."""
        head = read_magic(path, 512)
        if head.startswith(_LEGACY_MAGIC):
            return True
        return head.startswith(_ZIP_MAGIC) and _first_zip_name(head).endswith("data.pkl")

    def load(self, path: Path) -> Checkpoint:
        """Unpickle with ``weights_only=True`` on the meta device; tensors stay in the file."""
        where = str(path)
        try:
            import torch
        except ImportError:
            raise CheckpointError(
                "this is a torch.save checkpoint, and reading one needs torch, which is not "
                "installed", where=where,
                hint="pip install torch (the CPU wheel is enough), or convert the checkpoint "
                     "to safetensors") from None
        is_zip = read_magic(path, 4) == _ZIP_MAGIC
        records = _check_archive(path) if is_zip else None
        state = _unwrap(_torch_load(torch, path, map_location="meta"), where)
        on_demand = _OnDemand(path, is_zip)
        storages = _Storages(path, records)
        entries: list[CheckpointEntry] = []
        skipped: dict[str, str] = {}
        for key, value in state.items():
            if not isinstance(key, str):
                skipped[str(key)] = "the key is not a string"
                continue
            if not isinstance(value, torch.Tensor):
                skipped[key] = f"not a tensor ({type(value).__name__})"
                continue
            dtype = torch_to_onnx(value.dtype)
            if dtype is None or value.layout != torch.strided:
                skipped[key] = f"{value.dtype} {value.layout} tensors have no ONNX equivalent"
                continue
            shape = tuple(value.shape)
            offset = storages.check(key, value)
            if offset is not None and value.is_contiguous():
                itemsize = value.element_size()
                entries.append(CheckpointEntry.from_file_region(
                    key, dtype, shape, path, offset + int(value.storage_offset()) * itemsize,
                    int(value.numel()) * itemsize))
            else:
                entries.append(CheckpointEntry.from_loader(
                    key, dtype, shape, on_demand.loader(key, dtype), file=path,
                    storage=("torch", str(path), offset, value.storage_offset(),
                             tuple(value.stride()), shape)))
        if not entries:
            raise CheckpointError(
                "the checkpoint holds no tensors"
                + (f" (it has: {', '.join(sorted(skipped)[:8])})" if skipped else ""),
                where=where, hint="save the model's state_dict(): "
                                  "torch.save(model.state_dict(), path)")
        return Checkpoint(entries, path=path, format=self.name, skipped=skipped)


class _OnDemand:
    """Loads the whole checkpoint (memory-mapped) the first time an entry needs it."""

    def __init__(self, path: Path, is_zip: bool):
        self.path = path
        self.is_zip = is_zip
        self._state: Mapping[Any, Any] | None = None

    def loader(self, key: str, dtype: int) -> Any:
        def load() -> np.ndarray[Any, Any]:
            return _to_numpy(self._loaded()[key], dtype)

        return load

    def _loaded(self) -> Mapping[Any, Any]:
        if self._state is None:
            import torch

            self._state = _unwrap(_torch_load(torch, self.path, map_location="cpu",
                                              mmap=self.is_zip), str(self.path))
        return self._state


def _torch_load(torch: Any, path: Path, **options: Any) -> Any:
    """``torch.load(weights_only=True)``, never guessing the format from the file name."""
    where = str(path)
    try:
        if options.get("mmap"):  # needs a path; torch reads *.safetensors names as safetensors
            if path.suffix.lower() != ".safetensors":
                return torch.load(path, weights_only=True, **options)
            options["mmap"] = False
        with open(path, "rb") as handle:
            return torch.load(handle, weights_only=True, **options)
    except pickle.UnpicklingError as error:
        refused = _unsafe_globals(torch, path) or _unsupported_lines(error)
        what = f" (it needs {', '.join(refused)})" if refused else ""
        raise CheckpointError(
            f"the checkpoint holds Python objects that torch's weights_only loader refuses"
            f"{what}; graphpass never loads such pickles, because unpickling can run "
            "arbitrary code", where=where,
            hint="if you trust the file, load it once in a trusted Python with "
                 "torch.load(path, weights_only=False) and save just the tensors: "
                 "torch.save(model.state_dict(), 'weights.pt'), or "
                 "safetensors.torch.save_model(model, 'weights.safetensors')") from None
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile, struct.error,
            AssertionError, KeyError, IndexError, TypeError, AttributeError,
            OverflowError) as error:  # what torch's readers raise on damaged files
        raise CheckpointError(f"cannot read the torch checkpoint: {_first_line(error)}",
                              where=where, hint="the file is truncated or corrupt; copy or "
                                                "save it again") from None


def _check_archive(path: Path) -> dict[int, tuple[str, int]]:
    """Check a torch zip before torch reads it; the records by where their bytes start.

    Raises:
        CheckpointError: A member is compressed, the archive is unreadable, or its
            byte order is not little-endian.
    """
    where = str(path)
    records: dict[int, tuple[str, int]] = {}
    check_member_count(path)
    try:
        with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
            members = archive.infolist()
            for info in members:
                if info.compress_type != zipfile.ZIP_STORED:
                    raise CheckpointError(
                        f"member {info.filename!r} is compressed ({info.file_size} bytes from "
                        f"{info.compress_size}); torch.save stores every member as it is, so "
                        "graphpass refuses it (a compressed member can be a zip bomb)",
                        where=where, hint="save the checkpoint again with torch.save")
                if "/data/" in info.filename:
                    records[_data_start(raw, info)] = (info.filename, info.file_size)
            byteorder = next((archive.read(info).decode("ascii", "replace").strip()
                              for info in members if info.filename.endswith("/byteorder")
                              and info.file_size <= 64), "little")
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as error:
        raise CheckpointError(f"cannot read the torch checkpoint: {_first_line(error)}",
                              where=where, hint="the file is truncated or corrupt; copy or "
                                                "save it again") from None
    if byteorder == "big":
        raise CheckpointError(
            "the checkpoint was saved on a big-endian machine; torch crashes reading such a "
            "file without loading all of it, so graphpass refuses it", where=where,
            hint="load it once with torch and save it again on a little-endian machine: "
                 "torch.save(torch.load(path, weights_only=True), 'weights.pt')")
    return records


def _data_start(raw: Any, info: zipfile.ZipInfo) -> int:
    """Where a stored member's bytes start: after its local header, name and extra field."""
    raw.seek(info.header_offset)
    header = raw.read(30)
    if len(header) < 30 or header[:4] != _ZIP_MAGIC:
        raise ValueError(f"bad local header for {info.filename!r}")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return int(info.header_offset) + 30 + int(name_length) + int(extra_length)


class _Storages:
    """Checks that tensors lie inside their storages, and storages inside the file.

    In a zip, a storage is a record and must be at least as long as the storage says;
    in the legacy format, all storages together must fit in the file.
    """

    def __init__(self, path: Path, records: dict[int, tuple[str, int]] | None):
        self.path = path
        self.records = records
        self.seen: dict[int, int] = {}

    def check(self, key: str, value: Any) -> int | None:
        """The tensor's storage offset in the file (``None`` if it has none)."""
        storage = value.untyped_storage()
        nbytes = int(storage.nbytes())
        found = getattr(storage, "_checkpoint_offset", None)
        offset = None if found is None else int(found)
        itemsize = value.element_size()
        extent = 0 if value.numel() == 0 else 1 + sum(
            (size - 1) * abs(stride) for size, stride in zip(value.shape, value.stride(),
                                                            strict=True))
        if value.numel() and (value.storage_offset() + extent) * itemsize > nbytes:
            raise CheckpointError(
                f"tensor {key!r} reaches past its storage ({nbytes} bytes)", where=str(self.path),
                hint="the checkpoint's pickle lies about its tensors; save it again")
        identity = offset if offset is not None else id(storage)
        self.seen.setdefault(identity, nbytes)
        if self.records is not None and offset is not None:
            name, size = self.records.get(offset, ("", -1))
            if size < nbytes:
                raise CheckpointError(
                    f"tensor {key!r} needs a storage of {nbytes} bytes, but "
                    + (f"its record {name!r} holds {size}" if name else
                       "no record of the archive starts where it says"),
                    where=str(self.path), hint="the archive is corrupt; save it again")
        elif self.records is None:
            total = sum(self.seen.values())
            size = self.path.stat().st_size
            if total > size:
                raise CheckpointError(
                    f"the storages add up to {total} bytes, more than the file holds ({size})",
                    where=str(self.path), hint="the file is truncated or corrupt")
        return offset


def _unsafe_globals(torch: Any, path: Path) -> list[str]:
    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is None:
        return []
    try:
        return sorted(finder(path))
    except Exception:
        return []


def _unsupported_lines(error: BaseException) -> list[str]:
    """The "Unsupported global: ..." parts of torch's refusal, without its advice."""
    return re.findall(r"Unsupported (?:global|operand):? (?:GLOBAL )?([\w.]+)", str(error))[:3]


def _unwrap(obj: Any, where: str) -> Mapping[Any, Any]:
    """The state dict in ``obj``, looking inside ``state_dict``/``model``/... wrappers."""
    import torch

    for _ in range(len(_WRAPPERS)):
        if not isinstance(obj, Mapping):
            break
        if any(isinstance(value, torch.Tensor) for value in obj.values()):
            return obj
        inner = next((obj[name] for name in _WRAPPERS if isinstance(obj.get(name), Mapping)),
                     None)
        if inner is None:
            return obj
        obj = inner
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"the checkpoint holds a {type(obj).__name__}, not a state dict",
                              where=where, hint="save the model's state_dict(): "
                                                "torch.save(model.state_dict(), path)")
    return obj


def _to_numpy(tensor: Any, dtype: int) -> np.ndarray[Any, Any]:
    import torch

    tensor = tensor.detach().contiguous()
    try:
        return np.asarray(tensor.numpy())
    except TypeError:  # bfloat16, float8: numpy has no such dtype, ml_dtypes does
        as_int = {1: torch.uint8, 2: torch.int16}[tensor.element_size()]
        return np.asarray(tensor.view(as_int).numpy()).view(numpy_dtype(dtype))


def _first_zip_name(head: bytes) -> str:
    if len(head) < 30:
        return ""
    (length,) = struct.unpack("<H", head[26:28])
    return head[30:30 + length].decode("utf-8", errors="replace")


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
