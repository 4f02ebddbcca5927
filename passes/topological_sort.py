"""The ``topological-sort`` pass: put every graph's nodes in a valid execution order."""

from __future__ import annotations

from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import Model

__all__ = ["TopologicalSort"]


class TopologicalSort(Pass):
    """Sort the nodes of every graph (main, functions, subgraphs) topologically.

    The sort is stable: nodes already in a valid order keep it.
    """

    name = "topological-sort"
    description = "Sort every graph's nodes into a valid execution order (stable)."

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Sort every graph; report whether any order changed."""
        changed = False
        for graph in list(model.graphs()):
            changed |= graph.sort()
        return PassResult(changed=changed)
