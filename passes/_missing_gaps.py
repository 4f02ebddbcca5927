"""Where a model needs a tensor that nothing provides (private to ``detect-missing-buffers``).

Three kinds of gap, found in one linear walk over every graph of the model:

* a name that nodes (or graph outputs) use but that no enclosing scope defines:
  not a graph input, initializer or node output here or, for a subgraph, in any
  graph around it (function bodies have no outer scope);
* an initializer whose data is not all there (embedded bytes shorter than the
  shape says, an external data file missing or too short);
* a graph input of the main graph that has no initializer: a candidate, which the
  classifier later keeps only if it stands for model state rather than data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from graphpass.ir import CAPTURE, Function, Graph, Model, Node, Use

__all__ = ["Consumer", "Gap", "Problem", "find_gaps", "graph_path"]

Problem = Literal["undefined", "no-data", "input"]
"""``undefined``: used, never defined; ``no-data``: an initializer without its data;
``input``: a graph input without an initializer (state or data: the classifier decides)."""


@dataclass(frozen=True)
class Consumer:
    """One use of a missing name.

    Attributes:
        node: The consuming node, or ``None`` for a graph output.
        graph: Where the use lies, e.g. ``main > If 'cond' > then_branch``.
    """

    node: Node | None
    graph: str

    @property
    def node_name(self) -> str | None:
        """The node's name (``op_type`` when unnamed), or ``None`` for a graph output."""
        if self.node is None:
            return None
        name: str = self.node.name or self.node.op_type
        return name

    def describe(self) -> str:
        """``Mul 'node_mul'``, or ``graph output`` (with the subgraph when nested)."""
        node = self.node
        if node is None:
            text = "graph output"
        else:
            text = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        if self.graph != "main":
            text = f"{text} in {self.graph}"
        return text

    def to_dict(self) -> dict[str, str | None]:
        """A JSON-ready description."""
        node = self.node
        return {"node": node.name if node is not None else None,
                "op_type": node.op_type if node is not None else None,
                "graph": self.graph}


@dataclass
class Gap:
    """A tensor the model needs and nothing (so far) provides.

    Attributes:
        name: The value name.
        problem: What is wrong (see :data:`Problem`).
        function: The function whose body has the gap, or ``None`` for the main graph.
        consumers: Every use, in every graph of that scope.
        graph: The graph that declares the name (for inputs and initializers).
        detail: What is wrong with an initializer's data.
        input_index: The position among the main graph's inputs, for inputs.
    """

    name: str
    problem: Problem
    function: Function | None = None
    consumers: list[Consumer] = field(default_factory=list)
    graph: Graph | None = None
    detail: str | None = None
    input_index: int = -1


def graph_path(graph: Graph) -> str:
    """Where ``graph`` lies: ``main``, ``main > If 'cond' > then_branch``, or ``body``.

    A function body is ``body``; the function itself is named separately in findings.
    """
    parts: list[str] = []
    current = graph
    while current.parent is not None:
        node = current.parent
        attribute_name = next(
            (name for name, attribute in node.attributes.items()
             if any(g is current for g in attribute.graphs)), "?")
        label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        parts.append(f"{label} > {attribute_name}")
        enclosing = current.parent_graph
        if enclosing is None:
            break
        current = enclosing
    root = "body" if current.function is not None else "main"
    return " > ".join([root, *reversed(parts)])


def find_gaps(model: Model) -> list[Gap]:
    """Find every gap in ``model``: undefined names, data-less initializers, bare inputs.

    Returns:
        The gaps in model order: main graph (and its subgraphs) first, then functions.
    """
    gaps: list[Gap] = []
    scopes: list[tuple[Function | None, Graph]] = [(None, model.graph)]
    scopes.extend((function, function.graph) for function in model.functions.values())
    for function, root in scopes:
        gaps.extend(_undefined(function, root))
        for graph in _graphs(root):
            gaps.extend(_dataless(function, graph))
    gaps.extend(_bare_inputs(model.graph))
    return gaps


def _graphs(root: Graph) -> Iterator[Graph]:
    yield root
    yield from root.subgraphs()


def _undefined(function: Function | None, root: Graph) -> list[Gap]:
    by_name: dict[str, Gap] = {}
    for graph in _graphs(root):
        if not graph.free_names:
            continue
        enclosing = graph.parent_graph
        path = graph_path(graph)
        for name in graph.free_names:
            if enclosing is not None and enclosing.resolve(name) is not None:
                continue  # an outer scope defines it: a legal capture
            direct = [use for use in graph.uses(name) if use.slot != CAPTURE]
            if not direct:
                continue  # only used inside deeper subgraphs: reported there
            gap = by_name.get(name)
            if gap is None:
                gap = by_name[name] = Gap(name, "undefined", function)
            gap.consumers.extend(_consumer(use, path) for use in direct)
    return list(by_name.values())


def _dataless(function: Function | None, graph: Graph) -> Iterator[Gap]:
    if not graph.initializers:
        return
    path = graph_path(graph)
    for name, tensor in graph.initializers.items():
        problem = tensor.data_problem()
        if problem is None:
            continue
        consumers = [_consumer(use, path) for use in graph.uses(name)]
        yield Gap(name, "no-data", function, consumers, graph, problem)


def _bare_inputs(graph: Graph) -> Iterator[Gap]:
    path = graph_path(graph)
    for index, value in enumerate(graph.inputs):
        if value.name in graph.initializers or value.name in graph.sparse_initializers:
            continue
        consumers = [_consumer(use, path) for use in value.uses]
        yield Gap(value.name, "input", None, consumers, graph, input_index=index)


def _consumer(use: Use, path: str) -> Consumer:
    return Consumer(use.node, path)
