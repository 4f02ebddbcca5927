"""Hooks whose results blow up while graphpass reads them."""

import graphpass
from graphpass.plugins import hookimpl


class Fine(graphpass.AnalysisPass):
    name = "hostile-hooks-fine"
    description = "Given before the generator fails."

    def run(self, model, context):
        return graphpass.PassResult()


def _passes():
    yield Fine
    raise RuntimeError("the generator broke halfway")


@hookimpl
def graphpass_passes():
    return _passes()


class _Exploding:
    def __iter__(self):
        raise OSError("cannot even start iterating")


@hookimpl
def graphpass_pipelines():
    return _Exploding()
