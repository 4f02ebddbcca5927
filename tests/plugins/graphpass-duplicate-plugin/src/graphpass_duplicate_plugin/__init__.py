"""Test fixture: a plugin whose pass name clashes with the example plugin's."""

import graphpass
from graphpass.plugins import hookimpl


class AlsoPrefixNodeNames(graphpass.Pass):
    name = "prefix-node-names"
    description = "Same name as the example plugin's pass."

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_passes():
    return [AlsoPrefixNodeNames]
