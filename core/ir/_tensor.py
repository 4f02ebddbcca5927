"""Tensors: initializer data kept as a reference until someone needs the numbers.

A :class:`Tensor` is immutable. It knows its name, element type and shape without
touching the data. The data itself lives in one of four places:

* an embedded ``onnx.TensorProto`` (the bytes stay in the protobuf message),
* an external data file next to the model (file, offset, length),
* a region of any other file holding raw little-endian bytes (a safetensors
  checkpoint, for instance),
* a numpy array in memory.

Nothing is read until :meth:`Tensor.numpy` or :meth:`Tensor.iter_bytes` is called,
and external data is memory-mapped, so loading a model never reads its weights.
"""

from __future__ import annotations

import functools
import math
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnx
from onnx import numpy_helper

from graphpass.errors import ExternalDataError, InvalidModelError

__all__ = ["Tensor", "dtype_name", "dtype_size", "numpy_dtype"]

_CHUNK: Final = 16 * 1024 * 1024
_EXTERNAL: Final = onnx.TensorProto.EXTERNAL
_PACKED_4BIT: Final = frozenset(
    t
    for t in (
        getattr(onnx.TensorProto, "INT4", None),
        getattr(onnx.TensorProto, "UINT4", None),
        getattr(onnx.TensorProto, "FLOAT4E2M1", None),
        getattr(onnx.TensorProto, "INT2", None),
        getattr(onnx.TensorProto, "UINT2", None),
    )
    if t is not None
)


def dtype_name(elem_type: int) -> str:
    """Return the ONNX name of an element type (``FLOAT``, ``INT64`` ...)."""
    try:
        return str(onnx.TensorProto.DataType.Name(elem_type))
    except ValueError:
        return f"<unknown type {elem_type}>"


def numpy_dtype(elem_type: int) -> np.dtype[Any]:
    """Return the numpy dtype that holds one element of an ONNX element type.

    Raises:
        InvalidModelError: ``onnx`` does not know the element type (a corrupt file, or
            one written for a newer ONNX release).
    """
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise InvalidModelError(
            f"element type {elem_type} is not one that onnx {onnx.__version__} knows",
            hint="the file is corrupt, or it needs a newer onnx (pip install -U onnx)",
        ) from None


@functools.cache  # a handful of element types, asked for every tensor loaded or saved
def dtype_size(elem_type: int) -> float:
    """Return the storage size of one element in bytes (0.5 for 4-bit types).

    Raises:
        InvalidModelError: ``onnx`` does not know the element type.
    """
    if elem_type in _PACKED_4BIT:
        return 0.25 if "2" in dtype_name(elem_type)[-2:] else 0.5
    if elem_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return 0
    return float(numpy_dtype(elem_type).itemsize)


def _element_count(shape: Sequence[int]) -> int:
    return math.prod(map(int, shape))


def _storage_bytes(count: int, elem_type: int) -> int:
    """The bytes ``count`` elements take as raw data (packed types rounded up)."""
    bits = round(dtype_size(elem_type) * 8)
    return (count * bits + 7) // 8


class _Source:
    """Where a tensor's bytes live. Private; see the subclasses."""

    def array(self, tensor: Tensor) -> np.ndarray[Any, Any]:
        raise NotImplementedError

    def iter_bytes(self, tensor: Tensor) -> Iterator[bytes | memoryview]:
        yield from _array_bytes(tensor, self.array(tensor))


class _ProtoSource(_Source):
    """The data is in the tensor's own ``TensorProto`` (one instance serves all tensors)."""

    __slots__ = ()

    def array(self, tensor: Tensor) -> np.ndarray[Any, Any]:
        numpy_dtype(tensor.dtype)  # an unknown element type is a clear error
        proto = tensor.proto
        assert proto is not None
        try:
            return numpy_helper.to_array(proto)
        except (ValueError, TypeError, KeyError, OverflowError) as error:
            problem = _embedded_data_problem(proto) or str(error).strip()
            raise InvalidModelError(
                f"tensor {tensor.name!r} cannot be read: {problem}",
                hint="the file is corrupt, or the tool that wrote it stored the tensor wrongly",
            ) from None

    def iter_bytes(self, tensor: Tensor) -> Iterator[bytes | memoryview]:
        proto = tensor.proto
        assert proto is not None
        if proto.HasField("raw_data"):
            yield proto.raw_data
        else:
            yield from super().iter_bytes(tensor)


