"""Reading and writing model files.

:func:`load` parses the model and references external data without reading it.
:func:`save` writes atomically: every file goes to a temporary name in the target
folder and is renamed into place only when everything has been written, so a
failed or interrupted save leaves no partial file and never touches the input; the
model and its data files are replaced as one (:mod:`graphpass.files._commit`).
External data stays external: data files next to the output are referenced in
place, others are copied or streamed chunk by chunk, so peak memory stays near
the largest single tensor, not the model size.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

import onnx
from google.protobuf.message import DecodeError

from graphpass.errors import (
    ExternalDataError,
    GraphpassError,
    InvalidModelError,
    ModelLoadError,
    ModelSaveError,
    first_line,
)
from graphpass.files._atomic import is_temporary
from graphpass.files._commit import Transaction
from graphpass.files._validate import validate as validate_model
from graphpass.ir import Model, Tensor
from graphpass.ir.proto import (
    TENSOR_ATTRIBUTE_TYPES,
    attribute_tensors,
    model_from_proto,
    model_to_chunks,
    subgraph_protos,
)

__all__ = ["AUTO_EXTERNAL_BYTES", "load", "same_file", "save"]

AUTO_EXTERNAL_BYTES: Final = 512 * 1024 * 1024
"""With ``external_data=None``, weights go to a data file when they add up to more than this."""

_PROTOBUF_LIMIT: Final = 2**31 - 1
_ALIGN_SMALL: Final = 64
_ALIGN_LARGE: Final = 64 * 1024
_LARGE_TENSOR: Final = 1024 * 1024


def load(path: str | os.PathLike[str], *, check_external_data: bool = True) -> Model:
    """Load an ONNX model without reading its external weights.

    Args:
        path: The ``.onnx`` file.
        check_external_data: Check that every external data file exists and is long
            enough (a ``stat``, not a read).

    Returns:
        The model. Its ``source_path`` and ``base_dir`` point at the file and folder.

    Raises:
        ModelLoadError: The file is missing, unreadable, empty, or not an ONNX model.
        ExternalDataError: External data is missing, too short, or outside the folder.
        InvalidModelError: The model breaks a rule the IR relies on.
    """
    file_path = Path(path)
    where = str(file_path)
    if not file_path.exists():
        raise ModelLoadError("no such file", where=where,
                             hint="check the path; graphpass reads .onnx model files")
    if file_path.is_dir():
        raise ModelLoadError("is a folder, not a model file", where=where)
    try:
        data = file_path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"cannot be read ({error.strerror})", where=where) from None
    if not data:
        raise ModelLoadError("the file is empty", where=where,
                             hint="the model was not written completely; export it again")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError, RecursionError) as error:
        if "MaxDepth" in str(error) or isinstance(error, RecursionError):
            raise ModelLoadError(
                "the model nests messages (subgraphs in subgraphs, or types in types) deeper "
                "than protobuf's limit of 100 levels",
                where=where,
                hint="onnx.load refuses it too (both read models through Python protobuf); "
                     "build the model with flatter control flow",
            ) from None
        raise ModelLoadError(
            f"not an ONNX model, or truncated ({first_line(error, 200)})",
            where=where,
            hint="check that this is an .onnx file and that it was copied completely",
        ) from None
    del data
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise ModelLoadError(
            "not an ONNX model: it has no IR version or no graph",
            where=where,
            hint="check that this is an .onnx file and that it was copied completely",
        )
    resolved = file_path.resolve()
    try:
        model = model_from_proto(proto, resolved.parent)
        if check_external_data:
            _check_external_data(model)
    except GraphpassError as error:
        raise type(error)(error.message, where=_join(where, error.where),
                          hint=error.hint) from None
    except RecursionError:
        raise ModelLoadError("the model nests subgraphs too deeply to process",
                             where=where) from None
    model.source_path = resolved
    return model


def save(
    model: Model,
    path: str | os.PathLike[str],
    *,
    external_data: bool | None = None,
    location: str | None = None,
    size_threshold: int = 1024,
    overwrite_input: bool = False,
    validate: bool = True,
) -> Path:
    """Write a model atomically, keeping external data external.

    External data that already sits where the output needs it is referenced in
    place (saving next to the input writes no data at all); a data file the model
    uses (almost) whole is copied under its own name; anything else, and every
    in-memory tensor that goes external, is streamed into one new data file.

    Args:
        model: The model.
        path: The output ``.onnx`` file.
        external_data: ``True`` puts every tensor of at least ``size_threshold`` bytes in
            a data file; ``False`` embeds everything (models under 2 GB only); ``None``
            (the default) keeps external data external and embeds in-memory tensors
            unless the weights add up to more than :data:`AUTO_EXTERNAL_BYTES`.
        location: The data file's name, relative to the output folder; by default
            ``<output file name>.data``.
        size_threshold: Tensors smaller than this stay embedded.
        overwrite_input: Allow ``path`` to be the file the model was loaded from.
        validate: Check the model's structure first (:func:`graphpass.validate`) and
            refuse to write a model that no runtime would accept. Turn it off only to
            write a deliberately broken model (a test fixture, say).

    Returns:
        The path written.

    Raises:
        InvalidModelError: ``validate`` found a structural problem (a dangling name, a
            cycle, nodes out of order, a domain without an opset import); nothing
            was written.
        ModelSaveError: The model cannot be written; nothing was changed on disk.
    """
    out_path = Path(path)
    where = str(out_path)
    if validate:
        try:
            validate_model(model)
        except InvalidModelError as error:
            raise type(error)(
                f"refusing to save an invalid model: {error.message}",
                where=_join(where, error.where), hint=error.hint) from None
    if model.source_path is not None and not overwrite_input and same_file(out_path,
                                                                            model.source_path):
        raise ModelSaveError(
            "refusing to overwrite the input model",
            where=where,
            hint="write to another path, or ask for it explicitly (overwrite_input=True, "
                 "or --in-place on the command line)",
        )
    out_dir = out_path.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ModelSaveError(f"cannot create the folder ({error.strerror})", where=where) from None
    data_name = location or f"{out_path.name}.data"
    if Path(data_name).is_absolute() or ".." in Path(data_name).parts:
        raise ModelSaveError(f"external data location {data_name!r} must be a plain relative path",
                             where=where)
    try:
        with Transaction(out_path, model.source_path) as transaction:
            _write_model(model, out_path, data_name, external_data, size_threshold,
                         overwrite_input, transaction)
    except OSError as error:  # a rename failed while committing; nothing was left behind
        raise ModelSaveError(f"cannot write ({error.strerror or error})", where=where) from None
    return out_path


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths lead to the same file.

    They do when they resolve to the same path (following links; the file need not
    exist yet), or when both exist and are the same file (a hard link, another
    spelling on a case-insensitive filesystem). A path that cannot be examined is
    not the same.
    """
    first, second = Path(a), Path(b)
    try:
        return first.resolve() == second.resolve() or (
            first.exists() and second.exists() and first.samefile(second))
    except OSError:
        return False


