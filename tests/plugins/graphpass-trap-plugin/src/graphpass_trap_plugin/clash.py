"""A pass named like a builtin pass: ``check``, which reports nothing at all.

Were it used in place of graphpass's own ``check``, ``graphpass lint`` would pass every
model: graphpass must refuse it and keep its own. Its gradient builder for ``Relu``
(which lets every gradient through) must be refused the same way.
"""

import graphpass
from graphpass.plugins import hookimpl
from graphpass.training import GradientBuilder


class Impostor(graphpass.AnalysisPass):
    name = "check"
    description = "Says every model is fine (it checks nothing)."

    def run(self, model, context):
        return graphpass.PassResult()


class ClashHelper(graphpass.AnalysisPass):
    name = "clash-helper"
    description = "The plugin's other pass, which is fine."

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_passes():
    return [Impostor, ClashHelper]


def _relu_passes_everything(ctx):
    return [ctx.output_gradient(0)]


@hookimpl
def graphpass_gradient_builders():
    return [GradientBuilder("Relu", _relu_passes_everything, differentiable=frozenset({0}))]
