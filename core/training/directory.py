"""Writing and reading the training-graph directory, atomically.

The directory holds ``gradient.onnx``, ``step.onnx``, ``eval.onnx`` (frozen weights
inside, or in one shared ``frozen.data`` file when they are large), the initial
trainable weights ``weights.safetensors``, the initial optimizer state
``optimizer_state.safetensors`` (zeros, and ``step`` = 0) and ``manifest.json``.

Everything is written into a temporary folder next to the destination, checked
(``onnx.checker.check_model(full_check=True)`` on every model, no node outside the
default ONNX domain unless the model had one), and renamed into place. A failed
write leaves no folder behind; a directory from an earlier run is replaced only once
the new one is complete. A destination that exists and is not a training-graph
directory is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphpass.errors import ModelSaveError, first_line
from graphpass.files import load, save
from graphpass.ir import Model
from graphpass.training.graphs import FORMAT, TrainingGraphs

__all__ = ["MANIFEST", "read_manifest", "write_training_directory"]

MANIFEST = "manifest.json"
"""The manifest's file name."""

FROZEN_DATA = "frozen.data"
"""The external data file the three models share for large frozen weights."""


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of a training-graph directory, or ``None`` if it is not one."""
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


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


def write_training_directory(graphs: TrainingGraphs, directory: str | os.PathLike[str]
                             ) -> list[str]:
    """Write ``graphs`` into ``directory`` atomically; return the files written.

    Raises:
        ModelSaveError: The destination is not a training-graph directory, a file
            cannot be written, or a model fails the ONNX checker; nothing is changed
            on disk then.
    """
    target = Path(directory)
    _check_destination(target)
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.graphpass-", dir=parent))
    except OSError as error:
        raise ModelSaveError(f"cannot create the folder ({error.strerror})",
                             where=str(target)) from None
    try:
        allowed = {node.domain for node in graphs.gradient.graph if node.domain}
        files = _write_all(graphs, scratch, allowed)
        _replace(scratch, target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
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
        _save_arrays(graphs.state, scratch / files["optimizer_state"])
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n",
                                        encoding="utf-8")
    except OSError as error:
        raise ModelSaveError(f"cannot write ({error.strerror or error})",
                             where=str(scratch)) from None
    for key in ("gradient", "step", "eval"):
        _checked(scratch / files[key], allowed)
    for path in scratch.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    return sorted(path.name for path in scratch.iterdir())


def _replace(scratch: Path, target: Path) -> None:
    """Rename ``scratch`` to ``target``, replacing an earlier training-graph directory."""
    old: Path | None = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.graphpass-old-", dir=target.parent))
        old.rmdir()
        target.rename(old)
    try:
        scratch.rename(target)
    except OSError as error:
        if old is not None:
            old.rename(target)  # put the earlier directory back
        raise ModelSaveError(f"cannot move the new directory into place ({error.strerror})",
                             where=str(target)) from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
