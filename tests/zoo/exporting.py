"""Export a zoo case to ONNX the ways people do (cached; see :mod:`zoo.cache`).

The four modes of issue 12, and two that follow graphpass's advice:

``dynamo``
    ``torch.onnx.export(..., dynamo=True)`` with its weights and the default optimizer.
``dynamo-state-dict``
    ``dynamo=True, optimize=False``, saved with ``include_initializers=False``; the
    checkpoint is the Hugging Face model's own ``state_dict()`` as safetensors
    (``safetensors.torch.save_model``: keys without the wrapper's ``model.`` prefix, one
    name per tied tensor, non-persistent buffers absent). Not ``save_pretrained``:
    transformers 5 writes some architectures under their older key names there (ViT's
    ``layers.0.attention.k_proj`` as ``encoder.layer.0.attention.attention.key``). A
    ``state_dict()`` does not say which parameters torch freezes
    (``requires_grad=False``), so the judge names them with
    ``-O lint-gradients.frozen=[...]``, as their user would (the export's
    ``torch_frozen``; so in every mode but ``dynamo-full-state``: neither an ONNX file
    nor a ``state_dict()`` records it).
``dynamo-full-state``
    The same export; the checkpoint is ``graphpass.torch.save_state`` of the Hugging
    Face model (every parameter, buffer and tensor constant; same keys), which records
    the frozen parameters itself: the judge names nothing.
``legacy-functions``
    ``dynamo=False`` (TorchScript) with ``export_modules_as_functions`` on the model's
    layer classes, weights included, the default ``do_constant_folding=True``. torch
    2.13 fails on any Hugging Face model here (see :func:`legacy_export`); the zoo
    records that failure and exports with the workaround.
``dynamo-unoptimized`` (advice)
    ``dynamo=True, optimize=False`` with its weights.
``legacy-unfolded`` (advice)
    ``legacy-functions`` with ``do_constant_folding=False``.

Every export gets its own deep copy of the model: a failed legacy export leaves
BatchNorm statistics updated in the model it traced.

The modes of issue 22 export with weights and add a checkpoint, ``EXPORT+CHECKPOINT``
(:data:`WITH_CHECKPOINT`; the export's files are those of the mode named first, made
once):

``dynamo+state_dict``
    ``dynamo``'s file, and the Hugging Face model's ``state_dict()`` as safetensors
    (made as for ``dynamo-state-dict``: the very values inside the export).
``dynamo+finetuned``
    ``dynamo``'s file, and the ``state_dict()`` of the model fine-tuned after the export
    (:func:`zoo.finetuning.finetune`: every floating-point tensor differs). Its oracle is
    torch with the checkpoint's weights.
``legacy+state_dict``
    ``legacy-functions``' file (``do_constant_folding=True``) and the ``state_dict()``.
``optimum``, ``optimum+state_dict``, ``optimum+pretrained``
    ``optimum-cli export onnx`` of the model saved with ``save_pretrained``
    (:mod:`zoo.optimum`; the Hugging Face model itself, its own inputs and ``logits``):
    alone, with the ``state_dict()`` (transformers 5's key names), and with the
    ``model.safetensors`` that ``save_pretrained`` wrote. Their oracle is the model
    Optimum exported.

and the modes their advice leads to: ``dynamo-unoptimized+state_dict`` and
``dynamo-unoptimized+finetuned`` (``optimize=False``), ``legacy-unfolded+state_dict``
(``do_constant_folding=False``), ``optimum-unfolded`` and its ``+state_dict`` and
``+pretrained`` (``optimum-cli --no-constant-folding``), and ``optimum-fixed``,
``optimum-unfolded-fixed`` and their ``+state_dict`` and ``+pretrained``: the Optimum
export with every named input dimension fixed to the size of the case's inputs, as
``lint-gradients`` advises for a ``MaxPool`` over dynamic image sizes (``python -m
onnxruntime.tools.make_dynamic_shape_fixed``, once a dimension; :data:`FIXED_SIZES`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo import optimum
from zoo.cache import cached_entry, versions
from zoo.cases import Case, ZooError, load_class
from zoo.finetuning import finetune

__all__ = ["ADVICE_MODES", "CHECKPOINTS", "MODES", "OPTIMUM_MODES", "WITH_CHECKPOINT",
           "Export", "ExportFailed", "checkpoint", "export", "hidden_annotations",
           "legacy_export", "oracle_of"]

MODES = ("dynamo", "dynamo-state-dict", "dynamo-full-state", "legacy-functions",
         "dynamo+state_dict", "dynamo+finetuned", "legacy+state_dict",
         "optimum", "optimum+state_dict", "optimum+pretrained")
"""The export modes every case is judged in (issue 12's four, then issue 22's six)."""
ADVICE_MODES = ("dynamo-unoptimized", "legacy-unfolded",
                "dynamo-unoptimized+state_dict", "dynamo-unoptimized+finetuned",
                "legacy-unfolded+state_dict",
                "optimum-unfolded", "optimum-unfolded+state_dict", "optimum-unfolded+pretrained",
                "optimum-fixed", "optimum-fixed+state_dict", "optimum-fixed+pretrained",
                "optimum-unfolded-fixed", "optimum-unfolded-fixed+state_dict",
                "optimum-unfolded-fixed+pretrained")
"""Modes graphpass's hints lead to (re-export without the optimizer / constant folding, or
fix the sizes of the named input dimensions)."""
FIXED_SIZES = {"optimum-fixed": "optimum", "optimum-unfolded-fixed": "optimum-unfolded"}
"""Mode -> the mode whose file it takes, with its named input dimensions fixed to the sizes
of the case's inputs."""
WITH_CHECKPOINT: dict[str, tuple[str, str]] = {
    "dynamo+state_dict": ("dynamo", "state_dict"),
    "dynamo+finetuned": ("dynamo", "finetuned"),
    "legacy+state_dict": ("legacy-functions", "state_dict"),
    "optimum+state_dict": ("optimum", "state_dict"),
    "optimum+pretrained": ("optimum", "pretrained"),
    "dynamo-unoptimized+state_dict": ("dynamo-unoptimized", "state_dict"),
    "dynamo-unoptimized+finetuned": ("dynamo-unoptimized", "finetuned"),
    "legacy-unfolded+state_dict": ("legacy-unfolded", "state_dict"),
    "optimum-unfolded+state_dict": ("optimum-unfolded", "state_dict"),
    "optimum-unfolded+pretrained": ("optimum-unfolded", "pretrained"),
    "optimum-fixed+state_dict": ("optimum-fixed", "state_dict"),
    "optimum-fixed+pretrained": ("optimum-fixed", "pretrained"),
    "optimum-unfolded-fixed+state_dict": ("optimum-unfolded-fixed", "state_dict"),
    "optimum-unfolded-fixed+pretrained": ("optimum-unfolded-fixed", "pretrained"),
}
"""Mode -> (the mode whose file it uses, the checkpoint it adds: :data:`CHECKPOINTS`)."""
CHECKPOINTS = ("state_dict", "finetuned", "pretrained")
"""``state_dict``: the Hugging Face model's ``state_dict()`` (``save_model``: keys without
the wrapper's ``model.``, one name per tied tensor); ``finetuned``: the same of the model
fine-tuned after the export; ``pretrained``: the ``model.safetensors`` of
``save_pretrained`` (for the Optimum exports, which were made from it)."""
OPTIMUM_MODES = tuple(m for m in MODES + ADVICE_MODES if m.startswith("optimum"))
"""The modes that need the Optimum venv (:mod:`zoo.optimum`)."""
OUTPUT = "logits"
"""The name of the one graph output."""
LEGACY_OPSET = 17


