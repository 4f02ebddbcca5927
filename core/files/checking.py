"""Run ONNX's checker and shape inference on a model without touching its weights.

``onnx.checker`` and ``onnx.shape_inference`` take a serialized model: handing them
``model.to_proto()`` would copy every embedded weight (and fail past 2 GiB), and
external data would be looked up relative to the current folder. Both only need
the weights' types and shapes, so :func:`structural_proto` writes the main graph's
large or external initializers as typed graph inputs instead. Small initializers
(shape tensors and the like) stay, so shape inference can still propagate their
values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import onnx

from graphpass.files.proto import model_to_proto, subgraph_protos
from graphpass.ir import Model, Tensor

__all__ = ["CheckerProblem", "run_checker", "structural_proto"]

INLINE_LIMIT: Final = 4096
"""Initializers up to this many bytes stay in the proto given to the checker."""

_NODE_PATTERNS = (
    re.compile(r"[Nn]ode\.?\s*[Nn]ame: (?P<node>\S*)\s*OpType: (?P<op>\S+)"),
    re.compile(r"of node:\s*name: (?P<node>\S*)\s*OpType: (?P<op>\S+)"),
    re.compile(r"\(op_type:(?P<op>[^,]+), node name: (?P<node>[^)]*)\)"),
    re.compile(r"Node \((?P<node>[^)]*)\)"),
)


@dataclass(frozen=True)
class CheckerProblem:
    """What the ONNX checker said about a model.

    Attributes:
        kind: ``validation`` (the checker proper) or ``inference`` (strict shape
            inference, run by the full check).
        message: The checker's message, first lines only.
        node: The node it names, when it names one.
    """

    kind: str
    message: str
    node: str | None = None


def structural_proto(model: Model, *, inline_limit: int = INLINE_LIMIT) -> onnx.ModelProto:
    """The model as a ``ModelProto`` with its large and external weights left out.

    Main-graph initializers that are external or larger than ``inline_limit`` bytes
    become graph inputs of the same type and shape. Initializers of subgraphs (rare,
    and never the big weights) are embedded.

    Args:
        model: The model; it is not changed.
        inline_limit: Initializers up to this size are kept as they are.

    Returns:
        A new proto, fit for ``onnx.checker`` and ``onnx.shape_inference``.
    """
    # Keyed by name: the stub protos are copied into the model and then freed, so
    # their ids are reused and cannot identify them.
    stubs: dict[str, Tensor] = {}

    def emit(tensor: Tensor) -> onnx.TensorProto:
        if tensor.is_external or tensor.nbytes > inline_limit:
            stubs[tensor.name] = tensor
            return onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)
        embedded: onnx.TensorProto = tensor.to_proto()
        return embedded

    proto: onnx.ModelProto = model_to_proto(model, emit)
    if not stubs:
        return proto
    main = proto.graph
    main_stubs: list[onnx.TensorProto] = []
    kept: list[onnx.TensorProto] = []
    for tensor_proto in main.initializer:
        if tensor_proto.name in stubs and not _has_data(tensor_proto):
            main_stubs.append(tensor_proto)
        else:
            kept.append(tensor_proto)
    declared = {value.name for value in main.input}
    del main.initializer[:]
    main.initializer.extend(kept)
    for stub in main_stubs:
        if stub.name not in declared:
            main.input.append(onnx.helper.make_tensor_value_info(
                stub.name, stub.data_type, list(stub.dims)))
    for graph in subgraph_protos(main):
        for index, tensor_proto in enumerate(graph.initializer):
            if tensor_proto.name in stubs and not _has_data(tensor_proto):
                graph.initializer[index].CopyFrom(stubs[tensor_proto.name].to_embedded_proto())
    # Graph inputs without initializers need IR version 4 or later.
    proto.ir_version = max(proto.ir_version, 4)
    return proto


def run_checker(model: Model, *, full_check: bool = False) -> CheckerProblem | None:
    """Run ``onnx.checker.check_model`` on the model's structure.

    Args:
        model: The model; it is not changed and its weights are not read.
        full_check: Also run strict shape inference (what ``check`` does).

    Returns:
        The first problem the checker reports, or ``None`` if it is satisfied.
    """
    proto = structural_proto(model)
    try:
        onnx.checker.check_model(proto, full_check=full_check)
    except onnx.shape_inference.InferenceError as error:
        return _problem("inference", error)
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as error:
        return _problem("validation", error)
    return None


def _problem(kind: str, error: Exception) -> CheckerProblem:
    text = str(error).strip()
    node = None
    for pattern in _NODE_PATTERNS:
        match = pattern.search(text)
        if match:
            groups = match.groupdict()
            node = groups.get("node") or groups.get("op") or None
            if node:
                break
    lines = [line for line in text.splitlines() if line.strip()]
    message = " ".join(line.strip() for line in lines[:3])
    return CheckerProblem(kind, message[:1000], node)


def _has_data(tensor: onnx.TensorProto) -> bool:
    return any(field.name not in ("name", "dims", "data_type", "doc_string", "metadata_props")
               for field, _ in tensor.ListFields())

