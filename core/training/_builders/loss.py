"""The cross-entropy losses.

``SoftmaxCrossEntropyLoss`` and ``NegativeLogLikelihoodLoss``, with class weights,
``ignore_index`` and every reduction.
"""

from __future__ import annotations

import numpy as np

from graphpass.training._builder import BuilderResult, GradientContext
from graphpass.training._builders._common import builder

__all__ = ["BUILDERS"]


def _log_prob_gradient(ctx: GradientContext, reference: str, dy: str) -> str:
    """d(loss)/d(log-probabilities): minus each element's scale at its target class.

    ``reference`` is the tensor of log-probabilities (its shape and type).
    """
    e = ctx.emit
    target, weight = ctx.input(1), ctx.input(2)
    ignore = ctx.attribute("ignore_index")
    reduction = str(ctx.attribute("reduction", "mean"))
    safe_target = target
    scale: str | None = None  # the per-element weight; None means 1
    if ignore is not None:
        ignored = e.op("Equal", target, e.constant(np.array(int(ignore)),
                                                   e.elem_type(target) or 7))
        safe_target = e.op("Where", ignored, e.constant(np.array(0), e.elem_type(target) or 7),
                           target)
        scale = e.cast_like(e.op("Not", ignored), reference)
    if weight:
        picked = e.op("Gather", weight, safe_target, axis=0)
        scale = picked if scale is None else e.op("Mul", picked, scale)
    if reduction == "none":
        per_element = dy if scale is None else e.op("Mul", dy, scale)
    else:
        if scale is None:
            per_element = e.op("Expand", dy, e.shape(target))
        else:
            per_element = e.op("Mul", dy, scale)
        if reduction == "mean":
            total = (e.cast_like(e.op("Size", target), reference) if scale is None
                     else e.reduce_sum(scale, None, keepdims=False))
            per_element = e.op("Div", per_element, total)
    zeros = e.zeros_like(reference)
    scattered = e.op("ScatterElements", zeros, e.unsqueeze(safe_target, [1]),
                     e.unsqueeze(per_element, [1]), axis=1)
    return e.op("Neg", scattered)


@builder("NegativeLogLikelihoodLoss", frozenset({0}),
         description="dInput = -(scale at the target class), 0 elsewhere")
def _nll(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    return [_log_prob_gradient(ctx, ctx.input(0), dy)]


@builder("SoftmaxCrossEntropyLoss", frozenset({0}),
         description="dScores = softmax(scores) * scale - (scale at the target class)")
def _softmax_cross_entropy(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    log_prob = ctx.require_output(1)
    dy, d_log_prob = ctx.output_gradient(0), ctx.output_gradient(1)
    grad: str | None = (_log_prob_gradient(ctx, ctx.input(0), dy) if dy is not None
                        else None)
    if d_log_prob is not None:
        grad = d_log_prob if grad is None else e.op("Add", grad, d_log_prob)
    assert grad is not None
    total = e.reduce_sum(grad, [1], keepdims=True)
    return [e.op("Sub", grad, e.op("Mul", e.op("Exp", log_prob), total))]


BUILDERS = [_nll, _softmax_cross_entropy]
"""The loss builders."""
