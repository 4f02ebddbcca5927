"""Reductions.

``ReduceSum``, ``ReduceMean``, ``ReduceMax``, ``ReduceMin``, ``ReduceSumSquare``,
``ReduceL1``, ``ReduceL2``, ``ReduceLogSumExp``.

Axes are read from the attribute (before opset 18; ``ReduceSum`` before 13) or the
input, which may be computed at run time: the gradient is broadcast back with
``Unsqueeze`` (when ``keepdims`` is 0) and ``Expand``, which take run-time axes.
"""

from __future__ import annotations

from collections.abc import Callable

from graphpass.training._builder import BuilderResult, GradientBuilder, GradientContext

__all__ = ["BUILDERS"]

Formula = Callable[[GradientContext, str, str, str], str]
"""``(ctx, x, y_kept, dy_kept) -> dx`` with ``y`` and ``dy`` in keepdims form."""


def _axes_as_input(op_type: str, opset: int) -> bool:
    return opset >= (13 if op_type == "ReduceSum" else 18)


def _axes(ctx: GradientContext) -> list[int] | str | None:
    """The reduced axes: numbers, a value name (run time), or ``None`` (every axis)."""
    if _axes_as_input(ctx.node.op_type, ctx.opset):
        name = ctx.input(1)
        if not name:
            return None
        value = ctx.constant_value(name)
        if value is None:
            return name
        return [int(a) for a in value.reshape(-1)] or None
    axes = ctx.attribute("axes")
    return [int(a) for a in axes] or None if axes is not None else None


def _reduction(op_type: str, formula: Formula, description: str) -> GradientBuilder:
    def build(ctx: GradientContext) -> BuilderResult:
        e = ctx.emit
        dy, x, y = ctx.required_output_gradient(0), ctx.input(0), ctx.output(0)
        axes = _axes(ctx)
        noop = bool(ctx.attribute("noop_with_empty_axes", 0))
        if axes is None and noop:
            return [dy]  # reduces nothing: the identity
        keepdims = bool(ctx.attribute("keepdims", 1))
        dy_kept, y_kept = dy, y
        if not keepdims and axes is not None:
            dy_kept = e.unsqueeze(dy, axes)
            y_kept = e.unsqueeze(y, axes)
        return [formula(ctx, x, y_kept, dy_kept)]

    return GradientBuilder(op_type, build, differentiable=frozenset({0}),
                           description=description)


def _expanded(ctx: GradientContext, x: str, dy_kept: str) -> str:
    return ctx.emit.op("Expand", dy_kept, ctx.emit.dims(x))


def _sum(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return _expanded(ctx, x, dy)


def _mean(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    count = e.op("Div", e.cast_like(e.op("Size", x), x), e.cast_like(e.op("Size", y), x))
    # Divided before it is expanded (the same values): one tensor of X's size, not two.
    return _expanded(ctx, x, e.op("Div", dy, count))


def _extremum(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    mask = e.cast_like(e.op("Equal", x, y), x)
    # Ties share the gradient evenly (as torch's amax/amin); count them per reduced slot.
    ties = e.reduce_sum(mask, _axes(ctx), keepdims=True)
    return e.op("Mul", mask, e.op("Div", dy, ties))


def _sum_square(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    return e.op("Mul", e.op("Mul", x, e.scalar(2.0, like=x)), dy)


def _l1(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return ctx.emit.op("Mul", ctx.emit.op("Sign", x), dy)


def _l2(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    zero = e.scalar(0.0, like=x)
    is_zero = e.op("Equal", y, zero)
    safe = e.op("Where", is_zero, e.scalar(1.0, like=x), y)
    scaled = e.op("Mul", e.op("Div", x, safe), dy)
    return e.op("Where", is_zero, zero, scaled)


def _log_sum_exp(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    return e.op("Mul", e.op("Exp", e.op("Sub", x, y)), dy)


BUILDERS = [
    _reduction("ReduceSum", _sum, "dX = expand(dY)"),
    _reduction("ReduceMean", _mean, "dX = expand(dY) / count"),
    _reduction("ReduceMax", _extremum, "dX = dY where X equals the max, split between ties"),
    _reduction("ReduceMin", _extremum, "dX = dY where X equals the min, split between ties"),
    _reduction("ReduceSumSquare", _sum_square, "dX = 2 X expand(dY)"),
    _reduction("ReduceL1", _l1, "dX = sign(X) expand(dY)"),
    _reduction("ReduceL2", _l2, "dX = X / Y expand(dY) (0 where Y = 0)"),
    _reduction("ReduceLogSumExp", _log_sum_exp, "dX = exp(X - Y) expand(dY)"),
]
"""The reduction builders."""
