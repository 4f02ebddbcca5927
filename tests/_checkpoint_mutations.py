"""Hostile checkpoints and a sandboxed runner for them (not a test module).

Used by ``tests/test_checkpoint_fuzz.py`` (a short, seeded slice) and by
``benchmarks/fuzz_checkpoints.py`` (runs for a chosen time and prints counts).

Each case writes a checkpoint into ``<case>/ckpt`` (next to ``<case>/outside``, which
holds files a hostile checkpoint points at) and is opened with
:func:`graphpass.checkpoint.open_checkpoint`; every entry of up to
:data:`READ_LIMIT` bytes is then read. Families (:data:`FAMILIES`):

* ``seed``: valid checkpoints of every format (safetensors with tied-weight metadata,
  torch zip, legacy torch, ``.npz`` stored and compressed, sharded safetensors and
  torch indexes, a folder of shards);
* ``bytes``: seeds with flipped bytes, cut short, with garbage inserted or a range zeroed;
* ``safetensors``: lying headers: offsets past the end, reversed, overlapping or
  leaving gaps, huge or negative or non-integer shapes, unknown dtypes, a header of
  100 MB, a header size past the file, deep JSON, duplicate keys, bad metadata;
* ``torch``: pickles that would run code (``REDUCE``, ``INST``, ``OBJ``,
  ``STACK_GLOBAL``, ``builtins.open`` ...), storages larger than their records or
  missing, tensors past their storage, compressed members (a 1 GB pickle in a small
  file), truncated archives, many members, a lying byte order, legacy files whose
  storages outgrow the file;
* ``npz``: object arrays (pickles), headers whose shape lies, huge headers, compressed
  bombs, Fortran and big-endian members, members that are not ``.npy``;
* ``sharded``: a ``weight_map`` pointing outside the folder (``../``, absolute, a
  linked file, a linked folder, a pipe), at missing shards, folders, itself, with
  NUL characters, keys not in their shard, bad metadata; a folder of shards linked
  from outside.

An outcome is ``ok``, ``CheckpointError: <what>`` (the message must name a file of the
checkpoint), or a failure: ``crash`` (any other exception), ``executed`` (a payload's
marker file exists), ``outside read`` (a file under ``outside`` was opened, seen by an
audit hook), ``unnamed`` (the error names no file), ``hang``, ``memory``, ``died``.
Every case runs in a forked child of a worker process, under an address-space limit
and a timeout; its peak memory (``ru_maxrss`` above the worker's) is recorded.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import re
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _worker_process import WorkerProcess

HERE = Path(__file__).resolve().parent
FAMILIES = ("seed", "bytes", "safetensors", "torch", "npz", "sharded")
CASE_SECONDS = 60.0
MEMORY_HEADROOM = 2 * 2**30
"""A case may map this much address space beyond the worker's (RLIMIT_AS)."""
READ_LIMIT = 64 * 2**20
"""Entries up to this size are read after opening (larger ones are only listed)."""
READ_COUNT = 2000
"""At most this many entries are read (all of them were checked when opening)."""
FAILURES = ("crash", "executed", "outside read", "unnamed", "hang", "memory", "died")


# ======================================================================== writers
def _safetensors_bytes(header: Any, data: bytes = b"", *, size: int | None = None,
                       raw_header: bytes | None = None) -> bytes:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if size is None else size) + text + data


