"""The ``fix-training-ops`` pass: make common exported operators differentiable.

Two patterns torch exports everywhere stop ONNX Runtime training (1.19.2) although
an equivalent form trains fine:

* ``nn.LayerNorm`` exports (opset 17 and later) as a ``LayerNormalization`` with only
  its ``Y`` output; ORT's gradient builder needs the ``Mean`` and ``InvStdDev``
  outputs. The pass adds them (nothing reads them; the values are unchanged).
* ``masked_fill`` and friends export (``dynamo=True``) as ``CastLike(value, x)``,
  which has no gradient builder. ``CastLike`` only reads ``x``'s element type, so
  when that type is known the pass writes ``Cast(value, to=<type>)`` instead.

* ``torch.chunk``/``torch.split`` export (without the exporter's optimizer) as
  ``SplitToSequence`` read by ``SequenceAt`` at constant positions. A sequence is not
  a tensor, so trainers drop the gradient that flows through it (onnxruntime-training
  silently). The pass writes ``Split`` instead (``_sequences``).

* A broadcast ``Add``/``Sub``/``Mul`` input whose dimension is 1 but whose inferred shape
  gives only a symbol there (ONNX cannot type a ``Slice`` with computed ends: Optimum's
  ``Gather(position_embeddings, Slice(position_ids, 0, seq_len))`` is ``[unk__0, unk__1,
  H]``) gets a wrong gradient from ORT, which sums over the broadcast dimensions it sees
  in the static shapes (``_broadcast_dims``). The pass puts a
  ``Reshape`` by a constant (``[1, 0, 0]``: 1 where the graph proves it, ``0`` keeps a
  dimension) before the node, so that the 1 is in the inferred shape.

The rewrites compute exactly the same values, so ``--verify`` has nothing to find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx

from graphpass.checkpoint import ReconcileResult
from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import Attribute, Graph, Model, Node
from graphpass.torch.folding import UnrestorableParameters
from graphpass.training import ModelTypes, split_sequences
from graphpass.training.rules import BROADCAST_OPS, hidden_ones

__all__ = ["FixTrainingOps"]

LAYER_NORM_CODE = "GP530"
CAST_LIKE_CODE = "GP531"
SEQUENCE_CODE = "GP532"
BROADCAST_CODE = "GP533"
_SHOWN = 4
_REWRITTEN = frozenset({"LayerNormalization", "CastLike"})  # the ops the node loop rewrites


class FixTrainingOps(Pass):
    """Rewrite operators ORT training cannot differentiate into equivalent ones it can."""

    name = "fix-training-ops"
    description = ("Rewrite exported operators ONNX Runtime training cannot differentiate (or "
                   "differentiates wrongly) into equivalent ones it can (LayerNormalization "
                   "statistics, CastLike to Cast, broadcast 1s stated by a Reshape).")
    after = ("inline-functions",)
    before = ("lint-gradients",)
    # It rewrites operators; initializers keep their names and values.
    preserves = (ReconcileResult, UnrestorableParameters)
    codes: ClassVar[dict[str, str]] = {
        LAYER_NORM_CODE: "LayerNormalization nodes given their Mean and InvStdDev outputs",
        CAST_LIKE_CODE: "CastLike nodes with a known target type written as Cast",
        SEQUENCE_CODE: "SplitToSequence read by constant SequenceAt written as Split",
        BROADCAST_CODE: "broadcast inputs whose 1s the inferred shape hides reshaped to show them",
    }

    @dataclass
    class Options:
        """Options of ``fix-training-ops``.

        Attributes:
            layer_norm: Give ``LayerNormalization`` nodes their ``Mean`` and
                ``InvStdDev`` outputs.
            cast_like: Write ``CastLike`` nodes whose target element type is known as
                ``Cast``.
            sequences: Write ``SplitToSequence`` read by constant ``SequenceAt`` as
                ``Split``.
            broadcast_dims: Reshape a broadcast ``Add``/``Sub``/``Mul`` input whose
                dimension is 1 where the inferred shape says only a symbol, so that
                onnxruntime-training sums its gradient over that dimension.
        """

        layer_norm: bool = True
        cast_like: bool = True
        sequences: bool = True
        broadcast_dims: bool = True

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Rewrite every graph: main, subgraphs, function bodies."""
        types = ModelTypes(model) if self.options.cast_like or self.options.broadcast_dims \
            else None
        reshaped = _state_broadcast_ones(model, types) \
            if self.options.broadcast_dims and types is not None else []
        layer_norms: list[str] = []
        cast_likes: list[str] = []
        sequences = 0
        for graph in list(model.graphs()):
            if self.options.sequences:
                sequences += split_sequences(graph)
            for node in list(graph):
                if node.op_type not in _REWRITTEN or node.domain not in ("", "ai.onnx"):
                    continue
                label = node.name or node.op_type
                fixed_norm = (self.options.layer_norm and node.op_type == "LayerNormalization"
                              and _add_statistics(graph, node))
                fixed_cast = (not fixed_norm and types is not None and self.options.cast_like
                              and node.op_type == "CastLike"
                              and _cast_like_to_cast(graph, node, types))
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
        if sequences:
            findings.append(Finding(
                SEQUENCE_CODE, Severity.INFO,
                f"wrote {sequences} SplitToSequence node{'s' * (sequences != 1)} read by "
                "constant SequenceAt as Split (gradients do not flow through sequences)",
                data={"count": sequences}))
        if reshaped:
            findings.append(Finding(
                BROADCAST_CODE, Severity.INFO,
                f"reshaped {len(reshaped)} broadcast input{'s' * (len(reshaped) != 1)} whose "
                "dimension is 1 but inferred only as a symbol, so that onnxruntime-training "
                "sums their gradient over the batch (the same values): "
                + shortened_list([f"{node} input {index}" for node, index, _ in reshaped],
                                 _SHOWN, quote=False),
                data={"inputs": [{"node": node, "input": index, "shape": shape}
                                 for node, index, shape in reshaped]}))
        return PassResult(changed=bool(layer_norms or cast_likes or sequences or reshaped),
                          findings=findings,
                          stats={"layer norms": len(layer_norms), "cast-likes": len(cast_likes),
                                 "sequences": sequences, "broadcast inputs": len(reshaped)})


