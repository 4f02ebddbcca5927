"""Softmax and normalizations.

``Softmax``, ``LogSoftmax``, ``LayerNormalization``, ``BatchNormalization`` (inference
and training semantics), ``InstanceNormalization``.

Normalizations recompute their mean and inverse standard deviation in the backward
pass (one reduction each) unless the forward node already outputs them.
"""

from __future__ import annotations

from graphpass.training.builder import BuilderResult, GradientContext, Refusal
from graphpass.training.builders._common import FIRST, builder, rank_known
from graphpass.training.gradient_rules import Check, NodeSite

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
    dy, y = ctx.output_gradient(0), ctx.output(0)
    assert dy is not None
    axis = int(ctx.attribute("axis", -1))
    inner = e.reduce_sum(e.op("Mul", dy, y), [axis], keepdims=True)
    return [e.op("Mul", y, e.op("Sub", dy, inner))]


@builder("LogSoftmax", FIRST, since=13, description="dX = dY - exp(Y) sum(dY, axis)")
def _log_softmax(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy, y = ctx.output_gradient(0), ctx.output(0)
    assert dy is not None
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
    dy, y = ctx.output_gradient(0), ctx.output(0)
    assert dy is not None
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


@builder("BatchNormalization", frozenset({0, 1, 2}),
         refusals=(rank_known(0), _statistics_outputs(1, 2, 3, 4)),
         description="inference: dX = dY scale / sqrt(var + eps); training: through the "
                     "batch statistics")
def _batch_norm(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.output_gradient(0)
    assert dy is not None
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.rank(x)
    axes = [0, *range(2, rank)]
    epsilon = float(ctx.attribute("epsilon", 1e-5))
    grads: dict[int, str | None] = {}
    if _is_training(ctx):
        xhat, inv = _statistics(ctx, x, axes, epsilon)
        if ctx.needs(0):
            dxhat = e.op("Mul", dy, _channel(ctx, scale, rank))
            grads[0] = _normalized_gradient(ctx, dxhat, xhat, inv, axes)
    else:
        mean, variance = ctx.input(3), ctx.input(4)
        inv_c = e.op("Reciprocal", e.op("Sqrt", e.op("Add", variance,
                                                      e.scalar(epsilon, like=variance))))
        inv = _channel(ctx, inv_c, rank)
        if ctx.needs(0):
            grads[0] = e.op("Mul", dy, _channel(ctx, e.op("Mul", scale, inv_c), rank))
        xhat = e.op("Mul", e.op("Sub", x, _channel(ctx, mean, rank)), inv)
    if ctx.needs(1):
        grads[1] = e.reduce_sum(e.op("Mul", dy, xhat), axes, keepdims=False)
    if ctx.needs(2):
        grads[2] = e.reduce_sum(dy, axes, keepdims=False)
    return grads


@builder("InstanceNormalization", frozenset({0, 1, 2}), refusals=(rank_known(0),),
         description="LayerNormalization's formula per sample and channel")
def _instance_norm(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.output_gradient(0)
    assert dy is not None
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
