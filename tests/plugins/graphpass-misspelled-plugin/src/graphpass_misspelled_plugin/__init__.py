"""Test fixture: a plugin with mistakes graphpass must report and skip."""

import graphpass
from graphpass.plugins import hookimpl


class GoodPass(graphpass.AnalysisPass):
    name = "misspelled-good"
    description = "The one usable thing this plugin gives."

    def run(self, model, context):
        return graphpass.PassResult()


class NamelessPass(graphpass.AnalysisPass):
    description = "A pass without a name."

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_pases():
    return [GoodPass]


@hookimpl
def graphpass_passes():
    return [GoodPass, NamelessPass, "not-a-pass-class"]


@hookimpl
def graphpass_checkpoint_loaders():
    return 42
