"""The ``remove-unused`` pass: drop what nothing uses.

* **Nodes** whose outputs nothing reads: no node, no subgraph (through a capture) and
  no graph output. Removing one can make its producers dead too; a worklist follows
  those, so the pass is linear in the number of nodes. ONNX operators have no side
  effects, so an unread node computes nothing anyone sees. This holds in the main
  graph, in subgraphs (a subgraph's outputs are its uses) and in function bodies.
* **Initializers** nothing reads (in any graph). An initializer that is also a graph
  input is part of the model's interface and stays.
* **Functions** no longer called from the main graph, from subgraphs, or from functions
  that are themselves called.
* **Opset imports** of domains no node and no kept function uses. The default domain
  (``""`` / ``ai.onnx``) always stays.

Declarations (``value_info``) of removed values go with them; everything else stays.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from graphpass.checkpoint import ReconcileResult
from graphpass.findings import Finding, Severity
from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import FunctionId, Graph, Model, Node
from graphpass.torch.folding import UnrestorableParameters
from graphpass.training.rules import SelectionReport

__all__ = ["RemoveUnused"]

_DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})


class RemoveUnused(Pass):
    """Remove nodes, initializers, functions and opset imports nothing uses."""

    name = "remove-unused"
    description = "Remove nodes, initializers, functions and opset imports nothing uses."
    codes: ClassVar[Mapping[str, str]] = {
        "GP520": "remove-unused removed functions that nothing calls any more."}
    # Removing what nothing reads leaves these true: the checkpoint mapping (an entry for
    # a removed initializer goes unused), the lost parameters, and the problems reported
    # of a trainable/frozen request (a pattern that matched nothing still matches nothing).
    preserves = (ReconcileResult, UnrestorableParameters, SelectionReport)

    @dataclass
    class Options:
        """What to remove (all by default)."""

        nodes: bool = True
        initializers: bool = True
        functions: bool = True
        opset_imports: bool = True

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Remove what nothing uses; report counts in ``stats``."""
        stats: dict[str, int] = {}
        findings: list[Finding] = []
        if self.options.nodes:
            stats["nodes"] = _remove_dead_nodes(model)
        if self.options.functions:
            removed = _remove_uncalled_functions(model)
            stats["functions"] = len(removed)
            if removed:
                findings.append(Finding(
                    "GP520", Severity.INFO,
                    f"removed {len(removed)} function{'s' * (len(removed) != 1)} nothing "
                    f"calls: {', '.join(model.function_label(f) for f in removed)}",
                    data={"functions": [model.function_label(f) for f in removed]}))
        if self.options.initializers:
            stats["initializers"] = _remove_unused_initializers(model)
        if self.options.opset_imports:
            stats["opset imports"] = _remove_unused_opsets(model)
        return PassResult(changed=any(stats.values()), findings=findings,
                          stats={f"removed {key}": value for key, value in stats.items()})


def _attached(graph: Graph | None) -> bool:
    """Whether ``graph`` still hangs from the model (not from a removed node)."""
    return graph is not None and graph.model is not None


def _remove_dead_nodes(model: Model) -> int:
    removed = 0
    stack: list[Node] = list(model.walk())
    while stack:
        node = stack.pop()
        graph = node.graph
        if graph is None or not _attached(graph):
            continue
        is_used = graph.is_used
        if any(map(is_used, filter(None, node.outputs))):
            continue
        feeders = []
        for name in (*node.inputs, *node.captured_names):
            if name:
                value = graph.resolve(name)
                if value is not None and value.producer is not None:
                    feeders.append(value.producer)
        removed += 1 + sum(1 for subgraph in node.subgraphs() for _ in subgraph.walk())
        outputs = [name for name in node.outputs if name]
        graph.remove(node)
        for name in outputs:
            if name in graph.values and not graph.is_used(name) and not graph.is_defined(name):
                graph.drop_value(name)
        stack.extend(feeders)
    return removed


def _calls(graph: Graph, model: Model) -> Iterator[FunctionId]:
    for node in graph.walk():
        function = model.function_for(node)
        if function is not None:
            yield function.id


def _remove_uncalled_functions(model: Model) -> list[FunctionId]:
    if not model.functions:  # nothing to remove: no walk over the graphs for calls
        return []
    live: set[FunctionId] = set()
    stack = list(_calls(model.graph, model))
    while stack:
        key = stack.pop()
        if key in live:
            continue
        live.add(key)
        stack.extend(_calls(model.functions[key].graph, model))
    dead = [key for key in model.functions if key not in live]
    for key in dead:
        model.remove_function(key)
    return dead


def _remove_unused_initializers(model: Model) -> int:
    removed = 0
    for graph in list(model.graphs()):
        inputs = set(graph.input_names)
        for name in list(graph.initializers):
            if name not in inputs and not graph.is_used(name):
                graph.remove_initializer(name)
                if name in graph.values and not graph.is_defined(name):
                    graph.drop_value(name)
                removed += 1
    return removed


def _remove_unused_opsets(model: Model) -> int:
    used: set[str] = set(_DEFAULT_DOMAINS)
    for node in model.walk():
        used.add(node.domain)
    for function in model.functions.values():
        used.add(function.domain)
    unused = [domain for domain in model.opset_imports if domain not in used]
    for domain in unused:
        del model.opset_imports[domain]
    return len(unused)
