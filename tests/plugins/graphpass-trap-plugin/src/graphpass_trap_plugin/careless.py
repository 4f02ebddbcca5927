"""Passes with the bugs an author does not notice: the model is changed behind a
``changed=False``, or a node is removed while another still reads its output."""

import graphpass
from graphpass.plugins import hookimpl


class RenamesQuietly(graphpass.Pass):
    name = "careless-rename"
    description = "Renames every node of the main graph, and says it changed nothing."

    def run(self, model, context):
        for node in model.graph:
            node.name = "renamed_" + node.name
        return graphpass.PassResult(changed=False)


class DropsAProducer(graphpass.Pass):
    name = "careless-drop"
    description = "Removes the first node of the main graph, leaving its readers dangling."

    def run(self, model, context):
        first = next(iter(model.graph))
        model.graph.remove(first, safe=False)
        return graphpass.PassResult(changed=True)


@hookimpl
def graphpass_passes():
    return [RenamesQuietly, DropsAProducer]
