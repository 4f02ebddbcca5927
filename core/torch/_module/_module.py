"""The :class:`Module` class and the autograd function that runs its sessions."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from graphpass.errors import GraphpassError
from graphpass.torch._module._binding import bind_input, to_torch
from graphpass.torch._module._export import Exported, Signature, export, signature_of
from graphpass.torch._module._program import Program, prepare, ready_model

__all__ = ["Module"]

_PREFIX = "module."


@dataclass
class _Entry:
    """One export of the module and the programs built on it (by gradients wanted)."""

    exported: Exported
    model: Any
    programs: dict[tuple[tuple[int, ...], tuple[str, ...]], Program] = field(
        default_factory=dict)


class Module(torch.nn.Module):
    """A torch module whose forward and backward run in onnxruntime.

    Args:
        module: The module to wrap. Its parameters, buffers and ``state_dict`` keys
            stay its own.
        export: Keyword arguments for ``torch.onnx.export`` over graphpass's defaults
            (``dynamo=True, optimize=False``), e.g. ``{"dynamo": False,
            "export_modules_as_functions": {Block}}``.
        passes: More passes (names, presets or pass objects) to run after
            ``train-ready``.
        options: Pass options by pass name, as :class:`graphpass.PassManager` takes them.
        fallback: When the module cannot be exported or differentiated, run it in torch
            (with one warning) instead of raising.
        session_options: ``onnxruntime.SessionOptions`` for the sessions (default:
            the trainer's, with onnxruntime's memory arena off: see
            :func:`graphpass.torch._module._program.module_session_options`).

    Attributes:
        module: The wrapped module.
    """

    def __init__(self, module: torch.nn.Module, *, export: Mapping[str, Any] | None = None,
                 passes: Sequence[Any] = (), options: Mapping[str, Any] | None = None,
                 fallback: bool = False, session_options: Any = None):
        super().__init__()
        self.module = module
        self.training = module.training  # the wrapped module's mode, as it was given
        self._export_options = dict(export or {})
        self._passes = list(passes)
        self._options = dict(options or {})
        self._fallback = fallback
        self._fell_back: str | None = None
        self._session_options = session_options
        self._entries: dict[Signature, list[_Entry]] = {}
        self.exports = 0
        """How many times the module was exported (a new input signature exports again)."""
        self.register_state_dict_post_hook(_strip_prefix)  # type: ignore[no-untyped-call]
        self.register_load_state_dict_pre_hook(_add_prefix)  # type: ignore[no-untyped-call]

        def forward(*args: Any, **kwargs: Any) -> Any:
            return self._run(args, kwargs)

        # The wrapped forward's signature, for whoever inspects it (Hugging Face's Trainer
        # keeps the dataset columns the forward names).
        self.forward = functools.update_wrapper(forward, module.forward)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules", {})
            if "module" not in modules:
                raise
            return getattr(modules["module"], name)

    # ------------------------------------------------------------------ running
    def _run(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        if self._fell_back is not None:
            return self.module(*args, **kwargs)
        try:
            training = self.module.training  # train() and eval() on the wrapper reach it
            signature, tensors = signature_of(args, kwargs, training)
            _check_on_cpu(self.module, tensors)
            entry = self._entry(signature, tensors, args, kwargs)
            grad = torch.is_grad_enabled()
            wanted = tuple(i for i, t in enumerate(tensors)
                           if grad and t.requires_grad and t.is_floating_point())
            trainable = tuple(name for name, p in self.module.named_parameters(
                remove_duplicate=False) if grad and p.requires_grad) if grad else ()
            program = self._program(entry, wanted, trainable)
        except GraphpassError as error:
            if not self._fallback:
                raise
            self._fell_back = str(error)
            warnings.warn(f"graphpass.torch.Module runs {type(self.module).__name__} in torch "
                          f"from now on: {error}", RuntimeWarning, stacklevel=3)
            return self.module(*args, **kwargs)
        if program.backward is None:
            flat = _infer(program, tensors)
        else:
            params = [program.weights[name] for name in program.trainable]
            flat = _Function.apply(  # type: ignore[no-untyped-call]
                program, len(tensors), *tensors, *params)
        self._track_batches(program)
        return pytree.tree_unflatten(list(flat), entry.exported.out_spec)

    def _entry(self, signature: Signature, tensors: list[torch.Tensor],
               args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _Entry:
        for entry in self._entries.get(signature, []):
            if entry.exported.accepts(tensors):
                return entry
        was = self.module.training
        exported = export(self.module, args, kwargs, self._export_options)
        self.module.train(was)
        self.exports += 1
        model = ready_model(exported, self.module, passes=self._passes, options=self._options)
        exported.release()  # the proto holds a copy of every weight
        entry = _Entry(exported, model)
        self._entries.setdefault(signature, []).append(entry)
        return entry

    def _program(self, entry: _Entry, wanted: tuple[int, ...],
                 trainable: tuple[str, ...]) -> Program:
        key = (wanted, trainable)
        if key not in entry.programs:
            entry.programs[key] = prepare(entry.model, entry.exported, self.module,
                                          training=self.module.training, wanted_inputs=wanted,
                                          session_options=self._session_options)
            _return_freed_memory()
        return entry.programs[key]

    def _track_batches(self, program: Program) -> None:
        """Count the batch in ``num_batches_tracked``, as a batch norm in ``train()`` does."""
        for running in program.statistics:
            if not running.endswith("running_mean"):
                continue
            counter = program.weights.get(running[: -len("running_mean")]
                                          + "num_batches_tracked")
            if counter is None:
                counter = dict(self.module.named_buffers()).get(
                    running[: -len("running_mean")] + "num_batches_tracked")
            if counter is not None:
                counter.add_(1)


def _check_on_cpu(module: torch.nn.Module, tensors: Sequence[torch.Tensor]) -> None:
    """Refuse tensors onnxruntime's CPU provider cannot read where they are."""
    found = next((t.device for t in (*tensors, *module.parameters(), *module.buffers())
                  if t.device.type != "cpu"), None)
    if found is not None:
        raise GraphpassError(
            f"graphpass.torch.Module runs its graphs on onnxruntime's CPU provider, and a "
            f"tensor of {type(module).__name__} (or an input) is on {found}",
            hint="keep the module and its inputs on the CPU (.to('cpu')), or wrap with "
                 "fallback=True to run the module in torch")