class ExportFailed(ZooError):
    """The exporter failed on a case (recorded in the cache entry: not retried)."""


@dataclass(frozen=True)
class Export:
    """One export of one case (files in a cache folder; treat them as read-only).

    Attributes:
        case: The case's name.
        mode: The export mode.
        folder: The cache folder.
        model: ``model.onnx``.
        checkpoint: The checkpoint to fill it from (``None``: the model has its weights).
        inputs: ``inputs.npz``: the model's inputs by graph input name.
        batch: ``batch.npz``: the inputs and ``target`` (the MSE target), one training batch.
        manifest: ``export.json``: how it was made, versions, seconds, notes (for a
            mode with a checkpoint: also ``checkpoint``, the kind of it).
        oracle: The torch model it is judged against (:data:`zoo.ORACLES`).
    """

    case: str
    mode: str
    folder: Path
    model: Path
    checkpoint: Path | None
    inputs: Path
    batch: Path
    manifest: dict[str, Any]
    oracle: str = "export"


def oracle_of(mode: str) -> str:
    """The oracle a mode is judged against: ``finetuned``, ``optimum`` or ``export``."""
    base, kind = WITH_CHECKPOINT.get(mode, (mode, None))
    if kind == "finetuned":
        return "finetuned"
    base = FIXED_SIZES.get(base, base)
    return "optimum" if base in optimum.EXPORTS else "export"


