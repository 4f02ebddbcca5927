"""A pass class whose name cannot even be read."""

import graphpass
from graphpass.plugins import hookimpl


class _NameRaises(type(graphpass.Pass)):
    @property
    def name(cls):
        raise RuntimeError("asking for the name fails")


class NameRaises(graphpass.Pass, metaclass=_NameRaises):
    description = "Reading the name raises."


@hookimpl
def graphpass_passes():
    return [NameRaises]
