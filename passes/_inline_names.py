"""Fresh, readable names for the values and nodes that inlining copies out of a body.

A copied name is the call site's name, a slash, and the name in the body
(``layer1/Add_output_0``), so a value in the inlined model still tells where it
came from. The call-site prefix is made unique among the prefixes already given
out (``layer1``, ``layer1_1`` ...), and each name is checked against every name in
the model; a clash (rare) gets a numeric suffix. No global counter is hunted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from graphpass.ir import Model, Node

__all__ = ["FreshNames"]


class FreshNames:
    """Hands out names that no graph of the model uses yet."""

    def __init__(self, taken_values: Iterable[str], taken_nodes: Iterable[str]):
        """Start from the names already in use.

        Args:
            taken_values: Every value name in the model (all graphs, at any depth).
            taken_nodes: Every node name in the model.
        """
        self._values = set(taken_values)
        self._nodes = set(taken_nodes)
        self._prefixes: set[str] = set()
        self._next_suffix: dict[str, int] = {}

    @classmethod
    def for_model(cls, model: Model) -> FreshNames:
        """Collect the names in use in ``model``: main graph, function bodies, subgraphs."""
        values: set[str] = set()
        nodes: set[str] = set()
        for graph in model.graphs():
            values.update(graph.values)
            nodes.update(node.name for node in graph)
        return cls(values, nodes)

    def prefix_for(self, call: Node) -> str:
        """A prefix for the names copied out of a body at ``call``, unique per call site."""
        base = call.name or call.op_type
        prefix = base
        while prefix in self._prefixes:
            suffix = self._next_suffix.get(base, 1)
            self._next_suffix[base] = suffix + 1
            prefix = f"{base}_{suffix}"
        self._prefixes.add(prefix)
        return prefix

    def value(self, prefix: str, name: str) -> str:
        """A new value name ``prefix/name`` (with a suffix if that is taken)."""
        return self._claim(self._values, f"{prefix}/{name}")

    def node(self, prefix: str, name: str) -> str:
        """A new node name ``prefix/name`` (with a suffix if that is taken)."""
        return self._claim(self._nodes, f"{prefix}/{name}")

    def values(self, prefix: str, names: Sequence[str]) -> list[str]:
        """New value names ``prefix/name`` for distinct ``names``, as :meth:`value` gives."""
        return self._claim_all(self._values, [f"{prefix}/{name}" for name in names], True)

    def nodes(self, prefix: str, labels: Sequence[str], distinct: bool) -> list[str]:
        """New node names ``prefix/label``, in order, as :meth:`node` gives one by one.

        ``distinct`` says that no two labels are the same (then one set operation
        checks them all).
        """
        return self._claim_all(self._nodes, [f"{prefix}/{label}" for label in labels],
                               distinct)

    @classmethod
    def _claim_all(cls, taken: set[str], wanted: list[str], distinct: bool) -> list[str]:
        if distinct and taken.isdisjoint(wanted):  # the usual case: none taken yet
            taken.update(wanted)
            return wanted
        return [cls._claim(taken, name) for name in wanted]

    @staticmethod
    def _claim(taken: set[str], wanted: str) -> str:
        """``wanted``, else ``wanted_1``, ``wanted_2`` ...: the first not taken, now taken."""
        name, suffix = wanted, 0
        while name in taken:
            suffix += 1
            name = f"{wanted}_{suffix}"
        taken.add(name)
        return name