def export(case: Case, mode: str) -> Export:
    """The export of ``case`` in ``mode``, from the cache or made now.

    Raises:
        ZooError: unknown mode, or the exporter failed (the message has its error), or
            an Optimum mode without the Optimum venv.
    """
    if mode not in MODES + ADVICE_MODES:
        raise ZooError(f"unknown export mode {mode!r}; known: {', '.join(MODES + ADVICE_MODES)}")
    if mode in WITH_CHECKPOINT:
        base, kind = WITH_CHECKPOINT[mode]
        exported = export(case, base)
        manifest = {**exported.manifest, "mode": mode, "file_of": base, "checkpoint": kind}
        return Export(case.name, mode, exported.folder, exported.model, checkpoint(case, kind),
                      exported.inputs, exported.batch, manifest, oracle_of(mode))
    if mode in FIXED_SIZES:
        source = export(case, FIXED_SIZES[mode])
        folder = cached_entry(case.name, mode, lambda scratch: _fix_sizes(source, mode, scratch),
                              sources=("exporting.py", "optimum.py"),
                              extra=optimum.optimum_versions())
    elif mode in optimum.EXPORTS:
        folder = cached_entry(case.name, mode,
                              lambda scratch: optimum.build_export(case, mode, scratch),
                              sources=("exporting.py", "optimum.py"),
                              extra=optimum.optimum_versions())
    else:
        folder = cached_entry(case.name, mode, lambda scratch: _build_apart(case, mode, scratch),
                              sources=("exporting.py",))
    manifest = json.loads((folder / "export.json").read_text())
    if manifest.get("error"):
        raise ExportFailed(f"{case.name}/{mode}: the export failed: {manifest['error']}")
    own = folder / "checkpoint.safetensors"
    return Export(case.name, mode, folder, folder / "model.onnx",
                  own if own.exists() else None,
                  folder / "inputs.npz", folder / "batch.npz", manifest, oracle_of(mode))


