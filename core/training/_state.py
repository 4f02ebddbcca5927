"""The trainer's whole state in a folder: saved atomically, loaded exactly.

:meth:`Trainer.save_state(dir) <graphpass.training.Trainer.save_state>` writes every
value a step carries (trainable weights, optimizer state, running statistics, the
step count: :meth:`~graphpass.training.Trainer.carried_arrays`), the learning rate,
and what the caller adds (:meth:`~graphpass.training.Trainer.fit` adds the run's
settings and its position in the data) into a snapshot of ``dir``
(:mod:`graphpass.files._snapshots`: a kill at any moment leaves the previous state
whole)::

    dir/pointer.json                {"format": "graphpass-trainer-state", "snapshot": "step-40"}
    dir/step-40/arrays.safetensors  the carried values, by their names in step.onnx
    dir/step-40/trainer.json        steps, lr, the arrays' types and shapes, the run

:meth:`~graphpass.training.Trainer.load_state` writes the saved values into the
trainer's own arrays, so the next step is the step the saved run would have taken.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from graphpass.errors import ModelSaveError, first_line
from graphpass.files import read_snapshot, write_snapshot
from graphpass.training._errors import TrainingError

if TYPE_CHECKING:
    from graphpass.training._trainer import Trainer

__all__ = ["STATE_FORMAT", "STATE_VERSION", "SavedState", "load_state", "save_state"]

STATE_FORMAT: Final = "graphpass-trainer-state"
"""The ``format`` of a state's ``pointer.json`` and ``trainer.json``."""
STATE_VERSION: Final = 1
"""Their ``version``."""
ARRAYS: Final = "arrays.safetensors"
RECORD: Final = "trainer.json"

_DTYPES: Final = {"float32": "F32", "float16": "F16", "float64": "F64", "bfloat16": "BF16",
                  "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
                  "uint8": "U8", "bool": "BOOL"}


@dataclass(frozen=True)
class SavedState:
    """What :meth:`~graphpass.training.Trainer.load_state` restored.

    Attributes:
        steps: The optimizer steps the saved weights had taken.
        lr: The learning rate at the save.
        run: What the saver added (``fit``: the run's settings and data position).
        snapshot: The snapshot folder read.
    """

    steps: int
    lr: float
    run: dict[str, Any] = field(default_factory=dict)
    snapshot: Path | None = None


