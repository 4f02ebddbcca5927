"""Elementwise operators: arithmetic with broadcasting, unary math, activations.

Gradients of broadcasting operators are reduced back to each input's shape with
:meth:`~graphpass.training.Emitter.sum_to`. At points where a function has no
derivative the convention is PyTorch's: ``Relu``'s gradient at 0 is 0, ``Abs``'s is
0, ``Max``/``Min`` split the gradient evenly between tied inputs, ``Clip`` passes it
at the bounds.
"""

from __future__ import annotations

import math
from dataclasses import replace

from graphpass.training._builder import BuilderResult, GradientBuilder, GradientContext
from graphpass.training._builders._common import FIRST, builder, unary

__all__ = ["BUILDERS"]


# ===================================================================== binary
@builder("Add", None, description="dA = sum_to(dY), dB = sum_to(dY)")
def _add(ctx: GradientContext) -> BuilderResult:
    dy, y = ctx.required_output_gradient(0), ctx.output(0)
    return {i: ctx.emit.sum_to(dy, ctx.input(i), y) for i in ctx.wanted}


@builder("Sub", None, description="dA = sum_to(dY), dB = -sum_to(dY)")
def _sub(ctx: GradientContext) -> BuilderResult:
    dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
    grads: dict[int, str | None] = {}
    if ctx.needs(0):
        grads[0] = e.sum_to(dy, ctx.input(0), y)
    if ctx.needs(1):
        grads[1] = e.op("Neg", e.sum_to(dy, ctx.input(1), y))
    return grads


@builder("Mul", None, description="dA = sum_to(dY * B), dB = sum_to(dY * A)")
def _mul(ctx: GradientContext) -> BuilderResult:
    dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
    a, b = ctx.input(0), ctx.input(1)
    grads: dict[int, str | None] = {}
    if a == b and ctx.needs(0) and ctx.needs(1):
        # A square: dA = 2 dY A, one product scaled (exactly dY A + dY A) instead of two
        # products and their sum.
        product = e.op("Mul", _unexpanded(ctx, dy, a), a)
        grads[0] = e.sum_to(e.op("Mul", product, e.scalar(2.0, like=product)), a, y)
        return grads
    if ctx.needs(0):
        grads[0] = e.sum_to(e.op("Mul", _unexpanded(ctx, dy, b), b), a, y)
    if ctx.needs(1):
        grads[1] = e.sum_to(e.op("Mul", _unexpanded(ctx, dy, a), a), b, y)
    return grads


def _unexpanded(ctx: GradientContext, dy: str, other: str) -> str:
    """``dy`` before an ``Expand`` the builders emitted, where ``other`` broadcasts it back.

    A reduction's gradient is its ``dY`` expanded to the input's shape; multiplied by a
    factor that already has the product's (static) shape, the unexpanded ``dY``
    broadcasts to the same values, and the expanded tensor is never made (onnxruntime
    would also fold it into a constant of the output's size, held for the session).
    """
    node = ctx.emit.producer(dy)
    if node is None or node.op_type != "Expand":
        return dy
    wanted = ctx.type_of(ctx.output(0)).static_shape
    # dY is shaped like Y (every gradient is shaped like its value), so the Expand's
    # input broadcasts to Y's shape: against a factor of that shape it gives the same.
    if wanted is None or ctx.type_of(other).static_shape != wanted:
        return dy
    return node.inputs[0]


@builder("Div", None, description="dA = sum_to(dY / B), dB = -sum_to(dY * Y / B)")
def _div(ctx: GradientContext) -> BuilderResult:
    dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
    a, b = ctx.input(0), ctx.input(1)
    grads: dict[int, str | None] = {}
    scaled = e.op("Div", dy, b)
    if ctx.needs(0):
        grads[0] = e.sum_to(scaled, a, y)
    if ctx.needs(1):
        grads[1] = e.op("Neg", e.sum_to(e.op("Mul", scaled, y), b, y))
    return grads


@builder("Pow", None, description="dA = dY * B * A^(B-1); dB = dY * Y * log(A) (0 where A = 0)")
def _pow(ctx: GradientContext) -> BuilderResult:
    dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
    a, b = ctx.input(0), ctx.input(1)
    grads: dict[int, str | None] = {}
    if ctx.needs(0):
        exponent = e.cast_like(b, a)
        lowered = e.op("Pow", a, e.op("Sub", exponent, e.scalar(1.0, like=exponent)))
        grads[0] = e.sum_to(e.op("Mul", dy, e.op("Mul", exponent, lowered)), a, y)
    if ctx.needs(1):
        zero = e.scalar(0.0, like=a)
        at_zero = e.op("Equal", a, zero)
        log_a = e.op("Log", e.op("Where", at_zero, e.scalar(1.0, like=a), a))
        grads[1] = e.sum_to(e.op("Mul", dy, e.op("Mul", y, log_a)), b, y)
    return grads


