"""One plugin giving two passes of the same name, and one pass class twice."""

import graphpass
from graphpass.plugins import hookimpl


class DupeFirst(graphpass.AnalysisPass):
    name = "dupe-pass"
    description = "The first pass called dupe-pass."

    def run(self, model, context):
        return graphpass.PassResult()


class DupeSecond(graphpass.AnalysisPass):
    name = "dupe-pass"
    description = "The second pass called dupe-pass."

    def run(self, model, context):
        return graphpass.PassResult()


class GivenTwice(graphpass.AnalysisPass):
    name = "dupe-given-twice"
    description = "A class the hook returns twice."

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_passes():
    return [DupeFirst, GivenTwice, DupeSecond, GivenTwice]