def _state_broadcast_ones(model: Model, types: ModelTypes) -> list[tuple[str, int, list[int]]]:
    """Put a ``Reshape`` that states its hidden 1s before every such broadcast input.

    Returns ``(node, input index, the Reshape's target)`` for each input reshaped.
    """
    planned: list[tuple[Graph, Node, int, list[int]]] = []
    for graph in list(model.graphs()):
        def shape_of(name: str, graph: Graph = graph) -> tuple[int | str | None, ...] | None:
            return types.of(graph, name).shape

        for node in graph:
            if node.op_type not in BROADCAST_OPS or node.domain not in ("", "ai.onnx"):
                continue
            hits = hidden_ones(graph, node, shape_of)
            for index in sorted({i for i, _ in hits}):
                shape = shape_of(node.inputs[index])
                if shape is None:
                    continue
                ones = {position for i, position in hits if i == index}
                planned.append((graph, node, index,
                                [1 if p in ones else 0 for p in range(len(shape))]))
    done = []
    for graph, node, index, target in planned:
        source = node.inputs[index]
        shape_name = _fresh(graph, f"{source}__ones_shape")
        constant = Node("Constant", [], [shape_name], name=_fresh(graph, f"{shape_name}_node"),
                        attributes=[Attribute.from_value("value", onnx.numpy_helper.from_array(
                            np.array(target, dtype=np.int64), shape_name))])
        reshaped = _fresh(graph, f"{source}__ones")
        reshape = Node("Reshape", [source, shape_name], [reshaped],
                       name=_fresh(graph, f"{reshaped}_reshape"))
        graph.insert_before(node, [constant, reshape])
        node.set_input(index, reshaped)
        done.append((node.name or node.op_type, index, target))
    return done


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


def _fresh(graph: Graph, base: str) -> str:
    root = graph.root
    candidate, number = base, 1
    while _taken(graph, candidate) or _taken(root, candidate):
        number += 1
        candidate = f"{base}{number}"
    return candidate


def _taken(graph: Graph, name: str) -> bool:
    return name in graph.values

