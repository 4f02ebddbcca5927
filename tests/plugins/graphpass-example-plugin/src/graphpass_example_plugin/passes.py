"""The example plugin's passes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import graphpass
from graphpass.ir import Model


class PrefixNodeNames(graphpass.Pass):
    """Give every node of the main graph a name with a prefix (unnamed ones get a number)."""

    name = "prefix-node-names"
    description = "Prefix the names of the main graph's nodes (and name unnamed ones)."
    after = ("inline-functions",)

    @dataclass
    class Options:
        prefix: str = "ex_"
        only_ops: list[str] = field(default_factory=list)
        unnamed: Literal["number", "op-type"] = "number"

    def run(self, model: Model, context: graphpass.PassContext) -> graphpass.PassResult:
        renamed = 0
        for index, node in enumerate(model.graph):
            if self.options.only_ops and node.op_type not in self.options.only_ops:
                continue
            if node.name.startswith(self.options.prefix):
                continue
            base = node.name or (str(index) if self.options.unnamed == "number"
                                 else f"{node.op_type}{index}")
            node.name = f"{self.options.prefix}{base}"
            renamed += 1
        return graphpass.PassResult(changed=renamed > 0, stats={"renamed nodes": renamed})


class OpCounts(graphpass.AnalysisPass):
    """Report how many nodes use each operator; warn above a limit."""

    name = "example-op-counts"
    description = "Report node counts per operator; warn when the graph has too many nodes."
    # Optional: short descriptions of the codes, used as rule texts in SARIF reports.
    codes: ClassVar[dict[str, str]] = {
        "GP901": "How many nodes use each operator.",
        "GP902": "The main graph has more nodes than max-nodes.",
    }

    @dataclass
    class Options:
        max_nodes: int = 1000

    def run(self, model: Model, context: graphpass.PassContext) -> graphpass.PassResult:
        counts = Counter(node.op_type for node in model.graph)
        findings = [graphpass.Finding(
            "GP901", graphpass.Severity.INFO,
            "operators: " + ", ".join(f"{op} x{n}" for op, n in sorted(counts.items())),
            data=dict(counts))]
        total = sum(counts.values())
        if total > self.options.max_nodes:
            findings.append(graphpass.Finding(
                "GP902", graphpass.Severity.WARNING,
                f"the main graph has {total} nodes, more than max-nodes={self.options.max_nodes}",
                hint="raise max-nodes, or simplify the model"))
        return graphpass.PassResult(findings=findings, stats={"nodes": total})
