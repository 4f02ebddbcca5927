"""Writing and reading the training-graph directory, atomically.

The directory holds ``gradient.onnx``, ``step.onnx``, ``eval.onnx`` (frozen weights
inside, or in one shared ``frozen.data`` file when they are large), the initial
trainable weights ``weights.safetensors``, the initial running statistics of the batch
normalizations that train with batch statistics ``buffers.safetensors``, the forward
model ``model.onnx`` (what a runner saves with the trained weights; its trainable
weights and running statistics are external data inside the two safetensors files,
so they are on disk once) and ``manifest.json``. The optimizer state starts as zeros
and ``step`` as 0, so no file holds it (it would double the weights on disk):
:func:`initial_values` makes it in memory, with the rest of what ``step.onnx`` carries.

Everything is written into a temporary folder next to the destination, checked
(``onnx.checker.check_model(full_check=True)`` on every model, no node outside the
default ONNX domain unless the model had one), and put into place as one
(:func:`graphpass.files._atomic.replace_folder`): a kill at any moment leaves the
earlier directory or the new one at the path, never neither. A failed write leaves
no folder behind. A destination that exists and is not a training-graph directory is
never touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphpass.checkpoint import SafetensorsLoader
from graphpass.errors import ModelSaveError, first_line
from graphpass.files import load, recover_folder, replace_folder, save, temporary_folder
from graphpass.ir import Model, Tensor
from graphpass.training._graphs import FORMAT, TrainingGraphs

__all__ = ["MANIFEST", "initial_values", "read_manifest", "write_training_directory"]

MANIFEST = "manifest.json"
"""The manifest's file name."""

FROZEN_DATA = "frozen.data"
"""The external data file the three models share for large frozen weights."""


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of a training-graph directory, or ``None`` if it is not one.

    A replacement of the directory that a kill interrupted is finished first
    (:func:`~graphpass.files._atomic.recover_folder`).
    """
    try:
        recover_folder(directory)
    except (OSError, ModelSaveError):
        return None  # (a marker, but the folder above cannot be written: nothing to read)
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def initial_values(directory: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """What ``step.onnx`` carries, at step 0: the values to feed its first run.

    The trainable weights (``weights.safetensors``), the running statistics
    (``buffers.safetensors``), the optimizer state (zeros of each weight's shape and
    type, made here: ``np.zeros`` takes no memory until written) and ``step`` (0), by
    the input names ``step.onnx`` reads them under::

        values = initial_values("train/")
        for batch in batches:
            outputs = dict(zip(step_outputs, session.run(None, {**batch, **values, "lr": lr})))
            values = {source: outputs[updated] for source, updated in manifest["step"]["carry"]}

    Raises:
        ModelSaveError: ``directory`` is not a training-graph directory, or one of its
            safetensors files is missing or unreadable.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    manifest = read_manifest(directory)
    if manifest is None:
        raise ModelSaveError(f"not a graphpass training-graph directory (no valid {MANIFEST})",
                             where=str(directory))
    values: dict[str, np.ndarray] = {}
    for key in ("weights", "buffers"):
        path = Path(directory) / manifest["files"][key]
        try:
            values.update(load_file(str(path)))
        except (OSError, SafetensorError) as error:
            raise ModelSaveError(f"cannot read {path.name}: {first_line(error)}",
                                 where=str(directory),
                                 hint="the directory is incomplete; build it again") from None
    for weight in manifest["trainable"]:
        for kind in manifest["optimizer"]["state"]:
            if weight in values:
                values[f"{weight}.{kind}"] = np.zeros_like(values[weight])
    values[manifest["step"]["step"]] = np.array(0, dtype=np.int64)
    return values


def _check_destination(directory: Path) -> None:
    if not directory.exists():
        return
    if not directory.is_dir():
        raise ModelSaveError("the training-graph directory is a file", where=str(directory),
                             hint="give a folder path")
    if any(directory.iterdir()) and read_manifest(directory) is None:
        raise ModelSaveError(
            "refusing to replace a folder that is not a graphpass training-graph directory",
            where=str(directory), hint="give a new or empty folder, or one an earlier "
                                       "build-training-graph wrote")


