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
  silently). The pass writes ``Split`` instead (:mod:`graphpass.training.sequences`).

The rewrites compute exactly the same values, so ``--verify`` has nothing to find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework.pass_base import Pass, PassContext, PassResult
from graphpass.ir import Attribute, Graph, Model, Node
from graphpass.training.sequences import split_sequences
from graphpass.training.value_types import ModelTypes

__all__ = ["FixTrainingOps"]

LAYER_NORM_CODE = "GP530"
CAST_LIKE_CODE = "GP531"
SEQUENCE_CODE = "GP532"
_SHOWN = 4
_REWRITTEN = frozenset({"LayerNormalization", "CastLike"})  # the ops the node loop rewrites


class FixTrainingOps(Pass):
    """Rewrite operators ORT training cannot differentiate into equivalent ones it can."""

    name = "fix-training-ops"
    description = ("Rewrite exported operators ONNX Runtime training cannot differentiate into "
                   "equivalent ones it can (LayerNormalization statistics, CastLike to Cast).")
    after = ("inline-functions",)
    before = ("lint-gradients",)
    codes: ClassVar[dict[str, str]] = {
        LAYER_NORM_CODE: "LayerNormalization nodes given their Mean and InvStdDev outputs",
        CAST_LIKE_CODE: "CastLike nodes with a known target type written as Cast",
        SEQUENCE_CODE: "SplitToSequence read by constant SequenceAt written as Split",
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
        """

        layer_norm: bool = True
        cast_like: bool = True
        sequences: bool = True

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Rewrite every graph: main, subgraphs, function bodies."""
        types = ModelTypes(model) if self.options.cast_like else None
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
                fixed_cast = (not fixed_norm and types is not None
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
        return PassResult(changed=bool(layer_norms or cast_likes or sequences),
                          findings=findings,
                          stats={"layer norms": len(layer_norms), "cast-likes": len(cast_likes),
                                 "sequences": sequences})


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