def _honest_safetensors(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None
                        ) -> bytes:
    header: dict[str, Any] = {}
    offset = 0
    data = b""
    names = {"float32": "F32", "int64": "I64", "float16": "F16", "int8": "I8"}
    for key, array in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[key] = {"dtype": names[str(array.dtype)], "shape": list(array.shape),
                       "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    return _safetensors_bytes(header, data)


def _state(rng: random.Random) -> dict[str, np.ndarray]:
    return {"w": np.arange(rng.randint(1, 40), dtype=np.float32),
            "b": np.full((2, 3), rng.random(), np.float32),
            "i": np.arange(5, dtype=np.int64)}


def _pickle_int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if -2**31 <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _pickle_str(value: str) -> bytes:
    raw = value.encode("utf-8", errors="surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _pickle_tuple(items: Iterator[int] | list[int] | tuple[int, ...]) -> bytes:
    return b"(" + b"".join(_pickle_int(i) for i in items) + b"t"


@dataclass
class _Entry:
    """One tensor of a hand-made torch pickle (what ``_rebuild_tensor_v2`` receives)."""

    key: str
    record: str
    numel: int
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage: str = "FloatStorage"


def _torch_pickle(entries: list[_Entry], extra: bytes = b"") -> bytes:
    out = bytearray(b"\x80\x02}(")
    for entry in entries:
        out += _pickle_str(entry.key)
        out += b"ctorch._utils\n_rebuild_tensor_v2\n("
        out += b"(" + _pickle_str("storage") + f"ctorch\n{entry.storage}\n".encode()
        out += _pickle_str(entry.record) + _pickle_str("cpu") + _pickle_int(entry.numel) + b"tQ"
        out += _pickle_int(entry.offset) + _pickle_tuple(entry.size) + _pickle_tuple(entry.stride)
        out += b"\x89ccollections\nOrderedDict\n)RtR"
    out += extra + b"u."
    return bytes(out)


def _torch_zip(pickle_bytes: bytes, records: dict[str, bytes], *, name: str = "archive",
               compress: set[str] | None = None, byteorder: bytes = b"little",
               padding: int = 0) -> bytes:
    buffer = _BytesSink()
    compress = compress or set()
    with zipfile.ZipFile(buffer, "w", compresslevel=1) as archive:
        def put(member: str, data: bytes) -> None:
            method = zipfile.ZIP_DEFLATED if member in compress else zipfile.ZIP_STORED
            archive.writestr(zipfile.ZipInfo(f"{name}/{member}"), data, compress_type=method)
        put("data.pkl", pickle_bytes + b"\0" * padding)
        put(".format_version", b"1")
        put(".storage_alignment", b"64")
        put("byteorder", byteorder)
        for key, data in records.items():
            put(f"data/{key}", data)
        put("version", b"3\n")
    return buffer.getvalue()


class _BytesSink:
    """A seekable in-memory file for ``zipfile`` (``io.BytesIO`` with a name)."""

    def __init__(self) -> None:
        import io

        self._buffer = io.BytesIO()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._buffer, name)


def _npy(array: np.ndarray | None = None, *, header: str | None = None,
         data: bytes | None = None) -> bytes:
    """An ``.npy`` file, optionally with a header or data that does not match."""
    if header is None:
        assert array is not None
        header = repr({"descr": np.lib.format.dtype_to_descr(array.dtype),
                       "fortran_order": False, "shape": array.shape})
    if data is None:
        assert array is not None
        data = array.tobytes()
    text = header.encode("latin1")
    if len(text) < 65000:
        pad = 64 - (10 + len(text) + 1) % 64
        text += b" " * pad + b"\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data
    pad = 64 - (12 + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(text)) + text + data


def _npz(members: dict[str, bytes], *, compress: bool = False) -> bytes:
    buffer = _BytesSink()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", compression=method, compresslevel=1) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


_CACHE: dict[str, bytes] = {}


def _cached(key: str, make: Callable[[], bytes]) -> bytes:
    """Bytes that take long to make (a compressed gigabyte, 20,000 members), made once."""
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


# ========================================================================= cases
@dataclass
class Case:
    """One checkpoint to open: ``build(folder)`` writes it and returns the path to open."""

    ident: str
    family: str
    what: str
    build: Callable[[Path], Path]


def _file(name: str, data: bytes) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path
    return build


def _marker(folder: Path) -> Path:
    return folder.parent / "outside" / "EXECUTED"


def _seeds(rng: random.Random) -> list[tuple[str, Callable[[Path], Path]]]:
    import torch

    state = _state(rng)

    def torch_zip(folder: Path) -> Path:
        path = folder / "model.pt"
        torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path)
        return path

    def torch_legacy(folder: Path) -> Path:
        path = folder / "legacy.bin"
        torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path,
                   _use_new_zipfile_serialization=False)
        return path

    def npz(compress: bool) -> Callable[[Path], Path]:
        def build(folder: Path) -> Path:
            path = folder / "weights.npz"
            (np.savez_compressed if compress else np.savez)(path, **state)
            return path
        return build

    def sharded(kind: str) -> Callable[[Path], Path]:
        def build(folder: Path) -> Path:
            weight_map = {}
            for index, (key, array) in enumerate(state.items()):
                shard = f"part-{index}.{'safetensors' if kind == 'st' else 'bin'}"
                if kind == "st":
                    (folder / shard).write_bytes(_honest_safetensors({key: array}))
                else:
                    torch.save({key: torch.from_numpy(array)}, folder / shard)
                weight_map[key] = shard
            index_name = "model.safetensors.index.json" if kind == "st" else \
                "pytorch_model.bin.index.json"
            (folder / index_name).write_text(json.dumps({"metadata": {"total_size": 1},
                                                         "weight_map": weight_map}))
            return folder / index_name if kind != "folder" else folder
        return build

    def folder_of_shards(folder: Path) -> Path:
        for index, (key, array) in enumerate(state.items()):
            (folder / f"s{index}.safetensors").write_bytes(_honest_safetensors({key: array}))
        return folder

    return [
        ("safetensors", _file("model.safetensors",
                              _honest_safetensors(state, {"tied": "w", "format": "pt"}))),
        ("torch zip", torch_zip),
        ("torch legacy", torch_legacy),
        ("npz stored", npz(False)),
        ("npz compressed", npz(True)),
        ("sharded safetensors index", sharded("st")),
        ("sharded torch index", sharded("pt")),
        ("folder of shards", folder_of_shards),
    ]


def _byte_damage(rng: random.Random) -> tuple[str, Callable[[Path], Path]]:
    name, seed = rng.choice(_seeds(rng))
    how = rng.choice(["flip", "cut", "insert", "zero", "splice"])
    chooser = random.Random(rng.random())

    def build(folder: Path) -> Path:
        path = seed(folder)
        targets = [p for p in ([path] if path.is_file() else sorted(path.iterdir()))
                   if p.is_file()]
        target = chooser.choice(targets)
        data = bytearray(target.read_bytes())
        if not data:
            return path
        spot = chooser.randrange(len(data))
        if how == "flip":
            for _ in range(chooser.randint(1, 8)):
                data[chooser.randrange(len(data))] ^= 1 << chooser.randrange(8)
        elif how == "cut":
            del data[spot:]
        elif how == "insert":
            data[spot:spot] = bytes(chooser.randrange(256) for _ in range(chooser.randint(1, 64)))
        elif how == "zero":
            data[spot:spot + chooser.randint(1, 256)] = bytes(min(256, len(data) - spot))
        else:
            other = chooser.randrange(len(data))
            data[spot:spot + 32] = data[other:other + 32]
        target.write_bytes(bytes(data))
        return path

    return f"{how} bytes of {name}", build


