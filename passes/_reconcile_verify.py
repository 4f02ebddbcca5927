"""Checking each recomputation in onnxruntime (reconcile-initializers).

The nodes that compute a folded constant again (:func:`graphpass.torch.folding.recompute`)
and the ``Conv`` + ``BatchNormalization`` that replace a fused convolution
(:func:`graphpass.torch.folding.unfuse`) are run once, in one small model, on the values
they read: each folded constant must come out as the file held it (or, when the checkpoint
made it stale, as the recipe computes it from the checkpoint's values), and each separated
batch norm must compute what the convolution with the fused weights computes, on a random
input. A recomputation that does not is a problem naming it (nothing is written).

onnxruntime is optional: without it the check is skipped and the report says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphpass.errors import PassError
from graphpass.ir import Graph, Node

__all__ = ["BatchNormCheck", "FoldCheck", "Verification", "verify"]

_OPSET: Final = 18
_RTOL: Final = 1e-4
"""Largest difference, relative to the largest value, between a recomputation in
onnxruntime and what it must give (float32 rounding of a fused batch norm; the exact
recipes are compared exactly)."""


@dataclass
class FoldCheck:
    """A recomputed constant: the nodes that compute it and the values they must give."""

    name: str
    nodes: Sequence[Node]
    expected: np.ndarray[Any, Any]
    exact: bool


@dataclass
class BatchNormCheck:
    """A separated batch norm: its two nodes, and the fused weights they must equal."""

    conv: Node
    batch_norm: Node
    fused_weight: np.ndarray[Any, Any]
    fused_bias: np.ndarray[Any, Any]


@dataclass
class Verification:
    """What :func:`verify` found.

    Attributes:
        ran: Whether onnxruntime ran the checks (``False``: it is not installed).
        checked: How many recomputations were checked.
        problems: One line per recomputation that did not give what it must.
        transposes_only: Whether there was nothing to run (plain transposes only).
    """

    ran: bool = False
    checked: int = 0
    problems: list[str] = field(default_factory=list)
    transposes_only: bool = False

    def raise_problems(self, pass_name: str) -> None:
        """Stop the pass (:class:`PassError`) when a recomputation is wrong: a bug of ours."""
        if self.problems:
            raise PassError(
                "graphpass's recomputation of what the exporter folded is wrong:\n"
                + "\n".join(f"  - {p}" for p in self.problems),
                where=f"pass {pass_name}",
                hint="this is a bug in graphpass; please report it with the model (meanwhile, "
                     "export without constant folding)")


def verify(graph: Graph, folds: Sequence[FoldCheck],
           batch_norms: Sequence[BatchNormCheck]) -> Verification:
    """Run the recomputations in onnxruntime and compare (see the module documentation)."""
    result = Verification()
    if not folds and not batch_norms:
        result.transposes_only = True
        return result
    try:
        import onnxruntime
    except ImportError:
        return result
    model, pairs = _check_model(graph, folds, batch_norms)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    result.ran = True
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {}),
                       strict=True))
    except Exception as error:  # onnxruntime's own exception types
        result.problems.append(f"onnxruntime cannot run the recomputed nodes: "
                               f"{str(error).splitlines()[0][:300]}")
        return result
    for fold in folds:
        result.checked += 1
        have = got[fold.name]
        label = f"the recomputation of {fold.name!r}"
        if have.shape != fold.expected.shape:
            result.problems.append(f"{label} gives shape {list(have.shape)}, not "
                                   f"{list(fold.expected.shape)}")
        elif not (np.array_equal(have, fold.expected) if fold.exact
                  else _close(have, fold.expected)):
            result.problems.append(f"{label} does not give the values it must (largest "
                                   f"difference {_largest(have, fold.expected):.3g})")
    for check, (separated, fused) in zip(batch_norms, pairs, strict=True):
        result.checked += 1
        if not _close(got[separated], got[fused]):
            result.problems.append(
                f"the Conv and BatchNormalization that replace {check.conv.name!r} differ "
                f"from the fused convolution by {_largest(got[separated], got[fused]):.3g}")
    return result


def _check_model(graph: Graph, folds: Sequence[FoldCheck],
                 batch_norms: Sequence[BatchNormCheck]
                 ) -> tuple[onnx.ModelProto, list[tuple[str, str]]]:
    """One model computing every recomputation; the pairs of outputs to compare."""
    nodes: list[onnx.NodeProto] = []
    read: dict[str, None] = {}
    outputs: list[onnx.ValueInfoProto] = []
    extra: list[onnx.TensorProto] = []
    pairs: list[tuple[str, str]] = []
    for fold in folds:
        for node in fold.nodes:
            nodes.append(_node_proto(node))
            read.update(dict.fromkeys(n for n in node.inputs if n))
        outputs.append(helper.make_tensor_value_info(fold.name, _elem(fold.expected), None))
    rng = np.random.default_rng(0)
    for number, check in enumerate(batch_norms):
        prefix = f"check_{number}"
        x = _conv_input(check.conv, check.fused_weight, rng)
        extra += [numpy_helper.from_array(x, f"{prefix}_x"),
                  numpy_helper.from_array(check.fused_weight, f"{prefix}_fused_weight"),
                  numpy_helper.from_array(check.fused_bias, f"{prefix}_fused_bias")]
        nodes += [
            _node_proto(check.conv, inputs=[f"{prefix}_x", *check.conv.inputs[1:]],
                        outputs=[f"{prefix}_conv"]),
            _node_proto(check.batch_norm, inputs=[f"{prefix}_conv", *check.batch_norm.inputs[1:]],
                        outputs=[f"{prefix}_separated"]),
            _node_proto(check.conv, inputs=[f"{prefix}_x", f"{prefix}_fused_weight",
                                            f"{prefix}_fused_bias"],
                        outputs=[f"{prefix}_fused"])]
        read.update(dict.fromkeys(n for n in (*check.conv.inputs[1:],
                                              *check.batch_norm.inputs[1:]) if n))
        elem = _elem(check.fused_weight)
        outputs += [helper.make_tensor_value_info(f"{prefix}_separated", elem, None),
                    helper.make_tensor_value_info(f"{prefix}_fused", elem, None)]
        pairs.append((f"{prefix}_separated", f"{prefix}_fused"))
    initializers = [graph.initializers[name].to_embedded_proto() for name in read
                    if name in graph.initializers]
    model = helper.make_model(
        helper.make_graph(nodes, "recomputations", [], outputs, [*initializers, *extra]),
        opset_imports=[helper.make_opsetid("", max(_OPSET, _opset(graph)))])
    model.ir_version = min(model.ir_version, 10)
    return model, pairs


def _conv_input(conv: Node, weight: np.ndarray[Any, Any],
                rng: np.random.Generator) -> np.ndarray[Any, Any]:
    groups = int(conv.attribute("group", 1) or 1)
    kernel = weight.shape[2:]
    dilations = list(conv.attribute("dilations", None) or [1] * len(kernel))
    strides = list(conv.attribute("strides", None) or [1] * len(kernel))
    spatial = [int((k - 1) * d + 2 * s + 3) for k, d, s in zip(kernel, dilations, strides,
                                                              strict=True)]
    return rng.standard_normal((1, weight.shape[1] * groups, *spatial)).astype(weight.dtype)


def _node_proto(node: Node, *, inputs: Sequence[str] | None = None,
                outputs: Sequence[str] | None = None) -> onnx.NodeProto:
    proto = helper.make_node(node.op_type, list(node.inputs if inputs is None else inputs),
                             list(node.outputs if outputs is None else outputs),
                             domain=node.domain or None)
    proto.attribute.extend(attribute.proto for attribute in node.attributes.values())
    return proto


def _opset(graph: Graph) -> int:
    model = graph.root.model
    if model is None:
        return _OPSET
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", _OPSET)))


def _elem(array: np.ndarray[Any, Any]) -> int:
    return int(helper.np_dtype_to_tensor_dtype(array.dtype))


def _largest(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    return float(np.abs(a.astype(np.float64) - b).max(initial=0.0))


def _close(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    scale = max(float(np.abs(b).max(initial=0.0)), 1e-30)
    return a.shape == b.shape and _largest(a, b) <= _RTOL * scale
