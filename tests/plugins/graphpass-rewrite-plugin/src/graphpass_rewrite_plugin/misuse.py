"""A plugin that misuses graphpass_rewrite_rules (for graphpass's tests).

It gives a string, rules that are not onnxscript rules, and a rule whose condition
raises when it runs.
"""

from onnxscript.rewriter import pattern

import graphpass
from graphpass.plugins import hookimpl


def any_relu(op, x):
    return op.Relu(x)


def explode(context, x):
    raise RuntimeError("the condition of explode-on-relu fails on purpose")


def same(op, x):
    return op.Identity(x)


@hookimpl
def graphpass_rewrite_rules():
    return [
        "not rules at all",
        graphpass.RewriteRules("not-onnxscript-rules", [lambda op, x: x]),
        graphpass.RewriteRules("explode-on-relu", [pattern.RewriteRule(any_relu, same, explode)],
                               description="A rule whose condition raises."),
    ]