def _extremum(op_type: str) -> GradientBuilder:
    def build(ctx: GradientContext) -> BuilderResult:
        dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
        inputs = [name for name in ctx.node.inputs]
        masks = [e.cast_like(e.op("Equal", name, y), dy) for name in inputs]
        share = e.op("Div", dy, e.add_all(masks)) if len(masks) > 1 else dy
        return {i: e.sum_to(e.op("Mul", share, masks[i]), inputs[i], y) for i in ctx.wanted}
    return GradientBuilder(op_type, build, differentiable=None, description=(
        "the gradient goes to the inputs equal to the result, split evenly between ties"))


_sum = replace(_add, op_type="Sum", description="dA_i = sum_to(dY)")
"""``Sum`` of any number of inputs: ``Add``'s gradient, which already serves every input."""


@builder("Mean", None, description="dA_i = sum_to(dY) / n")
def _mean(ctx: GradientContext) -> BuilderResult:
    dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
    share = e.op("Div", dy, e.scalar(float(len(ctx.node.inputs)), like=dy))
    return {i: e.sum_to(share, ctx.input(i), y) for i in ctx.wanted}


@builder("Where", frozenset({1, 2}),
         description="dX = sum_to(where(C, dY, 0)), dY = sum_to(where(C, 0, dY))")
def _where(ctx: GradientContext) -> BuilderResult:
    dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
    condition = ctx.input(0)
    zero = e.scalar(0.0, like=dy)
    grads: dict[int, str | None] = {}
    if ctx.needs(1):
        grads[1] = e.sum_to(e.op("Where", condition, dy, zero), ctx.input(1), y)
    if ctx.needs(2):
        grads[2] = e.sum_to(e.op("Where", condition, zero, dy), ctx.input(2), y)
    return grads


@builder("PRelu", frozenset({0, 1}),
         description="dX = where(X > 0, dY, slope * dY), dslope = sum_to(where(X > 0, 0, dY * X))")
def _prelu(ctx: GradientContext) -> BuilderResult:
    dy, y, e = ctx.required_output_gradient(0), ctx.output(0), ctx.emit
    x, slope = ctx.input(0), ctx.input(1)
    positive = e.op("Greater", x, e.scalar(0.0, like=x))
    grads: dict[int, str | None] = {}
    if ctx.needs(0):
        grads[0] = e.sum_to(e.op("Where", positive, dy, e.op("Mul", dy, slope)), x, y)
    if ctx.needs(1):
        grads[1] = e.sum_to(e.op("Where", positive, e.scalar(0.0, like=dy),
                                 e.op("Mul", dy, x)), slope, y)
    return grads


# ====================================================================== unary
def _times(ctx: GradientContext, a: str, b: str) -> str:
    return ctx.emit.op("Mul", a, b)


def _one_minus(ctx: GradientContext, x: str) -> str:
    return ctx.emit.op("Sub", ctx.emit.scalar(1.0, like=x), x)


