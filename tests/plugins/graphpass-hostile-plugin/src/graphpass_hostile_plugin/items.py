"""Items graphpass cannot use, and ones that fail only when used."""

import graphpass
from graphpass.plugins import hookimpl


class NumberName(graphpass.Pass):
    name = 42
    description = "A pass whose name is a number."


class StringRequires(graphpass.Pass):
    name = "hostile-string-requires"
    requires = "check"
    description = "requires is a string, not a list."


class InitRaises(graphpass.Pass):
    name = "hostile-init-raises"
    description = "Fails when the plan creates it."

    def __init__(self, options=None):
        raise RuntimeError("cannot be created")


class OddAttributes(graphpass.AnalysisPass):
    name = "hostile-odd-attributes"
    description = None
    codes = "not a mapping"
    Options = int

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_passes():
    return [NumberName, StringRequires, InitRaises, OddAttributes]


@hookimpl
def graphpass_pipelines():
    return [graphpass.Pipeline("hostile-broken-preset", "names a pass nobody gives",
                               ["check", "no-such-pass"])]


@hookimpl
def graphpass_checkpoint_loaders():
    return [object()]
