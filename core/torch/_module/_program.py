"""An exported module made trainable and ready to run: sessions for forward and backward.

:func:`prepare` runs the ``train-ready`` pipeline (plus the caller's passes) on an
export, then builds the forward and backward graphs
(:func:`graphpass.training._vjp.build_forward_backward`) with respect to the
parameters that require a gradient and the inputs that do. Weights and buffers stay
torch's: they are inputs of both graphs, bound by address at every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from graphpass.errors import GraphpassError
from graphpass.findings import Severity
from graphpass.framework import RunSpec
from graphpass.ir import Model, Tensor
from graphpass.ir.proto import model_to_bytes
from graphpass.torch._export_record import module_scope
from graphpass.torch._module._export import Exported
from graphpass.training import (
    ForwardBackward,
    GradientError,
    build_forward_backward,
    default_session_options,
    prune,
)

__all__ = ["PreparationError", "Program", "prepare"]


class PreparationError(GraphpassError):
    """The exported module cannot be made trainable.

    A pass found an error, or a node on a gradient path has no gradient builder.
    """


@dataclass
class Program:
    """The sessions and names for one export and one set of gradients.

    Attributes:
        graphs: The forward and backward models and their names.
        inputs: The ONNX input of each tensor leaf of the call.
        weights: The torch tensors the graphs read, by ONNX name.
        trainable: The parameters the backward graph gives gradients of, in order.
        wanted_inputs: The positions of the input leaves the backward graph gives
            gradients of.
        forward: The forward session.
        backward: The backward session (``None`` when nothing needs a gradient).
        inference: The session for calls without gradients: outputs and statistics only.
    """

    graphs: ForwardBackward
    inputs: list[str]
    weights: dict[str, torch.Tensor]
    trainable: list[str]
    wanted_inputs: list[int]
    forward: Any
    backward: Any
    inference: Any
    statistics: dict[str, str] = field(default_factory=dict)


def torch_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``module`` by its ``state_dict`` name (ties included)."""
    found: dict[str, torch.Tensor] = {}
    found.update(module.named_buffers(remove_duplicate=False))
    found.update(module.named_parameters(remove_duplicate=False))
    return found


