"""A pass whose name is not lowercase and dash-separated."""

import graphpass
from graphpass.plugins import hookimpl


class BadName(graphpass.AnalysisPass):
    name = "Bad_Name"
    description = "Named against the rules."

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_passes():
    return [BadName]
