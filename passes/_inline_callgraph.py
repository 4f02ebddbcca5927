"""The call graph of a model's local functions, and the checks made on it before inlining.

One walk over every graph of the model (the main graph, every function body, and
all their subgraphs) finds the calls of model-local functions, checks that each
call fits its function, and records which function calls which in a
``networkx.DiGraph``. From that graph come the errors that must stop inlining
before anything changes (recursion, nesting deeper than ``max_depth``) and the
order in which bodies are expanded: callees before callers, so that every body is
expanded once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx

from graphpass.ir import Function, FunctionId, Graph, Model, Node, format_function_id
from graphpass.passes._inline_codes import (
    BAD_CALL,
    DEPTH_EXCEEDED,
    RECURSION,
    InlineError,
)

__all__ = ["CallGraph", "build_call_graph", "callees_first", "check_depth", "check_recursion",
           "graphs_of"]

if TYPE_CHECKING:
    import networkx as nx

_UNDEFINED = onnx.AttributeProto.UNDEFINED


def _new_graph() -> nx.DiGraph:
    import networkx as nx  # on first use: most commands never inline

    return nx.DiGraph()


@dataclass
class CallGraph:
    """Who calls which model-local function.

    Attributes:
        graph: One node per function, an edge ``caller -> callee`` for every function
            whose body (or a subgraph in it) calls another.
        main_calls: The functions the main graph (or its subgraphs) calls.
        call_sites: How many calls each function has in the whole model.
        undeclared: ``(function, attribute)`` pairs where a call passes an attribute the
            function does not declare, with how often.
    """

    graph: nx.DiGraph = field(default_factory=_new_graph)
    main_calls: set[FunctionId] = field(default_factory=set)
    call_sites: Counter[FunctionId] = field(default_factory=Counter)
    undeclared: Counter[tuple[FunctionId, str]] = field(default_factory=Counter)


def graphs_of(root: Graph) -> Iterator[Graph]:
    """Yield ``root`` and every graph nested in it."""
    yield root
    yield from root.subgraphs()


def build_call_graph(model: Model, inlined: Set[FunctionId]) -> CallGraph:
    """Find every call of a model-local function and check the calls to be inlined.

    Args:
        model: The model.
        inlined: The functions whose calls will be inlined (only those calls are checked).

    Raises:
        InlineError: A call to be inlined has more inputs or outputs than its function,
            passes an attribute of the wrong type, or refers to a function attribute
            outside any function.
    """
    functions = model.functions
    result = CallGraph()
    result.graph.add_nodes_from(functions)
    reference_types = {fid: _reference_types(functions[fid]) for fid in inlined}
    owners: list[tuple[FunctionId | None, Graph]] = [(None, model.graph)]
    owners.extend((fid, function.graph) for fid, function in functions.items())
    for owner, root in owners:
        for graph in graphs_of(root):
            for node in graph:
                callee = (node.domain, node.op_type, node.overload)
                function = functions.get(callee)
                if function is None:
                    continue
                result.call_sites[callee] += 1
                if owner is None:
                    result.main_calls.add(callee)
                else:
                    result.graph.add_edge(owner, callee)
                if callee in inlined:
                    _check_call(node, function, owner, reference_types[callee], result)
    return result


def _reference_types(function: Function) -> dict[str, int]:
    """The declared type of each function attribute, from its default or its references."""
    types: dict[str, int] = {}
    for graph in graphs_of(function.graph):
        for node in graph:
            for attribute in node.attributes.values():
                if attribute.ref_attr_name and attribute.type != _UNDEFINED:
                    types.setdefault(attribute.ref_attr_name, attribute.type)
    for name, default in function.attribute_defaults.items():
        if default.type != _UNDEFINED:
            types[name] = default.type
    return types


def _describe_call(node: Node, owner: FunctionId | None) -> str:
    place = "the main graph" if owner is None else f"function {format_function_id(owner)}"
    return f"call {node.name or '<unnamed>'!r} of {node.op_type} in {place}"


def _check_call(node: Node, function: Function, owner: FunctionId | None,
                reference_types: dict[str, int], result: CallGraph) -> None:
    where = _describe_call(node, owner)
    label = function.qualified_name
    if len(node.inputs) > len(function.inputs):
        raise InlineError(
            BAD_CALL,
            f"the call has {len(node.inputs)} inputs but function {label} takes "
            f"{len(function.inputs)}",
            where=where, hint="fix the call or the function's input list")
    if len(node.outputs) > len(function.outputs):
        raise InlineError(
            BAD_CALL,
            f"the call has {len(node.outputs)} outputs but function {label} returns "
            f"{len(function.outputs)}",
            where=where, hint="fix the call or the function's output list")
    declared = set(function.attribute_names) | set(function.attribute_defaults)
    for name, attribute in node.attributes.items():
        if attribute.ref_attr_name and owner is None:
            raise InlineError(
                BAD_CALL,
                f"attribute {name!r} refers to function attribute {attribute.ref_attr_name!r}, "
                "but the call is not inside a function",
                where=where, hint="give the attribute a value")
        if name not in declared:
            result.undeclared[(function.id, name)] += 1
            continue
        expected = reference_types.get(name, _UNDEFINED)
        if expected != _UNDEFINED and attribute.type not in (_UNDEFINED, expected):
            raise InlineError(
                BAD_CALL,
                f"attribute {name!r} is {_type_name(attribute.type)} but function {label} "
                f"uses it as {_type_name(expected)}",
                where=where, hint="pass the attribute with the type the function expects")


def _type_name(attribute_type: int) -> str:
    return str(onnx.AttributeProto.AttributeType.Name(attribute_type))


def check_recursion(call_graph: CallGraph, inlined: Set[FunctionId]) -> list[list[FunctionId]]:
    """Refuse recursion among inlined functions.

    Returns:
        Cycles made only of functions that are not inlined (left as they are), each as
        the list of functions along it, first repeated at the end.

    Raises:
        InlineError: A function to be inlined calls itself, directly or through others;
            the message names the cycle (``a::f -> a::g -> a::f``).
    """
    import networkx as nx

    graph = call_graph.graph
    kept_cycles: list[list[FunctionId]] = []
    for component in nx.strongly_connected_components(graph):
        members = sorted(component, key=format_function_id)
        first = members[0]
        if len(members) == 1 and not graph.has_edge(first, first):
            continue
        starts = [fid for fid in members if fid in inlined]
        cycle = _cycle_through(graph.subgraph(component), starts[0] if starts else first)
        if starts:
            raise InlineError(
                RECURSION,
                "recursive functions cannot be inlined: "
                + " -> ".join(format_function_id(fid) for fid in cycle),
                where=f"function {format_function_id(starts[0])}",
                hint="ONNX functions must not call themselves; exclude the functions on the "
                     "cycle from inlining (option 'exclude') or break the cycle")
        kept_cycles.append(cycle)
    return kept_cycles


def _cycle_through(component: nx.DiGraph, start: FunctionId) -> list[FunctionId]:
    """The shortest cycle through ``start`` in a strongly connected component."""
    import networkx as nx

    if component.has_edge(start, start):
        return [start, start]
    paths = (nx.shortest_path(component, successor, start)
             for successor in component.successors(start))
    return [start, *min(paths, key=lambda path: (len(path), [format_function_id(f) for f in path]))]


def callees_first(call_graph: CallGraph, inlined: Set[FunctionId]) -> list[FunctionId]:
    """The inlined functions ordered so that every callee comes before its callers."""
    import networkx as nx

    subgraph = call_graph.graph.subgraph(inlined)
    order = nx.lexicographical_topological_sort(subgraph, key=format_function_id)
    return list(reversed(list(order)))


def check_depth(call_graph: CallGraph, inlined: Set[FunctionId], max_depth: int | None) -> int:
    """Measure how deep inlined calls nest, and refuse more than ``max_depth`` levels.

    Returns:
        The deepest nesting: 1 when inlined functions call no other inlined function.

    Raises:
        InlineError: Calls nest deeper than ``max_depth``; the message names the chain.
    """
    graph = call_graph.graph
    depth: dict[FunctionId, int] = {}
    deepest_callee: dict[FunctionId, FunctionId | None] = {}
    for fid in callees_first(call_graph, inlined):
        callees = [c for c in graph.successors(fid) if c in inlined]
        best = max(callees, key=lambda c: (depth[c], format_function_id(c)), default=None)
        depth[fid] = 1 + (depth[best] if best is not None else 0)
        deepest_callee[fid] = best
    if not depth:
        return 0
    top = max(depth, key=lambda fid: (depth[fid], format_function_id(fid)))
    if max_depth is not None and depth[top] > max_depth:
        chain: list[FunctionId] = []
        current: FunctionId | None = top
        while current is not None:
            chain.append(current)
            current = deepest_callee[current]
        raise InlineError(
            DEPTH_EXCEEDED,
            f"calls nest {depth[top]} levels deep, more than max_depth={max_depth}: "
            + " > ".join(format_function_id(fid) for fid in chain),
            hint="raise 'max-depth' (or leave it unset: there is no limit by default), or "
                 "exclude the innermost functions")
    return depth[top]
