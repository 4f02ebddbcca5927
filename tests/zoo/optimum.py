"""Hugging Face Optimum's exporter in the zoo: ``optimum-cli export onnx`` in its own venv.

Optimum exports the Hugging Face model itself, not the zoo's wrapper, from a folder that
``save_pretrained`` wrote. It needs ``transformers<4.58`` (the main venv has 5.x), so it
lives in ``.venv-optimum`` (``make optimum-venv``, or ``$GRAPHPASS_OPTIMUM_PYTHON``).
The zoo's flow, as a user with transformers 5 would do it:

1. :func:`pretrained`: the case's model (built in this venv, transformers 5, the same
   weights as every other mode) saved with ``save_pretrained`` (cached). transformers 5
   writes some architectures under their older key names there (ViT's
   ``vit.layers.0.attention.k_proj`` as ``vit.encoder.layer.0.attention.attention.key``,
   GPT-NeoX's ``lm_head`` as ``embed_out``), which Optimum's transformers reads.
2. :func:`build_export`: ``optimum-cli export onnx -m PRETRAINED --task TASK OUT``
   (``--no-constant-folding`` for ``optimum-unfolded``), then the inputs its graph takes
   (:func:`inputs_for`: ``input_ids``, ``attention_mask`` of ones, ``token_type_ids`` of
   zeros, ``position_ids``, ``pixel_values``) and a batch for them. Optimum runs torch's
   legacy (TorchScript) exporter with constant folding on. A case it cannot export is
   recorded as such (the manifest's ``error``), not judged.
3. The torch oracle of these modes is the model Optimum exported: the pretrained folder
   loaded by the Optimum venv's transformers, called with the same named inputs
   (:mod:`zoo.subjects`, run there by :func:`run_in_optimum_venv`), so its parameter
   names are the export's.

Optimum's weight deduplication needs ``accelerate``, which ``optimum-onnx[onnxruntime]``
does not install; the venv has none (Optimum warns and skips that step, as for a user
who installed only what it asks for).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from zoo.cache import cached_entry
from zoo.cases import Case, ZooError

__all__ = ["EXPORTS", "TASKS", "build_export", "compute_oracle", "inputs_for",
           "optimum_python",
           "optimum_versions", "pretrained", "run_in_optimum_venv"]

EXPORTS = ("optimum", "optimum-unfolded")
"""The export modes made with ``optimum-cli`` (``-unfolded``: ``--no-constant-folding``)."""
TASKS = {"encoder": "fill-mask", "decoder": "text-generation",
         "vision-transformer": "image-classification", "cnn": "image-classification"}
"""Optimum's task for each family of the zoo (the model classes its tasks load)."""
_REPO = Path(__file__).resolve().parents[2]
_TESTS = _REPO / "tests"
_PACKAGES = ("torch", "transformers", "optimum", "optimum-onnx", "onnx", "onnxruntime")


def optimum_python() -> str | None:
    """The Optimum venv's Python (``$GRAPHPASS_OPTIMUM_PYTHON`` or ``.venv-optimum``),
    or ``None`` where there is none (or it has no ``optimum-cli``)."""
    candidate = os.environ.get("GRAPHPASS_OPTIMUM_PYTHON") or str(
        _REPO / ".venv-optimum" / "bin" / "python")
    if not Path(candidate).exists() or not (Path(candidate).parent / "optimum-cli").exists():
        return None
    return candidate


def _required_python() -> str:
    python = optimum_python()
    if python is None:
        raise ZooError("no Optimum venv (make optimum-venv): the optimum modes cannot run")
    return python


