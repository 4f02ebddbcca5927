"""Exporting a torch module for :class:`graphpass.torch.Module`: once per input signature.

A call's inputs are flattened with torch's pytree: tensors become the ONNX model's
inputs, in order; anything else (an ``int``, a ``bool``, a string) is part of the
signature, since the exporter bakes it into the graph. Every dimension of every tensor
is exported dynamic (``torch.export.Dim.AUTO`` with the dynamo exporter, named
``dynamic_axes`` with the legacy one), so a new batch or sequence size runs the same
graphs; a dimension the exporter fixes anyway (a size the model's code depends on) is
part of the signature, and a call with another size exports again.
"""

from __future__ import annotations

import inspect
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnx
import torch
from torch.utils import _pytree as pytree

from graphpass.errors import GraphpassError

__all__ = ["ExportError", "Exported", "Signature", "export", "signature_of"]


class ExportError(GraphpassError):
    """torch's exporter failed, or the module's inputs or outputs cannot be run as ONNX."""


@dataclass(frozen=True)
class Signature:
    """What a call looks like to the exporter: structure, dtypes, ranks and constants.

    Attributes:
        spec: The pytree structure of ``(args, kwargs)``.
        tensors: ``(dtype, rank)`` of each tensor leaf, in order.
        constants: The leaves that are not tensors (baked into the export), by position.
        training: Whether the module was in ``train()`` mode.
    """

    spec: Any
    tensors: tuple[tuple[torch.dtype, int], ...]
    constants: tuple[tuple[int, str], ...]
    training: bool


def signature_of(args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 training: bool) -> tuple[Signature, list[torch.Tensor]]:
    """The signature of a call, and its tensor leaves in order."""
    leaves, spec = pytree.tree_flatten((args, dict(kwargs)))
    tensors: list[torch.Tensor] = []
    shapes = []
    constants = []
    for position, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            tensors.append(leaf)
            shapes.append((leaf.dtype, leaf.dim()))
        else:
            constants.append((position, f"{type(leaf).__name__}:{leaf!r}"))
    return Signature(spec, tuple(shapes), tuple(constants), training), tensors


@dataclass
class Exported:
    """A module exported for one signature.

    Attributes:
        model: The ONNX model without the weights torch holds (``None`` once released).
        inputs: The ONNX input of each tensor leaf, in order.
        fixed: For each tensor leaf, the dimensions the export fixed (position, size).
        out_spec: The pytree structure of the module's output.
        weights: The initializers taken out of ``model``: torch's tensors of those
            ``state_dict`` names are their values.
    """

    model: onnx.ModelProto | None
    inputs: list[str]
    fixed: list[tuple[tuple[int, int], ...]]
    out_spec: Any
    weights: list[str]

    def release(self) -> None:
        """Let the ONNX model go once it has been read."""
        self.model = None

    def accepts(self, tensors: list[torch.Tensor]) -> bool:
        """Whether tensors of these sizes fit the fixed dimensions of the export."""
        return all(tensor.shape[axis] == size for tensor, fixed in zip(tensors, self.fixed,
                                                                        strict=True)
                   for axis, size in fixed)


def export(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
           options: Mapping[str, Any]) -> Exported:
    """Export ``module`` for a call with ``args`` and ``kwargs``.

    Args:
        module: The module (exported in the mode it is in).
        args: The positional arguments of the call.
        kwargs: The keyword arguments.
        options: Keyword arguments for ``torch.onnx.export`` (``dynamo``, ``opset_version``,
            ``export_modules_as_functions`` ...), over graphpass's defaults (the dynamo
            exporter without its optimizer, which folds parameters into constants).

    Raises:
        ExportError: torch's exporter failed, or the module returns something that is not
            a tensor.
    """
    settings: dict[str, Any] = {"dynamo": True, "optimize": False, **options}
    outputs: list[Any] = []

    def record(_module: torch.nn.Module, _args: Any, output: Any) -> None:
        outputs.append(pytree.tree_flatten(output))

    handle = module.register_forward_hook(record)
    try:
        with torch.no_grad():
            if settings.get("dynamo", True):
                proto = _dynamo(module, args, kwargs, settings)
            else:
                proto = _legacy(module, args, kwargs, settings)
    except Exception as error:
        if outputs:  # a forward that ran but returned what ONNX cannot: say that instead
            _check_tensors(module, outputs[-1][0])
        raise ExportError(
            f"torch.onnx.export failed on {type(module).__name__}: {_root_cause(error)}",
            hint="run torch.onnx.export on the module yourself to see the whole error; "
                 "pass other exporter settings with export={...} (e.g. {'dynamo': False}), "
                 "or fallback=True to run the module in torch") from error
    finally:
        handle.remove()
    if not outputs:
        raise ExportError(f"exporting {type(module).__name__} never called its forward")
    leaves, out_spec = outputs[-1]
    _check_tensors(module, leaves)
    graph = proto.graph
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = [value.name for value in graph.input if value.name not in initializers]
    if len(graph.output) != len(leaves):
        raise ExportError(
            f"the export has {len(graph.output)} outputs but {type(module).__name__}.forward "
            f"returns {len(leaves)} tensors", hint="return tensors (not None) from forward")
    fixed = [_fixed_dims(value) for value in graph.input if value.name in set(inputs)]
    small, weights = _without_weights(proto, module)
    return Exported(small, inputs, fixed, out_spec, weights)


