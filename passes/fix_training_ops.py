"""The ``fix-training-ops`` pass: make common exported operators differentiable.

Three patterns torch exports stop ONNX Runtime training (1.19.2) although an
equivalent form trains fine:

* ``nn.LayerNorm`` exports (opset 17 and later) as a ``LayerNormalization`` with only
  its ``Y`` output; ORT's gradient builder needs the ``Mean`` and ``InvStdDev``
  outputs. The pass adds them (nothing reads them; the values are unchanged).
* ``masked_fill`` and friends export (``dynamo=True``) as ``CastLike(value, x)``,
  which has no gradient builder. ``CastLike`` only reads ``x``'s element type, so
  when that type is known the pass writes ``Cast(value, to=<type>)`` instead.
* ``torch.split``/``chunk`` with ``optimize=False`` (GPT-2's fused QKV projection,
  GPT-NeoX's) exports as ``SplitToSequence`` followed by ``SequenceAt`` with constant
  indices; ORT has no gradient through sequences, so every weight before the split
  reaches no loss. When the split sizes, the axis's length and every index are
  constants, the pass writes one ``Split`` whose outputs replace the ``SequenceAt``
  results (``Squeeze`` after it for ``keepdims=0``).

Every rewrite computes exactly the same values, so ``--verify`` has nothing to find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx

from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework.pass_base import Pass, PassContext, PassResult
from graphpass.ir import Attribute, Graph, Model, Node, Tensor
from graphpass.training.value_types import ModelTypes

__all__ = ["FixTrainingOps"]

LAYER_NORM_CODE = "GP530"
CAST_LIKE_CODE = "GP531"
SPLIT_CODE = "GP532"
_SHOWN = 4


class FixTrainingOps(Pass):
    """Rewrite operators ORT training cannot differentiate into equivalent ones it can."""

    name = "fix-training-ops"
    description = ("Rewrite exported operators ONNX Runtime training cannot differentiate into "
                   "equivalent ones it can (LayerNormalization statistics, CastLike to Cast, "
                   "SplitToSequence + SequenceAt to Split).")
    after = ("inline-functions",)
    before = ("lint-gradients",)
    codes: ClassVar[dict[str, str]] = {
        LAYER_NORM_CODE: "LayerNormalization nodes given their Mean and InvStdDev outputs",
        CAST_LIKE_CODE: "CastLike nodes with a known target type written as Cast",
        SPLIT_CODE: "SplitToSequence + SequenceAt with constant sizes written as Split",
    }

    @dataclass
    class Options:
        """Options of ``fix-training-ops``.

        Attributes:
            layer_norm: Give ``LayerNormalization`` nodes their ``Mean`` and
                ``InvStdDev`` outputs.
            cast_like: Write ``CastLike`` nodes whose target element type is known as
                ``Cast``.
            split_to_sequence: Write ``SplitToSequence`` read only by ``SequenceAt``
                with constant indices as ``Split``.
        """

        layer_norm: bool = True
        cast_like: bool = True
        split_to_sequence: bool = True

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Rewrite every graph: main, subgraphs, function bodies."""
        options = self.options
        types = ModelTypes(model) if options.cast_like or options.split_to_sequence else None
        layer_norms: list[str] = []
        cast_likes: list[str] = []
        splits: list[str] = []
        for graph in list(model.graphs()):
            for node in list(graph):
                if node.domain not in ("", "ai.onnx"):
                    continue
                label = node.name or node.op_type
                fixed_norm = (self.options.layer_norm and node.op_type == "LayerNormalization"
                              and _add_statistics(graph, node))
                fixed_cast = (not fixed_norm and types is not None and options.cast_like
                              and node.op_type == "CastLike"
                              and _cast_like_to_cast(graph, node, types))
                if (types is not None and options.split_to_sequence
                        and node.op_type == "SplitToSequence"
                        and model.opset_imports.get("", 0) >= 13
                        and _split_to_sequence_as_split(graph, node, types)):
                    splits.append(label)
                if fixed_norm:
                    layer_norms.append(label)
                if fixed_cast:
                    cast_likes.append(label)
        findings = []
        if layer_norms:
            findings.append(Finding(
                LAYER_NORM_CODE, Severity.INFO,
                f"gave {len(layer_norms)} LayerNormalization node"
                f"{'s' * (len(layer_norms) != 1)} their Mean and InvStdDev outputs, which "
                "onnxruntime-training's gradient needs: "
                + shortened_list(layer_norms, _SHOWN, quote=True),
                data={"nodes": layer_norms}))
        if cast_likes:
            findings.append(Finding(
                CAST_LIKE_CODE, Severity.INFO,
                f"wrote {len(cast_likes)} CastLike node{'s' * (len(cast_likes) != 1)} as Cast "
                f"(CastLike has no gradient builder; its target type was known): "
                f"{shortened_list(cast_likes, _SHOWN, quote=True)}", data={"nodes": cast_likes}))
        if splits:
            findings.append(Finding(
                SPLIT_CODE, Severity.INFO,
                f"wrote {len(splits)} SplitToSequence node{'s' * (len(splits) != 1)} and the "
                "SequenceAt nodes reading them as Split (ORT has no gradient through "
                f"sequences): {shortened_list(splits, _SHOWN, quote=True)}",
                data={"nodes": splits}))
        return PassResult(changed=bool(layer_norms or cast_likes or splits), findings=findings,
                          stats={"layer norms": len(layer_norms), "cast-likes": len(cast_likes),
                                 "splits": len(splits)})


