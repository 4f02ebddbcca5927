"""Training data: batches from ``.npz`` files, stacked arrays, ``datasets`` and Parquet.

:func:`open_batches` reads what ``graphpass train --data`` takes and gives
:class:`Batches`: a dataset split into batches, iterated epoch by epoch, each epoch's
order a function of the seed and the epoch alone (so that a resumed run sees the
batches the uninterrupted one would)::

    from graphpass.training._data import open_batches

    batches = open_batches(["train/"], batch_size=8, shuffle=True, seed=0)
    for batch in batches.epoch(0):        # {"x": array, "target": array}
        trainer.step(batch)

The forms, one or more paths of one form:

* one ``.npz`` (numpy.savez): **one batch** (its arrays by input name);
* several ``.npz`` files, a folder of them or a glob: one batch each (sorted by name);
* ``.npz`` files of **stacked samples** with ``batch_size``: arrays split along axis 0;
* a Hugging Face ``datasets`` folder (``Dataset.save_to_disk``), or Parquet
  (``.parquet``) or Arrow (``.arrow``, ``.feather``) files or a folder of them, with
  ``batch_size``: one column per model input and ``target``, one row per sample
  (lists of lists for arrays). Needs ``pip install graphpass[data]``.

Nothing is loaded whole: a stacked ``.npz`` written by ``numpy.savez`` is memory-mapped
(``numpy.savez_compressed`` arrays are read whole, one array at a time), a
``datasets`` folder and Arrow files are memory-mapped, and Parquet is read one row
group at a time. With ``shuffle``, the samples (or, for one batch per file, the files)
are permuted by ``numpy.random.default_rng([seed, epoch])``.
"""

from __future__ import annotations

import glob
import os
import zipfile
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from graphpass.errors import first_line
from graphpass.training._errors import TrainingError

__all__ = ["Batches", "DataError", "batch_rows", "open_batches", "read_npz"]

TABLE_SUFFIXES: Final = (".parquet", ".arrow", ".feather")
"""File suffixes read as tables (one row per sample)."""
_NPZ_HINT: Final = ("write it with numpy.savez(path, input=array, ..., target=array), one "
                    "array per model input and 'target'")


class DataError(TrainingError):
    """The training data cannot be read: a missing file, a bad form, a missing column."""


