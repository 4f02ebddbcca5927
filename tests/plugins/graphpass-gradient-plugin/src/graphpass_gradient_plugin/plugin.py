"""The plugin's hook: a gradient builder for its own operator.

``example.graphpass::ScaledTanh(X; alpha) = alpha * tanh(X)`` is defined by a
model-local function (so any runtime runs it); its gradient is
``dX = dY * (alpha - Y * Y / alpha)``, written with standard ONNX operators.
"""

from __future__ import annotations

from collections.abc import Iterable

from graphpass.plugins import hookimpl
from graphpass.training import BuilderResult, GradientBuilder, GradientContext, Refusal
from graphpass.training.gradient_rules import AttributeIn

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


@hookimpl
def graphpass_gradient_builders() -> Iterable[GradientBuilder]:
    """The builders this plugin gives."""
    return [SCALED_TANH]
