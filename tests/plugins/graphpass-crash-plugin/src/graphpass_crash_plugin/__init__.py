"""A pass with a bug: it raises, and what it says depends on the model it is given."""

from dataclasses import dataclass

import graphpass
from graphpass.plugins import hookimpl


class CountThenCrash(graphpass.AnalysisPass):
    name = "crash-count"
    description = "Counts nodes and initializers, then falls over (a bug)."

    @dataclass
    class Options:
        word: str = "boom"

    def run(self, model, context):
        nodes = len(list(model.graph))
        initializers = sorted(model.graph.initializers)
        raise RuntimeError(f"{self.options.word}: {nodes} nodes, initializers {initializers}")


@hookimpl
def graphpass_passes():
    return [CountThenCrash]