def ready_model(exported: Exported, module: torch.nn.Module, *, passes: Sequence[Any],
                options: Mapping[str, Any]) -> Model:
    """The export after ``train-ready`` and the caller's passes.

    Raises:
        PreparationError: A pass reported an error (its message and hint are kept).
    """
    trainable = [name for name, tensor in module.named_parameters(remove_duplicate=False)
                 if tensor.requires_grad]
    merged: dict[str, Any] = {"lint-gradients": {"rules": "graphpass",
                                                 "trainable": trainable}}
    for name, value in options.items():
        merged[name] = {**merged.get(name, {}), **dict(value)}
    if exported.model is None:
        raise ValueError("the export was released")
    model = Model.from_proto(exported.model)
    tensors = torch_tensors(module)
    for name in exported.weights:  # views of torch's memory, not copies
        model.graph.set_initializer(Tensor.from_array(name, tensors[name].detach().numpy()))
    spec = RunSpec(passes=("train-ready", *passes), options=merged)
    result = spec.manager().run(model, copy=False)
    errors = [f for f in result.findings if f.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise PreparationError(
            f"{first.code} {first.message}{more}",
            where=_where(result.model, module, first.node or first.value or first.function),
            hint=_hint(first.hint))
    return result.model


def _where(model: Model, module: torch.nn.Module, node_name: str | None) -> str:
    """``Net``, or ``Net, module up (Up), node 'node_upsample'``: where a refusal points."""
    where = type(module).__name__
    if not node_name:
        return where
    node = next((n for n in model.graph if n.name == node_name), None)
    path = module_scope(node) if node is not None else None
    if path:
        try:
            kind = type(module.get_submodule(path)).__name__
        except AttributeError:
            kind = "?"
        where += f", module {path!r} ({kind})"
    return f"{where}, node {node_name!r}"


def _hint(hint: str | None) -> str:
    """A pass's hint, and what a torch module's user does instead of a pass option."""
    own = ("in torch: freeze the parameters behind it (requires_grad_(False)), or wrap with "
           "fallback=True to run the module in torch")
    return f"{hint}; {own}" if hint else own


def _check_parameters_bound(model: Model, module: torch.nn.Module,
                            bound: Sequence[str]) -> None:
    """Refuse when a parameter torch trains is a value of the graph but not a weight.

    Such a parameter was merged into another (the legacy exporter's deduplication of
    equal values) or computed by the graph: the graphs would train it as something
    else, or not at all.
    """
    values = model.graph.values
    merged = [name for name, tensor in module.named_parameters(remove_duplicate=False)
              if tensor.requires_grad and name not in bound and name in values]
    if merged:
        raise PreparationError(
            f"{len(merged)} parameter{'s' * (len(merged) != 1)} that torch trains "
            f"{'are' if len(merged) != 1 else 'is'} computed in the exported graph instead "
            f"of read from a weight: {', '.join(repr(n) for n in merged[:4])}"
            f"{' ...' if len(merged) > 4 else ''}",
            where=type(module).__name__,
            hint="the exporter merged or folded them: export with the dynamo exporter "
                 "(the default), or leave the legacy exporter's keep_initializers_as_inputs "
                 "and do_constant_folding as graphpass sets them (True, False)")


def module_session_options() -> Any:
    """The ``onnxruntime.SessionOptions`` of a :class:`~graphpass.torch.Module`'s sessions.

    The trainer's (:func:`graphpass.training.default_session_options`), with onnxruntime's
    memory arena off: the forward and the backward session would each keep an arena the
    size of its largest run, on top of torch's own allocator, which holds the gradients
    and the optimizer state; without the arenas every allocation comes from and goes back
    to the one process heap that torch uses too (BERT-base 4x64 in an AdamW loop: peak
    2,966 MB with the arenas, 2,414 without, torch eager 2,411).
    """
    options = default_session_options()
    options.enable_cpu_mem_arena = False
    return options


def prepare(model: Model, exported: Exported, module: torch.nn.Module, *, training: bool,
            wanted_inputs: Sequence[int], session_options: Any = None) -> Program:
    """Build the graphs and sessions for one export and the gradients a call needs.

    Raises:
        PreparationError: A node on a gradient path cannot be differentiated.
    """
    import onnxruntime

    tensors = torch_tensors(module)
    initializers = model.graph.initializers
    bound = [name for name in initializers if name in tensors]
    trainable = [name for name in bound if tensors[name].requires_grad
                 and isinstance(tensors[name], torch.nn.Parameter)]
    _check_parameters_bound(model, module, bound)
    wrt = [*trainable, *(exported.inputs[i] for i in wanted_inputs)]
    try:
        graphs = build_forward_backward(
            model, wrt=wrt, bound=bound,
            batch_norm="batch-statistics" if training else "running-statistics")
    except GradientError as error:
        raise PreparationError(error.message, where=_where(model, module, error.node),
                               hint=_hint(error.hint)) from error
    options = session_options if session_options is not None else module_session_options()

    def session(forward_model: Model) -> Any:
        return onnxruntime.InferenceSession(model_to_bytes(forward_model), options,
                                            providers=["CPUExecutionProvider"])

    inference_model = graphs.forward.copy()
    keep = [*graphs.outputs, *graphs.statistics.values()]
    inference_model.graph.set_outputs(
        [value for value in inference_model.graph.outputs if value.name in keep])
    prune(inference_model.graph, inference_model.graph.output_names)
    needs_backward = any(g is not None for g in graphs.gradients.values())
    return Program(
        graphs=graphs, inputs=list(exported.inputs),
        weights={name: tensors[name] for name in bound}, trainable=trainable,
        wanted_inputs=list(wanted_inputs),
        forward=session(graphs.forward) if needs_backward else None,
        backward=session(graphs.backward) if needs_backward else None,
        inference=session(inference_model), statistics=dict(graphs.statistics))