_EMBEDDED = _ProtoSource()


def _array_bytes(tensor: Tensor, array: np.ndarray[Any, Any]) -> Iterator[bytes | memoryview]:
    """The bytes ONNX stores for ``array`` as raw data (packed for 4- and 2-bit types)."""
    if tensor.dtype in _PACKED_4BIT:
        yield _embed_array(tensor, array).raw_data
        return
    data = np.ascontiguousarray(array)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    yield data.reshape(-1).view(np.uint8).data


def _embed_array(tensor: Tensor, array: np.ndarray[Any, Any]) -> onnx.TensorProto:
    """A ``TensorProto`` holding ``array`` under the tensor's name and element type."""
    proto = numpy_helper.from_array(np.asarray(array), tensor.name)
    if proto.data_type != tensor.dtype:
        proto = onnx.helper.make_tensor(tensor.name, tensor.dtype, tensor.shape,
                                        np.asarray(array).tobytes(), raw=True)
    return proto


class _UnplacedSource(_Source):
    """External data of a proto converted without knowing the model's folder."""

    __slots__ = ("location",)

    def __init__(self, location: str):
        self.location = location

    def problem(self, tensor: Tensor) -> ExternalDataError:
        return ExternalDataError(
            f"tensor {tensor.name!r} keeps its data in {self.location!r}, but the model was "
            "not loaded from a file, so that file cannot be found",
            hint="load the model with graphpass.load(path), or pass base_dir= to "
                 "Model.from_proto",
        )

    def array(self, tensor: Tensor) -> np.ndarray[Any, Any]:
        raise self.problem(tensor)

    def iter_bytes(self, tensor: Tensor) -> Iterator[bytes | memoryview]:
        raise self.problem(tensor)


class _FileRegionSource(_Source):
    """Raw little-endian bytes at ``offset`` in ``path`` (external data, safetensors)."""

    __slots__ = ("length", "offset", "path")

    def __init__(self, path: Path, offset: int, length: int):
        self.path = path
        self.offset = offset
        self.length = length

    def _check(self) -> None:
        try:
            status = self.path.stat()
        except OSError as error:
            raise ExternalDataError(
                f"external data file {str(self.path)!r} cannot be read ({error.strerror})",
                hint="keep the data file next to the model, under the name the model gives",
            ) from None
        if not stat.S_ISREG(status.st_mode):
            raise ExternalDataError(
                f"external data file {str(self.path)!r} is not a regular file (a folder, a "
                "pipe or a device)", hint="point the tensor at a file holding its data")
        size = status.st_size
        if self.offset + self.length > size:
            raise ExternalDataError(
                f"external data file {str(self.path)!r} is {size} bytes, but a tensor needs "
                f"bytes {self.offset}..{self.offset + self.length}",
                hint="the data file is truncated or belongs to another model",
            )

    def array(self, tensor: Tensor) -> np.ndarray[Any, Any]:
        self._check()
        if tensor.dtype in _PACKED_4BIT or tensor.dtype == onnx.TensorProto.STRING:
            proto = onnx.TensorProto(dims=tensor.shape, data_type=tensor.dtype)
            proto.raw_data = b"".join(bytes(chunk) for chunk in self.iter_bytes(tensor))
            return numpy_helper.to_array(proto)
        dtype = numpy_dtype(tensor.dtype).newbyteorder("<")
        if self.length == 0:
            return np.zeros(tensor.shape, dtype=dtype)
        mapped = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self.offset,
                           shape=(self.length,))
        return mapped.view(dtype).reshape(tensor.shape)

    def iter_bytes(self, tensor: Tensor) -> Iterator[bytes | memoryview]:
        self._check()
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            remaining = self.length
            while remaining > 0:
                chunk = handle.read(min(_CHUNK, remaining))
                if not chunk:
                    raise ExternalDataError(f"external data file {str(self.path)!r} ended early")
                remaining -= len(chunk)
                yield chunk


class _ArraySource(_Source):
    __slots__ = ("data",)

    def __init__(self, data: np.ndarray[Any, Any]):
        self.data = data

    def array(self, tensor: Tensor) -> np.ndarray[Any, Any]:
        return self.data