def _without_weights(proto: onnx.ModelProto,
                     module: torch.nn.Module) -> tuple[onnx.ModelProto, list[str]]:
    """The export without the initializers that are torch's tensors, and their names.

    The exporter copies every weight into the proto; torch's own tensors are the weights
    (the caller binds them), so the copy goes at once. Only the small rest is copied.
    """
    tensors = {**dict(module.named_buffers(remove_duplicate=False)),
               **dict(module.named_parameters(remove_duplicate=False))}
    weights, kept = [], []
    for tensor in proto.graph.initializer:
        own = tensors.get(tensor.name)
        if (own is not None and own.dtype in VIEWABLE
                and tuple(own.shape) == tuple(tensor.dims)):
            weights.append(tensor.name)
        else:
            kept.append(tensor)
    small_initializers = [onnx.TensorProto() for _ in kept]
    for copy, tensor in zip(small_initializers, kept, strict=True):
        copy.CopyFrom(tensor)
    del proto.graph.initializer[:]
    small = onnx.ModelProto()
    small.CopyFrom(proto)
    small.graph.initializer.extend(small_initializers)
    return small, weights


VIEWABLE = frozenset({torch.float32, torch.float64, torch.float16, torch.int64, torch.int32,
                      torch.int8, torch.uint8, torch.bool})
"""torch dtypes numpy can view without a copy (bfloat16 cannot)."""


def _check_tensors(module: torch.nn.Module, leaves: list[Any]) -> None:
    for position, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            raise ExportError(
                f"{type(module).__name__}.forward returns a {type(leaf).__name__} "
                f"(output leaf {position}: {leaf!r}); an ONNX model returns tensors only",
                hint="return it as a tensor (torch.tensor(value)), or compute it outside the "
                     "wrapped module")


def _root_cause(error: BaseException) -> str:
    """The first line of the innermost exception's message, without terminal colours."""
    while error.__cause__ is not None:
        error = error.__cause__
    lines = [line for line in str(error).splitlines() if line.strip()]
    text = re.sub(r"\x1b\[[0-9;]*m", "", lines[0] if lines else "")
    return f"{type(error).__name__}: {text}"


def _fixed_dims(value: onnx.ValueInfoProto) -> tuple[tuple[int, int], ...]:
    dims = value.type.tensor_type.shape.dim
    return tuple((axis, dim.dim_value) for axis, dim in enumerate(dims)
                 if dim.HasField("dim_value"))


def _dynamo(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
            settings: dict[str, Any]) -> onnx.ModelProto:
    settings = dict(settings)
    settings.pop("dynamo", None)
    if "dynamic_shapes" in settings or not _fills_var_keyword(module, args, kwargs):
        settings.setdefault("dynamic_shapes", _dynamic_shapes(module, args, kwargs))
        program = torch.onnx.export(module, args, kwargs=dict(kwargs), dynamo=True,
                                    verbose=False, **settings)
        if program is None:
            raise ExportError("torch.onnx.export returned nothing")
        return program.model_proto
    # torch.export cannot take dynamic shapes for arguments a forward's **kwargs collects
    # (Hugging Face's Trainer passes num_items_in_batch so): export a module that takes
    # the call's tensors positionally, then give the weights their own names back.
    leaves, spec = pytree.tree_flatten((args, dict(kwargs)))
    positional = _Positional(module, leaves, spec)
    tensors = tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))
    settings["dynamic_shapes"] = {"tensors": tuple(
        {axis: torch.export.Dim.AUTO for axis in range(t.dim())} if t.dim() else None
        for t in tensors)}
    program = torch.onnx.export(positional, tensors, dynamo=True, verbose=False, **settings)
    if program is None:
        raise ExportError("torch.onnx.export returned nothing")
    proto: onnx.ModelProto = program.model_proto
    _strip_weight_prefix(proto, _Positional.PREFIX)
    return proto