def _fix_sizes(source: Export, mode: str, folder: Path) -> None:
    """``source``'s model with each named input dimension fixed to the size the case's
    inputs have there, by ``onnxruntime.tools.make_dynamic_shape_fixed`` (stock
    onnxruntime, once a dimension, as the advice says); its inputs and batch as they are."""
    import onnx

    with np.load(source.inputs) as data:
        shapes = {name: data[name].shape for name in data.files}
    sizes: dict[str, int] = {}
    for value in onnx.load(str(source.model), load_external_data=False).graph.input:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.dim_param and value.name in shapes:
                sizes.setdefault(dim.dim_param, int(shapes[value.name][axis]))
    current = source.model
    for name, size in sizes.items():
        target = folder / "model.onnx"
        done = subprocess.run([sys.executable, "-m", "onnxruntime.tools.make_dynamic_shape_fixed",
                               "--dim_param", name, "--dim_value", str(size), str(current),
                               str(target)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ZooError(f"{source.case}: make_dynamic_shape_fixed {name}={size} failed: "
                           f"{done.stderr.strip()[-500:]}")
        current = target
    if current == source.model:
        shutil.copyfile(source.model, folder / "model.onnx")
    shutil.copyfile(source.inputs, folder / "inputs.npz")
    shutil.copyfile(source.batch, folder / "batch.npz")
    manifest = {**source.manifest, "mode": mode, "fixed_sizes": sizes,
                "file_of": source.mode}
    (folder / "export.json").write_text(json.dumps(manifest, indent=1) + "\n")


def checkpoint(case: Case, kind: str) -> Path:
    """The checkpoint file of ``kind`` (:data:`CHECKPOINTS`) for ``case`` (cached)."""
    if kind == "pretrained":
        return optimum.pretrained(case) / "model.safetensors"
    if kind not in CHECKPOINTS:
        raise ZooError(f"unknown checkpoint {kind!r}; known: {', '.join(CHECKPOINTS)}")
    folder = cached_entry(case.name, f"checkpoint-{kind}",
                          lambda scratch: _save_checkpoint(case, kind, scratch),
                          sources=("exporting.py", "finetuning.py"))
    return folder / "checkpoint.safetensors"


def _save_checkpoint(case: Case, kind: str, folder: Path) -> None:
    """The Hugging Face model's ``state_dict()`` (fine-tuned for ``finetuned``), as
    ``save_model`` writes it: one name per tied tensor, no ``model.`` prefix."""
    from safetensors.torch import save_model

    model = case.build()
    if kind == "finetuned":
        finetune(model, case.seed)
    save_model(model, str(folder / "checkpoint.safetensors"))


# ===================================================================== building
_BUILD_APART = ("import sys; from pathlib import Path; from zoo.exporting import _build; "
                "from zoo.cases import Case; import json; fields = json.loads(sys.argv[1]); "
                "_build(Case(**{**fields, 'input_shape': tuple(fields['input_shape']), "
                "'function_classes': tuple(fields['function_classes'])}), sys.argv[2], "
                "Path(sys.argv[3]))")
"""The child of :func:`_build_apart`: the case arrives whole, as JSON (a benchmark's
variant of a zoo case, another batch shape say, is not in the zoo by its name)."""


_EXPORT_TRIES = 3
"""How often an export is tried when its process dies of a signal (torch's crash)."""


def _build_apart(case: Case, mode: str, folder: Path) -> None:
    """:func:`_build` in a fresh process, given the case as JSON.

    torch's exporters run in the process that asked for the export otherwise, and the
    legacy one crashed there (a segfault in ``torch.onnx.export(dynamo=False)`` after
    other tests had run in the same pytest worker; alone it exports fine). In a process
    of its own, a crash fails this export with its message instead of the session. The
    crash does not repeat (the same export succeeds when run again): an export that dies
    of a signal is tried up to :data:`_EXPORT_TRIES` times.

    Raises:
        ZooError: the export process failed (its last lines are in the message).
    """
    here = str(Path(__file__).resolve().parent.parent)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])])}
    for _ in range(_EXPORT_TRIES):
        done = subprocess.run([sys.executable, "-c", _BUILD_APART,
                               json.dumps(dataclasses.asdict(case)), mode,
                               str(folder)], env=environment, capture_output=True, text=True,
                              check=False)
        if done.returncode >= 0:  # an error of the export's own, or done: no second try
            break
        for leftover in folder.iterdir():  # a signal: torch's exporter crashed; again
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise ZooError(f"{case.name}/{mode}: the export process ended with exit code "
                       f"{done.returncode}:\n{tail}")


def _build(case: Case, mode: str, folder: Path) -> None:
    import torch

    wrapper = case.wrapped()
    inputs = case.inputs()
    arguments = tuple(torch.from_numpy(value) for value in inputs.values())
    with torch.no_grad():
        output = wrapper(*arguments)
    manifest: dict[str, Any] = {
        "case": case.name, "mode": mode, "versions": versions(),
        "inputs": {name: list(value.shape) for name, value in inputs.items()},
        "output": OUTPUT, "output_shape": list(output.shape), "error": None, "notes": [],
        # What the user knows and no ONNX file or state_dict() says: the parameters torch
        # does not train, by name (the judge names them where a user would have to).
        "torch_frozen": [name for name, parameter in wrapper.named_parameters()
                         if not parameter.requires_grad]}
    started = time.perf_counter()
    try:
        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            _export_mode(case, mode, wrapper, arguments, folder, manifest)
    except Exception as error:  # recorded, so that a failing export is not retried
        manifest["error"] = f"{type(error).__name__}: {error}"[:2000]
        manifest["traceback"] = traceback.format_exc()[-4000:]
    manifest["seconds"] = round(time.perf_counter() - started, 3)
    np.savez(folder / "inputs.npz", **inputs)
    np.savez(folder / "batch.npz", **inputs, target=case.target(tuple(output.shape)))
    (folder / "export.json").write_text(json.dumps(manifest, indent=1) + "\n")


