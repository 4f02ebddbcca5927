"""Passes that load fine and misbehave when they run."""

import sys

import graphpass
from graphpass.plugins import hookimpl


class Raises(graphpass.Pass):
    name = "hostile-raises"
    description = "Raises an exception that is not a GraphpassError."

    def run(self, model, context):
        raise ValueError("the hostile pass fell over")


class ReturnsNone(graphpass.Pass):
    name = "hostile-returns-none"
    description = "Returns None instead of a PassResult."

    def run(self, model, context):
        return None


class ReturnsDict(graphpass.Pass):
    name = "hostile-returns-dict"
    description = "Returns a dict instead of a PassResult."

    def run(self, model, context):
        return {"changed": True}


class BadFinding(graphpass.AnalysisPass):
    name = "hostile-bad-finding"
    description = "Reports a string instead of a Finding."

    def run(self, model, context):
        return graphpass.PassResult(findings=["not a finding"])


class FindingsNotAList(graphpass.AnalysisPass):
    name = "hostile-findings-none"
    description = "Returns findings=None."

    def run(self, model, context):
        return graphpass.PassResult(findings=None)


class FindingFields(graphpass.AnalysisPass):
    name = "hostile-finding-fields"
    description = "Reports a Finding whose fields have the wrong types."

    def run(self, model, context):
        return graphpass.PassResult(findings=[
            graphpass.Finding(404, graphpass.Severity.WARNING, None, node=3, data=[1, 2])])


class BadStats(graphpass.AnalysisPass):
    name = "hostile-bad-stats"
    description = "Returns stats with keys JSON cannot hold."

    def run(self, model, context):
        return graphpass.PassResult(stats={("a", "tuple"): object(), 7: {1, 2}})


class StatsNotAMapping(graphpass.AnalysisPass):
    name = "hostile-stats-list"
    description = "Returns stats that are a list."

    def run(self, model, context):
        return graphpass.PassResult(stats=[1, 2, 3])


class RenamesNodes(graphpass.AnalysisPass):
    name = "hostile-renames"
    description = "An analysis pass that renames every node."

    def run(self, model, context):
        for node in model.graph:
            node.name = "renamed_" + node.name
        return graphpass.PassResult()


class EditsMetadata(graphpass.AnalysisPass):
    name = "hostile-edits-metadata"
    description = "An analysis pass that changes the model's metadata and doc string."

    def run(self, model, context):
        model.metadata["touched"] = "yes"
        model.doc_string = "changed by an analysis pass"
        return graphpass.PassResult()


class Exits(graphpass.Pass):
    name = "hostile-exits"
    description = "Calls sys.exit(3)."

    def run(self, model, context):
        sys.exit(3)


class Recurses(graphpass.Pass):
    name = "hostile-recurses"
    description = "Recurses until Python gives up."

    def run(self, model, context):
        return self.run(model, context)


PASSES = [Raises, ReturnsNone, ReturnsDict, BadFinding, FindingsNotAList, FindingFields,
          BadStats, StatsNotAMapping, RenamesNodes, EditsMetadata, Exits, Recurses]


@hookimpl
def graphpass_passes():
    return PASSES