class _Positional(torch.nn.Module):
    """``module`` called with the tensors of one call signature, positionally."""

    PREFIX = "module."

    def __init__(self, module: torch.nn.Module, leaves: list[Any], spec: Any):
        super().__init__()
        self.module = module
        self._leaves = leaves
        self._spec = spec

    def forward(self, *tensors: torch.Tensor) -> Any:
        given = iter(tensors)
        leaves = [next(given) if isinstance(leaf, torch.Tensor) else leaf
                  for leaf in self._leaves]
        args, kwargs = pytree.tree_unflatten(leaves, self._spec)
        return self.module(*args, **kwargs)


def _fills_var_keyword(module: torch.nn.Module, args: tuple[Any, ...],
                       kwargs: Mapping[str, Any]) -> bool:
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    return any(bound.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD
               and value for name, value in bound.arguments.items())


def _strip_weight_prefix(proto: onnx.ModelProto, prefix: str) -> None:
    """Rename the weights ``PREFIX + name`` to ``name`` everywhere in the main graph."""
    graph = proto.graph
    renamed = {t.name: t.name[len(prefix):] for t in graph.initializer
               if t.name.startswith(prefix)}
    for tensor in graph.initializer:
        tensor.name = renamed.get(tensor.name, tensor.name)
    for info in (*graph.input, *graph.value_info, *graph.output):
        info.name = renamed.get(info.name, info.name)
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in renamed:
                node.input[index] = renamed[name]
    # torch's export record names the weights and their placeholders (p_module_a_b for
    # parameter module.a.b) in metadata: the record must name the weights as they are now.
    placeholder = re.compile(r"\b([pbc])_" + re.escape(prefix.rstrip(".")) + "_")
    target = re.compile(r"(['\"])" + re.escape(prefix))
    holders = [graph, *graph.input, *graph.value_info, *graph.output, *graph.initializer,
               *graph.node]
    for holder in holders:
        for entry in holder.metadata_props:
            entry.value = target.sub(r"\1", placeholder.sub(r"\1_", entry.value))


def _dynamic_shapes(module: torch.nn.Module, args: tuple[Any, ...],
                    kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every dimension of every tensor dynamic, keyed by the forward's parameter names."""
    bound = inspect.signature(module.forward).bind(*args, **kwargs)

    def spec(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and leaf.dim():
            return {axis: torch.export.Dim.AUTO for axis in range(leaf.dim())}
        return None  # a scalar (nothing to make dynamic), or not a tensor

    shapes: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        shapes[name] = pytree.tree_map(spec, value)
    return shapes


def _legacy(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
            settings: dict[str, Any]) -> onnx.ModelProto:
    settings = dict(settings)
    settings.pop("dynamo", None)
    leaves = [leaf for leaf in pytree.tree_leaves((args, dict(kwargs)))
              if isinstance(leaf, torch.Tensor)]
    names = settings.pop("input_names", None) or [f"input_{i}" for i in range(len(leaves))]
    axes = settings.pop("dynamic_axes", None) or {
        name: {axis: f"{name}_dim{axis}" for axis in range(leaf.dim())}
        for name, leaf in zip(names, leaves, strict=False)}
    # Keeping initializers as inputs stops the exporter from merging parameters that hold
    # equal values (two fresh LayerNorms); without folding, no parameter becomes a constant.
    settings.setdefault("keep_initializers_as_inputs", True)
    settings.setdefault("do_constant_folding", False)
    buffer = io.BytesIO()
    torch.onnx.export(module, args, buffer,  # type: ignore[arg-type]
                      kwargs=dict(kwargs) or None, dynamo=False,
                      input_names=names, dynamic_axes=axes, **settings)
    return onnx.load_from_string(buffer.getvalue())