class Tensor:
    """An initializer's data: name, element type, shape, and a lazy reference to the bytes.

    Tensors are immutable and may be shared between models; a pass that changes a
    weight makes a new ``Tensor`` (for example with :meth:`from_array`) and puts it
    in the graph.

    Attributes:
        name: The initializer name.
        dtype: The ONNX element type (``onnx.TensorProto.FLOAT`` ...).
        shape: The dimensions.
    """

    # ``_proto`` is the TensorProto, or (``_proto_at`` >= 0) the repeated field of a loaded
    # graph that holds it at that index: one proto object per tensor would cost more
    # memory than the tensor itself.
    __slots__ = ("_proto", "_proto_at", "_source", "dtype", "name", "shape")

    def __init__(
        self,
        name: str,
        dtype: int,
        shape: Sequence[int],
        source: _Source,
        proto: onnx.TensorProto | None = None,
    ):
        self.name = name
        self.dtype = int(dtype)
        self.shape: tuple[int, ...] = tuple(int(d) for d in shape)
        self._source = source
        self._proto: Any = proto
        self._proto_at = -1

    # ----------------------------------------------------------------- factories
    @classmethod
    def from_proto(cls, proto: onnx.TensorProto, base_dir: str | os.PathLike[str] | None = None
                   ) -> Tensor:
        """Wrap a ``TensorProto`` without copying its data.

        Args:
            proto: The tensor. It is referenced, not copied: do not change it afterwards.
            base_dir: The folder external data locations are relative to. Without it,
                external data cannot be read (the tensor still converts back to the
                same proto).

        Raises:
            ExternalDataError: The external data location is unsafe (absolute, ``..``, or
                a link leading out of ``base_dir``), its offset or length is not a whole
                number, or a string tensor claims external data.
            InvalidModelError: ``onnx`` does not know the element type.
        """
        data_type = proto.data_type
        try:
            dtype_size(data_type)
        except InvalidModelError as error:
            raise InvalidModelError(f"tensor {proto.name!r}: {error.message}",
                                    hint=error.hint) from None
        dims = proto.dims[:]
        if dims and (min(dims) < 0 or math.prod(dims) >= 2**63):
            _check_dims(proto)
        if proto.data_location != _EXTERNAL:  # the usual case, made directly
            tensor = cls.__new__(cls)
            tensor.name = proto.name
            tensor.dtype = data_type
            tensor.shape = tuple(dims)
            tensor._source = _EMBEDDED
            tensor._proto = proto
            tensor._proto_at = -1
            return tensor
        if proto.data_location == onnx.TensorProto.EXTERNAL:
            info = _external_info(proto)
            location = info.get("location", "")
            if proto.data_type == onnx.TensorProto.STRING:
                raise ExternalDataError(
                    f"tensor {proto.name!r} holds strings but points at external data "
                    f"({location!r}); ONNX keeps string tensors inside the model",
                    hint="the file is corrupt, or was written by a tool that does not follow "
                         "the ONNX external data format")
            if base_dir is None:
                check_external_location(location, proto.name)
                return cls(proto.name, proto.data_type, proto.dims, _UnplacedSource(location),
                           proto)
            path = resolve_external_location(Path(base_dir), location, proto.name)
            offset = _external_number(info, "offset", proto.name)
            length = _external_number(info, "length", proto.name)
            if length is None:
                length = _storage_bytes(_element_count(proto.dims), proto.data_type)
            if length < 0:
                raise ExternalDataError(
                    f"tensor {proto.name!r} has a negative external data length "
                    f"(its shape is {list(proto.dims)})")
            return cls(proto.name, proto.data_type, proto.dims,
                       _FileRegionSource(path, offset or 0, length), proto)
        return cls(proto.name, proto.data_type, proto.dims, _EMBEDDED, proto)

    @classmethod
    def from_array(cls, name: str, array: Any, dtype: int | None = None) -> Tensor:
        """Make a tensor from a numpy array (or anything ``numpy.asarray`` accepts).

        Args:
            name: The initializer name.
            array: The data. A numpy array is referenced, not copied.
            dtype: The ONNX element type; inferred from the array when omitted.
        """
        data = np.asarray(array)
        elem_type = dtype if dtype is not None else onnx.helper.np_dtype_to_tensor_dtype(
            data.dtype)
        return cls(name, elem_type, data.shape, _ArraySource(data))

    @classmethod
    def from_file_region(
        cls, name: str, dtype: int, shape: Sequence[int], path: str | os.PathLike[str],
        offset: int, length: int,
    ) -> Tensor:
        """Reference raw little-endian bytes in a file (a safetensors checkpoint, say).

        The file is not opened until the data is needed; saving streams the bytes.
        """
        return cls(name, dtype, shape, _FileRegionSource(Path(path), int(offset), int(length)))

    # ---------------------------------------------------------------- properties
    @property
    def size(self) -> int:
        """The number of elements."""
        return _element_count(self.shape)

    @property
    def nbytes(self) -> int:
        """The size of the data in bytes, as stored."""
        if isinstance(self._source, _FileRegionSource):
            return self._source.length
        return _storage_bytes(self.size, self.dtype)

    @property
    def is_external(self) -> bool:
        """Whether the data lives in a file rather than in memory."""
        return isinstance(self._source, (_FileRegionSource, _UnplacedSource))

    @property
    def external_path(self) -> Path | None:
        """The file holding the data, for file-backed tensors."""
        if isinstance(self._source, _FileRegionSource):
            return self._source.path
        return None

    @property
    def external_offset(self) -> int | None:
        """The data's byte offset in :attr:`external_path`, for file-backed tensors."""
        if isinstance(self._source, _FileRegionSource):
            return self._source.offset
        return None

    @property
    def proto(self) -> onnx.TensorProto | None:
        """The ``TensorProto`` this tensor was loaded from, if any (do not modify it)."""
        at = self._proto_at
        if at < 0:
            proto: onnx.TensorProto | None = self._proto
            return proto
        loaded: onnx.TensorProto = self._proto[at]
        return loaded

    # ---------------------------------------------------------------------- data
    def numpy(self) -> np.ndarray[Any, Any]:
        """Return the data as a numpy array (memory-mapped for external data)."""
        return self._source.array(self)

    def iter_bytes(self) -> Iterator[bytes | memoryview]:
        """Yield the raw little-endian bytes in chunks, reading files piece by piece."""
        return self._source.iter_bytes(self)

    def check_data(self) -> None:
        """Check that the data exists in full, without reading it.

        Raises:
            ExternalDataError: The external data file is missing or too short.
        """
        if isinstance(self._source, _FileRegionSource):
            self._source._check()
        elif isinstance(self._source, _UnplacedSource):
            raise self._source.problem(self)

    def data_problem(self) -> str | None:
        """Describe why the data is missing or incomplete, or return ``None`` if it is whole."""
        if isinstance(self._source, _FileRegionSource):
            try:
                self._source._check()
            except ExternalDataError as error:
                return error.message
            return None
        if isinstance(self._source, _UnplacedSource):
            return self._source.problem(self).message
        if isinstance(self._source, _ProtoSource):
            proto = self.proto
            assert proto is not None
            return _embedded_data_problem(proto)
        return None

    def with_name(self, name: str) -> Tensor:
        """Return the same data under another name."""
        proto = None
        original = self.proto
        if original is not None:
            proto = onnx.TensorProto()
            proto.CopyFrom(original)
            proto.name = name
        return Tensor(name, self.dtype, self.shape, self._source, proto)

    def to_proto(self) -> onnx.TensorProto:
        """Return a ``TensorProto`` holding the data.

        A tensor loaded from a proto returns that proto unchanged (external data
        references included); any other tensor is read and embedded.
        """
        proto = self.proto
        if proto is not None:
            return proto
        return self.to_embedded_proto()

    def to_embedded_proto(self) -> onnx.TensorProto:
        """Return a ``TensorProto`` with the data embedded (reads external data)."""
        original = self.proto
        if isinstance(self._source, _ProtoSource):
            assert original is not None
            return original
        if self.dtype in _PACKED_4BIT or not isinstance(self._source, _FileRegionSource):
            proto = _embed_array(self, self.numpy())
        else:
            proto = onnx.TensorProto(name=self.name, data_type=self.dtype, dims=self.shape)
            proto.raw_data = b"".join(bytes(chunk) for chunk in self.iter_bytes())
        if original is not None:
            for field in ("doc_string",):
                if original.HasField(field):
                    setattr(proto, field, getattr(original, field))
            proto.metadata_props.extend(original.metadata_props)
        return proto

    def __repr__(self) -> str:
        where = "external" if self.is_external else "in memory"
        return f"Tensor({self.name!r}, {dtype_name(self.dtype)}, {list(self.shape)}, {where})"


