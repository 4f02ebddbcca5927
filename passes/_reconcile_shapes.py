"""Checking the shapes of weights the model never declared (reconcile-initializers).

An export saved with ``include_initializers=False`` uses its weights without
declaring their types, so the checkpoint's shapes cannot be compared with the
model's. Every other source of truth the model has is asked instead
(:func:`check_undeclared`):

1. ONNX shape inference (strict) over the filled model, with every initializer's
   type and shape but none of its data: an error at a node that reads such a weight;
2. what the consuming operators require given their other inputs' inferred shapes,
   where inference does not check it: ``LayerNormalization``'s scale and bias are
   ``X.shape[axis:]``, ``BatchNormalization``'s and ``InstanceNormalization``'s are
   ``[C]``; and torch's own record of the call (``pkg.torch.onnx.fx_node``:
   ``aten.layer_norm(x, [32], weight, bias, ...)`` names the normalised shape) when
   the input's shape is not known;
3. a run of the filled model in onnxruntime on generated inputs, where onnxruntime is
   installed and the model can run: every kernel checks its weights.

A mismatch names the weight, its checkpoint key, both shapes and the consumer. A
weight that neither (2) nor (3) confirms (an operator without a rule, and no run) is
returned as unconfirmed, with the reason the run did not happen: onnxruntime is not
installed, the filled model still uses values nothing defines (a buffer no key
filled: an error of its own elsewhere), inputs cannot be made, or onnxruntime fails
elsewhere than at a filled weight.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

import onnx

from graphpass.files import infer_shapes
from graphpass.findings import shortened_list
from graphpass.ir import Graph, Model, Node, Tensor
from graphpass.ir.proto import model_to_proto
from graphpass.torch import FX_NODE, fx_target
from graphpass.training import ModelTypes

__all__ = ["ShapeCheck", "check_undeclared", "undeclared_shape_problems"]

_PER_CHANNEL: Final = {"BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2)}
_FX_ARGS: Final = "](args = "


@dataclass
class ShapeCheck:
    """What the checks found.

    Attributes:
        problems: One line per mismatch (weight, key, both shapes, consumer).
        unconfirmed: Weights whose shape nothing could confirm.
        ran: Whether onnxruntime ran the filled model.
        not_run: Why onnxruntime did not run it (``""`` when it ran, or was not
            needed): ``"onnxruntime is not installed"`` and the like.
        undefined: When the run did not happen because the filled model still uses
            values nothing defines: those names.
    """

    problems: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    ran: bool = False
    not_run: str = ""
    undefined: list[str] = field(default_factory=list)


def _without_data(tensor: Tensor) -> onnx.TensorProto:
    return onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)


def undeclared_shape_problems(model: Model, names: Collection[str]) -> list[str]:
    """Shape-inference errors at nodes downstream of ``names`` (empty when consistent)."""
    graph = model.graph
    pending = [node for name in names for node in graph.consumers(name)]
    reached = {id(node): node for node in pending}
    while pending:
        for following in graph.nx.successors(pending.pop()):
            if id(following) not in reached:
                reached[id(following)] = following
                pending.append(following)
    readers = {node.name for node in reached.values() if node.name}
    try:
        infer_shapes(model_to_proto(model, _without_data), strict_mode=True)
    except onnx.shape_inference.InferenceError as error:
        return [line.strip() for line in str(error).splitlines()
                if any(f"node name: {reader})" in line for reader in readers)
                and "instead is null" not in line]  # untyped: unknown, not inconsistent
    except (onnx.checker.ValidationError, ValueError, RuntimeError):
        return []  # the model itself is malformed; the check pass reports that
    return []


def check_undeclared(model: Model, keys: Mapping[str, str]) -> ShapeCheck:
    """Check the shapes of the filled weights ``keys`` (name -> checkpoint key).

    Runs shape inference, the consumers' requirements, and (where installed)
    onnxruntime, in that order; the first that finds a mismatch decides.
    """
    result = ShapeCheck(problems=undeclared_shape_problems(model, keys))
    if result.problems:
        return result
    confirmed = _requirements(model, keys, result)
    if result.problems:
        return result
    problem = _runtime(model, keys, result)
    if problem:
        result.problems.append(problem)
        return result
    if not result.ran:
        result.unconfirmed = [name for name in keys if name not in confirmed]
    return result


# ============================================================== requirements
def _requirements(model: Model, keys: Mapping[str, str], result: ShapeCheck) -> set[str]:
    """Check what each consumer requires of the weights; return the names it confirmed."""
    graph = model.graph
    types = ModelTypes(model)
    confirmed: set[str] = set()
    for name in keys:
        tensor = graph.initializers.get(name)
        if tensor is None:
            continue
        for node, slot in graph.uses(name):
            if node is None or node.domain not in ("", "ai.onnx"):
                continue
            needed, because = _required_shape(node, slot, types, graph)
            if needed is None:
                continue
            if tuple(tensor.shape) != needed:
                result.problems.append(
                    f"{name!r} (checkpoint key {keys[name]!r}) is {list(tensor.shape)}, but "
                    f"{node.op_type} {node.name or node.op_type!r} needs {list(needed)} at "
                    f"input {slot} ({because})")
            else:
                confirmed.add(name)
    return confirmed


def _required_shape(node: Node, slot: int, types: ModelTypes, graph: Graph
                    ) -> tuple[tuple[int, ...] | None, str]:
    if node.op_type == "LayerNormalization" and slot in (1, 2):
        shape = types.of(graph, node.inputs[0]).static_shape
        axis = int(node.attribute("axis", -1))
        if shape is not None and -len(shape) <= axis < len(shape):
            return tuple(shape[axis:]), (f"its input {node.inputs[0]!r} is {list(shape)}, "
                                         f"axis {axis}")
        recorded = _fx_normalized_shape(node)
        if recorded is not None:
            return recorded, f"torch recorded aten.layer_norm with normalized_shape " \
                             f"{list(recorded)}"
        return None, ""
    if node.op_type in _PER_CHANNEL and slot in _PER_CHANNEL[node.op_type]:
        shape = types.of(graph, node.inputs[0]).static_shape
        if shape is not None and len(shape) >= 2:
            return (shape[1],), f"its input {node.inputs[0]!r} is {list(shape)}: one per channel"
    return None, ""


def _fx_normalized_shape(node: Node) -> tuple[int, ...] | None:
    """``normalized_shape`` from torch's record of ``aten.layer_norm(x, shape, ...)``."""
    if fx_target(node) != "aten.layer_norm.default":
        return None
    text = node.metadata.get(FX_NODE, "")
    _, found, arguments = text.partition(_FX_ARGS)
    start, end = arguments.find("["), arguments.find("]")
    if not found or start < 0 or end < start:
        return None
    try:
        value = ast.literal_eval(arguments[start:end + 1])
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


