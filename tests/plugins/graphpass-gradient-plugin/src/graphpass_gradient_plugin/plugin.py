"""The plugin's hook: gradient builders for its own operators.

Both are defined by model-local functions (so any runtime runs the forward), and their
gradients are written with standard ONNX operators:

* ``example.graphpass::ScaledTanh(X; alpha) = alpha * tanh(X)``:
  ``dX = dY * (alpha - Y * Y / alpha)``, the derivative of the body;
* ``example.graphpass::GradientReversal(X; scale) = X`` (the gradient reversal layer of
  domain-adversarial training): ``dX = -scale * dY``, **not** the derivative of its body
  (an ``Identity``), which is the point of the operator.
"""

from __future__ import annotations

from collections.abc import Iterable

from graphpass.plugins import hookimpl
from graphpass.training import BuilderResult, GradientBuilder, GradientContext, Refusal
from graphpass.training.rules import AttributeIn

DOMAIN = "example.graphpass"


def _scaled_tanh(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    y, dy = ctx.output(0), ctx.output_gradient(0)
    assert dy is not None  # the engine calls a builder only when a gradient arrives
    alpha = float(ctx.attribute("alpha", 1.0))
    squared = e.op("Div", e.op("Mul", y, y), e.scalar(alpha, like=y))
    return [e.op("Mul", dy, e.op("Sub", e.scalar(alpha, like=y), squared))]


SCALED_TANH = GradientBuilder(
    "ScaledTanh", _scaled_tanh, domain=DOMAIN, differentiable=frozenset({0}),
    refusals=(Refusal((AttributeIn("alpha", (0.0,)),), "alpha 0 divides by zero",
                      "use a non-zero alpha"),),
    description="dX = dY (alpha - Y^2 / alpha)")


def _gradient_reversal(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.output_gradient(0)
    assert dy is not None
    scale = float(ctx.attribute("scale", 1.0))
    return [e.op("Mul", dy, e.scalar(-scale, like=dy))]


GRADIENT_REVERSAL = GradientBuilder(
    "GradientReversal", _gradient_reversal, domain=DOMAIN, differentiable=frozenset({0}),
    description="dX = -scale dY (the forward is the identity)")


@hookimpl
def graphpass_gradient_builders() -> Iterable[GradientBuilder]:
    """The builders this plugin gives."""
    return [SCALED_TANH, GRADIENT_REVERSAL]
