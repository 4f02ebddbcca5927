"""Structural validation: the rules of the ONNX IR that every saved model must keep.

:func:`validate` checks what a model's *structure* must satisfy for any runtime to
accept it, using the IR's bookkeeping so that a valid model costs one pass over
its nodes:

* every name a node (or a graph output) uses is defined: in the same graph, or,
  inside a subgraph, in an enclosing graph; a function body sees only its own names;
* no graph has a cycle, and nodes come in topological order (a node after the
  producers of everything it uses, including what its subgraphs use);
* every node's domain is imported: the model's opset imports for the main graph
  and its subgraphs, the function's (or the model's) for a function body. This
  includes calls of model-local functions, whose domain must be imported too.

It does not check operator schemas, types or shapes (``onnx.checker`` and shape
inference do that; see the ``check`` and ``infer-shapes`` passes).

:func:`graphpass.load` does not validate: a model with dangling names loads, so
that passes such as ``detect-missing-buffers`` can report on it.
:func:`graphpass.save` validates before writing anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from graphpass.errors import CycleError, InvalidModelError
from graphpass.ir import Function, Graph, Model, describe_node

__all__ = ["find_problems", "validate"]

_ONNX_DOMAINS = ("", "ai.onnx")


def validate(model: Model) -> None:
    """Check that the model is structurally valid.

    Args:
        model: The model to check. It is not changed.

    Raises:
        InvalidModelError: A node or graph output uses a name nothing defines, a node
            comes before the producer of one of its inputs, or a node's domain is not
            imported. The message names the node, the value and the graph or function.
        CycleError: Nodes depend on each other in a cycle (a subclass of
            ``InvalidModelError``).
    """
    for problem in _problems(model):
        raise problem


def find_problems(model: Model) -> list[InvalidModelError]:
    """Return every structural problem :func:`validate` would raise for, in model order."""
    return list(_problems(model))


# ===================================================================== checks
def _problems(model: Model) -> Iterator[InvalidModelError]:
    roots: list[tuple[Graph, Function | None]] = [(model.graph, None)]
    roots.extend((function.graph, function) for function in model.functions.values())
    for root, function in roots:
        graphs = [root, *root.subgraphs()]
        if root.free_names:
            yield from _undefined_uses(graphs, function)
        for graph in graphs:
            problem = _order_problem(graph, function)
            if problem is not None:
                yield problem
        yield from _unimported_domains(model, graphs, function)


def _undefined_uses(graphs: list[Graph],
                    function: Function | None) -> Iterator[InvalidModelError]:
    """Find the uses behind a top-level graph's free names (only called when it has some).

    ``graphs`` is the top-level graph and all its subgraphs.
    """
    for graph in graphs:
        undefined = [f"node {describe_node(node)} uses {name!r}, which nothing defines"
                     for node in graph for name in node.inputs
                     if name and graph.resolve(name) is None]
        undefined.extend(
            f"graph output {name!r} is not defined by any node, input or initializer"
            for name in graph.output_names if name and graph.resolve(name) is None)
        where = _where(graph, function)
        for message in undefined:
            yield InvalidModelError(message, where=where, hint=_undefined_hint(function))


def _undefined_hint(function: Function | None) -> str:
    if function is not None:
        return "a function body can use only its own inputs and the outputs of its nodes"
    return ("a weight or buffer may be missing from the export (try the detect-missing-buffers "
            "pass), or a node that produced the name was removed")


def _order_problem(graph: Graph, function: Function | None) -> InvalidModelError | None:
    misplaced = graph._first_use_before_definition()
    if misplaced is None:
        return None
    where = _where(graph, function)
    try:
        graph.topological_order()
    except CycleError as error:
        return CycleError(error.message, where=where, hint=error.hint)
    node, producer, name = misplaced
    return InvalidModelError(
        f"node {describe_node(node)} uses {name!r} before node {describe_node(producer)} "
        "produces it: the nodes are not in topological order",
        where=where,
        hint="ONNX requires nodes in execution order; run the topological-sort "
             "pass (or Graph.sort())",
    )


def _unimported_domains(model: Model, graphs: list[Graph],
                        function: Function | None) -> Iterator[InvalidModelError]:
    imported: Mapping[str, int] = model.opset_imports
    if function is not None:
        imported = {**model.opset_imports, **function.opset_imports}
    known = set(imported)
    if known & set(_ONNX_DOMAINS):
        known.update(_ONNX_DOMAINS)
    reported: set[str] = set()
    for graph in graphs:
        for node in graph:
            domain = node.domain
            if domain in known or domain in reported:
                continue
            reported.add(domain)
            local = model.function_for(node) is not None
            what = "the model-local function" if local else "operator"
            owner = f"function {function.qualified_name}" if function is not None else "the model"
            yield InvalidModelError(
                f"node {describe_node(node)} calls {what} {domain or 'ai.onnx'}::{node.op_type}, "
                f"but {owner} imports no opset for domain {domain!r}",
                where=_where(graph, function),
                hint=f"add an opset import for {domain!r} (Model.opset_imports"
                     f"{'' if function is None else ' or Function.opset_imports'}); runtimes "
                     "refuse nodes of domains that are not imported",
            )


# ================================================================== describing
def _where(graph: Graph, function: Function | None) -> str:
    parts: list[str] = []
    current: Graph | None = graph
    while current is not None and current.parent is not None:
        parts.append(f"subgraph {current.name!r} of node {describe_node(current.parent)}")
        current = current.parent_graph
    if function is not None:
        parts.append(f"function {function.qualified_name}")
    else:
        parts.append(f"graph {current.name!r}" if current is not None else "graph")
    return " in ".join(parts)