def _checked(path: Path, allowed_domains: set[str]) -> None:
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as error:  # the checker raises several exception types
        raise ModelSaveError(f"{path.name} fails the ONNX checker: {first_line(error)}",
                             hint="please report the model; graphpass should not write it"
                             ) from None
    proto = onnx.load(str(path), load_external_data=False)
    foreign = sorted({node.domain for node in proto.graph.node
                      if node.domain not in ("", "ai.onnx") and node.domain
                      not in allowed_domains})
    if foreign:  # pragma: no cover - the builders emit the ONNX domain only
        raise ModelSaveError(f"{path.name} has nodes outside the ONNX domain: {foreign}")


def _save_arrays(arrays: dict[str, np.ndarray], path: Path) -> None:
    from safetensors.numpy import save_file

    save_file({name: np.asarray(value, order="C") for name, value in arrays.items()}, str(path))


def _share_frozen(model: Model, saved: Model) -> None:
    """Point ``model``'s initializers at the external data ``saved`` already wrote."""
    for name, tensor in saved.graph.initializers.items():
        if tensor.is_external and name in model.graph.initializers:
            model.graph.set_initializer(tensor)


def _write_forward(forward: Model, gradient: Model, scratch: Path, files: dict[str, str]
                   ) -> None:
    """Write ``model.onnx``: trained and carried weights point into the safetensors files."""
    model = forward.copy()
    _share_frozen(model, gradient)
    for key in ("weights", "buffers"):
        checkpoint = SafetensorsLoader().load(scratch / files[key])
        for name, entry in checkpoint.items():
            if name in model.graph.initializers:
                model.graph.set_initializer(_in_place(entry.tensor(name), scratch))
    save(model, scratch / files["model"], location=f"{files['model']}.data")


def _in_place(tensor: Tensor, folder: Path) -> Tensor:
    """``tensor`` (a region of a file in ``folder``) as ONNX external data of that file."""
    path, offset = tensor.external_path, tensor.external_offset
    assert path is not None and offset is not None
    proto = onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape,
                             data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", path.name), ("offset", str(offset)),
                       ("length", str(tensor.nbytes))):
        entry = proto.external_data.add()
        entry.key, entry.value = key, value
    return Tensor.from_proto(proto, base_dir=folder)


def write_training_directory(graphs: TrainingGraphs, directory: str | os.PathLike[str]
                             ) -> list[str]:
    """Write ``graphs`` into ``directory`` atomically; return the files written.

    Raises:
        ModelSaveError: The destination is not a training-graph directory, a file
            cannot be written, or a model fails the ONNX checker; nothing is changed
            on disk then.
    """
    target = Path(directory)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        recover_folder(target)
    except OSError as error:
        raise ModelSaveError(f"cannot create the folder ({error.strerror})",
                             where=str(target)) from None
    _check_destination(target)
    try:
        with temporary_folder(target.parent, target.name) as scratch:
            allowed = {node.domain for node in graphs.gradient.graph if node.domain}
            files = _write_all(graphs, scratch, allowed)
            replace_folder(target, scratch, step="training directory")
    except OSError as error:
        raise ModelSaveError(f"cannot write the directory ({error.strerror or error})",
                             where=str(target)) from None
    return files


def _write_all(graphs: TrainingGraphs, scratch: Path, allowed: set[str]) -> list[str]:
    manifest = graphs.manifest
    files = manifest["files"]
    try:
        save(graphs.gradient, scratch / files["gradient"], location=FROZEN_DATA)
        written = load(scratch / files["gradient"])
        for key in ("step", "eval"):
            model: Model = getattr(graphs, key)
            _share_frozen(model, written)
            save(model, scratch / files[key], location=f"{files[key]}.data")
        _save_arrays({name: tensor.numpy() for name, tensor in graphs.weights.items()},
                     scratch / files["weights"])
        _save_arrays({name: tensor.numpy() for name, tensor in graphs.buffers.items()},
                     scratch / files["buffers"])
        if graphs.torch_extra:
            _save_arrays(graphs.torch_extra, scratch / files["torch_extra"])
        if graphs.forward is not None:
            _write_forward(graphs.forward, written, scratch, files)
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n",
                                        encoding="utf-8")
    except OSError as error:
        raise ModelSaveError(f"cannot write ({error.strerror or error})",
                             where=str(scratch)) from None
    for key in ("gradient", "step", "eval", "model"):
        if (scratch / files[key]).exists():
            _checked(scratch / files[key], allowed)
    return sorted(path.name for path in scratch.iterdir())
