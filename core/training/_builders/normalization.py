"""Softmax and normalizations.

``Softmax``, ``LogSoftmax``, ``LayerNormalization``, ``BatchNormalization`` (inference
and training semantics), ``InstanceNormalization``.

Normalizations recompute their mean and inverse standard deviation in the backward
pass (one reduction each) unless the forward node already outputs them.
"""

from __future__ import annotations

from graphpass.ir import Node
from graphpass.training._builder import BuilderResult, GradientContext, Refusal
from graphpass.training._builders._common import FIRST, builder, rank_known
from graphpass.training.rules import Check, NodeSite, normalize_domain

__all__ = ["BUILDERS"]


def _statistics_outputs(*indices: int) -> Refusal:
    shown = ", ".join(str(i) for i in indices)

    def needed(site: NodeSite) -> bool:
        return any(i in site.outputs_needing_gradient for i in indices)

    return Refusal((Check("statistics-gradient", f"a gradient reaches output {shown}",
                          needed),),
                   "the builder differentiates the normalized output only, not the "
                   "statistics outputs", "compute the loss from output 0")


@builder("Softmax", FIRST, since=13, description="dX = Y (dY - sum(dY Y, axis))")
def _softmax(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy, y = ctx.required_output_gradient(0), ctx.output(0)
    axis = int(ctx.attribute("axis", -1))
    inner = e.reduce_sum(e.op("Mul", dy, y), [axis], keepdims=True)
    return [e.op("Mul", y, e.op("Sub", dy, inner))]


@builder("LogSoftmax", FIRST, since=13, description="dX = dY - exp(Y) sum(dY, axis)")
def _log_softmax(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy, y = ctx.required_output_gradient(0), ctx.output(0)
    axis = int(ctx.attribute("axis", -1))
    total = e.reduce_sum(dy, [axis], keepdims=True)
    return [e.op("Sub", dy, e.op("Mul", e.op("Exp", y), total))]


def _normalized_gradient(ctx: GradientContext, dxhat: str, xhat: str, inv: str,
                         axes: list[int]) -> str:
    """DX from dX̂ for X̂ = (X - mean) * inv over ``axes``."""
    e = ctx.emit
    mean_dxhat = e.reduce_mean(dxhat, axes, keepdims=True)
    mean_dxhat_xhat = e.reduce_mean(e.op("Mul", dxhat, xhat), axes, keepdims=True)
    centered = e.op("Sub", e.op("Sub", dxhat, mean_dxhat), e.op("Mul", xhat, mean_dxhat_xhat))
    return e.op("Mul", inv, centered)


def _statistics(ctx: GradientContext, x: str, axes: list[int], epsilon: float
                ) -> tuple[str, str]:
    """``(X̂, inv)`` recomputed over ``axes`` (kept dimensions)."""
    e = ctx.emit
    mean = e.reduce_mean(x, axes, keepdims=True)
    centered = e.op("Sub", x, mean)
    variance = e.reduce_mean(e.op("Mul", centered, centered), axes, keepdims=True)
    inv = e.op("Reciprocal", e.op("Sqrt", e.op("Add", variance, e.scalar(epsilon, like=x))))
    return e.op("Mul", centered, inv), str(inv)


@builder("LayerNormalization", frozenset({0, 1, 2}), since=17,
         refusals=(rank_known(0), _statistics_outputs(1, 2)),
         description="the standard formula over axes [axis, rank)")
def _layer_norm(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy, y = ctx.required_output_gradient(0), ctx.output(0)
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = ctx.rank(x)
    axis = int(ctx.attribute("axis", -1)) % rank
    axes = list(range(axis, rank))
    epsilon = float(ctx.attribute("epsilon", 1e-5))
    mean, inv_std = ctx.output(1), ctx.output(2)
    x_type = ctx.type_of(x).elem_type
    if mean and inv_std and x_type is not None and \
            ctx.type_of(mean).elem_type == x_type == ctx.type_of(inv_std).elem_type:
        inv = inv_std
        xhat = e.op("Mul", e.op("Sub", x, mean), inv)
    else:
        xhat, inv = _statistics(ctx, x, axes, epsilon)
    grads: dict[int, str | None] = {}
    if ctx.needs(2) and bias:
        grads[2] = e.sum_to(dy, bias, y)
    if ctx.needs(1):
        grads[1] = e.sum_to(e.op("Mul", dy, xhat), scale, y)
    if ctx.needs(0):
        grads[0] = _normalized_gradient(ctx, e.op("Mul", dy, scale), xhat, inv, axes)
    return grads


def _is_training(ctx: GradientContext) -> bool:
    if ctx.opset >= 14:
        return bool(ctx.attribute("training_mode", 0))
    return sum(1 for name in ctx.node.outputs if name) > 1


def _channel(ctx: GradientContext, values: str, rank: int) -> str:
    """A per-channel ``[C]`` tensor shaped ``[C, 1, ...]`` to broadcast against NCHW."""
    return ctx.emit.unsqueeze(values, list(range(1, rank - 1))) if rank > 2 else values


def _is_mean_of(ctx: GradientContext, node: Node | None, source: str, axes: list[int],
                keepdims: int) -> bool:
    """Whether ``node`` is ``ReduceMean(source)`` over exactly ``axes``."""
    if node is None or node.op_type != "ReduceMean" or normalize_domain(node.domain) \
            or not node.inputs or node.inputs[0] != source \
            or int(node.attribute("keepdims", 1)) != keepdims:
        return False
    if len(node.inputs) > 1 and node.inputs[1]:
        value = ctx.constant_value(node.inputs[1])
        found = None if value is None else [int(a) for a in value.reshape(-1)]
    else:
        found = node.attribute("axes")
    return found is not None and sorted(int(a) for a in found) == axes


def _saved_statistics(ctx: GradientContext, axes: list[int]) -> tuple[str, str] | None:
    """The batch's mean and biased variance ``[C]`` the forward pass already computed.

    :func:`graphpass.training._batch_norm.use_batch_statistics` computes them beside each
    node it switches and passes them as the node's inputs 3 and 4 while the gradient is
    built. They are used only when the graph proves what they are: input 3 is
    ``Reshape(ReduceMean(X, axes, keepdims=1), [-1])`` and input 4 is
    ``ReduceMean((X - that mean) * (X - that mean), axes, keepdims=0)``. Otherwise
    ``None`` (the builder computes them again).
    """
    graph = ctx.node.graph
    if graph is None or not ctx.has_input(4):
        return None
    x, mean, variance = ctx.input(0), ctx.input(3), ctx.input(4)
    flat = graph.producer(mean)
    if flat is None or flat.op_type != "Reshape" or normalize_domain(flat.domain):
        return None
    kept = flat.inputs[0]
    if not _is_mean_of(ctx, graph.producer(kept), x, axes, 1):
        return None
    squares = graph.producer(variance)
    square = graph.producer(squares.inputs[0]) if squares is not None and squares.inputs \
        else None
    if square is None or square.op_type != "Mul" or normalize_domain(square.domain) \
            or len(square.inputs) != 2 or square.inputs[0] != square.inputs[1]:
        return None
    centered = graph.producer(square.inputs[0])
    if centered is None or centered.op_type != "Sub" or normalize_domain(centered.domain) \
            or list(centered.inputs) != [x, kept] \
            or not _is_mean_of(ctx, squares, square.outputs[0], axes, 0):
        return None
    return mean, variance


@builder("BatchNormalization", frozenset({0, 1, 2, 3, 4}),
         refusals=(rank_known(0), _statistics_outputs(1, 2, 3, 4)),
         description="inference: dX = dY scale / sqrt(var + eps), and the mean and variance "
                     "read as inputs (computed ones, such as a weight's own statistics) get "
                     "theirs; training: through the batch statistics")
def _batch_norm(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.rank(x)
    axes = [0, *range(2, rank)]
    epsilon = float(ctx.attribute("epsilon", 1e-5))
    grads: dict[int, str | None] = {}
    if _is_training(ctx):
        # What stays alive from the forward pass is X alone (and [C] statistics): X̂ is
        # formed here as X * inv + shift, per-channel factors, not X - mean, which
        # onnxruntime's common-subexpression elimination would merge with the forward
        # pass's centred X and keep a full-size tensor per node to the backward pass.
        saved = _saved_statistics(ctx, axes)
        if saved is not None:
            mean_c, variance_c = saved
        else:
            mean_c = e.reshape(e.reduce_mean(x, axes, keepdims=True), [-1])
            centered = e.op("Add", x, e.op("Neg", _channel(ctx, mean_c, rank)))
            variance_c = e.reduce_mean(e.op("Mul", centered, centered), axes, keepdims=False)
        inv_c = e.op("Reciprocal", e.op("Sqrt", e.op("Add", variance_c,
                                                      e.scalar(epsilon, like=variance_c))))
        shift_c = e.op("Neg", e.op("Mul", mean_c, inv_c))
        xhat = e.op("Add", e.op("Mul", x, _channel(ctx, inv_c, rank)),
                    _channel(ctx, shift_c, rank))
        product = e.op("Mul", dy, xhat) if ctx.needs(0) or ctx.needs(1) else None
        if ctx.needs(0):
            assert product is not None
            mean_dy = e.reduce_mean(dy, axes, keepdims=True)
            mean_product = e.reduce_mean(product, axes, keepdims=True)
            factor = _channel(ctx, e.op("Mul", scale, inv_c), rank)
            inner = e.op("Sub", e.op("Sub", dy, mean_dy), e.op("Mul", xhat, mean_product))
            grads[0] = e.op("Mul", inner, factor)
        if ctx.needs(1):
            assert product is not None
            grads[1] = e.reduce_sum(product, axes, keepdims=False)
    else:
        mean, variance = ctx.input(3), ctx.input(4)
        inv_c = e.op("Reciprocal", e.op("Sqrt", e.op("Add", variance,
                                                      e.scalar(epsilon, like=variance))))
        inv = _channel(ctx, inv_c, rank)
        if ctx.needs(0):
            grads[0] = e.op("Mul", dy, _channel(ctx, e.op("Mul", scale, inv_c), rank))
        if ctx.needs(1):
            xhat = e.op("Mul", e.op("Sub", x, _channel(ctx, mean, rank)), inv)
            grads[1] = e.reduce_sum(e.op("Mul", dy, xhat), axes, keepdims=False)
        # Y = scale (X - mean) / sqrt(var + eps) + B depends on the statistics it reads:
        # torch's batch_norm(w, None, None, training=True) (a weight standardized in
        # forward) exports as this node reading the mean and variance computed from w.
        if ctx.needs(3):
            grads[3] = e.op("Neg", e.op("Mul", e.reduce_sum(dy, axes, keepdims=False),
                                        e.op("Mul", scale, inv_c)))
        if ctx.needs(4):
            centered = e.op("Sub", x, _channel(ctx, mean, rank))
            spread = e.reduce_sum(e.op("Mul", dy, centered), axes, keepdims=False)
            cube = e.op("Mul", inv_c, e.op("Mul", inv_c, inv_c))
            grads[4] = e.op("Mul", spread, e.op("Mul", scale, e.op(
                "Mul", cube, e.scalar(-0.5, like=cube))))
    if ctx.needs(2):
        grads[2] = e.reduce_sum(dy, axes, keepdims=False)
    return grads


@builder("InstanceNormalization", frozenset({0, 1, 2}), refusals=(rank_known(0),),
         description="LayerNormalization's formula per sample and channel")
def _instance_norm(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.rank(x)
    axes = list(range(2, rank))
    batch_axes = [0, *axes]
    epsilon = float(ctx.attribute("epsilon", 1e-5))
    xhat, inv = _statistics(ctx, x, axes, epsilon)
    grads: dict[int, str | None] = {}
    if ctx.needs(0):
        dxhat = e.op("Mul", dy, _channel(ctx, scale, rank))
        grads[0] = _normalized_gradient(ctx, dxhat, xhat, inv, axes)
    if ctx.needs(1):
        grads[1] = e.reduce_sum(e.op("Mul", dy, xhat), batch_axes, keepdims=False)
    if ctx.needs(2):
        grads[2] = e.reduce_sum(dy, batch_axes, keepdims=False)
    return grads


BUILDERS = [_softmax, _log_softmax, _layer_norm, _batch_norm, _instance_norm]
"""The softmax and normalization builders."""
