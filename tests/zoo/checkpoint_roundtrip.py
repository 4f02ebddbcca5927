"""The last mile back to torch: a zoo case trained by ``graphpass train``, loaded strictly.

:func:`roundtrip` exports a case (``dynamo-full-state`` by default: the export
without weights, the checkpoint the Hugging Face model's full state), trains it a few
steps with ``graphpass train MODEL --checkpoint CK --checkpoint-out OUT --save
TRAINED.onnx``, then loads ``OUT`` into a fresh Hugging Face model with
``load_state_dict(strict=True)`` and compares torch's outputs (``model.eval()``) with
the trained ONNX model's on onnxruntime.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoo.cases import Case
from zoo.exporting import export

__all__ = ["MODE", "Roundtrip", "roundtrip"]

MODE = "dynamo-full-state"
"""The export mode that trains for every architecture (docs/benchmarks.md)."""
STEPS = 3


@dataclass
class Roundtrip:
    """What happened to one case.

    Attributes:
        case: The case's name.
        mode: The export mode.
        ok: Trained, loaded strictly, and torch's outputs equal the ONNX model's.
        reason: One line: why not, or what was seen.
        keys: Keys in the checkpoint written.
        aliases: Keys written for tied tensors (beyond one per tensor).
        counters: ``num_batches_tracked`` keys (and their values).
        output_error: Largest difference of torch's outputs from onnxruntime's.
        changed: Keys whose values training changed.
    """

    case: str
    mode: str
    ok: bool
    reason: str
    keys: int = 0
    aliases: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    output_error: float | None = None
    changed: int = 0


def roundtrip(case: Case, workdir: Path, mode: str = MODE) -> Roundtrip:
    """Train ``case`` and load the checkpoint back into torch (see the module docstring)."""
    import onnxruntime
    import torch
    from safetensors.torch import load_file

    exported = export(case, mode)
    workdir.mkdir(parents=True, exist_ok=True)
    out, trained = workdir / "trained.safetensors", workdir / "trained.onnx"
    command = [sys.executable, "-m", "graphpass", "train", str(exported.model),
               "--data", str(exported.batch), "--steps", str(STEPS), "--lr", "0.01",
               "--checkpoint-out", str(out), "--save", str(trained),
               "--emit-training-graph", str(workdir / "train"), "--format", "json"]
    if exported.checkpoint is not None:
        command += ["--checkpoint", str(exported.checkpoint)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        return Roundtrip(case.name, mode, False, f"graphpass train exit {done.returncode}: "
                         f"{(done.stderr or done.stdout).strip()[-300:]}")
    manifest = json.loads((workdir / "train" / "manifest.json").read_text())
    model = case.build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = load_file(str(out))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        return Roundtrip(case.name, mode, False, f"strict load failed: "
                         f"{str(error).splitlines()[0][:300]} "
                         f"{str(error).splitlines()[1:3]}", keys=len(state))
    aliases = sorted(k for keys in manifest.get("torch_aliases", {}).values() for k in keys)
    counters = {k: int(state[k]) for k in manifest["torch_state"]["counters"]}
    changed = sum(1 for k, v in model.state_dict().items() if not torch.equal(v, before[k]))
    inputs = case.inputs()
    model.eval()
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()},
                         return_dict=False)[0].numpy()
    session = onnxruntime.InferenceSession(str(trained), providers=["CPUExecutionProvider"])
    (found,) = session.run(None, inputs)
    error = float(np.abs(found - expected).max())
    ok = error < 1e-4 and changed > 0
    return Roundtrip(case.name, mode, ok,
                     f"strict load of {len(state)} keys ({changed} trained), torch's outputs "
                     f"{'equal' if ok else 'differ from'} the ONNX model's (max {error:.1e})",
                     keys=len(state), aliases=aliases, counters=counters, output_error=error,
                     changed=changed)