@cache
def optimum_versions() -> dict[str, str]:
    """The versions of the Optimum venv's packages (part of its cache entries' keys)."""
    code = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) "
            f"for n in {list(_PACKAGES)!r}}}))")
    done = subprocess.run([_required_python(), "-c", code], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise ZooError(f"the Optimum venv does not work: {done.stderr.strip()[-500:]}")
    found: dict[str, str] = json.loads(done.stdout)
    return {f"optimum-venv:{name}": version for name, version in found.items()}


def run_in_optimum_venv(function: str, *arguments: str, timeout: float = 900) -> str:
    """Call ``module:function(*arguments)`` in the Optimum venv (``tests`` on its path).

    Returns:
        What it printed.

    Raises:
        ZooError: it failed (the end of its error output is in the message).
    """
    module, _, name = function.partition(":")
    code = f"import sys; from {module} import {name}; {name}(*sys.argv[1:])"
    done = subprocess.run([_required_python(), "-c", code, *arguments], env=_environment(),
                          capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise ZooError(f"{function} failed in the Optimum venv (exit {done.returncode}):\n"
                       f"{tail}")
    return done.stdout


def compute_oracle(case: Case, function: str, folder: Path) -> None:
    """``function(case name, pretrained folder, the export's inputs.npz, folder)`` in the
    Optimum venv: how :mod:`zoo.reference` and :mod:`zoo.adamw_reference` compute the
    ``optimum`` oracle (the model the ``optimum`` export was made from)."""
    from zoo.exporting import export

    exported = export(case, "optimum")
    run_in_optimum_venv(function, case.name, str(pretrained(case)), str(exported.inputs),
                        str(folder))


def _environment() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
            "PYTHONPATH": os.pathsep.join([str(_TESTS),
                                           *filter(None, [os.environ.get("PYTHONPATH")])])}


# ================================================================ the saved model
def pretrained(case: Case) -> Path:
    """The folder ``save_pretrained`` wrote for the case's model (cached):
    ``config.json`` and ``model.safetensors``."""
    return cached_entry(case.name, "pretrained", lambda scratch: _save_pretrained(case, scratch),
                        sources=("optimum.py",))


def _save_pretrained(case: Case, folder: Path) -> None:
    code = ("import sys; from pathlib import Path; from zoo.cases import case; "
            "case(sys.argv[1]).build().save_pretrained(Path(sys.argv[2]))")
    done = subprocess.run([sys.executable, "-c", code, case.name, str(folder)],
                          env=_environment(), capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (folder / "model.safetensors").exists():
        raise ZooError(f"{case.name}: save_pretrained failed: {done.stderr.strip()[-1000:]}")


# ================================================================== the export
def build_export(case: Case, mode: str, folder: Path) -> None:
    """Export the case with ``optimum-cli`` into ``folder`` (the zoo's export files).

    Writes ``model.onnx``, ``inputs.npz``, ``batch.npz`` and ``export.json``; a failed
    export writes only ``export.json``, with the exporter's error.
    """
    if mode not in EXPORTS:
        raise ZooError(f"not an Optimum mode: {mode!r}")
    source = pretrained(case)
    task = TASKS[case.family]
    command = ["optimum-cli", "export", "onnx", "-m", str(source), "--task", task]
    if mode == "optimum-unfolded":
        command.append("--no-constant-folding")
    out = folder / "optimum-out"
    manifest: dict[str, Any] = {
        "case": case.name, "mode": mode, "versions": optimum_versions(),
        "exporter": {"tool": "optimum-cli export onnx", "task": task,
                     "constant_folding": mode == "optimum", "command": [*command, "OUT"]},
        "pretrained": str(source), "output": "logits", "error": None, "notes": []}
    started = time.perf_counter()
    cli = str(Path(_required_python()).parent / "optimum-cli")
    done = subprocess.run([cli, *command[1:], str(out)], env=_environment(),
                          capture_output=True, text=True, check=False, timeout=900)
    manifest["seconds"] = round(time.perf_counter() - started, 3)
    manifest["notes"] = _exporter_notes(done.stdout + "\n" + done.stderr)
    if done.returncode != 0 or not (out / "model.onnx").exists():
        manifest["error"] = _exporter_error(done.stderr or done.stdout, done.returncode)
        manifest["log"] = (done.stdout + done.stderr)[-6000:]
    else:
        for file in out.iterdir():
            if file.name.startswith("model.onnx"):  # the model, and external data if any
                shutil.move(str(file), folder / file.name)
        _inputs_and_batch(case, folder, manifest)
    shutil.rmtree(out, ignore_errors=True)
    (folder / "export.json").write_text(json.dumps(manifest, indent=1) + "\n")


def _inputs_and_batch(case: Case, folder: Path, manifest: dict[str, Any]) -> None:
    """The inputs the exported graph takes, their outputs' shape, and the batch."""
    import onnx
    import onnxruntime

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    try:
        inputs = inputs_for(case, names)
        session = onnxruntime.InferenceSession(str(folder / "model.onnx"),
                                               providers=["CPUExecutionProvider"])
        output = session.run(["logits"], inputs)[0]
    except Exception as error:  # the runtime's own exception types
        manifest["error"] = f"the export does not run on the zoo's inputs: {error}"[:2000]
        return
    manifest["inputs"] = {name: list(value.shape) for name, value in inputs.items()}
    manifest["output_shape"] = list(output.shape)
    manifest["difference_from_the_zoo_model"] = _difference_from_the_zoo_model(case, inputs,
                                                                                output)
    np.savez(folder / "inputs.npz", **inputs)
    np.savez(folder / "batch.npz", **inputs, target=case.target(tuple(output.shape)))


def _difference_from_the_zoo_model(case: Case, inputs: dict[str, np.ndarray],
                                   output: np.ndarray) -> float:
    """How far the export's output is from the zoo's own model (this venv's transformers)
    on the same inputs: near 0 where both transformers versions build the same model
    from the saved folder (the export's oracle is Optimum's model either way)."""
    import torch

    model = case.build()
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in inputs.items()},
                         return_dict=False)[0].numpy()
    if expected.shape != output.shape:
        return float("inf")
    return float(np.abs(expected - output).max(initial=0.0))


