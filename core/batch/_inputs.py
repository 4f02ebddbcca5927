"""Which model files a command line names, and where ``run`` writes each one.

A model argument is a file, a folder (every ``*.onnx`` below it, hidden folders
skipped), or a glob (``models/**/*.onnx``, quoted so that graphpass expands it). Each
model found keeps its path relative to the argument that found it: a folder's models
are named relative to the folder, a glob's relative to the part of the pattern before
its first wildcard, a file by its name. ``graphpass run ... -o DIR`` writes each model to
``DIR/<that relative path>``.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from graphpass.errors import GraphpassError

__all__ = ["FoundModel", "find_models", "is_many", "output_paths"]

MODEL_SUFFIX = ".onnx"


@dataclass(frozen=True)
class FoundModel:
    """A model file found on the command line.

    Attributes:
        path: The file, as it is named from the current folder (relative when the
            argument was).
        relative: Its path below the argument that found it (its name, for a file).
    """

    path: str
    relative: str


def is_many(arguments: Sequence[str]) -> bool:
    """Whether ``arguments`` ask for a batch: several, a folder, or a glob."""
    return len(arguments) != 1 or Path(arguments[0]).is_dir() or glob.has_magic(arguments[0])


def find_models(arguments: Iterable[str], *, skip: Iterable[str | Path] = ()) -> list[FoundModel]:
    """Every model file the arguments name, in order, each once.

    Args:
        arguments: Files, folders and globs.
        skip: Folders whose models are left out (``run``'s output folder).

    Raises:
        GraphpassError: An argument names no existing file or folder, or a folder or
            glob holds no model.
    """
    skipped = [Path(folder).resolve() for folder in skip]
    found: list[FoundModel] = []
    seen: set[Path] = set()
    for argument in arguments:
        if glob.has_magic(argument):
            matches = [Path(m) for m in sorted(glob.glob(argument, recursive=True))
                       if Path(m).is_file()]
            base = _glob_base(argument)
            if not matches:
                raise GraphpassError(f"{argument!r} matches no file",
                                     hint="check the pattern; quote it so that graphpass, "
                                          "not the shell, expands it")
            entries = [(m, _relative(m, base)) for m in matches]
        else:
            path = Path(argument)
            if path.is_dir():
                models = [m for m in sorted(path.rglob(f"*{MODEL_SUFFIX}"))
                          if m.is_file() and not _hidden(m.relative_to(path))]
                if not models:
                    raise GraphpassError(f"folder {argument!r} holds no {MODEL_SUFFIX} file")
                entries = [(m, m.relative_to(path).as_posix()) for m in models]
            elif path.exists():
                entries = [(path, path.name)]
            else:
                raise GraphpassError(f"{argument}: no such file or folder")
        for path, relative in entries:
            resolved = path.resolve()
            if resolved in seen or any(resolved.is_relative_to(s) for s in skipped):
                continue
            seen.add(resolved)
            found.append(FoundModel(str(path), relative))
    return found


def output_paths(models: Sequence[FoundModel], folder: str | Path) -> list[Path]:
    """Where ``run -o FOLDER`` writes each model: ``FOLDER/<relative path>``.

    Raises:
        GraphpassError: Two models would be written to the same file (two files of the
            same name given one by one, say), or an output is one of the models.
    """
    outputs = [Path(folder) / PurePosixPath(model.relative) for model in models]
    taken: dict[Path, str] = {}
    inputs = {Path(model.path).resolve() for model in models}
    for model, output in zip(models, outputs, strict=True):
        key = output.resolve()
        if key in taken:
            raise GraphpassError(
                f"{taken[key]!r} and {model.path!r} would both be written to {str(output)!r}",
                hint="give their folder instead of the files (outputs keep the paths below "
                     "it), or run them one at a time")
        if key in inputs:
            raise GraphpassError(f"the output {str(output)!r} is one of the models",
                                 hint="write to another folder, or use --in-place")
        taken[key] = model.path
    return outputs


def _glob_base(pattern: str) -> Path:
    """The part of a glob before its first wildcard: what its matches are relative to."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _relative(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.name


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)
