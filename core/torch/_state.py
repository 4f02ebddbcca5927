"""The full state of a PyTorch model, under the names its ONNX export uses.

``state_dict()`` leaves out non-persistent buffers (``register_buffer(...,
persistent=False)``: rotary ``inv_freq``, position ids, causal masks) and plain
tensor attributes, yet an exported graph needs them. :func:`capture_state` returns
everything, and :func:`save_state` writes it as a safetensors checkpoint that
``graphpass run --checkpoint`` (``reconcile-initializers``) can fill a model from::

    import graphpass.torch

    graphpass.torch.save_state(model, "state.safetensors")
    # graphpass run model.onnx -o filled.onnx --checkpoint state.safetensors

It also records which parameters torch does not train (``requires_grad=False``: a
frozen embedding, a sinusoidal position table), in the file's metadata under
:data:`FROZEN_METADATA` (a JSON list of names). Neither the ONNX file (torch's export
records them as parameters) nor a plain ``state_dict()`` says so; with this record,
``reconcile-initializers`` hands them on and the trainable selection of
``lint-gradients`` and ``build-training-graph`` keeps them fixed
(:func:`recorded_frozen` reads it).

The names are the ones both exporters give initializers: ``torch.onnx.export(...,
dynamo=True)`` names them by fully qualified name (``block.linear.weight``, tied
weights under one of their names, tensor attributes as ``block.offset``); the
legacy exporter (``dynamo=False``) by ``state_dict()`` key. Every alias of a shared
tensor is included, so whichever name an exporter picked is there.

PyTorch is imported only when these functions are called.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphpass.errors import CheckpointError, GraphpassError
from graphpass.files import replace_file

if TYPE_CHECKING:
    import torch

__all__ = ["FROZEN_METADATA", "capture_state", "recorded_frozen", "save_state"]

_SHOWN: int = 5

FROZEN_METADATA: str = "graphpass.frozen"
"""The safetensors metadata key of :func:`save_state`'s record of the parameters torch
does not train (``requires_grad=False``): a JSON list of their names (the checkpoint's
keys). Absent when the source did not say (a mapping of tensors, an ONNX program
without its exported program)."""


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise GraphpassError(
            "graphpass.torch needs PyTorch, which is not installed",
            hint="install it (pip install 'graphpass[torch]'), or save the state in the "
                 "environment where the model lives",
        ) from None
    return torch


def capture_state(source: Any, *, skip_unmaterialized: bool = False) -> dict[str, torch.Tensor]:
    """Return a model's full state: parameters, buffers (persistent or not), tensor constants.

    Args:
        source: A ``torch.nn.Module``; a ``torch.export.ExportedProgram`` (its
            ``state_dict`` and ``constants``, which include the tensors created inside
            ``forward`` that torch.export lifts as ``lifted_tensor_0`` ...); or the
            ``torch.onnx.ONNXProgram`` that ``torch.onnx.export(..., dynamo=True)``
            returns (every initializer of its ONNX graph, under its ONNX name, folded
            constants included).
        skip_unmaterialized: Leave out tensors without values (on the ``meta`` device,
            or fake tensors from ``FakeTensorMode``) instead of refusing them.

    Returns:
        The tensors by name (detached, not copied). Shared tensors appear under each
        of their names.

    Raises:
        GraphpassError: PyTorch is not installed, ``source`` is none of the above, or
            some tensors have no values (and ``skip_unmaterialized`` is false).
    """
    torch = _import_torch()
    if isinstance(source, torch.nn.Module):
        entries = _module_state(torch, source)
    elif isinstance(source, torch.export.ExportedProgram):
        entries = _exported_state(torch, source)
    elif isinstance(source, torch.onnx.ONNXProgram):
        entries = _onnx_program_state(torch, source)
    else:
        raise GraphpassError(
            f"cannot capture the state of a {type(source).__name__}",
            hint="pass a torch.nn.Module, a torch.export.ExportedProgram, or the ONNXProgram "
                 "that torch.onnx.export(..., dynamo=True) returns",
        )
    return _with_values(
        entries, skip_unmaterialized, where=type(source).__name__,
        hint="capture the state of a module that holds real values (built normally or "
             "loaded with its weights): non-persistent buffers are computed in __init__, "
             "so a module built under FakeTensorMode or on the meta device lacks them; or "
             "pass skip_unmaterialized=True to leave them out")


def save_state(source: Any, path: str | os.PathLike[str], *,
               skip_unmaterialized: bool = False) -> Path:
    """Write a model's full state as a safetensors checkpoint (atomically).

    Tensors that share memory (tied weights) are each written whole, under every
    name; non-contiguous tensors are made contiguous; tensors on other devices are
    copied to the CPU.

    Args:
        source: A module, an exported program or an ONNX program (see
            :func:`capture_state`), or a mapping of names to tensors.
        path: The ``.safetensors`` file to write.
        skip_unmaterialized: See :func:`capture_state`.

    Returns:
        The path written.

    Raises:
        GraphpassError: PyTorch or safetensors is missing, or the state cannot be captured.
        CheckpointError: The file cannot be written; nothing was changed on disk.
    """
    torch = _import_torch()
    if isinstance(source, Mapping):
        state = {str(name): tensor for name, tensor in source.items()}
        bad = [name for name, tensor in state.items() if not isinstance(tensor, torch.Tensor)]
        if bad:
            raise GraphpassError(f"these entries are not tensors: {_some(bad)}",
                                 hint="pass a mapping of names to torch tensors")
        state = _with_values(
            state.items(), skip_unmaterialized, where=None,
            hint="pass real tensors, or skip_unmaterialized=True to leave them out")
    else:
        state = capture_state(source, skip_unmaterialized=skip_unmaterialized)
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise GraphpassError("saving a state needs safetensors, which is not installed",
                             hint="pip install safetensors") from None
    tensors = _writable(torch, state)
    metadata = {"format": "pt", "producer": "graphpass.torch.save_state"}
    frozen = _frozen_parameters(torch, source)
    if frozen is not None:
        metadata[FROZEN_METADATA] = json.dumps([name for name in frozen if name in tensors])
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(target, lambda tmp: save_file(tensors, str(tmp), metadata=metadata),
                     step="state")
    except OSError as error:
        raise CheckpointError(f"cannot write the state ({error.strerror or error})",
                              where=str(target)) from None
    return target


def recorded_frozen(metadata: Mapping[str, str], *, where: str | None = None
                    ) -> frozenset[str] | None:
    """The names :func:`save_state` recorded as not trained by torch, from a file's metadata.

    Args:
        metadata: The checkpoint's string metadata (``Checkpoint.metadata``).
        where: The checkpoint, for error messages.

    Returns:
        The names (checkpoint keys), or ``None`` when the checkpoint has no record.

    Raises:
        CheckpointError: The record is not a JSON list of names.
    """
    text = metadata.get(FROZEN_METADATA)
    if text is None:
        return None
    try:
        names = json.loads(text)
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise CheckpointError(
            f"the metadata {FROZEN_METADATA!r} is not a JSON list of names: {text[:80]!r}",
            where=where, hint="write the checkpoint again with graphpass.torch.save_state, "
                              "or remove that metadata entry")
    return frozenset(names)


# ===================================================================== sources
def _frozen_parameters(torch: Any, source: Any) -> list[str] | None:
    """The parameters of ``source`` that do not require grad; ``None`` if it cannot say."""
    if isinstance(source, torch.nn.Module):
        named: Iterable[tuple[str, Any]] = source.named_parameters(remove_duplicate=False)
    elif isinstance(source, torch.export.ExportedProgram):
        named = source.named_parameters()
    elif isinstance(source, torch.onnx.ONNXProgram) and \
            getattr(source, "exported_program", None) is not None:
        named = source.exported_program.named_parameters()
    else:
        return None
    return [name for name, parameter in named if not parameter.requires_grad]


def _module_state(torch: Any, module: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)
    for prefix, submodule in module.named_modules(remove_duplicate=False):
        for attribute, value in vars(submodule).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                yield (f"{prefix}.{attribute}" if prefix else attribute), value
    # Modules that rename their entries in state_dict() (hooks) are filled by those names.
    for key, value in module.state_dict(keep_vars=True).items():
        if isinstance(value, torch.Tensor):
            yield key, value


def _exported_state(torch: Any, program: Any) -> Iterator[tuple[str, Any]]:
    yield from program.state_dict.items()
    for name, value in program.constants.items():
        if isinstance(value, torch.Tensor):
            yield name, value


def _onnx_program_state(torch: Any, program: Any) -> Iterator[tuple[str, Any]]:
    for name, value in program.model.graph.initializers.items():
        data = value.const_value
        if data is None:
            continue
        raw = getattr(data, "raw", None)
        if isinstance(raw, torch.Tensor):
            yield name, raw
        else:
            yield name, torch.from_numpy(data.numpy().copy())


def _with_values(entries: Iterable[tuple[str, Any]], skip_unmaterialized: bool,
                 *, where: str | None, hint: str) -> dict[str, Any]:
    """The first tensor of each name, detached; tensors without values refused or left out."""
    state: dict[str, Any] = {}
    empty: list[str] = []
    for name, tensor in entries:
        if name in state:
            continue
        if _has_no_values(tensor):
            empty.append(name)
            continue
        state[name] = tensor.detach()
    if empty and not skip_unmaterialized:
        raise GraphpassError(
            f"{len(empty)} tensor(s) have no values (meta device or fake tensors): "
            f"{_some(empty)}", where=where, hint=hint)
    return state


def _has_no_values(tensor: Any) -> bool:
    if tensor.device.type == "meta":
        return True
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


# ====================================================================== saving
def _writable(torch: Any, state: Mapping[str, Any]) -> dict[str, Any]:
    """Contiguous CPU tensors, no two sharing memory (safetensors refuses shared storage)."""
    tensors: dict[str, Any] = {}
    seen_storage: set[tuple[str, int]] = set()
    for name, tensor in state.items():
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        storage = (data.device.type, data.untyped_storage().data_ptr())
        shared = storage in seen_storage and data.numel() > 0
        seen_storage.add(storage)
        if shared:
            data = data.clone(memory_format=torch.contiguous_format)
        elif not data.is_contiguous():
            data = data.contiguous()
        tensors[name] = data
    return tensors


def _some(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