def _write_model(model: Model, out_path: Path, data_name: str, external_data: bool | None,
                 size_threshold: int, overwrite_input: bool, transaction: Transaction) -> None:
    """Write the data files and the model into ``transaction``, then commit it."""
    where = str(out_path)
    out_dir = out_path.parent
    try:
        plan = _plan_tensors(model, out_dir.resolve(), out_dir / data_name, data_name,
                             external_data, size_threshold)
        _check_destinations(plan, out_path, overwrite_input)
        transaction.prepare(_destinations(plan, out_path), plan.read)
        if plan.stream:  # the data file may get another name (m.onnx.1.data)
            plan.data_path = transaction.name_for(plan.data_path)
            plan.data_name = Path(os.path.relpath(plan.data_path, out_dir)).as_posix()
        emitted = _write_data(plan, transaction, where)
        # Serialized once (with protobuf's upb backend ByteSize() serializes too), in
        # pieces written one after another: the model is never in memory twice.
        serialized = model_to_chunks(model, lambda tensor: emitted[id(tensor)])
        size = sum(map(len, serialized))
        if size > _PROTOBUF_LIMIT:
            raise ModelSaveError(
                f"the model is {size / 2**30:.1f} GiB, over protobuf's 2 GiB limit",
                where=where,
                hint="save with external_data=True (weights go to a separate file)",
            )
        # Locations come only from the tensors planned here (initializers, and the
        # external tensors the IR keeps as protos): no need to search the bytes.
        references_data = plan.loose_external or any(
            proto.data_location == onnx.TensorProto.EXTERNAL for proto in emitted.values())
        transaction.commit(serialized, references_data=references_data)
    except GraphpassError as error:
        if isinstance(error, ModelSaveError):
            raise
        raise ModelSaveError(error.message, where=_join(where, error.where),
                             hint=error.hint) from None
    except OSError as error:
        raise ModelSaveError(f"cannot write ({error.strerror or error})", where=where) from None