def _million_tensors() -> bytes:
    limit = 100_000_000 - 64
    pieces = [b'"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}' % i
              for i in range(1_000_000)]
    text = b"{" + b",".join(pieces)[: limit - 2]
    return text[: text.rfind(b"},") + 1] + b"}"


_Choices = list[tuple[str, Callable[[Path], Path]]]


def _safetensors_lies(rng: random.Random) -> _Choices:
    data = np.arange(16, dtype=np.float32).tobytes()  # 64 bytes
    good = {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}
    lies: list[tuple[str, Any]] = [
        ("offsets past the end", {"a": {**good, "data_offsets": [0, 10**12]}}),
        ("offsets reversed", {"a": {**good, "data_offsets": [64, 0]}}),
        ("negative offset", {"a": {**good, "data_offsets": [-64, 0]}}),
        ("offsets that are not numbers", {"a": {**good, "data_offsets": ["0", "64"]}}),
        ("three offsets", {"a": {**good, "data_offsets": [0, 32, 64]}}),
        ("overlapping tensors", {"a": {**good, "shape": [12], "data_offsets": [0, 48]},
                                 "b": {**good, "shape": [12], "data_offsets": [16, 64]}}),
        ("two tensors on the same bytes", {"a": good, "b": good}),
        ("a gap between tensors", {"a": {**good, "shape": [4], "data_offsets": [0, 16]},
                                   "b": {**good, "shape": [4], "data_offsets": [48, 64]}}),
        ("huge shape", {"a": {**good, "shape": [2**40, 2**40]}}),
        ("shape past 2**64", {"a": {**good, "shape": [2**70]}}),
        ("negative dimension", {"a": {**good, "shape": [-16]}}),
        ("dimension that is a string", {"a": {**good, "shape": ["16"]}}),
        ("dimension that is a float", {"a": {**good, "shape": [16.0]}}),
        ("shape that disagrees with the offsets", {"a": {**good, "shape": [15]}}),
        ("unknown dtype", {"a": {**good, "dtype": "F128"}}),
        ("dtype that is a number", {"a": {**good, "dtype": 7}}),
        ("no dtype", {"a": {"shape": [16], "data_offsets": [0, 64]}}),
        ("tensor that is a list", {"a": [1, 2, 3]}),
        ("metadata that is a list", {"a": good, "__metadata__": ["x"]}),
        ("metadata with a number", {"a": good, "__metadata__": {"x": 1}}),
        ("alias loop in metadata", {"a": good, "__metadata__": {"b": "c", "c": "b"}}),
        ("empty key", {"": good}),
        ("key of 1 MB", {"k" * 2**20: good}),
    ]
    choices: _Choices = [(f"safetensors: {what}", _file(
        "model.safetensors", _safetensors_bytes(header, data))) for what, header in lies]
    raw = [
        ("header size past the file", _safetensors_bytes(good, data, size=2**40)),
        ("header size 2**64-1", _safetensors_bytes(good, data, size=2**64 - 1)),
        ("header size 0", _safetensors_bytes(good, data, size=0)),
        ("header that is not JSON", _safetensors_bytes(None, data, raw_header=b"{not json")),
        ("header that is a JSON list", _safetensors_bytes([good], data)),
        ("JSON nested 100,000 deep",
         _safetensors_bytes(None, data, raw_header=b"{\"a\":" + b"[" * 100_000 + b"]" * 100_000
                            + b"}")),
        ("duplicate keys, the second lying",
         _safetensors_bytes(None, data, raw_header=(
             b'{"a":' + json.dumps(good).encode() + b',"a":'
             + json.dumps({**good, "data_offsets": [0, 10**9]}).encode() + b"}"))),
        ("header of 100 MB (a million tensors)", None),
        ("header of 100 MB (one metadata string)", None),
        ("header of 100 MB, cut short", None),
    ]
    for label, content in raw:
        choices.append((f"safetensors: {label}", _file("model.safetensors", content)
                        if content is not None else _big_header(label)))
    return choices


