"""A readable summary of a model (what ``graphpass inspect`` prints).

Nodes by operator, functions and how often each is called, initializers and their
bytes (embedded and external, by file), opset imports, and the graph's inputs and
outputs with their types. Weights are never read: sizes come from types and shapes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from graphpass.ir import Model, Value, dtype_name, format_function_id
from graphpass.reporting._tables import print_trimmed

__all__ = ["INSPECT_SCHEMA_ID", "format_bytes", "model_summary", "render_summary"]

INSPECT_SCHEMA_ID = "graphpass-inspect/1"
"""The ``schema`` field of ``graphpass inspect --format json``."""


def model_summary(model: Model) -> dict[str, Any]:
    """Describe a model as a JSON-ready dictionary.

    Keys: ``schema`` (``graphpass-inspect/1``), ``model`` (ir_version, producer, domain,
    model_version, doc_string, metadata),
    ``opset_imports``, ``inputs``/``outputs`` (name, type, shape), ``nodes`` (total,
    main graph, in subgraphs, in functions, ``by_op`` as ``domain::op`` counts over the
    main graph and its subgraphs), ``functions`` (id, nodes, calls), ``initializers``
    (count, bytes, embedded_bytes, external_bytes, external files with tensors and
    bytes, and the largest few).
    """
    function_ids = set(model.functions)
    calls: Counter[tuple[str, str, str]] = Counter()
    by_op: Counter[str] = Counter()
    main_nodes = len(model.graph)
    walked = 0
    for node in model.graph.walk():
        walked += 1
        by_op[_op_label(node.domain, node.op_type)] += 1
        key = (node.domain, node.op_type, node.overload)
        if key in function_ids:
            calls[key] += 1
    function_nodes = 0
    for function in model.functions.values():
        for node in function.graph.walk():
            function_nodes += 1
            key = (node.domain, node.op_type, node.overload)
            if key in function_ids:
                calls[key] += 1
    tensors = [t for graph in model.graphs() for t in graph.initializers.values()]
    external: dict[str, dict[str, int]] = {}
    embedded_bytes = 0
    for tensor in tensors:
        if tensor.is_external:
            path = tensor.external_path
            label = _relative(path, model.base_dir) if path is not None else "?"
            entry = external.setdefault(label, {"tensors": 0, "bytes": 0})
            entry["tensors"] += 1
            entry["bytes"] += tensor.nbytes
        else:
            embedded_bytes += tensor.nbytes
    largest = sorted(tensors, key=lambda t: -t.nbytes)[:5]
    return {
        "schema": INSPECT_SCHEMA_ID,
        "model": {
            "path": str(model.source_path) if model.source_path else None,
            "ir_version": model.ir_version,
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "domain": model.domain,
            "model_version": model.model_version,
            "doc_string": model.doc_string[:200],
            "metadata": dict(model.metadata),
        },
        "opset_imports": {domain or "ai.onnx": version
                          for domain, version in sorted(model.opset_imports.items())},
        "inputs": [_value(v) for v in model.graph.inputs
                   if v.name not in model.graph.initializers],
        "outputs": [_value(v) for v in model.graph.outputs],
        "nodes": {
            "total": walked + function_nodes,
            "main_graph": main_nodes,
            "in_subgraphs": walked - main_nodes,
            "in_functions": function_nodes,
            "by_op": dict(by_op.most_common()),
        },
        "functions": [
            {"id": format_function_id(fid), "nodes": sum(1 for _ in f.graph.walk()),
             "calls": calls.get(fid, 0)}
            for fid, f in model.functions.items()
        ],
        "initializers": {
            "count": len(tensors),
            "bytes": embedded_bytes + sum(e["bytes"] for e in external.values()),
            "embedded_bytes": embedded_bytes,
            "external_bytes": sum(e["bytes"] for e in external.values()),
            "external_files": external,
            "largest": [{"name": t.name, "type": dtype_name(t.dtype), "shape": list(t.shape),
                         "bytes": t.nbytes} for t in largest],
        },
    }


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print a summary made by :func:`model_summary` as a few small tables."""
    info = summary["model"]
    console.print(Text(info["path"] or "model", style="bold"))
    opsets = ", ".join(f"{d} {v}" for d, v in summary["opset_imports"].items())
    console.print(f"IR version {info['ir_version']}; opsets: {opsets}")
    if info["producer"]:
        console.print(f"produced by {info['producer']}")
    nodes = summary["nodes"]
    console.print(f"{nodes['total']} nodes: {nodes['main_graph']} in the main graph, "
                  f"{nodes['in_subgraphs']} in subgraphs, {nodes['in_functions']} in functions")
    inits = summary["initializers"]
    console.print(f"{inits['count']} initializers, {format_bytes(inits['bytes'])} "
                  f"({format_bytes(inits['embedded_bytes'])} embedded, "
                  f"{format_bytes(inits['external_bytes'])} external)")
    for title, key in (("inputs", "inputs"), ("outputs", "outputs")):
        table = _table("name", "type", "shape")
        for value in summary[key]:
            table.add_row(value["name"], value["type"] or "?", _shape(value["shape"]))
        _section(console, title, table)
    ops = _table("operator", "count")
    for op, count in nodes["by_op"].items():
        ops.add_row(op, str(count))
    _section(console, "nodes by operator (main graph and subgraphs)", ops)
    if summary["functions"]:
        functions = _table("function", "nodes", "calls")
        for entry in summary["functions"]:
            functions.add_row(entry["id"], str(entry["nodes"]), str(entry["calls"]))
        _section(console, "functions", functions)
    if inits["external_files"]:
        files = _table("file", "tensors", "size")
        for name, entry in inits["external_files"].items():
            files.add_row(name, str(entry["tensors"]), format_bytes(entry["bytes"]))
        _section(console, "external data", files)
    if inits["largest"]:
        largest = _table("name", "type", "shape", "size")
        for entry in inits["largest"]:
            largest.add_row(entry["name"], entry["type"], _shape(entry["shape"]),
                            format_bytes(entry["bytes"]))
        _section(console, "largest initializers", largest)


def _section(console: Console, title: str, table: Table) -> None:
    console.print()
    console.print(Text(title, style="bold"))
    print_trimmed(console, table)


def _table(*columns: str) -> Table:
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="dim")
    for column in columns:
        table.add_column(column)
    return table


def _value(value: Value) -> dict[str, Any]:
    elem_type = value.elem_type
    type_proto = value.type
    if elem_type is not None:
        type_name: str | None = dtype_name(elem_type)
    elif type_proto is not None:
        type_name = type_proto.WhichOneof("value")
    else:
        type_name = None
    shape = value.shape
    return {"name": value.name, "type": type_name,
            "shape": list(shape) if shape is not None else None}


def _op_label(domain: str, op_type: str) -> str:
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def _shape(shape: list[Any] | None) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def format_bytes(count: int) -> str:
    """A byte count for people: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    amount = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{int(amount)} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} GiB"  # pragma: no cover


def _relative(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            pass
    return str(path)