# ===================================================================== planning
@dataclass
class _Plan:
    embed: list[Tensor] = field(default_factory=list)
    keep: list[Tensor] = field(default_factory=list)
    copy_files: dict[Path, list[Tensor]] = field(default_factory=dict)
    copy_loose: dict[Path, str] = field(default_factory=dict)  # source -> location
    stream: list[Tensor] = field(default_factory=list)
    data_path: Path = Path()
    data_name: str = ""
    read: set[Path] = field(default_factory=set)  # the data files the tensors come from
    loose_external: bool = False  # external tensors the IR keeps as protos (attributes ...)


def _model_tensors(model: Model) -> tuple[list[Tensor], list[onnx.TensorProto]]:
    """The initializers (each tensor once) and the external tensors the IR keeps as protos.

    One walk over the model's graphs finds both. The second list holds the tensors
    with external data that are not initializers: in attributes (a ``Constant``
    saved with ``convert_attribute=True``), sparse initializers, function attribute
    defaults and training_info graphs.
    """
    initializers: dict[int, Tensor] = {}
    loose: list[onnx.TensorProto] = []

    def from_attribute(attribute: onnx.AttributeProto) -> None:
        if attribute.type in TENSOR_ATTRIBUTE_TYPES:
            loose.extend(attribute_tensors(attribute))

    for graph in model.graphs():
        for tensor in graph.initializers.values():
            initializers.setdefault(id(tensor), tensor)
        for sparse in graph.sparse_initializers.values():
            loose.extend((sparse.values, sparse.indices))
        for node in graph:
            if node._attributes:
                for attribute in node._attributes.values():
                    if attribute.type in TENSOR_ATTRIBUTE_TYPES:
                        loose.extend(attribute_tensors(attribute.proto))
    for function in model.functions.values():
        for default in function.attribute_defaults.values():
            from_attribute(default.proto)
    training_graphs = [graph_proto for info in model.extra_fields.get("training_info", ())
                       for root in (info.initialization, info.algorithm)
                       for graph_proto in (root, *subgraph_protos(root))]
    for graph_proto in training_graphs:
        loose.extend(graph_proto.initializer)
        for sparse in graph_proto.sparse_initializer:
            loose.extend((sparse.values, sparse.indices))
        for node_proto in graph_proto.node:
            for attribute in node_proto.attribute:
                from_attribute(attribute)
    external = [t for t in loose if t.data_location == onnx.TensorProto.EXTERNAL]
    return list(initializers.values()), external


def _check_external_data(model: Model) -> None:
    """Check that every external data file exists and is long enough (no reading)."""
    tensors, loose = _model_tensors(model)
    for tensor in tensors:
        if tensor.is_external:
            tensor.check_data()
    for proto in loose:
        _loose_source(model, proto).check_data()


def _plan_tensors(model: Model, out_dir: Path, data_path: Path, data_name: str,
                  external_data: bool | None, size_threshold: int) -> _Plan:
    tensors, loose = _model_tensors(model)
    plan = _Plan(data_path=data_path, data_name=data_name)
    if external_data is None:
        external_data_mode = any(t.is_external for t in tensors) or (
            sum(t.nbytes for t in tensors) > AUTO_EXTERNAL_BYTES)
    else:
        external_data_mode = external_data
    if external_data is False:
        # (With external_data=None, weights are embedded only when they add up to less
        # than AUTO_EXTERNAL_BYTES, far below the limit: no need to add them up again.)
        embedded = sum(t.nbytes for t in tensors)
        if embedded > _PROTOBUF_LIMIT:  # refuse before reading any of it
            raise ModelSaveError(
                f"the weights add up to {embedded / 2**30:.1f} GiB, over protobuf's 2 GiB "
                "limit for one file",
                hint="save with external_data=True (weights go to a separate file)",
            )
    # Each data file is resolved once (many tensors share one file).
    resolved_files = {t.external_path: t.external_path.resolve()
                      for t in tensors if t.external_path is not None}
    plan.read.update(resolved_files.values())

    def source_of(tensor: Tensor) -> Path:
        assert tensor.external_path is not None
        return resolved_files[tensor.external_path]

    by_file: dict[tuple[Path, str], list[Tensor]] = {}
    for tensor in tensors:
        tensor.check_data()
        if (not external_data_mode or tensor.dtype == onnx.TensorProto.STRING
                or (tensor.nbytes < size_threshold and not tensor.is_external)):
            plan.embed.append(tensor)
        elif tensor.is_external and tensor.proto is not None:
            by_file.setdefault((source_of(tensor), _proto_location(tensor)), []).append(tensor)
        else:
            plan.stream.append(tensor)
    target = data_path.resolve()
    sources = {source for source, _ in by_file}
    for (source, location), group in by_file.items():
        destination = (out_dir / location).resolve()
        if is_temporary(source):
            # Left by a killed save and referenced by its output: it is removed once that
            # output is saved again, so no other model may reference it.
            plan.stream.extend(group)
        elif destination == source:
            plan.keep.extend(group)  # already where the output needs it: reference in place
        elif (destination not in sources and _inside(destination, out_dir)
              and _mostly_used(source, by_file) and source not in plan.copy_files):
            plan.copy_files[source] = group  # copy the whole file under the same name
        else:
            plan.stream.extend(group)
    if plan.stream:
        # The new data file replaces whatever is at ``target``: what would have been
        # kept there or copied there is written into it instead.
        moved = [t for t in plan.keep if source_of(t) == target]
        plan.keep = [t for t in plan.keep if source_of(t) != target]
        for source, group in list(plan.copy_files.items()):
            if (out_dir / _proto_location(group[0])).resolve() == target:
                moved.extend(plan.copy_files.pop(source))
        plan.stream = moved + plan.stream
    plan.loose_external = bool(loose)
    _plan_loose(model, plan, loose, out_dir, target)
    return plan


