"""The built-in gradient rules: onnxruntime-training.

The facts live in ``data/onnxruntime_training.toml`` (a
:meth:`graphpass.GradientRules.from_toml` file): which operators ORT can
differentiate, its stop edges, and the conditions under which it still fails, each
one checked against the runtime (``benchmarks/gradient_agreement.py``).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import onnx

from graphpass.ir import Graph
from graphpass.training.gradient_rules import Check, GradientRules, NodeSite

__all__ = ["CHECKS", "ORT_TRAINING", "builtin_rule_sets", "onnxruntime_training_rules"]

ORT_TRAINING = "onnxruntime-training"
"""The name of the built-in (and default) rule set."""

_DATA = "onnxruntime_training.toml"


def _constant_value(graph: Graph, name: str, trainable: frozenset[str]) -> Any:
    """The value of a constant (Constant node or non-trainable initializer), else ``None``."""
    if name in graph.initializers and name not in trainable:
        return graph.initializers[name].numpy()
    producer = graph.producer(name)
    if producer is not None and producer.op_type == "Constant" and not producer.domain:
        tensor = producer.attribute("value")
        if isinstance(tensor, onnx.TensorProto):
            return onnx.numpy_helper.to_array(tensor)
    return None


def _dropout_kept(site: NodeSite) -> bool:
    """Whether ORT's optimizer keeps a Dropout (it removes those that do nothing).

    It removes a Dropout whose ratio is absent or a constant 0 and whose output is not
    a graph output. When a loss block is added after the outputs (``generate_artifacts``
    with a loss, as ``emit-training-artifacts`` does by default), the forward model's
    outputs feed the loss and are graph outputs no more.
    """
    node, graph = site.node, site.node.graph
    if graph is None:
        return True
    if not site.loss_added and \
            any(name and graph.value(name).is_graph_output for name in node.outputs):
        return True
    ratio = node.inputs[1] if len(node.inputs) > 1 else ""
    if not ratio:
        return False
    value = _constant_value(graph, ratio, site.trainable)
    return value is None or float(value) != 0.0


def _broadcast_input_needs_gradient(site: NodeSite) -> bool:
    """Whether an input of the node that needs a gradient is broadcast to the output.

    Only known shapes count: both the input's and the output's must be known, and
    differ (a dimension both name alike, or both leave unknown, is the same).
    """
    output = site.output_shape(0)
    if output is None:
        return False
    for index in site.inputs_needing_gradient:
        shape = site.input_shape(index)
        if index > 0 and shape is not None and tuple(shape) != tuple(output):
            return True
    return False


CHECKS: dict[str, Check] = {
    "dropout-kept": Check("dropout-kept", "ORT's optimizer does not remove it first "
                          "(its ratio is not a constant 0, or its output stays a graph "
                          "output: no loss block is added)", _dropout_kept),
    "broadcast-input-needs-gradient": Check(
        "broadcast-input-needs-gradient",
        "an input that needs a gradient has a shape other than the output's (broadcast)",
        _broadcast_input_needs_gradient),
}
"""The named conditions the built-in rules refer to (``{ check = "..." }``)."""


@functools.lru_cache(maxsize=1)
def onnxruntime_training_rules() -> GradientRules:
    """The rules of onnxruntime-training 1.19.2 (read once, shared: they are immutable)."""
    path = resources.files("graphpass.passes").joinpath("data", _DATA)
    return GradientRules.from_toml_text(path.read_text(encoding="utf-8"), checks=CHECKS,
                                        where=_DATA)


def builtin_rule_sets() -> list[GradientRules]:
    """The built-in rule sets."""
    return [onnxruntime_training_rules()]
