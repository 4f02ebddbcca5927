"""Test fixture: a plugin whose hook raises (its other hook must not count either)."""

from graphpass.plugins import hookimpl


@hookimpl
def graphpass_passes():
    raise RuntimeError("the raising plugin's hook fell over")


@hookimpl
def graphpass_pipelines():
    import graphpass

    return [graphpass.Pipeline("raising-preset", "never registered", ["check"])]
