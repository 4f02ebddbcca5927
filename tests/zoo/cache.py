"""The zoo's cache of exports and torch references: atomic entries, one writer at a time.

An entry is a folder ``$GRAPHPASS_ZOO_CACHE/<case>/<kind>-<key>/`` (default cache:
``tests/.cache/zoo``), where ``key`` hashes what the entry depends on: the case, the
kind (an export mode, or ``reference``), the versions of torch, transformers, onnx,
onnxscript and onnxruntime, the zoo's own source that builds the entry (the case
definitions, and the exporting or the reference module) and what else the entry says it
depends on (``extra``: the Optimum venv's versions, for the entries built there). Change
any of them and the entry is rebuilt under a new key; stale entries are left for
``rm -rf`` to take.

An entry is built in a scratch folder next to it and renamed into place when complete,
so a killed build never leaves a half entry; a file lock per entry makes two processes
(pytest-xdist workers, the benchmark) wait for each other instead of building it twice.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

from filelock import FileLock

__all__ = ["cache_root", "cached_entry", "entry_key", "versions"]

_HERE = Path(__file__).resolve().parent
_DEFAULT = _HERE.parent / ".cache" / "zoo"
_PACKAGES = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime")


def cache_root() -> Path:
    """``$GRAPHPASS_ZOO_CACHE``, or ``tests/.cache/zoo``."""
    return Path(os.environ.get("GRAPHPASS_ZOO_CACHE") or _DEFAULT)


@cache
def versions() -> dict[str, str]:
    """The versions of the packages the exports and references depend on."""
    found = {}
    for name in _PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


@cache
def _source_hash(sources: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in sorted({*sources, "cache.py", "cases.py"}):
        digest.update(name.encode())
        digest.update((_HERE / name).read_bytes())
    return digest.hexdigest()


@cache
def _sweep_names() -> frozenset[str]:
    from zoo.sweep_cases import SWEEP_CASES

    return frozenset(c.name for c in SWEEP_CASES)


def entry_key(case: str, kind: str, sources: tuple[str, ...],
              extra: Mapping[str, str] | None = None) -> str:
    """The key of an entry: a hash of the case, kind, package versions and zoo source.

    ``sources`` are the zoo modules (file names) that build the entry; ``cache.py`` and
    ``cases.py`` always count, and ``sweep_cases.py`` for the sweep's cases. ``extra``:
    more ``name: version`` pairs it depends on.
    """
    if case in _sweep_names():  # a sweep case is defined there, not in cases.py
        sources = (*sources, "sweep_cases.py")
    text = "\n".join([case, kind, *(f"{k}={v}" for k, v in versions().items()),
                      _source_hash(sources),
                      *(f"{k}={v}" for k, v in sorted((extra or {}).items()))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_entry(case: str, kind: str, build: Callable[[Path], None],
                 sources: tuple[str, ...], extra: Mapping[str, str] | None = None) -> Path:
    """The folder of an entry, built by ``build(scratch_folder)`` if it is not there yet.

    Args:
        case: The case name.
        kind: What the entry holds (an export mode, ``reference``).
        build: Writes the entry's files into the folder it is given (empty, on the same
            file system as the cache). If it raises, nothing is cached.
        sources: The zoo modules (file names) whose code ``build`` runs.
        extra: More ``name: version`` pairs the entry depends on (:func:`entry_key`).

    Returns:
        The entry's folder (complete).
    """
    parent = cache_root() / case
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / f"{kind}-{entry_key(case, kind, sources, extra)}"
    if final.is_dir():
        return final
    with FileLock(str(final) + ".lock"):
        if final.is_dir():  # another process built it while we waited
            return final
        scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=parent))
        try:
            build(scratch)
            os.replace(scratch, final)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch, ignore_errors=True)
    return final