def _return_freed_memory() -> None:
    """Hand the memory the export and the build freed back to the system (glibc keeps it).

    Exporting copies every weight a few times over; without this, the process's resident
    memory stays that much higher while training.
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _strip_prefix(module: torch.nn.Module, state: dict[str, Any], prefix: str,
                  local_metadata: Any) -> None:
    """``state_dict()`` keys are the wrapped module's own."""
    for key in [k for k in state if k.startswith(prefix + _PREFIX)]:
        state[prefix + key[len(prefix) + len(_PREFIX):]] = state.pop(key)
    metadata = getattr(state, "_metadata", None)
    if metadata is not None:
        for key in [k for k in metadata if k.startswith(prefix + "module")]:
            metadata[prefix + key[len(prefix) + len("module"):].lstrip(".")] = metadata.pop(key)


def _add_prefix(module: torch.nn.Module, state: dict[str, Any], prefix: str,
                local_metadata: Any, strict: bool, missing: list[str],
                unexpected: list[str], errors: list[str]) -> None:
    """``load_state_dict()`` takes the wrapped module's own keys."""
    for key in [k for k in state if k.startswith(prefix)
                and not k.startswith(prefix + _PREFIX)]:
        state[prefix + _PREFIX + key[len(prefix):]] = state.pop(key)


def _bind_weights(binding: Any, program: Program, names: Sequence[str]) -> list[torch.Tensor]:
    return [bind_input(binding, name, program.weights[name]) for name in names]


