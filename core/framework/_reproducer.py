"""Crash reproducers: what a pass that fell over leaves for its authors.

When a pass raises an exception graphpass did not expect (a bug: anything but a
:class:`~graphpass.GraphpassError`, which is a pass refusing a model on purpose with
its own message), :class:`~graphpass.PassManager` given ``reproducer=FOLDER`` (the
command line always gives one: ``--reproducer DIR``, by default a folder under the
system's temporary folder) writes a folder into ``FOLDER``, as MLIR's pass manager
leaves one (``--mlir-pass-pipeline-crash-reproducer``)::

    graphpass-reproducer-<time>-<pass>/
        model.onnx        the model as it entered the failing pass
        pipeline.toml     the failing pass and those after it, with their options
        versions.toml     graphpass, python, onnx, onnxruntime, numpy, torch, the plugins
        error.txt         the error and its traceback
        replay.sh         the one command that replays it

``sh replay.sh`` runs ``graphpass run model.onnx -o replayed.onnx -c pipeline.toml``
(with the run's ``--checkpoint`` files) and fails as the run did, wherever the plugins
are installed. Send the folder with a bug report.

The model is not copied before every pass (that would cost every run a copy of every
node): the passes that ran before the failing one are run again, on the caller's model
(or the file the model was loaded from), which gives the model the failing pass saw.
The folder is written whole or not at all (:mod:`graphpass.files._atomic`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import platform
import re
import shlex
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from graphpass.files import new_folder, replace_file, save, temporary_folder
from graphpass.framework._option_types import toml_text
from graphpass.framework._pass_base import option_fields

if TYPE_CHECKING:
    from graphpass.framework._planning import PlannedPass
    from graphpass.framework._registry import Registry
    from graphpass.ir import Model

__all__ = ["REPLAY", "default_folder", "pipeline_toml", "write_reproducer"]

REPLAY = "replay.sh"
"""The file name of the replay script in a reproducer."""

_OWNER = "reproducer"
_PACKAGES = ("graphpass", "onnx", "onnxruntime", "onnx-ir", "numpy", "torch")


def default_folder() -> Path:
    """Where the command line puts reproducers unless ``--reproducer DIR`` says otherwise."""
    import tempfile  # (only its folder: the reproducer is written through files.atomic)
    return Path(tempfile.gettempdir()) / "graphpass-reproducers"


def write_reproducer(folder: Path, model: Model | None, failing: Sequence[PlannedPass],
                     *, checkpoints: Sequence[Path], registry: Registry,
                     error: BaseException, message: str) -> Path:
    """Write a reproducer folder into ``folder`` and return its path.

    Args:
        folder: The folder reproducers go into (created when missing).
        model: The model as it entered the failing pass (``None``: it could not be
            rebuilt; the folder then says so and has no ``model.onnx``).
        failing: The failing pass, then the passes planned after it.
        checkpoints: The run's ``--checkpoint`` files (absolute).
        registry: The run's registry (the plugins and their versions).
        error: What the pass raised.
        message: graphpass's message about it.

    Raises:
        OSError: The folder cannot be written.
    """
    folder = folder.absolute()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = folder / f"graphpass-reproducer-{stamp}-{failing[0].name}"
    taken = 1
    while name.exists():
        taken += 1
        name = folder / f"graphpass-reproducer-{stamp}-{failing[0].name}-{taken}"
    with temporary_folder(folder, _OWNER) as scratch:
        if model is not None:
            save(model, scratch / "model.onnx")
        replace_file(scratch / "pipeline.toml", pipeline_toml(failing))
        replace_file(scratch / "versions.toml", _versions(registry))
        replace_file(scratch / "error.txt", message + "\n\n"
                     + "".join(traceback.format_exception(error)))
        replace_file(scratch / REPLAY, _replay(checkpoints, has_model=model is not None))
        (scratch / REPLAY).chmod(0o755)
        return new_folder(scratch, name, step="reproducer")


def pipeline_toml(passes: Sequence[PlannedPass]) -> str:
    """``passes`` as a pipeline file: their names, then each one's options.

    Options equal to their defaults are written too (the file says what ran); values
    TOML cannot hold (``None``) are left out, which gives them their defaults.
    """
    lines = ["# The failing pass and those planned after it, with their options.",
             "[pipeline]", f"passes = {toml_text([p.name for p in passes])}", ""]
    for planned in passes:
        options = planned.instance.options
        written = [(f.name.replace("_", "-"), getattr(options, f.name))
                   for f in option_fields(type(planned.instance))]
        written = [(key, value) for key, value in written if value is not None]
        if not written:
            continue
        lines.append(f"[passes.{planned.name}]")
        lines.extend(f"{key} = {toml_text(_plain(value))}" for key, value in written)
        lines.append("")
    return "\n".join(lines)


def _plain(value: object) -> object:
    """Tuples and dataclasses as TOML writes them (arrays, tables)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name.replace("_", "-"): _plain(getattr(value, f.name))
                for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    return value


def _versions(registry: Registry) -> str:
    lines = ["# What ran: send this with the bug report.", "[versions]",
             f"python = {toml_text(platform.python_version())}",
             f"platform = {toml_text(platform.platform())}"]
    for package in _PACKAGES:
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        lines.append(f"{_key(package)} = {toml_text(version)}")
    lines += ["", "[plugins]"]
    for info in registry.plugins:
        lines.append(f"{_key(info.name)} = {{ version = {toml_text(info.version)}, "
                     f"distribution = {toml_text(info.distribution)}, "
                     f"status = {toml_text(info.status)} }}")
    return "\n".join(lines) + "\n"


def _key(name: str) -> str:
    """``name`` as a TOML key: bare when TOML allows, else quoted."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else toml_text(name)


def _replay(checkpoints: Sequence[Path], *, has_model: bool) -> str:
    checkpoint_args = "".join(f" --checkpoint {shlex.quote(str(c))}" for c in checkpoints)
    lines = ["#!/bin/sh",
             "# Replays the failing run: sh replay.sh [OUT.onnx]",
             "# (graphpass and the plugins in versions.toml installed; GRAPHPASS names",
             "# another command, such as \"python -m graphpass\").",
             'here=$(cd "$(dirname "$0")" && pwd)']
    if not has_model:
        lines.append('echo "the model as it entered the failing pass could not be rebuilt; '
                     'see error.txt" >&2')
    lines.append('exec ${GRAPHPASS:-graphpass} run "$here/model.onnx" '
                 '-o "${1:-$here/replayed.onnx}" -c "$here/pipeline.toml"'
                 f"{checkpoint_args} --traceback")
    return "\n".join(lines) + "\n"