def _export_mode(case: Case, mode: str, wrapper: Any, arguments: tuple[Any, ...],
                 folder: Path, manifest: dict[str, Any]) -> None:
    import torch

    model_path = folder / "model.onnx"
    names = {"input_names": list(case.input_names), "output_names": [OUTPUT]}
    if mode.startswith("dynamo"):
        optimize = mode == "dynamo"
        program = torch.onnx.export(copy.deepcopy(wrapper), arguments, dynamo=True,
                                    optimize=optimize, verbose=False, **names)
        weights = mode in ("dynamo", "dynamo-unoptimized")
        program.save(str(model_path), include_initializers=weights)
        manifest["exporter"] = {"dynamo": True, "optimize": optimize,
                                "include_initializers": weights}
        if mode == "dynamo-state-dict":
            from safetensors.torch import save_model

            save_model(wrapper.model, str(folder / "checkpoint.safetensors"))
        elif mode == "dynamo-full-state":
            import graphpass.torch

            graphpass.torch.save_state(wrapper.model, folder / "checkpoint.safetensors")
        return
    folding = mode == "legacy-functions"
    classes = {load_class(path) for path in case.function_classes}
    plain_error = _legacy_without_workaround(wrapper, arguments, classes, folding, names)
    legacy_export(copy.deepcopy(wrapper), arguments, model_path, classes,
                  do_constant_folding=folding, **names)
    manifest["exporter"] = {"dynamo": False, "opset_version": LEGACY_OPSET,
                            "export_modules_as_functions": sorted(case.function_classes),
                            "do_constant_folding": folding,
                            "workaround": "hidden_annotations" if plain_error else None}
    if plain_error:
        manifest["notes"].append(f"without the workaround the legacy exporter fails: "
                                 f"{plain_error}")


# ======================================================== the legacy exporter
def legacy_export(model: Any, arguments: tuple[Any, ...], path: Path, classes: set[type], *,
                  do_constant_folding: bool = True, **names: Any) -> None:
    """``torch.onnx.export(dynamo=False, export_modules_as_functions=classes)`` that works.

    torch 2.13's legacy exporter, asked for ``export_modules_as_functions``, hooks every
    module and hands each one's *annotated* attributes (``typing.get_type_hints`` of its
    class) to ``_jit_pass_onnx_track_scope_attributes``, which takes only TorchScript
    values. Every Hugging Face ``PreTrainedModel`` annotates ``config`` (a config
    object), ``config_class`` (a type), sets, dicts and ``None``, so any model holding
    one fails: ``_jit_pass_onnx_track_scope_attributes(): incompatible function
    arguments``, whichever classes are asked for and whatever wraps the model. The
    workaround hides those annotations while exporting (:func:`hidden_annotations`);
    the layers exported as functions are plain ``nn.Module`` subclasses whose
    annotations are fine.
    """
    import torch

    with hidden_annotations(model):
        torch.onnx.export(model, arguments, str(path), dynamo=False,
                          opset_version=LEGACY_OPSET, export_modules_as_functions=classes,
                          do_constant_folding=do_constant_folding, **names)


@contextlib.contextmanager
def hidden_annotations(model: Any) -> Iterator[None]:
    """Hide the class annotations of the Hugging Face models in ``model`` for a while.

    Affects the ``PreTrainedModel`` subclasses (and their mixins) in the module tree;
    torch's own classes are left alone. Restored on exit.
    """
    from transformers import PreTrainedModel

    saved: dict[type, Any] = {}
    for module in model.modules():
        if not isinstance(module, PreTrainedModel):
            continue
        for cls in type(module).__mro__:
            if ("__annotations__" in cls.__dict__ and cls not in saved
                    and not cls.__module__.startswith("torch")):
                saved[cls] = cls.__dict__["__annotations__"]  # noqa: RUF063 (restored as is)
    try:
        for cls in saved:
            cls.__annotations__ = {}
        yield
    finally:
        for cls, annotations in saved.items():
            cls.__annotations__ = annotations


def _legacy_without_workaround(wrapper: Any, arguments: tuple[Any, ...], classes: set[type],
                               folding: bool, names: dict[str, Any]) -> str | None:
    """Try the plain legacy export (on a copy); its error, or ``None`` if it worked."""
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as scratch:
        try:
            torch.onnx.export(copy.deepcopy(wrapper), arguments, f"{scratch}/plain.onnx",
                              dynamo=False, opset_version=LEGACY_OPSET,
                              export_modules_as_functions=classes,
                              do_constant_folding=folding, **names)
        except TypeError as error:
            return str(error).splitlines()[0][:300]
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence what the exporters print, native code included (file descriptors 1 and 2)."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for handle in saved:
            os.close(handle)