def _neg(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return ctx.emit.op("Neg", dy)


def _sqrt(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    return e.op("Div", e.op("Mul", dy, e.scalar(0.5, like=y)), y)


def _reciprocal(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    return e.op("Neg", e.op("Mul", dy, e.op("Mul", y, y)))


def _exp(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return _times(ctx, dy, y)


def _log(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return ctx.emit.op("Div", dy, x)


def _tanh(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return _times(ctx, dy, _one_minus(ctx, _times(ctx, y, y)))


def _sigmoid(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return _times(ctx, dy, _times(ctx, y, _one_minus(ctx, y)))


def _erf(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    gauss = e.op("Exp", e.op("Neg", e.op("Mul", x, x)))
    return _times(ctx, dy, _times(ctx, gauss, e.scalar(2.0 / math.sqrt(math.pi), like=x)))


def _relu(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return ctx.emit.where_positive(y, dy)


def _leaky_relu(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    alpha = float(ctx.attribute("alpha", 0.01))
    return e.where_positive(x, dy, e.op("Mul", dy, e.scalar(alpha, like=dy)))


def _elu(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    alpha = float(ctx.attribute("alpha", 1.0))
    # x <= 0: y = alpha * (exp(x) - 1), dy/dx = y + alpha
    return e.where_positive(x, dy, e.op("Mul", dy, e.op("Add", y, e.scalar(alpha, like=y))))


def _selu(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    alpha = float(ctx.attribute("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attribute("gamma", 1.05070102214813232421875))
    negative = e.op("Mul", e.op("Exp", x), e.scalar(alpha * gamma, like=x))
    return e.op("Mul", dy, e.where_positive(x, e.scalar(gamma, like=x), negative))


def _celu(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    alpha = float(ctx.attribute("alpha", 1.0))
    negative = e.op("Exp", e.op("Div", x, e.scalar(alpha, like=x)))
    return e.op("Mul", dy, e.where_positive(x, e.scalar(1.0, like=x), negative))


def _softplus(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return _times(ctx, dy, ctx.emit.op("Sigmoid", x))


def _softsign(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    denominator = e.op("Add", e.scalar(1.0, like=x), e.op("Abs", x))
    return e.op("Div", dy, e.op("Mul", denominator, denominator))


def _abs(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return _times(ctx, dy, ctx.emit.op("Sign", x))


def _sin(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return _times(ctx, dy, ctx.emit.op("Cos", x))


def _cos(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    return ctx.emit.op("Neg", _times(ctx, dy, ctx.emit.op("Sin", x)))


def _hard_sigmoid(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    alpha = float(ctx.attribute("alpha", 0.2))
    inside = e.op("And", e.op("Greater", y, e.scalar(0.0, like=y)),
                  e.op("Less", y, e.scalar(1.0, like=y)))
    return e.masked(e.op("Mul", dy, e.scalar(alpha, like=dy)), inside)


def _hard_swish(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    # y = x * clip(x / 6 + 1/2, 0, 1): 0 below -3, x / 3 + 1/2 between, 1 above 3 (torch)
    middle = e.op("Add", e.op("Div", x, e.scalar(3.0, like=x)), e.scalar(0.5, like=x))
    below = e.op("Less", x, e.scalar(-3.0, like=x))
    above = e.op("Greater", x, e.scalar(3.0, like=x))
    slope = e.op("Where", below, e.scalar(0.0, like=x),
                 e.op("Where", above, e.scalar(1.0, like=x), middle))
    return _times(ctx, dy, slope)


def _thresholded_relu(ctx: GradientContext, x: str, y: str, dy: str) -> str:
    e = ctx.emit
    alpha = float(ctx.attribute("alpha", 1.0))
    above = e.op("Greater", x, e.scalar(alpha, like=x))
    return e.masked(dy, above)


@builder("Gelu", since=20, description="exact (erf) or tanh-approximate, as torch computes it")
def _gelu(ctx: GradientContext) -> BuilderResult:
    x, dy = ctx.input(0), ctx.required_output_gradient(0)
    return [_gelu_gradient(ctx, x, dy, str(ctx.attribute("approximate", "none")))]


def _gelu_gradient(ctx: GradientContext, x: str, dy: str, approximate: str) -> str:
    e = ctx.emit
    half = e.scalar(0.5, like=x)
    one = e.scalar(1.0, like=x)
    if approximate == "tanh":
        beta = math.sqrt(2.0 / math.pi)
        kappa = 0.044715
        x_sq = e.op("Mul", x, x)
        inner = e.op("Mul", e.scalar(beta, like=x),
                     e.op("Add", x, e.op("Mul", e.scalar(kappa, like=x), e.op("Mul", x_sq, x))))
        tanh_inner = e.op("Tanh", inner)
        left_derivative = e.op("Mul", half, e.op("Add", one, tanh_inner))
        right_derivative = e.op(
            "Mul", e.op("Mul", e.op("Mul", half, x), _one_minus(ctx, e.op("Mul", tanh_inner,
                                                                         tanh_inner))),
            e.op("Mul", e.scalar(beta, like=x),
                 e.op("Add", one, e.op("Mul", e.scalar(3 * kappa, like=x), x_sq))))
        return e.op("Mul", dy, e.op("Add", left_derivative, right_derivative))
    cdf = e.op("Mul", half, e.op("Add", one, e.op("Erf", e.op(
        "Mul", x, e.scalar(1.0 / math.sqrt(2.0), like=x)))))
    pdf = e.op("Mul", e.scalar(1.0 / math.sqrt(2.0 * math.pi), like=x),
               e.op("Exp", e.op("Mul", e.op("Mul", x, x), e.scalar(-0.5, like=x))))
    return e.op("Mul", dy, e.op("Add", cdf, e.op("Mul", x, pdf)))


@builder("Clip", FIRST, description="dX = dY where min <= X <= max, else 0 (the mask is "
         "computed in the forward pass)")
def _clip(ctx: GradientContext) -> BuilderResult:
    x, dy, e = ctx.input(0), ctx.required_output_gradient(0), ctx.emit
    low = ctx.input(1)
    high = ctx.input(2)
    if ctx.opset < 11:  # pragma: no cover - the emitter needs opset 13
        low_value, high_value = ctx.attribute("min"), ctx.attribute("max")
        low = e.scalar(float(low_value), like=x) if low_value is not None else ""
        high = e.scalar(float(high_value), like=x) if high_value is not None else ""
    inside: str | None = None
    start = len(e.nodes)
    if low:
        inside = e.op("GreaterOrEqual", x, low)
    if high:
        upper = e.op("LessOrEqual", x, high)
        inside = upper if inside is None else e.op("And", inside, upper)
    if inside is None:
        return [dy]
    _compute_with_forward(ctx, start)
    return [e.masked(dy, inside)]


def _compute_with_forward(ctx: GradientContext, start: int) -> None:
    """Move the nodes emitted since ``start`` next to the forward node (before it).

    They read only the node's inputs: computed there, in the forward pass, their
    (boolean) result is what the backward pass keeps instead of a full-size input the
    forward pass no longer needs.
    """
    e, node = ctx.emit, ctx.node
    graph = node.graph
    if graph is None or graph is not e.graph:  # pragma: no cover - builders see the main graph
        return
    moved = e.nodes[start:]
    available = set(node.inputs)
    for new in moved:
        if not set(new.inputs) <= available:
            return  # reads a value the forward pass does not have there: leave them
        available.update(new.outputs)
    for new in moved:
        graph.remove(new, safe=False)
    graph.insert_before(node, moved)


# ============================================================= type and copy
@builder("Identity", FIRST, description="dX = dY")
def _identity_builder(ctx: GradientContext) -> BuilderResult:
    return [ctx.output_gradient(0)]


@builder("Cast", FIRST, description="dX = dY cast back to X's type")
def _cast(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    return [ctx.emit.cast_like(dy, ctx.input(0))]


@builder("CastLike", FIRST, description="dX = dY cast back to X's type")
def _cast_like(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    return [ctx.emit.cast_like(dy, ctx.input(0))]


@builder("Dropout", FIRST,
         description="dX = dY * mask / (1 - ratio) in training mode, dY otherwise")
def _dropout(ctx: GradientContext) -> BuilderResult:
    dy, e = ctx.required_output_gradient(0), ctx.emit
    training = ctx.input(2)
    if not training:
        return [dy]
    mask = e.cast_like(ctx.require_output(1), dy)
    ratio = ctx.input(1) or e.scalar(0.5, like=dy)
    ratio = e.cast_like(ratio, dy)
    scale = e.op("Div", e.scalar(1.0, like=dy), e.op("Sub", e.scalar(1.0, like=dy), ratio))
    scale = e.op("Where", training, scale, e.scalar(1.0, like=dy))
    return [e.op("Mul", e.op("Mul", dy, mask), scale)]


BUILDERS: list[GradientBuilder] = [
    _add, _sub, _mul, _div, _pow, _extremum("Max"), _extremum("Min"), _sum, _mean, _where,
    _prelu,
    unary("Neg", _neg, description="dX = -dY"),
    unary("Sqrt", _sqrt, description="dX = dY / (2 Y)"),
    unary("Reciprocal", _reciprocal, description="dX = -dY Y^2"),
    unary("Exp", _exp, description="dX = dY Y"),
    unary("Log", _log, description="dX = dY / X"),
    unary("Tanh", _tanh, description="dX = dY (1 - Y^2)"),
    unary("Sigmoid", _sigmoid, description="dX = dY Y (1 - Y)"),
    unary("Erf", _erf, description="dX = dY 2/sqrt(pi) exp(-X^2)"),
    unary("Relu", _relu, description="dX = dY where Y > 0"),
    unary("LeakyRelu", _leaky_relu, description="dX = dY where X > 0, else alpha dY"),
    unary("Elu", _elu, description="dX = dY where X > 0, else dY (Y + alpha)"),
    unary("Selu", _selu, description="dX = gamma dY where X > 0, else dY alpha gamma exp(X)"),
    unary("Celu", _celu, description="dX = dY where X > 0, else dY exp(X / alpha)"),
    unary("Softplus", _softplus, description="dX = dY sigmoid(X)"),
    unary("Softsign", _softsign, description="dX = dY / (1 + |X|)^2"),
    unary("Abs", _abs, description="dX = dY sign(X)"),
    unary("Sin", _sin, description="dX = dY cos(X)"),
    unary("Cos", _cos, description="dX = -dY sin(X)"),
    unary("HardSigmoid", _hard_sigmoid, description="dX = alpha dY where 0 < Y < 1"),
    unary("HardSwish", _hard_swish, since=14, description="as torch's hardswish_backward"),
    unary("ThresholdedRelu", _thresholded_relu, description="dX = dY where X > alpha"),
    _gelu, _clip, _identity_builder, _cast, _cast_like, _dropout,
]
"""The elementwise builders."""

