"""Test fixture: a plugin whose passes hook works but whose loaders hook raises.

The plugin fails as a whole (nothing it gives is used), but graphpass knows which pass
it would have given, and says so when that pass is asked for.
"""

import graphpass
from graphpass.plugins import hookimpl


class HalfPass(graphpass.AnalysisPass):
    name = "half-pass"
    description = "Never registered: its plugin's other hook raises."

    def run(self, model, context):
        return graphpass.PassResult()


@hookimpl
def graphpass_passes():
    return [HalfPass]


def _open_the_loader():
    raise RuntimeError("the half plugin's loader hook fell over")


@hookimpl
def graphpass_checkpoint_loaders():
    return [_open_the_loader()]