# ===================================================================== batches
class Batches:
    """A dataset as batches, iterated by epoch (see the module docstring).

    Attributes:
        description: What was read (``3 .npz files``, ``datasets folder train/``).
        samples: Samples per epoch (``None`` where the batches are given whole).
        batch_size: Samples per batch (``None``: one batch per file).
        shuffle: Whether each epoch permutes the order.
        seed: The seed of the permutations.
        drop_last: Whether a short last batch is left out.
    """

    def __init__(self, source: _Source, *, batch_size: int | None, shuffle: bool, seed: int,
                 drop_last: bool, description: str):
        self._source = source
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.description = description
        self.samples = len(source) if batch_size is not None else None

    def __len__(self) -> int:
        """Batches per epoch."""
        count = len(self._source)
        if self.batch_size is None:
            return count
        whole, rest = divmod(count, self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)

    @property
    def last_batch_size(self) -> int | None:
        """The size of a short last batch, or ``None`` when every batch is whole."""
        if self.batch_size is None or self.samples is None:
            return None
        rest = self.samples % self.batch_size
        return rest if rest and not self.drop_last else None

    def order(self, epoch: int) -> np.ndarray:
        """The items (samples, or files) of ``epoch`` in the order they are read."""
        count = len(self._source)
        if not self.shuffle:
            return np.arange(count)
        return np.random.default_rng([self.seed, epoch]).permutation(count)

    def epoch(self, number: int, start: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """The batches of epoch ``number`` (from 0), from batch ``start`` on."""
        order = self.order(number)
        for index in range(start, len(self)):
            if self.batch_size is None:
                yield self._source.take(order[index:index + 1])
            else:
                yield self._source.take(order[index * self.batch_size:
                                              (index + 1) * self.batch_size])

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """The batches of epoch 0."""
        return self.epoch(0)

    def settings(self) -> dict[str, Any]:
        """What decides the batches (JSON; a saved state records it)."""
        return {"data": self.description, "batches": len(self), "samples": self.samples,
                "batch_size": self.batch_size, "shuffle": self.shuffle, "seed": self.seed,
                "drop_last": self.drop_last}

    def __repr__(self) -> str:
        return f"Batches({self.description}: {len(self)} batches)"


def open_batches(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                 batch_size: int | None = None, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, columns: Sequence[str] | None = None) -> Batches:
    """Open training data in one of the forms of the module docstring.

    Args:
        paths: Files, folders or globs (all of one form).
        batch_size: Samples per batch: the arrays or rows are samples (stacked along
            axis 0). Without it, each ``.npz`` file is one batch.
        shuffle: Permute the samples (or files) in each epoch.
        seed: The permutations' seed.
        drop_last: Leave out a short last batch.
        columns: The arrays or columns to read (default: all; a table must have them).

    Raises:
        DataError: A path is missing, the forms are mixed, a file cannot be read, a
            column is missing, the arrays' lengths differ, or a table is given without
            ``batch_size``; or ``datasets``/``pyarrow`` is missing for one.
    """
    given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not given:
        raise DataError("no training data given")
    if batch_size is not None and batch_size < 1:
        raise DataError("the batch size must be at least 1")
    files, kind = _expand(given)
    wanted = list(columns) if columns is not None else None
    source: _Source
    if kind == "datasets":
        source = _DatasetRows(files[0], wanted)
        description = f"datasets folder {given[0]}"
    elif kind == "table":
        source = _TableRows(files, wanted)
        description = _described(given, files, "table file")
    elif batch_size is None:
        source = _NpzBatches(files)
        description = _described(given, files, ".npz file")
    else:
        source = _NpzSamples(files, wanted)
        description = _described(given, files, "stacked .npz file")
    if kind != "npz" and batch_size is None:
        raise DataError(f"{description} holds samples, not batches: give a batch size",
                        hint="--batch-size B (graphpass train), or batch_size=B")
    if len(source) == 0:
        raise DataError(f"{description} holds no {'batch' if batch_size is None else 'sample'}")
    return Batches(source, batch_size=batch_size, shuffle=shuffle, seed=seed,
                   drop_last=drop_last, description=description)


def _columns(columns: list[str] | None, found: list[str], what: str, where: Path) -> list[str]:
    """The columns to read: ``columns`` (all ``found`` if ``None``), each one present.

    Raises:
        DataError: ``what`` (a table, a dataset) lacks one of ``columns``.
    """
    wanted = columns if columns is not None else found
    missing = [n for n in wanted if n not in found]
    if missing:
        raise DataError(f"{what} has no column {', '.join(map(repr, missing))} "
                        f"(it has {', '.join(found)})", where=str(where),
                        hint="name the columns as the model's inputs and 'target'")
    return wanted


def _described(given: list[Any], files: list[Path], what: str) -> str:
    if len(files) == 1 and len(given) == 1:
        return f"{what} {given[0]}"
    return f"{len(files)} {what}s ({', '.join(map(str, given[:2]))}{' ...' * (len(given) > 2)})"


def _expand(given: list[Any]) -> tuple[list[Path], str]:
    """The files the paths name, and their form: ``npz``, ``table`` or ``datasets``."""
    files: list[Path] = []
    for item in given:
        path = Path(item)
        text = str(item)
        if path.is_dir():
            if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():
                if len(given) > 1:
                    raise DataError("a datasets folder is read alone", where=text,
                                    hint="give one save_to_disk folder")
                if (path / "dataset_dict.json").is_file():
                    raise DataError("a DatasetDict folder: give one split", where=text,
                                    hint=f"for example {path / 'train'}")
                return [path], "datasets"
            if (path / "dataset_dict.json").is_file():
                raise DataError("a DatasetDict folder: give one split", where=text,
                                hint=f"for example {path / 'train'}")
            inside = sorted(p for p in path.iterdir()
                            if p.is_file() and p.suffix in (".npz", *TABLE_SUFFIXES))
            if not inside:
                raise DataError("the folder holds no .npz, .parquet or .arrow file",
                                where=text)
            files.extend(inside)
        elif path.is_file():
            files.append(path)
        elif glob.has_magic(text):
            matched = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
            if not matched:
                raise DataError("the glob matches no file", where=text)
            files.extend(matched)
        else:
            raise DataError("no such file or folder", where=text)
    suffixes = {p.suffix for p in files}
    if suffixes <= {".npz"}:
        return files, "npz"
    if suffixes <= set(TABLE_SUFFIXES):
        return files, "table"
    raise DataError(f"the data mixes forms ({', '.join(sorted(suffixes))})",
                    hint="give .npz files, or table files (.parquet, .arrow), not both")


# ===================================================================== sources
class _Source:
    """Items (batches or samples) by index."""

    def __len__(self) -> int:
        raise NotImplementedError

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` file (one batch).

    Raises:
        DataError: It is missing or not an ``.npz`` archive.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise ValueError("not an .npz archive")
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise DataError(f"cannot read the batch: {first_line(error)}", where=str(path),
                        hint=_NPZ_HINT) from None


class _NpzBatches(_Source):
    """One batch per ``.npz`` file."""

    def __init__(self, files: list[Path]):
        self.files = files
        if len(files) == 1:
            self._cached: dict[str, np.ndarray] | None = read_npz(files[0])
        else:
            self._cached = None

    def __len__(self) -> int:
        return len(self.files)

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        (index,) = indices.tolist()
        if self._cached is not None:
            return self._cached  # one batch: read once
        return read_npz(self.files[index])


class _NpzSamples(_Source):
    """Samples stacked along axis 0 in ``.npz`` files (concatenated), memory-mapped."""

    def __init__(self, files: list[Path], columns: list[str] | None):
        self.parts: list[dict[str, np.ndarray]] = [_mapped_npz(f) for f in files]
        names = columns if columns is not None else list(self.parts[0])
        for file, part in zip(files, self.parts, strict=True):
            missing = [n for n in names if n not in part]
            if missing:
                raise DataError(f"the file has no array {', '.join(map(repr, missing))}",
                                where=str(file), hint=_NPZ_HINT)
            lengths = {n: part[n].shape[0] if part[n].ndim else None for n in names}
            if None in lengths.values() or len(set(lengths.values())) > 1:
                raise DataError("the arrays do not hold the same number of samples (axis 0): "
                                + ", ".join(f"{n} {v}" for n, v in lengths.items()),
                                where=str(file), hint="stack one sample per row of every array")
        self.names = names
        sizes = [part[names[0]].shape[0] for part in self.parts]
        self.starts = np.cumsum([0, *sizes])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        where = np.searchsorted(self.starts, indices, side="right") - 1
        result: dict[str, np.ndarray] = {}
        for name in self.names:
            pieces = [self.parts[part][name][indices[where == part] - self.starts[part]]
                      for part in range(len(self.parts))]
            if len(self.parts) == 1:
                result[name] = np.ascontiguousarray(pieces[0])
                continue
            first = next(p for p in pieces if p.shape[0])
            out = np.empty((len(indices), *first.shape[1:]), first.dtype)
            for part, piece in enumerate(pieces):
                out[where == part] = piece
            result[name] = out
        return result


def _mapped_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz``: memory-mapped where stored uncompressed (numpy.savez)."""
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            for member in members:
                if not member.filename.endswith(".npy"):
                    continue
                name = member.filename[:-4]
                if member.compress_type == zipfile.ZIP_STORED:
                    arrays[name] = _mapped_member(path, archive, member)
                else:
                    with archive.open(member) as stream:
                        arrays[name] = np.lib.format.read_array(stream, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise DataError(f"cannot read the samples: {first_line(error)}", where=str(path),
                        hint=_NPZ_HINT) from None
    if not arrays:
        raise DataError("the file holds no array", where=str(path), hint=_NPZ_HINT)
    return arrays


def _mapped_member(path: Path, archive: zipfile.ZipFile, member: zipfile.ZipInfo
                   ) -> np.ndarray:
    with archive.open(member) as stream:
        version = np.lib.format.read_magic(stream)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(stream)
        header = stream.tell()
    if dtype.hasobject:
        raise ValueError(f"{member.filename} holds Python objects")
    with open(path, "rb") as handle:  # the member's data: after its local header
        handle.seek(member.header_offset)
        local = handle.read(30)
        name_length = int.from_bytes(local[26:28], "little")
        extra_length = int.from_bytes(local[28:30], "little")
    offset = member.header_offset + 30 + name_length + extra_length + header
    if not int(np.prod(shape)):
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")


# ====================================================================== tables
def _arrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise DataError("reading Parquet or Arrow data needs pyarrow, which is not installed",
                        hint="pip install 'graphpass[data]'") from None
    return pyarrow


def _column_array(column: Any, name: str, where: str) -> np.ndarray:
    """An Arrow column (lists of lists for arrays) as one numpy array, rows on axis 0."""
    pa = _arrow()
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    rows = len(array)
    shape = [rows]
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or \
            pa.types.is_fixed_size_list(array.type):
        if array.null_count:
            raise DataError(f"column {name!r} has missing values", where=where)
        if pa.types.is_fixed_size_list(array.type):
            size = array.type.list_size
            array = array.flatten()
        else:
            offsets = np.asarray(array.offsets)
            lengths = np.diff(offsets)
            if len(lengths) and (lengths != lengths[0]).any():
                raise DataError(f"column {name!r} holds arrays of different shapes",
                                where=where, hint="every sample's array must have one shape; "
                                                  "pad them to one length")
            size = int(lengths[0]) if len(lengths) else 0
            array = array.flatten()
        shape.append(size)
    if array.null_count:
        raise DataError(f"column {name!r} has missing values", where=where)
    try:
        values = array.to_numpy(zero_copy_only=False)
    except (pa.ArrowException, ValueError, TypeError) as error:
        raise DataError(f"column {name!r} is not numeric: {first_line(error)}",
                        where=where) from None
    if values.dtype == object:
        raise DataError(f"column {name!r} is not numeric ({array.type})", where=where)
    return np.asarray(values).reshape(shape)


class _TableRows(_Source):
    """Rows of Parquet (one row group read at a time) or Arrow files (memory-mapped)."""

    def __init__(self, files: list[Path], columns: list[str] | None):
        pa = _arrow()
        import pyarrow.parquet as pq

        self.files = files
        self._segments: list[tuple[int, int]] = []  # (file, row group or -1)
        sizes: list[int] = []
        self._tables: dict[int, Any] = {}
        names: list[str] | None = None
        for index, file in enumerate(files):
            try:
                if file.suffix == ".parquet":
                    metadata = pq.ParquetFile(file).metadata
                    found = list(metadata.schema.to_arrow_schema().names)
                    for group in range(metadata.num_row_groups):
                        self._segments.append((index, group))
                        sizes.append(metadata.row_group(group).num_rows)
                else:
                    table = _read_arrow(pa, file)
                    found = list(table.schema.names)
                    self._tables[index] = table
                    self._segments.append((index, -1))
                    sizes.append(table.num_rows)
            except (OSError, pa.ArrowException) as error:
                raise DataError(f"cannot read the table: {first_line(error)}",
                                where=str(file)) from None
            wanted = _columns(columns, found, "the table", file)
            names = names or wanted
        assert names is not None
        self.names = names
        self.starts = np.cumsum([0, *sizes])
        self._groups: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _segment(self, number: int) -> dict[str, np.ndarray]:
        """The columns of one row group (or Arrow file) as numpy arrays (a few cached)."""
        if number in self._groups:
            self._groups.move_to_end(number)
            return self._groups[number]
        file, group = self._segments[number]
        where = str(self.files[file])
        if group < 0:
            table = self._tables[file].select(self.names)
        else:
            import pyarrow.parquet as pq

            table = pq.ParquetFile(self.files[file]).read_row_group(group, columns=self.names)
        arrays = {n: _column_array(table.column(n), n, where) for n in self.names}
        self._groups[number] = arrays
        if len(self._groups) > 4:
            self._groups.popitem(last=False)
        return arrays

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        where = np.searchsorted(self.starts, indices, side="right") - 1
        parts = {int(s): self._segment(int(s)) for s in np.unique(where)}
        result: dict[str, np.ndarray] = {}
        for name in self.names:
            first = next(iter(parts.values()))[name]
            out = np.empty((len(indices), *first.shape[1:]), first.dtype)
            for segment, arrays in parts.items():
                chosen = where == segment
                out[chosen] = arrays[name][indices[chosen] - self.starts[segment]]
            result[name] = out
        return result


def _read_arrow(pa: Any, file: Path) -> Any:
    """An Arrow IPC file or stream, memory-mapped (its buffers are not copied)."""
    import pyarrow.ipc

    source = pa.memory_map(str(file), "r")
    try:
        return pyarrow.ipc.open_file(source).read_all()
    except pa.ArrowInvalid:
        source.seek(0)
        return pyarrow.ipc.open_stream(source).read_all()


class _DatasetRows(_Source):
    """A Hugging Face ``datasets`` folder (``save_to_disk``), memory-mapped."""

    def __init__(self, folder: Path, columns: list[str] | None):
        try:
            import datasets
        except ImportError:
            raise DataError("reading a datasets folder needs the datasets library, which is "
                            "not installed", hint="pip install 'graphpass[data]'") from None
        try:
            dataset = datasets.load_from_disk(str(folder))
        except (OSError, ValueError, FileNotFoundError) as error:
            raise DataError(f"cannot read the datasets folder: {first_line(error)}",
                            where=str(folder)) from None
        if not isinstance(dataset, datasets.Dataset):
            raise DataError("a DatasetDict folder: give one split", where=str(folder))
        wanted = _columns(columns, list(dataset.column_names), "the dataset", folder)
        self.names = wanted
        self.folder = folder
        self._dataset = dataset.select_columns(wanted).with_format("arrow")

    def __len__(self) -> int:
        return int(self._dataset.num_rows)

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        table = self._dataset[indices.tolist()]
        return {n: _column_array(table.column(n), n, str(self.folder)) for n in self.names}


def batch_rows(batch: Mapping[str, Any]) -> int:
    """The samples in a batch: the length of its first array's axis 0 (1 for scalars)."""
    first = next(iter(batch.values()), None)
    shape = np.shape(first) if first is not None else ()
    return int(shape[0]) if shape else 1