# ===================================================================== runtime
def _runtime(model: Model, keys: Mapping[str, str], result: ShapeCheck) -> str | None:
    """Run the model in onnxruntime (when it can run); a failure at a reader is a problem.

    When it does not run, ``result.not_run`` says why.
    """
    if importlib.util.find_spec("onnxruntime") is None:
        result.not_run = "onnxruntime is not installed"
        return None
    graph = model.graph
    undefined = list(graph.free_names)
    if undefined:  # a run cannot start: say so, and leave the missing value to its error
        result.undefined = undefined
        shown = shortened_list(undefined, 3, quote=True)
        result.not_run = f"the filled model still uses {shown}, which nothing defines"
        return None
    from graphpass.framework import VerifyOptions, make_inputs, run_model

    try:
        inputs = make_inputs(model, VerifyOptions())
    except Exception as error:  # inputs it cannot make (sequences...): nothing confirmed
        result.not_run = f"graphpass cannot make inputs for it ({error})"
        return None
    outcome = run_model(model, inputs, backend="onnxruntime")
    if outcome.outputs is not None:
        result.ran = True
        return None
    reason = (outcome.reason or "").strip().splitlines() or ["no reason given"]
    result.not_run = f"onnxruntime fails on it: {reason[0][:300]}"
    for name in keys:
        for node in graph.consumers(name):
            if node.name and node.name in outcome.reason:
                tensor = graph.initializers[name]
                return (f"{name!r} (checkpoint key {keys[name]!r}) is {list(tensor.shape)}, "
                        f"and onnxruntime refuses it in {node.op_type} {node.name!r}: "
                        f"{outcome.reason}")
    return None
