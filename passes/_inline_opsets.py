"""Opset imports when inlining: merging a function's imports, converting its body's version.

A function imports its own operator sets. Once its body sits in a graph, that
graph's model (or enclosing function) must import every domain the body uses, at
the version the body was written for. Other domains are simply added when
missing; a different version of a domain the body uses cannot be reconciled,
except for the default ONNX domain, which onnx's version converter can translate.
The converted body is checked against the operator schemas of the target version,
so that an invalid model is never produced.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set

import onnx
import onnx.checker
import onnx.version_converter

from graphpass.ir import Graph
from graphpass.ir.proto import graph_from_proto, graph_to_proto
from graphpass.passes._inline_callgraph import graphs_of
from graphpass.passes._inline_codes import OPSET_CONFLICT, InlineError

__all__ = [
    "convert_body",
    "default_version",
    "merge_imports",
    "normalize_domain",
    "used_domains",
]

_TAG = "__graphpass_inline_{}"


def normalize_domain(domain: str) -> str:
    """``ai.onnx`` and ``""`` are the same domain; return ``""`` for both."""
    return "" if domain == "ai.onnx" else domain


def default_version(imports: Mapping[str, int]) -> int | None:
    """The version of the default ONNX domain in ``imports``, if imported."""
    if "" in imports:
        return imports[""]
    return imports.get("ai.onnx")


def used_domains(graph: Graph) -> set[str]:
    """The (normalized) domains of every node in ``graph`` and its subgraphs."""
    return {normalize_domain(node.domain) for sub in graphs_of(graph) for node in sub}


def merge_imports(target: dict[str, int], source: Mapping[str, int], domains: Set[str],
                  *, what: str, into: str) -> None:
    """Add ``source``'s imports of ``domains`` (except the default domain) to ``target``.

    Args:
        target: The imports to extend (changed in place).
        source: The imports of the body being inlined.
        domains: The domains the body uses.
        what: The body, for messages (``function a::f``).
        into: The graph it goes into, for messages (``the model``).

    Raises:
        InlineError: The body uses a domain at another version than ``target`` imports.
    """
    for domain, version in source.items():
        normalized = normalize_domain(domain)
        if normalized == "" or normalized not in domains:
            continue
        existing = target.get(normalized)
        if existing is None:
            target[normalized] = version
        elif existing != version:
            raise InlineError(
                OPSET_CONFLICT,
                f"{what} uses domain {normalized!r} at version {version}, but {into} imports "
                f"version {existing}",
                hint="no converter exists for this domain; exclude the function from inlining "
                     "(option 'exclude') or re-export the model with one version")


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    stack = [graph]
    while stack:
        current = stack.pop()
        for node in current.node:
            yield node
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    stack.append(attribute.g)
                stack.extend(attribute.graphs)


def convert_body(graph: Graph, imports: Mapping[str, int], from_version: int, to_version: int,
                 *, label: str, ir_version: int) -> Graph:
    """Convert a function body from one version of the default ONNX domain to another.

    The body is wrapped into a small model for ``onnx.version_converter`` and the
    result checked as a function against the schemas of ``to_version``. Node names,
    doc strings and ``metadata_props`` (which the converter drops) are kept.

    Args:
        graph: The body (not changed). It must contain no attribute references.
        imports: The body's opset imports.
        from_version: Its default-domain version.
        to_version: The version wanted.
        label: The function, for messages.
        ir_version: The model's IR version.

    Returns:
        A new body graph.

    Raises:
        InlineError: The converter cannot convert the body, or the result is invalid.
    """
    body = graph_to_proto(graph)
    kept: dict[str, tuple[str | None, list[onnx.StringStringEntryProto]]] = {}
    for index, node in enumerate(_all_nodes(body)):
        tag = _TAG.format(index)
        kept[tag] = (node.name if node.HasField("name") else None, list(node.metadata_props))
        node.name = tag
        del node.metadata_props[:]
    opsets = [onnx.helper.make_opsetid(d, v) for d, v in imports.items()
              if normalize_domain(d) != ""]
    opsets.append(onnx.helper.make_opsetid("", from_version))
    wrapper = onnx.helper.make_model(body, opset_imports=opsets,
                                     ir_version=max(ir_version, 7))
    problem = f"cannot convert function {label} from opset {from_version} to {to_version}"
    hint = ("re-export the model so that its functions use the model's opset, or exclude the "
            "function from inlining (option 'exclude')")
    try:
        converted = onnx.version_converter.convert_version(wrapper, to_version)
    except Exception as error:  # the converter raises bare RuntimeErrors
        raise InlineError(OPSET_CONFLICT, f"{problem}: {_first_line(error)}", hint=hint) from None
    target_imports = {normalize_domain(o.domain): o.version for o in converted.opset_import}
    target_imports[""] = to_version
    check = onnx.helper.make_function(
        "graphpass.check", "body", [i.name for i in converted.graph.input],
        [o.name for o in converted.graph.output], list(converted.graph.node),
        [onnx.helper.make_opsetid(d, v) for d, v in target_imports.items()])
    context = onnx.checker.C.CheckerContext()
    context.ir_version = max(ir_version, 7)
    context.opset_imports = target_imports
    try:
        onnx.checker.check_function(check, context)
    except onnx.checker.ValidationError as error:
        raise InlineError(OPSET_CONFLICT, f"{problem}: the converted body is invalid: "
                          f"{_first_line(error)}", hint=hint) from None
    for node in _all_nodes(converted.graph):
        if node.name in kept:
            name, metadata = kept[node.name]
            if name is None:
                node.ClearField("name")
            else:
                node.name = name
            node.metadata_props.extend(metadata)
    result = graph_from_proto(converted.graph)
    result.name = graph.name
    return result


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