def _external_info(proto: onnx.TensorProto) -> dict[str, str]:
    info = {entry.key: entry.value for entry in proto.external_data}
    for key, value in info.items():
        if not isinstance(key, str) or not isinstance(value, str):  # bytes: not UTF-8
            raise ExternalDataError(
                f"tensor {proto.name!r} has external data entry {key!r} = {value!r}, which is "
                "not UTF-8 text", hint="the file is corrupt")
    return info


def _external_number(info: dict[str, str], key: str, tensor_name: str) -> int | None:
    """The ``offset`` or ``length`` of external data: a non-negative decimal, or ``None``."""
    text = info.get(key, "")
    if not text:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ExternalDataError(
            f"tensor {tensor_name!r} has external data {key} {text[:40]!r}, which is not a "
            "non-negative whole number below 2**63", hint="the file is corrupt")
    return int(text)


def _embedded_data_problem(proto: onnx.TensorProto) -> str | None:
    count = _element_count(proto.dims)
    if count == 0:
        return None
    try:
        dtype_size(proto.data_type)
    except InvalidModelError as error:
        return error.message
    if proto.HasField("raw_data"):
        expected = _storage_bytes(count, proto.data_type)
        if proto.data_type != onnx.TensorProto.STRING and len(proto.raw_data) < expected:
            return (f"raw_data holds {len(proto.raw_data)} bytes, the shape "
                    f"{list(proto.dims)} needs {_number(expected)}")
        return None
    try:
        field = onnx.helper.tensor_dtype_to_field(proto.data_type) if proto.data_type else None
    except KeyError:
        return f"element type {proto.data_type} is not one that onnx {onnx.__version__} knows"
    if field is None:
        return "the tensor has no element type"
    stored = len(getattr(proto, field))
    if stored == 0:
        return (f"the tensor holds no data, its shape {list(proto.dims)} needs {_number(count)} "
                "elements")
    return None


