"""Small helpers the built-in builders share."""

from __future__ import annotations

from collections.abc import Callable

from graphpass.training._builder import BuilderResult, GradientBuilder, GradientContext, Refusal
from graphpass.training.rules import Check, NodeSite

__all__ = ["FIRST", "builder", "rank_known", "unary"]

FIRST = frozenset({0})
"""Only input 0 is differentiable."""


def builder(op_type: str, differentiable: frozenset[int] | None = FIRST, *,
            since: int = 1, until: int | None = None,
            refusals: tuple[Refusal, ...] = (),
            description: str = "") -> Callable[[Callable[[GradientContext], BuilderResult]],
                                               GradientBuilder]:
    """Decorate a build function into a :class:`GradientBuilder`."""
    def wrap(function: Callable[[GradientContext], BuilderResult]) -> GradientBuilder:
        return GradientBuilder(op_type, function, differentiable=differentiable,
                               since_version=since, until_version=until, refusals=refusals,
                               description=description or (function.__doc__ or "").strip())
    return wrap


def unary(op_type: str, formula: Callable[[GradientContext, str, str, str], str], *,
          since: int = 1, description: str = "") -> GradientBuilder:
    """A builder for a one-input operator: ``formula(ctx, x, y, dy) -> dx``."""
    def build(ctx: GradientContext) -> BuilderResult:
        dy = ctx.required_output_gradient(0)
        return [formula(ctx, ctx.input(0), ctx.output(0), dy)]
    return GradientBuilder(op_type, build, differentiable=FIRST, since_version=since,
                           description=description)


def rank_known(*indices: int) -> Refusal:
    """A refusal for nodes where the rank of one of ``indices`` is unknown."""
    shown = ", ".join(str(i) for i in indices)

    def unknown(site: NodeSite) -> bool:
        return any(i < len(site.node.inputs) and site.node.inputs[i]
                   and site.input_rank(i) is None for i in indices)

    return Refusal(
        (Check("rank-unknown", f"the rank of input {shown} is unknown", unknown),),
        "the builder needs to know the rank", "run infer-shapes first, or give the model's "
        "inputs shapes (a symbolic dimension is fine)")
