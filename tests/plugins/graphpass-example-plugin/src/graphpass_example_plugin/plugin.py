"""The example plugin's hook implementations (what the entry point points at)."""

from __future__ import annotations

from collections.abc import Iterable

import graphpass
from graphpass.plugins import hookimpl
from graphpass_example_plugin.passes import OpCounts, PrefixNodeNames


@hookimpl
def graphpass_passes() -> Iterable[type[graphpass.Pass]]:
    """The passes this plugin gives."""
    return [PrefixNodeNames, OpCounts]


@hookimpl
def graphpass_pipelines() -> Iterable[graphpass.Pipeline]:
    """A preset: tidy names, then count operators."""
    return [graphpass.Pipeline(
        "example-tidy", "Prefix node names and count operators.",
        ["prefix-node-names", "example-op-counts"],
        options={"prefix-node-names": {"prefix": "tidy_"}})]