def _big_header(label: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        path = folder / "model.safetensors"
        limit = 100_000_000 - 64  # the safetensors library's limit
        if "million" in label:
            text = _cached("million tensors", _million_tensors)
        else:
            text = b'{"__metadata__":{"x":"' + b"y" * (limit - 32) + b'"}}'
        if "cut short" in label:
            path.write_bytes(struct.pack("<Q", len(text)) + text[: len(text) // 2])
        else:
            path.write_bytes(struct.pack("<Q", len(text) + (-len(text)) % 8) + text
                             + b" " * ((-len(text)) % 8))
        return path

    return build


_PAYLOADS = {
    "os.system through REDUCE": b"cos\nsystem\n(S'touch {m}'\ntR.",
    "posix.system through REDUCE": b"cposix\nsystem\n(S'touch {m}'\ntR.",
    "builtins.eval": b"cbuiltins\neval\n(S'open(\"{m}\", \"w\")'\ntR.",
    "builtins.exec": b"cbuiltins\nexec\n(S'open(\"{m}\", \"w\")'\ntR.",
    "builtins.open": b"cbuiltins\nopen\n(S'{m}'\nS'w'\ntR.",
    "INST opcode": b"(S'touch {m}'\nios\nsystem\n.",
    "OBJ opcode": b"(cos\nsystem\nS'touch {m}'\no.",
    "STACK_GLOBAL (protocol 4)": b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x00touch {m}\x85R.",
    "subprocess.call": b"csubprocess\ncall\n((S'touch'\nS'{m}'\nltR.",
    "getattr of __import__": b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(S'os'\ntRS'system'\n"
                             b"tR(S'touch {m}'\ntR.",
    "REDUCE inside a tuple": b"(cos\nsystem\n(S'touch {m}'\ntRt.",
    "a pickle inside the pickle": b"cpickle\nloads\n(C{inner}tR.",
}


def _payload(name: str, marker: Path) -> bytes:
    template = _PAYLOADS[name]
    if b"{inner}" in template:
        inner = _payload("os.system through REDUCE", marker)
        template = template.replace(b"{inner}", bytes([len(inner)]) + inner)
    text = template.replace(b"{m}", str(marker).encode())
    if b"\x8c\x00touch" in text:  # STACK_GLOBAL: fix the short string's length
        command = f"touch {marker}".encode()
        text = text.replace(b"\x8c\x00touch " + str(marker).encode(),
                            b"\x8c" + bytes([len(command)]) + command)
    return text


def _torch_lies(rng: random.Random) -> _Choices:
    floats = np.arange(6, dtype=np.float32).tobytes()  # 24 bytes
    honest = [_Entry("w", "0", 6, 0, (6,), (1,))]
    choices: list[tuple[str, Callable[[Path], bytes]]] = []
    for name in _PAYLOADS:
        def in_zip(folder: Path, name: str = name) -> bytes:
            return _torch_zip(_payload(name, _marker(folder)), {"0": floats})

        def in_dict(folder: Path, name: str = name) -> bytes:
            payload = _payload(name, _marker(folder))
            body = payload[2:] if payload.startswith(b"\x80") else payload
            return _torch_zip(_torch_pickle(honest, extra=_pickle_str("evil") + body[:-1]),
                              {"0": floats})

        def legacy(folder: Path, name: str = name) -> bytes:
            magic = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."
            return magic + b"\x80\x02M\xe9\x03." + _payload(name, _marker(folder))

        choices += [(f"pickled code in data.pkl: {name}", in_zip),
                    (f"pickled code next to a tensor: {name}", in_dict),
                    (f"pickled code in a legacy file: {name}", legacy)]

    def entries(*items: _Entry) -> Callable[[Path], bytes]:
        return lambda folder: _torch_zip(_torch_pickle(list(items)), {"0": floats})

    choices += [
        ("storage larger than its record", entries(_Entry("w", "0", 10**6, 0, (10**6,), (1,)))),
        ("tensor past its storage", entries(_Entry("w", "0", 6, 4, (6,), (1,)))),
        ("storage offset past the record", entries(_Entry("w", "0", 6, 10**9, (6,), (1,)))),
        ("record that is missing", entries(_Entry("w", "7", 6, 0, (6,), (1,)))),
        ("negative size", entries(_Entry("w", "0", 6, 0, (-6,), (1,)))),
        ("huge shape of a small storage", entries(_Entry("w", "0", 6, 0, (2**31, 2**31),
                                                         (2**31, 1)))),
        ("strides past the storage", entries(_Entry("w", "0", 6, 0, (6,), (1000,)))),
        ("unknown storage type", entries(_Entry("w", "0", 6, 0, (6,), (1,), "EvilStorage"))),
        ("two tensors on one storage", entries(_Entry("a", "0", 6, 0, (3,), (1,)),
                                               _Entry("b", "0", 6, 3, (3,), (1,)))),
        ("record compressed", lambda folder: _torch_zip(_torch_pickle(honest), {"0": floats},
                                                        compress={"data/0"})),
        ("a 256 MB pickle compressed into 256 KB (zip bomb)",
         lambda folder: _cached("torch pickle bomb", lambda: _torch_zip(
             _torch_pickle(honest), {"0": floats}, compress={"data.pkl"}, padding=2**28))),
        ("a 256 MB record compressed into 256 KB (zip bomb)",
         lambda folder: _cached("torch record bomb", lambda: _torch_zip(
             _torch_pickle([_Entry("w", "0", 2**26, 0, (2**26,), (1,))]),
             {"0": bytes(2**28)}, compress={"data/0"}))),
        ("byte order that is neither", lambda folder: _torch_zip(
            _torch_pickle(honest), {"0": floats}, byteorder=b"sideways")),
        ("big-endian", lambda folder: _torch_zip(_torch_pickle(honest), {
            "0": np.arange(6, dtype=">f4").tobytes()}, byteorder=b"big")),
        ("5,000 members", lambda folder: _cached("torch 5k", lambda: _torch_zip(
            _torch_pickle(honest), {"0": floats, **{str(i): b"" for i in range(1, 5_000)}}))),
        ("an end record claiming 250,000 members", lambda folder: _claiming_members(
            _torch_zip(_torch_pickle(honest), {"0": floats}), 250_000)),
        ("legacy file whose storage outgrows it", _legacy_lie),
    ]

    return [(f"torch: {what}", _written("model.pt", make)) for what, make in choices]


def _written(name: str, make: Callable[[Path], bytes]) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(make(folder))
        return path
    return build


def _cut_short(build: Callable[[Path], Path], rng: random.Random) -> Callable[[Path], Path]:
    """The same files, the checkpoint cut at a random byte."""
    fraction = rng.random()

    def cut(folder: Path) -> Path:
        path = build(folder)
        if path.is_file():
            data = path.read_bytes()
            path.write_bytes(data[: int(len(data) * fraction)])
        return path
    return cut


def _claiming_members(archive: bytes, count: int) -> bytes:
    """A zip whose end records (zip64) claim ``count`` members: a lie told before any listing."""
    spot = archive.rfind(b"PK\x05\x06")
    end = bytearray(archive[spot:])
    directory_size, directory_offset = struct.unpack("<II", end[12:20])
    end[8:12] = b"\xff\xff\xff\xff"  # entries on this disk and in all: see zip64
    zip64_end = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count,
                            directory_size, directory_offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, spot, 1)
    return archive[:spot] + zip64_end + locator + bytes(end)


def _legacy_lie(folder: Path) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.save({"w": torch.arange(6.0)}, buffer, _use_new_zipfile_serialization=False)
    data = buffer.getvalue()
    # The storage's element count is written as a little-endian int64 before its bytes.
    count = struct.pack("<q", 6)
    spot = data.rfind(count)
    return data[:spot] + struct.pack("<q", 2**40) + data[spot + 8:]


def _npz_lies(rng: random.Random) -> _Choices:
    floats = np.arange(6, dtype=np.float32)

    def header(shape: str, descr: str = "<f4", fortran: str = "False") -> str:
        return f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"

    choices: list[tuple[str, Callable[[Path], bytes]]] = [
        ("shape larger than the member", lambda f: _npz({"w.npy": _npy(
            header=header("(1000000,)"), data=floats.tobytes())})),
        ("shape smaller than the member", lambda f: _npz({"w.npy": _npy(
            header=header("(2,)"), data=floats.tobytes())})),
        ("huge shape", lambda f: _npz({"w.npy": _npy(header=header("(2**40, 2**40)"),
                                                     data=floats.tobytes())})),
        ("negative shape", lambda f: _npz({"w.npy": _npy(header=header("(-6,)"),
                                                         data=floats.tobytes())})),
        ("header that runs code", lambda f: _npz({"w.npy": _npy(
            header=f"__import__('os').system('touch {_marker(f)}')", data=b"")})),
        ("header of 1 MB", lambda f: _npz({"w.npy": _npy(
            header="{'descr': '<f4', 'x': '" + "y" * 2**20 + "'}", data=b"")})),
        ("unknown descr", lambda f: _npz({"w.npy": _npy(header=header("(6,)", "<q7"),
                                                        data=floats.tobytes())})),
        ("Fortran order", lambda f: _npz({"w.npy": _npy(header=header("(2, 3)", fortran="True"),
                                                        data=floats.tobytes())})),
        ("big-endian", lambda f: _npz({"w.npy": _npy(floats.astype(">f4"))})),
        ("object array (a pickle)", _npz_object_array),
        ("compressed, shape larger than the data", lambda f: _npz({"w.npy": _npy(
            header=header("(1000000,)"), data=floats.tobytes())}, compress=True)),
        ("64 MB of zeros compressed into 64 KB (zip bomb)", lambda f: _cached("npz bomb", lambda:
            _npz({"w.npy": _npy(np.zeros(2**24 + 1, np.float32))}, compress=True))),
        ("a member that is not .npy", lambda f: _npz({"w.npy": _npy(floats),
                                                      "notes.txt": b"hello"})),
        ("no members", lambda f: _npz({})),
        ("a member named ../escape.npy", lambda f: _npz({"../escape.npy": _npy(floats)})),
        ("5,000 members", lambda f: _cached("npz 5k", lambda: _npz(
            {f"w{i}.npy": _npy(floats[:1]) for i in range(5_000)}))),
        ("an end record claiming 250,000 members", lambda f: _claiming_members(
            _npz({"w.npy": _npy(floats)}), 250_000)),
        ("version 3 header", lambda f: _npz({"w.npy": b"\x93NUMPY\x03\x00" + b"\0" * 64})),
    ]
    return [(f"npz: {what}", _written("weights.npz", make)) for what, make in choices]


def _npz_object_array(folder: Path) -> bytes:
    import io
    import pickle

    class RunsCode:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {_marker(folder)}",))

    array = np.empty(1, dtype=object)
    array[0] = RunsCode()
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    assert pickle  # (the object array's data is a pickle)
    return _npz({"payload.npy": buffer.getvalue(),
                 "w.npy": _npy(np.arange(3, dtype=np.float32))})


def _sharded_lies(rng: random.Random) -> _Choices:
    good = _honest_safetensors({"w": np.arange(4, dtype=np.float32)})
    secret = _honest_safetensors({"secret": np.full(4, 42.0, np.float32)})

    def index(weight_map: Any, *, metadata: Any = None, raw: bytes | None = None,
              setup: Callable[[Path], None] | None = None) -> Callable[[Path], Path]:
        def build(folder: Path) -> Path:
            (folder.parent / "outside").mkdir(exist_ok=True)
            (folder.parent / "outside" / "secret.safetensors").write_bytes(secret)
            (folder / "part-0.safetensors").write_bytes(good)
            if setup is not None:
                setup(folder)
            path = folder / "model.safetensors.index.json"
            body: dict[str, Any] = {"weight_map": weight_map}
            if metadata is not None:
                body["metadata"] = metadata
            path.write_bytes(raw if raw is not None else json.dumps(body).encode())
            return path
        return build

    def link_file(folder: Path) -> None:
        (folder / "link.safetensors").symlink_to(folder.parent / "outside" / "secret.safetensors")

    def link_folder(folder: Path) -> None:
        (folder / "sub").symlink_to(folder.parent / "outside")

    def pipe_outside(folder: Path) -> None:
        os.mkfifo(folder.parent / "outside" / "pipe.safetensors")
        (folder / "pipe.safetensors").symlink_to(folder.parent / "outside" / "pipe.safetensors")

    def pipe_inside(folder: Path) -> None:
        os.mkfifo(folder / "pipe.safetensors")

    def folder_with_outside_links(folder: Path) -> Path:
        (folder.parent / "outside").mkdir(exist_ok=True)
        (folder.parent / "outside" / "secret.safetensors").write_bytes(secret)
        (folder / "a.safetensors").write_bytes(good)
        (folder / "b.safetensors").symlink_to(folder.parent / "outside" / "secret.safetensors")
        return folder

    def outside_absolute(folder: Path) -> Path:
        return index({"secret": str(folder.parent / "outside" / "secret.safetensors")})(folder)

    def nested(folder: Path) -> Path:
        (folder / "inner").mkdir()
        inner = index({"w": "part-0.safetensors"})(folder / "inner")
        return index({"w": f"inner/{inner.name}"})(folder)

    choices: list[tuple[str, Callable[[Path], Path]]] = [
        ("weight_map with ../", index({"secret": "../outside/secret.safetensors"})),
        ("weight_map with sub/../../", index({"secret": "sub/../../outside/secret.safetensors"})),
        ("weight_map with an absolute path", outside_absolute),
        ("weight_map naming a link that leads out", index({"secret": "link.safetensors"},
                                                          setup=link_file)),
        ("weight_map through a linked folder", index({"secret": "sub/secret.safetensors"},
                                                     setup=link_folder)),
        ("weight_map naming a link to a pipe outside", index({"w": "pipe.safetensors"},
                                                             setup=pipe_outside)),
        ("weight_map naming a pipe", index({"w": "pipe.safetensors"}, setup=pipe_inside)),
        ("missing shard", index({"w": "part-9.safetensors"})),
        ("shard that is a folder", index({"w": "."})),
        ("empty shard name", index({"w": ""})),
        ("shard name with a NUL", index({"w": "part-0.safetensors\0.txt"})),
        ("shard that is the index itself", index({"w": "model.safetensors.index.json"})),
        ("index naming another index", nested),
        ("key not in its shard", index({"nope": "part-0.safetensors"})),
        ("weight_map values that are not strings", index({"w": 7})),
        ("weight_map that is a list", index(["part-0.safetensors"])),
        ("metadata that is a list", index({"w": "part-0.safetensors"}, metadata=[1, 2])),
        ("metadata nested", index({"w": "part-0.safetensors"}, metadata={"a": {"b": [1]}})),
        ("index that is not JSON", index({}, raw=b'{"weight_map": {')),
        ("index nested 100,000 deep", index({}, raw=b'{"weight_map":' + b"[" * 100_000
                                            + b"]" * 100_000 + b"}")),
        ("index that is not UTF-8", index({}, raw=b'{"weight_map": {"w": "\xff\xfe"}}')),
        ("index of 300,000 keys to missing shards",
         index({}, raw=_cached("300k keys", lambda: json.dumps({"weight_map": {
             f"k{i}": f"missing-{i}.safetensors" for i in range(300_000)}}).encode()))),
        ("folder of shards with one linked from outside", folder_with_outside_links),
    ]
    return [(f"sharded: {what}", build) for what, build in choices]


def make_case(seed: int, index: int) -> Case:
    """The ``index``-th case of ``seed``: the same case every time."""
    rng = random.Random(f"{seed}/{index}")
    family = FAMILIES[index % len(FAMILIES)] if index >= len(_SEED_NAMES) else "seed"
    if family == "seed":
        what, build = _seeds(rng)[index % len(_SEED_NAMES)]
    elif family == "bytes":
        what, build = _byte_damage(rng)
    else:
        what, build = rng.choice(_LIES[family](rng))
        if family in ("torch", "npz") and rng.random() < 0.15 and "legacy" not in what:
            what, build = f"{what} (then cut short)", _cut_short(build, rng)
    return Case(f"{seed}/{index}", family, what, build)


_LIES: dict[str, Callable[[random.Random], _Choices]] = {
    "safetensors": _safetensors_lies, "torch": _torch_lies, "npz": _npz_lies,
    "sharded": _sharded_lies}


LOADS = frozenset({
    "npz: 64 MB of zeros compressed into 64 KB (zip bomb)", "npz: 5,000 members",
    "torch: 5,000 members", "safetensors: header of 100 MB (one metadata string)",
    "safetensors: key of 1 MB", "safetensors: alias loop in metadata", "safetensors: empty key",
    "sharded: metadata nested", "sharded: metadata that is a list", "npz: Fortran order",
    "npz: object array (a pickle)", "torch: two tensors on one storage",
    "npz: a member that is not .npy", "npz: a member named ../escape.npy"})
"""The kinds in the catalogue that are odd but honest: they load (a pickle is skipped)."""


def catalogue() -> list[Case]:
    """Every seed and every kind of lie once: the same list every time."""
    rng = random.Random(0)
    chosen = [Case(f"seed/{name}", "seed", name, build)
              for name, build in _seeds(rng)]
    for family, lies in _LIES.items():
        chosen.extend(Case(f"{family}/{n}", family, what, build)
                      for n, (what, build) in enumerate(lies(rng)))
    return chosen


_SEED_NAMES = [
    "safetensors", "torch zip", "torch legacy", "npz stored", "npz compressed",
    "sharded safetensors index", "sharded torch index", "folder of shards"]


def cases(seed: int, count: int, first: int = 0) -> Iterator[Case]:
    """``count`` cases of ``seed`` from ``first`` on."""
    for index in range(first, first + count):
        yield make_case(seed, index)


# ======================================================================== running
@dataclass
class Outcome:
    """What one case ended in, and the memory it took."""

    ident: str
    family: str
    what: str
    category: str
    detail: str = ""
    peak_rss: int = 0
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.category.split(":")[0] in FAILURES


def _normalized(message: str) -> str:
    """An error message without its paths and numbers, to group outcomes by."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
    text = re.sub(r"/\S+", "…", text)
    text = re.sub(r"\d+", "N", text)
    return text[:110]


def _run_in_child(case_dir: Path, checkpoint: Path) -> dict[str, Any]:
    """In the forked child: open the checkpoint and read its entries; return the verdict."""
    import graphpass
    from graphpass.checkpoint import open_checkpoint

    outside = str((case_dir / "outside").resolve())
    opened_outside: list[str] = []

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            with contextlib.suppress(OSError, ValueError):
                path = os.path.realpath(path)
            if path.startswith(outside):
                opened_outside.append(path)

    sys.addaudithook(audit)
    verdict: dict[str, Any]
    try:
        checkpoint_object = open_checkpoint(checkpoint)
        read = 0
        for key, entry in list(checkpoint_object.items())[:READ_COUNT]:
            if entry.nbytes <= READ_LIMIT:
                array = entry.numpy()
                assert array.shape == entry.shape, key
                read += 1
        verdict = {"category": "ok", "detail": f"{len(checkpoint_object)} tensors, read {read}, "
                                               f"skipped {len(checkpoint_object.skipped)}"}
    except graphpass.CheckpointError as error:
        named = error.where is not None and os.path.abspath(error.where).startswith(
            os.path.abspath(case_dir / "ckpt"))
        verdict = {"category": ("CheckpointError: " if named else "unnamed: ")
                   + _normalized(error.message), "detail": str(error)[:2000]}
    except MemoryError:
        verdict = {"category": "memory", "detail": "MemoryError"}
    except BaseException as error:  # anything else is a bug
        import traceback

        verdict = {"category": f"crash: {type(error).__name__}",
                   "detail": "".join(traceback.format_exception(error))[-3000:]}
    if opened_outside:
        verdict = {"category": "outside read", "detail": ", ".join(sorted(set(opened_outside)))}
    if _marker(case_dir / "ckpt").exists():
        verdict = {"category": "executed", "detail": str(_marker(case_dir / "ckpt"))}
    return verdict


def _worker() -> None:
    """The worker's loop: one JSON request per line in, one outcome per line out."""
    import torch  # noqa: F401  (imported once, before forking)

    import graphpass.checkpoint  # noqa: F401
    from graphpass.framework import default_registry

    default_registry()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        case_dir, checkpoint = Path(request["case"]), Path(request["checkpoint"])
        read_end, write_end = os.pipe()
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            code = 0
            try:
                limit = _address_space() + MEMORY_HEADROOM
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                signal.alarm(int(request["seconds"]))
                start_rss = _rss()
                verdict = {**_run_in_child(case_dir, checkpoint), "start_rss": start_rss}
                os.write(write_end, json.dumps(verdict).encode())
            except BaseException:
                code = 3
            finally:
                os._exit(code)
        os.close(write_end)
        chunks = []
        while chunk := os.read(read_end, 1 << 16):
            chunks.append(chunk)
        os.close(read_end)
        _, status, usage = os.wait4(pid, 0)
        seconds = time.perf_counter() - started
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            verdict = {"category": "hang" if sig == signal.SIGALRM else f"died: signal {sig}",
                       "detail": ""}
        elif not chunks:
            verdict = {"category": "died: no verdict", "detail": f"exit {status}"}
        else:
            verdict = json.loads(b"".join(chunks))
        # The child's high-water mark above its resident size when it started the case.
        peak = max(0, usage.ru_maxrss * 1024 - verdict.pop("start_rss", usage.ru_maxrss * 1024))
        print(json.dumps({**verdict, "peak_rss": peak, "seconds": round(seconds, 3)}),
              flush=True)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


class Sandbox:
    """Runs cases in a worker process (each in a fork of it); restarts it when it dies."""

    def __init__(self, root: Path, *, seconds: float = CASE_SECONDS):
        self.root = root
        self.seconds = seconds
        self.worker = WorkerProcess(root, "import _checkpoint_mutations as m; m._worker()")

    def run(self, case: Case) -> Outcome:
        """Write the case's files and open them in a fork of the worker."""
        case_dir = Path(tempfile.mkdtemp(prefix="case-", dir=self.root))
        try:
            (case_dir / "ckpt").mkdir()
            (case_dir / "outside").mkdir()
            try:
                checkpoint = case.build(case_dir / "ckpt")
            except Exception as error:  # a broken generator: say so, do not count it
                return Outcome(case.ident, case.family, case.what,
                               "generator error", f"{type(error).__name__}: {error}")
            line = self.worker.ask({"case": str(case_dir), "checkpoint": str(checkpoint),
                                    "seconds": self.seconds}, self.seconds + 60)
            if line is None:
                return Outcome(case.ident, case.family, case.what, "died: the worker")
            return Outcome(case.ident, case.family, case.what, **json.loads(line))
        finally:
            with contextlib.suppress(OSError):
                for fifo in case_dir.rglob("*"):
                    if fifo.is_fifo():
                        fifo.unlink()
            shutil.rmtree(case_dir, ignore_errors=True)

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Tally:
    """Counts by outcome, peak memory, and the failures in full."""

    cases: int = 0
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    families: dict[str, collections.Counter[str]] = field(default_factory=dict)
    peak_rss: dict[str, int] = field(default_factory=dict)
    slowest: dict[str, float] = field(default_factory=dict)
    failures: list[Outcome] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        if outcome.category == "generator error":
            self.failures.append(outcome)  # the fuzzer's own bug: shown, and fails the run
        self.cases += 1
        self.counts[outcome.category] += 1
        self.families.setdefault(outcome.family, collections.Counter())[
            outcome.category.split(":")[0]] += 1
        self.peak_rss[outcome.family] = max(self.peak_rss.get(outcome.family, 0),
                                            outcome.peak_rss)
        self.slowest[outcome.family] = max(self.slowest.get(outcome.family, 0.0),
                                           outcome.seconds)
        if outcome.failed:
            self.failures.append(outcome)

    def summary(self) -> str:
        lines = [f"{self.cases} checkpoints in {self.seconds:.0f} s; "
                 f"{len(self.failures)} failures"]
        lines.append(f"{'family':<12} {'cases':>6} {'ok':>6} {'CheckpointError':>16} "
                     f"{'failures':>9} {'peak RSS':>10} {'slowest':>8}")
        for family in FAMILIES:
            counts = self.families.get(family, collections.Counter())
            total = sum(counts.values())
            failures = sum(v for k, v in counts.items() if k in FAILURES or k == "generator error")
            lines.append(f"{family:<12} {total:>6} {counts.get('ok', 0):>6} "
                         f"{counts.get('CheckpointError', 0):>16} {failures:>9} "
                         f"{self.peak_rss.get(family, 0) / 2**20:>8.1f} MB "
                         f"{self.slowest.get(family, 0.0):>7.2f}s")
        lines.append("by outcome:")
        lines.extend(f"  {count:6d}  {category}" for category, count in
                     sorted(self.counts.items(), key=lambda item: (-item[1], item[0])))
        for outcome in self.failures[:20]:
            lines.append(f"FAILURE {outcome.category} on {outcome.ident} ({outcome.what}):\n"
                         f"{outcome.detail[-1500:]}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "seconds": round(self.seconds, 1),
                "failures": len(self.failures),
                "by family": {f: dict(c) for f, c in self.families.items()},
                "peak RSS MB by family": {f: round(v / 2**20, 1) for f, v in
                                          self.peak_rss.items()},
                "slowest seconds by family": {f: round(v, 2) for f, v in self.slowest.items()},
                "by outcome": dict(self.counts.most_common())}


def run_cases(sandbox: Sandbox, chosen: Iterator[Case] | list[Case],
              progress: Callable[[Tally], None] | None = None) -> Tally:
    tally = Tally()
    started = time.perf_counter()
    for case in chosen:
        tally.add(sandbox.run(case))
        if progress is not None:
            progress(tally)
    tally.seconds = time.perf_counter() - started
    return tally


def run_for(seed: int, seconds: float, root: Path, first: int = 0,
            progress: Callable[[Tally], None] | None = None) -> Tally:
    """Run cases of ``seed`` from ``first`` on until ``seconds`` have passed."""
    deadline = time.perf_counter() + seconds

    def until_deadline() -> Iterator[Case]:
        index = first
        while time.perf_counter() < deadline:
            yield make_case(seed, index)
            index += 1

    with Sandbox(root) as sandbox:
        return run_cases(sandbox, until_deadline(), progress)