def _check_destinations(plan: _Plan, out_path: Path, overwrite_input: bool) -> None:
    """Refuse to write outside the output folder, or over a file the model reads.

    The model file never replaces a data file the model needs. A data file is
    replaced only with ``overwrite_input``: otherwise it belongs to the input model
    (or to a checkpoint the weights come from), which must stay intact.
    """
    out_dir = out_path.parent.resolve()
    read = plan.read
    if out_path.is_dir():
        raise ModelSaveError("is a folder", where=str(out_path),
                             hint="give the path of the .onnx file to write")
    if out_path.resolve() in read:
        raise ModelSaveError(
            "refusing to write the model over a data file it reads its weights from",
            where=str(out_path), hint="write the model to another path")
    for destination in _destinations(plan, out_path):
        if destination.is_dir():
            raise ModelSaveError(f"the data file {str(destination)!r} would replace a folder",
                                 where=str(out_path), hint="save with another location=")
        folder = destination.parent.resolve()
        if folder != out_dir and out_dir not in folder.parents:
            raise ModelSaveError(
                f"the data file {destination.name!r} would go to {str(folder)!r}, outside the "
                "output folder (a link in its path leads out)", where=str(out_path),
                hint="graphpass writes data files only inside the output model's folder")
        if not overwrite_input and destination.resolve() in read:
            raise ModelSaveError(
                f"refusing to overwrite {str(destination)!r}: the model reads weights from it "
                "(it belongs to the input model or a checkpoint)", where=str(out_path),
                hint="save with another location= (or to another folder), or ask for it "
                     "explicitly with overwrite_input=True (--in-place on the command line)")


def _destinations(plan: _Plan, out_path: Path) -> list[Path]:
    """The data files the save writes (the new data file, and copies)."""
    destinations = [plan.data_path] if plan.stream else []
    destinations.extend(out_path.parent / _proto_location(group[0])
                        for group in plan.copy_files.values())
    destinations.extend(out_path.parent / location for location in plan.copy_loose.values())
    return destinations


def _plan_loose(model: Model, plan: _Plan, loose: list[onnx.TensorProto], out_dir: Path,
                target: Path) -> None:
    """Keep or copy the data files of external tensors that are not initializers.

    Tensors in attributes (a ``Constant`` saved with ``convert_attribute=True``),
    sparse initializers and training_info graphs stay protos in the IR. Their
    data file is referenced in place when the output folder sees it under the
    same name, and otherwise copied whole under that name.
    """
    rewritten = {target} if plan.stream else set()
    rewritten.update((out_dir / _proto_location(g[0])).resolve() for g in plan.copy_files.values())
    for proto in loose:
        tensor = _loose_source(model, proto)
        tensor.check_data()
        source = _resolved(tensor.external_path)
        plan.read.add(source)
        location = _location(proto)
        destination = (out_dir / location).resolve()
        if destination == source and source not in rewritten:
            continue
        copied = plan.copy_files.get(source)
        if copied is not None and destination == (out_dir / _proto_location(copied[0])).resolve():
            continue  # the whole file is copied under this name already
        if destination in rewritten or plan.copy_loose.get(source, location) != location:
            raise ModelSaveError(
                f"tensor {proto.name!r} (not an initializer) keeps its data in {location!r}, "
                "which this save would overwrite or cannot place",
                hint="save with another location= for the data file, or to another folder",
            )
        plan.copy_loose[source] = location


