"""Two pattern rewrites, each a pass: ``fold-double-negation``, ``drop-multiply-by-one``."""

from collections.abc import Iterable

from onnxscript.rewriter import pattern

import graphpass
from graphpass.plugins import hookimpl


def double_negation(op, x):
    return op.Neg(op.Neg(x))


def multiply_by_one(op, x, one):
    return op.Mul(x, one)


def is_one(context, x, one):
    """Only when ``one`` is a constant scalar 1 (so that it broadcasts nothing)."""
    value = one.const_value
    return value is not None and value.numpy().shape == () and bool(value.numpy() == 1)


def same(op, x, **_):
    return op.Identity(x)


@hookimpl
def graphpass_rewrite_rules() -> Iterable[graphpass.RewriteRules]:
    return [
        graphpass.RewriteRules(
            "fold-double-negation", [pattern.RewriteRule(double_negation, same)],
            description="Replace Neg(Neg(x)) by x."),
        graphpass.RewriteRules(
            "drop-multiply-by-one", [pattern.RewriteRule(multiply_by_one, same, is_one)],
            description="Replace x * 1 by x (1: a constant scalar).",
            after=["fold-double-negation"]),
    ]