def _infer(program: Program, tensors: Sequence[torch.Tensor]) -> list[Any]:
    """Run the inference session: outputs only, statistics updated (no gradient)."""
    session = program.inference
    binding = session.io_binding()
    held = [bind_input(binding, name, tensor) for name, tensor in zip(program.inputs, tensors,
                                                                        strict=True)]
    names = {i.name for i in session.get_inputs()}
    held += _bind_weights(binding, program, [n for n in program.weights if n in names])
    outputs = [o.name for o in session.get_outputs()]
    for name in outputs:
        binding.bind_output(name, "cpu")
    session.run_with_iobinding(binding)
    values = dict(zip(outputs, binding.get_outputs(), strict=True))
    _update_statistics(program, values)
    return [to_torch(values[name]) for name in program.graphs.outputs]


def _update_statistics(program: Program, values: Mapping[str, Any]) -> None:
    with torch.no_grad():
        for running, new in program.statistics.items():
            program.weights[running].copy_(to_torch(values[new]))


class _Function(torch.autograd.Function):
    """The forward session, and the backward session as its gradient."""

    @staticmethod
    def forward(ctx: Any, program: Program, count: int,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        inputs = tensors[:count]
        graphs = program.graphs
        session = program.forward
        binding = session.io_binding()
        held = [bind_input(binding, name, tensor)
                for name, tensor in zip(program.inputs, inputs, strict=True)]
        names = {i.name for i in session.get_inputs()}
        held += _bind_weights(binding, program, [n for n in program.weights if n in names])
        outputs = graphs.forward_outputs
        for name in outputs:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding)
        values = dict(zip(outputs, binding.get_outputs(), strict=True))
        _update_statistics(program, values)
        ctx.program = program
        ctx.saved = [values[name] for name in graphs.saved]
        ctx.count = count
        ctx.save_for_backward(*inputs)
        results = tuple(to_torch(values[name]) for name in graphs.outputs)
        ctx.shapes = [tuple(r.shape) for r in results]
        ctx.dtypes = [r.dtype for r in results]
        ctx.mark_non_differentiable(*(r for name, r in zip(graphs.outputs, results, strict=True)
                                      if name not in graphs.seeded))
        return results

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        program: Program = ctx.program
        graphs = program.graphs
        inputs = ctx.saved_tensors
        session = program.backward
        binding = session.io_binding()
        for name, value in zip(graphs.saved, ctx.saved, strict=True):
            binding.bind_ortvalue_input(name, value)
        by_name = dict(zip(program.inputs, inputs, strict=True))
        held = []
        for name in graphs.backward_inputs:
            tensor = by_name.get(name)
            held.append(bind_input(binding, name, tensor if tensor is not None
                                   else program.weights[name]))
        for position, name in enumerate(graphs.outputs):
            cotangent = graphs.seeded.get(name)
            if cotangent is None:
                continue
            grad = grads[position]
            if grad is None:
                grad = torch.zeros(ctx.shapes[position], dtype=ctx.dtypes[position])
            held.append(bind_input(binding, cotangent, grad))
        results: list[torch.Tensor | None] = []
        wanted = [program.inputs[i] for i in program.wanted_inputs]
        # onnxruntime allocates each gradient as the backward run reaches it (torch takes
        # the buffer by DLPack), so the gradients do not all exist from the run's start.
        outputs = list(dict.fromkeys(output for name in [*wanted, *program.trainable]
                                     if (output := graphs.gradients.get(name)) is not None))
        for output in outputs:
            binding.bind_output(output, "cpu")
        session.run_with_iobinding(binding)
        ctx.saved = []
        targets = {output: to_torch(value)
                   for output, value in zip(outputs, binding.get_outputs(), strict=True)}
        given: set[str] = set()

        def gradient(output: str | None) -> torch.Tensor | None:
            if output is None:
                return None
            tensor = targets[output]
            if output in given:  # autograd may keep a gradient as .grad: one tensor each
                return tensor.clone()
            given.add(output)
            return tensor

        for position in range(ctx.count):
            name = program.inputs[position]
            results.append(gradient(graphs.gradients.get(name)
                                    if position in program.wanted_inputs else None))
        results += [gradient(graphs.gradients.get(name)) for name in program.trainable]
        return (None, None, *results)