def save_state(trainer: Trainer, directory: str | os.PathLike[str], *,
               run: Mapping[str, Any] | None = None) -> Path:
    """Write the trainer's state into ``directory`` (see the module docstring).

    Returns:
        The snapshot folder written.

    Raises:
        ModelSaveError: The folder cannot be written, or holds other files; the
            previous state is then still the current one.
    """
    arrays = trainer.carried_arrays()
    steps, lr = trainer.steps, trainer.lr
    record = {
        "format": STATE_FORMAT, "version": STATE_VERSION, "steps": steps, "lr": lr,
        "optimizer": trainer.manifest["optimizer"],
        "arrays": {name: {"dtype": str(a.dtype), "shape": list(a.shape)}
                   for name, a in arrays.items()},
        "run": dict(run or {}),
    }

    def write(folder: Path) -> None:
        _write_safetensors(arrays, folder / ARRAYS)
        (folder / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    return write_snapshot(directory, f"step-{steps}", write,
                          {"format": STATE_FORMAT, "version": STATE_VERSION, "steps": steps})


def load_state(trainer: Trainer, directory: str | os.PathLike[str], *,
               missing_ok: bool = False) -> SavedState | None:
    """Restore the state saved in ``directory`` into ``trainer``.

    Args:
        trainer: The trainer (of the training-graph directory the state was saved from).
        directory: The state folder.
        missing_ok: Return ``None`` when no state was saved there (else an error).

    Raises:
        TrainingError: No state there, a state of another format, or one whose values
            do not fit the trainer (another model, optimizer or trainable set); the
            trainer is unchanged then.
    """
    folder = Path(directory)
    try:
        found = read_snapshot(folder)
    except ModelSaveError as error:
        raise TrainingError(f"cannot read the saved state: {error.message}",
                            where=str(folder), hint=error.hint) from None
    if found is None:
        if missing_ok:
            return None
        raise TrainingError("no trainer state was saved here", where=str(folder),
                            hint="give the --state-dir folder of an earlier run "
                                 "(Trainer.save_state)")
    snapshot, _ = found
    try:
        record = json.loads((snapshot / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TrainingError(f"cannot read {RECORD}: {first_line(error)}",
                            where=str(snapshot)) from None
    if record.get("format") != STATE_FORMAT or record.get("version") != STATE_VERSION:
        raise TrainingError(f"not a graphpass trainer state of version {STATE_VERSION}",
                            where=str(snapshot))
    arrays = trainer.carried_arrays()
    _check_fits(record, arrays, trainer, snapshot)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(snapshot / ARRAYS), "numpy") as saved:
            keys = set(saved.keys())
            if keys != set(arrays):
                raise TrainingError(f"{ARRAYS} does not hold the values {RECORD} lists",
                                    where=str(snapshot))
            values = {name: saved.get_tensor(name) for name in arrays}
    except (OSError, SafetensorError) as error:
        raise TrainingError(f"cannot read {ARRAYS}: {first_line(error)}",
                            where=str(snapshot)) from None
    for name, value in values.items():
        arrays[name][...] = value
    trainer.lr = float(record["lr"])
    return SavedState(int(record["steps"]), float(record["lr"]), dict(record.get("run", {})),
                      snapshot)


def _check_fits(record: Mapping[str, Any], arrays: Mapping[str, np.ndarray], trainer: Trainer,
                snapshot: Path) -> None:
    saved = record.get("arrays", {})
    missing = [n for n in arrays if n not in saved]
    unknown = [n for n in saved if n not in arrays]
    wrong = [n for n in arrays if n in saved and (
        saved[n].get("dtype") != str(arrays[n].dtype)
        or list(saved[n].get("shape", ())) != list(arrays[n].shape))]
    if record.get("optimizer", {}).get("kind") != trainer.manifest["optimizer"]["kind"]:
        raise TrainingError(f"the state was saved with the {record['optimizer'].get('kind')} "
                            f"optimizer; this trainer's is "
                            f"{trainer.manifest['optimizer']['kind']}", where=str(snapshot),
                            hint="resume with the training graphs the state was saved from")
    if missing or unknown or wrong:
        parts = []
        if missing:
            parts.append(f"has no {', '.join(map(repr, missing[:3]))}")
        if unknown:
            parts.append(f"has {', '.join(map(repr, unknown[:3]))}, which this trainer lacks")
        if wrong:
            parts.append(f"gives {', '.join(map(repr, wrong[:3]))} another shape or type")
        raise TrainingError(f"the saved state does not fit this model: it {'; it '.join(parts)}",
                            where=str(snapshot),
                            hint="resume with the training graphs the state was saved from "
                                 "(the same model, trainable weights and optimizer)")


def _write_safetensors(arrays: Mapping[str, np.ndarray], path: Path) -> None:
    """Write ``arrays`` in the safetensors format, streaming each array from its memory.

    ``safetensors.numpy.save_file`` first makes a ``bytes`` copy of every array: for a
    state as large as the weights and the optimizer's moments, that doubles the memory.
    The format is an 8-byte header length, the JSON header and the data, in order.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "np"}}
    offset = 0
    for name, array in arrays.items():
        dtype = _DTYPES.get(str(array.dtype))
        if dtype is None:
            raise ModelSaveError(f"cannot save {name!r}: element type {array.dtype}",
                                 where=str(path))
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(len(text).to_bytes(8, "little"))
        handle.write(text)
        for array in arrays.values():
            np.ascontiguousarray(array).tofile(handle)