def _loose_source(model: Model, proto: onnx.TensorProto) -> Tensor:
    return Tensor.from_proto(proto, model.base_dir)


def _location(proto: onnx.TensorProto) -> str:
    for entry in proto.external_data:
        if entry.key == "location":
            return str(entry.value)
    return ""


def _proto_location(tensor: Tensor) -> str:
    assert tensor.proto is not None
    return _location(tensor.proto)


def _mostly_used(source: Path, by_file: dict[tuple[Path, str], list[Tensor]]) -> bool:
    try:
        size = source.stat().st_size
    except OSError:
        return False
    used = sum(t.nbytes for (path, _), group in by_file.items() if path == source for t in group)
    return used >= 0.9 * size


def _inside(path: Path, folder: Path) -> bool:
    return folder in path.parents


# ====================================================================== writing
def _write_data(plan: _Plan, transaction: Transaction, where: str) -> dict[int, onnx.TensorProto]:
    emitted: dict[int, onnx.TensorProto] = {}
    for tensor in plan.embed:
        emitted[id(tensor)] = tensor.to_embedded_proto() if tensor.is_external \
            else tensor.to_proto()
    for tensor in plan.keep:
        assert tensor.proto is not None
        emitted[id(tensor)] = tensor.proto
    copies = {source: _proto_location(group[0]) for source, group in plan.copy_files.items()}
    copies.update(plan.copy_loose)
    for source, location in copies.items():
        destination = transaction.name_for(transaction.out_dir / location, relocate=True)
        destination.parent.mkdir(parents=True, exist_ok=True)
        tmp = transaction.new_file(destination.parent)
        try:
            _copy_file(source, tmp)
        except OSError as error:
            raise ExternalDataError(f"cannot copy external data file {str(source)!r} "
                                    f"({error.strerror})") from None
        transaction.add_data(tmp, destination)
    for group in plan.copy_files.values():
        for tensor in group:
            assert tensor.proto is not None
            emitted[id(tensor)] = tensor.proto
    if plan.stream:
        plan.data_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = transaction.new_file(plan.data_path.parent)
        with open(tmp, "wb") as handle:
            for tensor in plan.stream:
                emitted[id(tensor)] = _stream_tensor(tensor, handle, plan.data_name)
        transaction.add_data(tmp, plan.data_path)
    return emitted


def _stream_tensor(tensor: Tensor, handle: BinaryIO, location: str) -> onnx.TensorProto:
    align = _ALIGN_LARGE if tensor.nbytes >= _LARGE_TENSOR else _ALIGN_SMALL
    offset = handle.tell()
    if offset % align:
        handle.write(b"\0" * (align - offset % align))
        offset = handle.tell()
    written = 0
    for chunk in tensor.iter_bytes():
        handle.write(chunk)
        written += len(chunk)
    proto = onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)
    original = tensor.proto
    if original is not None:
        if original.HasField("doc_string"):
            proto.doc_string = original.doc_string
        proto.metadata_props.extend(original.metadata_props)
    proto.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(written))):
        proto.external_data.add(key=key, value=value)
    return proto


# ======================================================================= helpers
def _copy_file(source: Path, destination: Path) -> None:
    """Copy a file inside the kernel where it can, else with ``shutil.copyfile``.

    ``copy_file_range`` never brings the data into this process, and on filesystems
    that share extents (XFS, btrfs) it makes a reflink: no data is copied at all.
    """
    copy_range = getattr(os, "copy_file_range", None)
    if copy_range is not None:
        try:
            with open(source, "rb") as src, open(destination, "wb") as dst:
                remaining = os.fstat(src.fileno()).st_size
                while remaining > 0:
                    copied = copy_range(src.fileno(), dst.fileno(), min(remaining, 1 << 30))
                    if copied == 0:
                        break
                    remaining -= copied
                if remaining == 0:
                    return
        except OSError:
            pass  # not supported here (another filesystem, an old kernel): copy plainly
    shutil.copyfile(source, destination)


def _resolved(path: Path | None) -> Path:
    assert path is not None
    return path.resolve()


def _join(outer: str, inner: str | None) -> str:
    return f"{outer}: {inner}" if inner else outer