def _add_statistics(graph: Graph, node: Node) -> bool:
    outputs = list(node.outputs) + [""] * (3 - len(node.outputs))
    if all(outputs[1:3]) or not outputs[0]:
        return False
    for index, suffix in ((1, "mean"), (2, "inv_std_dev")):
        if not outputs[index]:
            outputs[index] = _fresh(graph, f"{outputs[0]}__{suffix}")
    node.set_outputs(outputs)
    return True


def _cast_like_to_cast(graph: Graph, node: Node, types: ModelTypes) -> bool:
    if len(node.inputs) != 2 or not node.inputs[0] or not node.inputs[1]:
        return False
    elem_type = types.elem_type(graph, node.inputs[1])
    if elem_type is None:
        return False
    attributes = [Attribute.from_value("to", elem_type)]
    saturate = node.attributes.get("saturate")
    if saturate is not None:
        attributes.append(saturate)
    cast = Node("Cast", [node.inputs[0]], list(node.outputs), name=node.name,
                attributes=attributes, doc_string=node.doc_string,
                metadata=dict(node.metadata))
    graph.replace(node, [cast])
    return True


def _constant(graph: Graph, name: str) -> np.ndarray[Any, Any] | None:
    """The value of ``name`` if it is an initializer or a ``Constant`` node's output."""
    if not name:
        return None
    if name in graph.initializers:
        return graph.initializers[name].numpy()
    producer = graph.producer(name)
    if producer is not None and producer.op_type == "Constant" and \
            producer.domain in ("", "ai.onnx"):
        tensor = producer.attribute("value")
        if isinstance(tensor, onnx.TensorProto):
            return onnx.numpy_helper.to_array(tensor)
    return None


def _split_sizes(graph: Graph, node: Node, length: int) -> list[int] | None:
    split = node.inputs[1] if len(node.inputs) > 1 else ""
    if not split:
        return [1] * length
    value = _constant(graph, split)
    if value is None or value.dtype.kind not in "iu":
        return None
    if value.ndim == 0:
        size = int(value)
        if size <= 0:
            return None
        return [size] * (length // size) + ([length % size] if length % size else [])
    sizes = [int(v) for v in value.reshape(-1)]
    return sizes if sum(sizes) == length and all(v >= 0 for v in sizes) else None


def _split_to_sequence_as_split(graph: Graph, node: Node, types: ModelTypes) -> bool:
    """``SplitToSequence`` + constant-index ``SequenceAt`` readers -> one ``Split``."""
    sequence = node.outputs[0] if node.outputs else ""
    if not sequence or graph.value(sequence).is_graph_output or not node.inputs[0]:
        return False
    readers = graph.uses(sequence)
    if not readers or any(user is None or user.op_type != "SequenceAt" or slot != 0
                          or user.domain not in ("", "ai.onnx") for user, slot in readers):
        return False
    shape = types.of(graph, node.inputs[0]).shape
    axis = int(node.attribute("axis", 0))
    if shape is None or not -len(shape) <= axis < len(shape):
        return False
    length = shape[axis]
    if not isinstance(length, int):
        return False
    sizes = _split_sizes(graph, node, length)
    if not sizes:
        return False
    keepdims = int(node.attribute("keepdims", 1))
    if not keepdims and len(node.inputs) > 1 and node.inputs[1]:
        return False  # keepdims is ignored when split is given; be safe
    picks: list[tuple[Node, int]] = []
    for user, _ in readers:
        index = _constant(graph, user.inputs[1] if len(user.inputs) > 1 else "")
        if index is None or index.size != 1 or index.dtype.kind not in "iu":
            return False
        position = int(index.reshape(-1)[0])
        position += len(sizes) if position < 0 else 0
        if not 0 <= position < len(sizes):
            return False
        picks.append((user, position))
    parts = [_fresh(graph, f"{sequence}__part{i}") for i in range(len(sizes))]
    sizes_name = _fresh(graph, f"{sequence}__sizes")
    graph.set_initializer(Tensor.from_array(sizes_name, np.array(sizes, dtype=np.int64)))
    split = Node("Split", [node.inputs[0], sizes_name], parts, name=node.name or sequence,
                 attributes={"axis": axis}, doc_string=node.doc_string,
                 metadata=dict(node.metadata))
    graph.insert_before(node, split)
    for user, position in picks:
        replacement: list[Node] = []
        if keepdims:
            replacement = [Node("Identity", [parts[position]], list(user.outputs),
                                name=user.name, metadata=dict(user.metadata))]
        else:
            axes = _fresh(graph, f"{sequence}__axis")
            graph.set_initializer(Tensor.from_array(axes, np.array([axis], dtype=np.int64)))
            replacement = [Node("Squeeze", [parts[position], axes], list(user.outputs),
                                name=user.name, metadata=dict(user.metadata))]
        graph.replace(user, replacement)
    graph.remove(node)
    return True


def _fresh(graph: Graph, base: str) -> str:
    root = graph.root
    candidate, number = base, 1
    while _taken(graph, candidate) or _taken(root, candidate):
        number += 1
        candidate = f"{base}{number}"
    return candidate


def _taken(graph: Graph, name: str) -> bool:
    return name in graph.values