def _check_dims(proto: onnx.TensorProto) -> None:
    """Refuse a shape no tensor can have: a negative dimension, or 2**63 elements or more."""
    dims = proto.dims
    if any(dim < 0 for dim in dims):
        raise InvalidModelError(
            f"tensor {proto.name!r} has a negative dimension (shape {list(dims)})",
            hint="the file is corrupt")
    if _element_count(dims) >= 2**63:
        raise InvalidModelError(
            f"tensor {proto.name!r} has shape {list(dims)[:8]}{' ...' if len(dims) > 8 else ''},"
            " 2**63 elements or more, which no tensor can hold", hint="the file is corrupt")


def _number(value: int) -> str:
    """``value`` in digits, or as a power of two when it is astronomically large."""
    return str(value) if abs(value) < 10**30 else f"about 2**{value.bit_length() - 1}"


def check_external_location(location: str, tensor_name: str) -> None:
    """Refuse an external data location that is empty, absolute, or climbs out with ``..``.

    Raises:
        ExternalDataError: The location is not a plain relative path.
    """
    if not location:
        raise ExternalDataError(f"tensor {tensor_name!r} has external data without a location")
    if "\0" in location:
        raise ExternalDataError(
            f"tensor {tensor_name!r} points at external data {location!r}, a name with a NUL "
            "character, which no file can have", hint="the file is corrupt")
    candidate = Path(location)
    if (candidate.is_absolute() or location.startswith(("/", "\\"))
            or (len(location) > 1 and location[1] == ":")):
        raise ExternalDataError(
            f"tensor {tensor_name!r} points at external data by an absolute path ({location!r})",
            hint="external data must sit in the model's folder; graphpass refuses other paths",
        )
    if ".." in candidate.parts:
        raise ExternalDataError(
            f"tensor {tensor_name!r} points at external data outside the model's folder "
            f"({location!r})",
            hint="external data must sit in the model's folder; graphpass refuses '..' paths",
        )


def resolve_external_location(base_dir: Path, location: str, tensor_name: str) -> Path:
    """Resolve an external data location safely inside ``base_dir``.

    Raises:
        ExternalDataError: The location is empty, absolute, or leads outside ``base_dir``
            (``..`` components or a symbolic link out of the folder).
    """
    check_external_location(location, tensor_name)
    candidate = Path(location)
    root = base_dir.resolve()
    resolved = (root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise ExternalDataError(
            f"tensor {tensor_name!r} points at external data {location!r}, which is a link "
            f"leading outside the model's folder (to {str(resolved)!r})",
            hint="copy the data file into the model's folder instead of linking to it",
        )
    return root / candidate