def inputs_for(case: Case, names: list[str]) -> dict[str, np.ndarray]:
    """The case's inputs under the names Optimum's graph takes, in the graph's order.

    ``input_ids`` and ``pixel_values`` are the case's own; ``attention_mask`` is ones,
    ``token_type_ids`` zeros and ``position_ids`` ``0..T-1`` (what the Hugging Face
    model uses when they are not given).

    Raises:
        ZooError: the graph takes an input the zoo cannot make.
    """
    own = case.inputs()
    shape = own[case.input_name].shape
    made = {
        "attention_mask": lambda: np.ones(shape, dtype=np.int64),
        "token_type_ids": lambda: np.zeros(shape, dtype=np.int64),
        "position_ids": lambda: np.broadcast_to(np.arange(shape[-1], dtype=np.int64),
                                                shape).copy(),
    }
    found: dict[str, np.ndarray] = {}
    for name in names:
        if name in own:
            found[name] = own[name]
        elif name in made and case.input_name == "input_ids":
            found[name] = made[name]()
        else:
            raise ZooError(f"{case.name}: the Optimum export takes an input {name!r} that the "
                           f"zoo cannot make")
    return found


def _exporter_notes(log: str) -> list[str]:
    """What the exporter said that a reader of the export should know (warnings)."""
    keep = ("deduplication", "max diff", "maximum absolute difference", "not close",
            "does not support", "atol")
    return sorted({line.strip()[:300] for line in log.splitlines()
                   if any(k in line.lower() for k in keep)})


def _exporter_error(log: str, code: int) -> str:
    """The exporter's error: its last line that names an exception, or its last line."""
    lines = [line.strip() for line in log.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.split(":")[0] or "Exception" in line]
    return f"optimum-cli exit {code}: {(errors or lines or ['(no output)'])[-1][:1500]}"
