"""The built-in gradient rules: onnxruntime-training.

The facts live in ``data/onnxruntime_training.toml`` (a
:meth:`graphpass.GradientRules.from_toml` file): which operators ORT can
differentiate, its stop edges, and the conditions under which it still fails, each
one checked against the runtime (``benchmarks/gradient_agreement.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

from graphpass.training._constants import constant_value
from graphpass.training.rules._broadcast_dims import hidden_ones
from graphpass.training.rules._model import Check, GradientRules, NodeSite

__all__ = ["CHECKS", "ORT_TRAINING", "builtin_rule_sets", "onnxruntime_training_rules"]

ORT_TRAINING = "onnxruntime-training"
"""The name of the built-in (and default) rule set."""

_DATA = "onnxruntime_training.toml"


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
    value = constant_value(graph, ratio, variables=site.trainable)
    return value is None or float(value) != 0.0


def _broadcast_to(shape: Sequence[Any], output: Sequence[Any]) -> bool:
    """Whether a tensor of ``shape`` is provably broadcast to ``output``: fewer elements.

    It is when, aligned from the right, some output dimension is a number above 1 where
    the tensor has 1 or no dimension. Symbolic or unknown dimensions prove nothing (a
    leading ``[1, ...]`` the tensor lacks adds no element).
    """
    missing = len(output) - len(shape)
    if missing < 0:
        return False
    for position, size in enumerate(output):
        mine = shape[position - missing] if position >= missing else 1
        if isinstance(size, int) and size > 1 and mine == 1:
            return True
    return False


def _broadcast_input_needs_gradient(site: NodeSite) -> bool:
    """Whether an input of the node that needs a gradient is broadcast to a larger output.

    ORT's ``Where`` gradient gives such an input a gradient of the output's shape, not
    reduced to its own. Only known shapes count (see :func:`_broadcast_to`).
    """
    output = site.output_shape(0)
    if output is None:
        return False
    for index in site.inputs_needing_gradient:
        shape = site.input_shape(index)
        if index > 0 and shape is not None and _broadcast_to(shape, output):
            return True
    return False


def _same_padding(site: NodeSite) -> bool:
    """Whether a ``Conv`` with ``auto_pad = SAME_*`` pads, and its input or weight needs a gradient.

    ORT's ``ConvGrad`` takes the explicit ``pads`` (none here) and ignores ``auto_pad``.
    The padding is ``(ceil(n / s) - 1) * s + (k - 1) * d + 1 - n`` along each spatial axis
    (input size ``n``, stride ``s``, kernel ``k``, dilation ``d``); it is known to be above 0
    when that is computable, or when the stride is 1 and the kernel wider than 1.
    """
    if not site.inputs_needing_gradient & {0, 1}:
        return False
    node = site.node
    auto_pad = node.attribute("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return False
    data, weight = site.input_shape(0), site.input_shape(1)
    kernel = node.attribute("kernel_shape", None)
    if kernel is None and weight is not None:
        kernel = weight[2:]
    if kernel is None:
        return False
    spatial = len(kernel)
    strides = node.attribute("strides", None) or [1] * spatial
    dilations = node.attribute("dilations", None) or [1] * spatial
    sizes = list(data[2:]) if data is not None and len(data) == spatial + 2 else [None] * spatial
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=False):
        if not isinstance(k, int):
            continue
        if isinstance(size, int):
            if (-(-size // stride) - 1) * stride + (k - 1) * dilation + 1 - size > 0:
                return True
        elif stride == 1 and (k - 1) * dilation > 0:
            return True
    return False


def _vector_times_batched_matrices(site: NodeSite) -> bool:
    """Whether ``MatMul`` multiplies a vector A that needs a gradient by a stack of matrices.

    B of shape ``[b, k, n]`` with ``b`` a number above 1: ORT's gradient of A comes out
    ``b`` times too large (measured; ``b = 1`` is right).
    """
    if 0 not in site.inputs_needing_gradient or site.input_rank(0) != 1:
        return False
    shape = site.input_shape(1)
    return shape is not None and len(shape) == 3 and isinstance(shape[0], int) \
        and shape[0] > 1


def _split_output_without_gradient(site: NodeSite) -> bool:
    """Whether a ``Split`` whose input needs a gradient has outputs that get none.

    ORT's gradient concatenates the outputs' gradients it has and nothing for the others,
    so the input's gradient is missing their part, and what it has lands at the wrong
    places, except when the outputs without a gradient come last and every dimension
    before the axis is 1 (then the part it has is a prefix of the input's memory): then
    only a dimension known to be above 1 proves it wrong.
    """
    if 0 not in site.inputs_needing_gradient:
        return False
    outputs = [index for index, name in enumerate(site.node.outputs) if name]
    having = site.outputs_needing_gradient
    if not having or all(index in having for index in outputs):
        return False
    if not all(index in having for index in outputs[:len(having)]):
        return True  # an output without a gradient before one with: wrong whatever the shape
    shape = site.input_shape(0)
    axis = site.node.attribute("axis", 0)
    if shape is None or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        return False  # the leading dimensions are unknown: nothing proves it wrong
    return any(isinstance(size, int) and size > 1 for size in shape[:axis % len(shape)])


def _sizes_unknown(site: NodeSite, first: int) -> bool:
    """Whether input 0 needs a gradient and its sizes from axis ``first`` are not all numbers.

    An unknown shape (or rank) counts as not known: the trainer does not know it either
    (its shape inference is ONNX's).
    """
    if 0 not in site.inputs_needing_gradient:
        return False
    shape = site.input_shape(0)
    return shape is None or any(not isinstance(size, int) for size in shape[first:])


def _sizes_unknown_past_batch(site: NodeSite) -> bool:
    """Whether a pooling input that needs a gradient has a size past the first not fixed.

    Not fixed: symbolic or unknown, or the whole shape unknown.

    ORT's ``MaxPoolGrad`` (CPU) allocates the input's gradient with the input's shape as
    inferred when the session is built (a symbolic dimension reads as 0), taking only
    the first dimension from the incoming gradient, then scatters into it at the
    forward pass's indices: out of bounds, a segmentation fault (or memory corruption
    and a failure downstream) in the first training step.
    """
    return _sizes_unknown(site, 1)


def _sizes_unknown_anywhere(site: NodeSite) -> bool:
    """Whether a pooling input that needs a gradient has a size not fixed (batch included).

    Not fixed: symbolic or unknown, or the whole shape unknown.

    ORT's ``AveragePoolGrad`` (CPU) takes the whole gradient's shape from the input's
    inferred shape (symbolic dimensions read as 0): a segmentation fault, or a floating
    point exception, in the first training step.
    """
    return _sizes_unknown(site, 0)


def _broadcast_dimension_seen_as_symbol(site: NodeSite) -> bool:
    """Whether an input that needs a gradient is broadcast along a dimension ORT cannot see as 1.

    ORT's ``Add``/``Sub``/``Mul`` gradients sum over the broadcast dimensions they find in
    the static shapes; a dimension known only as a symbol (ONNX's ``unk__0`` after a
    ``Slice`` with computed ends) is taken to equal the other side's and is not summed.
    It holds where the graph proves the dimension is 1 and the other input's is not
    known to be 1 (see :mod:`graphpass.training.rules._broadcast_dims`).
    """
    node, graph = site.node, site.node.graph
    needing = sorted(site.inputs_needing_gradient & {0, 1})
    if graph is None or not needing or len(node.inputs) != 2:
        return False
    shapes = dict(zip(node.inputs, site.input_shapes, strict=False))

    def shape_of(name: str) -> Any:
        if name in shapes:
            return shapes[name]
        value = graph.values.get(name)
        return None if value is None else _declared_shape(value)

    return bool(hidden_ones(graph, node, shape_of, needing))


def _declared_shape(value: Any) -> Any:
    """A value's declared shape (``None`` when it has none)."""
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(shape)


CHECKS: dict[str, Check] = {
    "dropout-kept": Check("dropout-kept", "ORT's optimizer does not remove it first "
                          "(its ratio is not a constant 0, or its output stays a graph "
                          "output: no loss block is added)", _dropout_kept),
    "broadcast-input-needs-gradient": Check(
        "broadcast-input-needs-gradient",
        "an input that needs a gradient is broadcast to a larger output (some output "
        "dimension above 1 is 1, or absent, in the input)", _broadcast_input_needs_gradient),
    "same-padding": Check(
        "same-padding",
        "auto_pad is SAME_UPPER or SAME_LOWER and pads, and the input or the weight needs "
        "a gradient", _same_padding),
    "vector-times-batched-matrices": Check(
        "vector-times-batched-matrices",
        "A is a vector that needs a gradient, B a stack of more than one matrix ([b, k, n], "
        "b > 1)", _vector_times_batched_matrices),
    "split-output-without-gradient": Check(
        "split-output-without-gradient",
        "the input needs a gradient and some outputs get none (other than trailing ones "
        "of a split whose leading dimensions are all 1)", _split_output_without_gradient),
    "sizes-unknown-past-batch": Check(
        "sizes-unknown-past-batch",
        "the input needs a gradient and a dimension of it past the first is not a fixed "
        "number (a named, dynamic size such as height or width), or its shape is unknown",
        _sizes_unknown_past_batch),
    "sizes-unknown": Check(
        "sizes-unknown",
        "the input needs a gradient and a dimension of it (the batch one included) is not a "
        "fixed number (a named, dynamic size), or its shape is unknown", _sizes_unknown_anywhere),
    "broadcast-dimension-seen-as-symbol": Check(
        "broadcast-dimension-seen-as-symbol",
        "an input that needs a gradient is broadcast along a dimension that is 1 but that "
        "the inferred shape gives only as a symbol (a Slice with computed ends: "
        "Optimum's position embeddings), facing a larger or symbolic dimension",
        _broadcast_dimension_seen_as_symbol),
}
"""The named conditions the built-in rules refer to (``{ check = "..." }``)."""


@functools.lru_cache(maxsize=1)
def onnxruntime_training_rules() -> GradientRules:
    """The rules of onnxruntime-training 1.19.2 (read once, shared: they are immutable)."""
    path = resources.files("graphpass.training.rules").joinpath("data", _DATA)
    return GradientRules.from_toml_text(path.read_text(encoding="utf-8"), checks=CHECKS,
                                        where=_DATA)


def builtin_rule_sets() -> list[GradientRules]:
    """The built-in rule sets."""
    return [onnxruntime_training_rules()]
