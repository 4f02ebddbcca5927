"""A pass whose ``after`` and ``before`` name passes with a typo."""

import graphpass
from graphpass.plugins import hookimpl


class Misordered(graphpass.AnalysisPass):
    name = "misordered"
    description = "Means to run after inline-functions and before topological-sort."
    after = ("inline-function",)
    before = ("topological-srot",)

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_passes():
    return [Misordered]
