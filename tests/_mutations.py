"""Hostile model files and a sandboxed runner for them (not a test module).

Used by ``tests/test_fuzz_mutations.py`` (a short, seeded slice) and by
``benchmarks/fuzz_mutations.py`` (runs for a chosen time and prints counts).

* :func:`seed_models` gives small valid models covering what graphpass must carry:
  initializers, value_info, metadata, local functions with attribute references and
  defaults, ``If``/``Loop`` bodies reading outer values, external data.
* :func:`make_case` turns ``(seed, index)`` into one hostile input, deterministically:
  byte-level damage (flipped bytes, truncation, inserted garbage, spliced chunks),
  structural damage (dangling names, duplicates, cycles, wrong attribute types,
  absurd dimensions, unknown element types, bad external data locations and
  offsets, recursion between functions, fields with the wrong wire type) or sheer
  size (10,000-deep chains, deep nesting, 20,000 attributes ...).
* :class:`Sandbox` runs cases in a worker process with an address-space limit and a
  per-case timeout, restarting it when it dies, and sorts each outcome into a
  category: ``ok``, ``findings`` (the run stopped on error findings, nothing
  written), ``error: <Class>: <first words>`` (a clear :class:`graphpass.GraphpassError`),
  or a failure: ``crash``, ``hang``, ``memory``, ``died``, ``bad output``.

A ``PassError`` whose cause is not a ``GraphpassError`` counts as a crash: the
pass had a bug and the framework merely wrapped it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from _worker_process import WorkerProcess
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

PIPELINES = (
    "train-ready",
    "train-ready+checkpoint",
    "inline-functions,remove-unused,topological-sort",
    "infer-shapes,check",
    "detect-missing-buffers,lint-gradients",
)
"""The built-in pipelines every case goes through (``-p`` syntax; ``+checkpoint`` runs
with the seed's weights as a safetensors checkpoint)."""

CLI_STEPS = ("cli run", "cli lint", "cli inspect")
"""The CLI commands a case can go through too (see :func:`run_cli`)."""

FAILURES = ("crash", "hang", "memory", "died", "bad output")
"""Outcome categories that are bugs."""

CASE_SECONDS = 60.0
"""A case that takes longer than this (all pipelines) is a hang."""

MEMORY_LIMIT = 3 * 2**30
"""The worker's address-space limit (RLIMIT_AS), in bytes."""

OPSET = [helper.make_opsetid("", 18)]
CHECKPOINT = "weights.safetensors"


# ======================================================================= seeds
def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((6, 3)).astype(np.float32), "w2")
    shape = numpy_helper.from_array(np.array([-1, 3], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="mm1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="add1"),
        helper.make_node("LeakyRelu", ["h1"], ["h2"], name="act", alpha=0.1),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="mm2"),
        helper.make_node("Reshape", ["h3", "shape"], ["h4"], name="reshape"),
        helper.make_node("Transpose", ["h4"], ["h5"], name="transpose", perm=[1, 0]),
        helper.make_node("ReduceSum", ["h5"], ["y"], name="sum", keepdims=1),
    ]
    nodes[0].doc_string = "first layer"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1])], [w1, b1, w2, shape],
        value_info=[helper.make_tensor_value_info("h1", TensorProto.FLOAT, ["batch", 6])])
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="fuzz")
    helper.set_model_props(model, {"author": "fuzz", "purpose": "seed"})
    return model


def _functions() -> onnx.ModelProto:
    local = [*OPSET, helper.make_opsetid("local", 1)]
    alpha = onnx.AttributeProto(name="alpha", ref_attr_name="alpha",
                                type=onnx.AttributeProto.FLOAT)
    elu = helper.make_node("Elu", ["x"], ["e"], name="elu")
    elu.attribute.append(alpha)
    inner = helper.make_function("local", "Inner", ["x"], ["y"],
                                 [elu, helper.make_node("Neg", ["e"], ["y"], name="neg")], OPSET,
                                 attributes=[])
    inner.attribute_proto.append(helper.make_attribute("alpha", 0.5))
    beta = onnx.AttributeProto(name="alpha", ref_attr_name="beta", type=onnx.AttributeProto.FLOAT)
    call = helper.make_node("Inner", ["x"], ["i"], name="call_inner", domain="local")
    call.attribute.append(beta)
    outer = helper.make_function(
        "local", "Outer", ["x", "w"], ["y"],
        [call, helper.make_node("Add", ["i", "w"], ["y"], name="add")], local,
        attributes=["beta"])
    w = numpy_helper.from_array(np.full((3,), 0.25, np.float32), "w")
    nodes = [
        helper.make_node("Outer", ["x", "w"], ["a"], name="outer", domain="local", beta=0.3),
        helper.make_node("Inner", ["a"], ["b"], name="inner_default", domain="local"),
        helper.make_node("Mul", ["b", "w"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes, "functions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [w])
    return helper.make_model(graph, opset_imports=local, functions=[inner, outer])


def _control_flow() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "w")
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"], name="then_add")], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Mul", ["carried", "w"], ["carried_out"], name="scale")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carried_out", TensorProto.FLOAT, [2])])
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    nodes = [
        helper.make_node("If", ["c"], ["chosen"], name="if", then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("Loop", ["trips", "c", "chosen"], ["y"], name="loop", body=body),
    ]
    graph = helper.make_graph(
        nodes, "control",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [w, trips])
    return helper.make_model(graph, opset_imports=OPSET)


def _constants() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k",
                         value=numpy_helper.from_array(np.arange(6, dtype=np.float32)
                                                       .reshape(2, 3))),
        helper.make_node("Constant", [], ["axes"], name="axes", value_ints=[1]),
        helper.make_node("Concat", ["x", "k"], ["cat"], name="concat", axis=0),
        helper.make_node("ReduceSum", ["cat", "axes"], ["y"], name="sum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=OPSET)


def _with_external_data(model: onnx.ModelProto, location: str) -> tuple[bytes, dict[str, Any]]:
    """The model bytes with every initializer moved to ``location`` (offsets aligned)."""
    model = _copy(model)
    data = bytearray()
    for tensor in model.graph.initializer:
        raw = numpy_helper.to_array(tensor).tobytes()
        offset = (len(data) + 63) // 64 * 64
        data.extend(b"\0" * (offset - len(data)))
        data.extend(raw)
        tensor.ClearField("raw_data")
        for name in ("float_data", "int64_data", "int32_data", "double_data"):
            tensor.ClearField(name)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)),
                           ("length", str(len(raw)))):
            tensor.external_data.add(key=key, value=value)
    return model.SerializeToString(), {location: bytes(data)}


@dataclass
class Seed:
    """A valid starting model and the files next to it."""

    name: str
    proto: onnx.ModelProto
    files: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from safetensors.numpy import save

        weights = {}
        for tensor in self.proto.graph.initializer:
            if tensor.data_location == TensorProto.EXTERNAL:
                raw = self.files[tensor.external_data[0].value]
                offset, length = (int(e.value) for e in tensor.external_data[1:3])
                array = np.frombuffer(raw[offset:offset + length],
                                      onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
                weights[tensor.name] = array.reshape(tuple(tensor.dims))
            else:
                weights[tensor.name] = numpy_helper.to_array(tensor)
        self.files = {**self.files, CHECKPOINT: save(weights)} if weights else self.files


def seed_models() -> list[Seed]:
    """The valid models mutations start from."""
    seeds = [Seed("mlp", _mlp()), Seed("functions", _functions()),
             Seed("control", _control_flow()), Seed("constants", _constants())]
    tiny = REPO / "examples" / "tiny_classifier.onnx"
    if tiny.exists():
        seeds.append(Seed("tiny", onnx.load_model_from_string(tiny.read_bytes())))
    data, files = _with_external_data(_mlp(), "mlp.weights")
    seeds.append(Seed("external", onnx.load_model_from_string(data), files))
    return seeds


# =================================================================== mutations
@dataclass
class Case:
    """One hostile input: the model's bytes and the files next to it.

    ``files`` maps a name to bytes, or to ``("symlink", target)``. A target that
    starts with ``@outside/`` is resolved to a folder next to the case's folder.
    """

    ident: str
    mutation: str
    data: bytes
    files: dict[str, Any] = field(default_factory=dict)

    def write(self, folder: Path) -> Path:
        """Write the case into ``folder`` (created); return the model path."""
        folder.mkdir(parents=True, exist_ok=True)
        outside = folder.parent / f"{folder.name}-outside"
        outside.mkdir(exist_ok=True)
        (outside / "secret.bin").write_bytes(b"\x01" * 4096)
        for name, content in self.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, tuple):
                target = str(content[1]).replace("@outside", str(outside))
                path.symlink_to(target)
            else:
                path.write_bytes(content)
        model = folder / "model.onnx"
        model.write_bytes(self.data)
        return model


def _copy(proto: Any) -> Any:
    clone = type(proto)()
    clone.CopyFrom(proto)
    return clone


def _graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    found = [model.graph]
    bodies = [list(f.node) for f in model.functions]
    stack = [model.graph]
    nodes = [n for b in bodies for n in b]
    while stack or nodes:
        if stack:
            nodes.extend(stack.pop().node)
            continue
        node = nodes.pop()
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
            found.extend(subgraphs)
            stack.extend(subgraphs)
    return found


def _all_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    nodes = [n for g in _graphs(model) for n in g.node]
    nodes.extend(n for f in model.functions for n in f.node)
    return nodes


def _tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    found = [t for g in _graphs(model) for t in g.initializer]
    for node in _all_nodes(model):
        for attribute in node.attribute:
            if attribute.HasField("t"):
                found.append(attribute.t)
    return found


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [v for g in _graphs(model) for v in (*g.input, *g.output, *g.value_info)]


Mutator = Callable[[random.Random, onnx.ModelProto, dict[str, Any]], str]
"""Changes a model in place (and the files next to it); returns a short description."""


def _pick(rng: random.Random, items: list[Any]) -> Any:
    if not items:
        raise _NotApplicable
    return rng.choice(items)


class _NotApplicable(Exception):
    """The mutation needs something this model does not have."""


def _dangling_input(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    node = _pick(rng, [n for n in _all_nodes(model) if n.input])
    slot = rng.randrange(len(node.input))
    node.input[slot] = f"nowhere_{rng.randrange(100)}"
    return f"node {node.name!r} input {slot} names nothing"


def _dangling_output(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    graph = _pick(rng, [g for g in _graphs(model) if g.output])
    graph.output[rng.randrange(len(graph.output))].name = "undefined_output"
    return f"graph {graph.name!r} output names nothing"


def _duplicate_definition(rng: random.Random, model: onnx.ModelProto,
                          files: dict[str, Any]) -> str:
    graph = _pick(rng, [g for g in _graphs(model) if len(g.node) >= 2])
    first, second = rng.sample(list(graph.node), 2)
    if not first.output or not second.output:
        raise _NotApplicable
    second.output[0] = first.output[0]
    return f"{first.output[0]!r} defined twice"


def _duplicate_entries(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    what = rng.choice(["initializer", "input", "function", "attribute", "opset", "metadata",
                       "value_info", "node"])
    if what == "initializer":
        graph = _pick(rng, [g for g in _graphs(model) if g.initializer])
        graph.initializer.append(_copy(rng.choice(graph.initializer)))
    elif what == "input":
        graph = _pick(rng, [g for g in _graphs(model) if g.input])
        graph.input.append(_copy(rng.choice(graph.input)))
    elif what == "function":
        function = _pick(rng, list(model.functions))
        model.functions.append(_copy(function))
    elif what == "attribute":
        node = _pick(rng, [n for n in _all_nodes(model) if n.attribute])
        node.attribute.append(_copy(rng.choice(node.attribute)))
    elif what == "opset":
        model.opset_import.add(domain="", version=rng.choice([1, 7, 13, 25]))
    elif what == "metadata":
        model.metadata_props.add(key="dup", value="1")
        model.metadata_props.add(key="dup", value="2")
    elif what == "value_info":
        graph = _pick(rng, [g for g in _graphs(model) if g.output])
        graph.value_info.append(_copy(rng.choice(graph.output)))
    else:
        graph = _pick(rng, [g for g in _graphs(model) if g.node])
        graph.node.append(_copy(rng.choice(graph.node)))
    return f"duplicate {what}"


def _cycle(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    graph = _pick(rng, [g for g in _graphs(model) if g.node])
    index = rng.randrange(len(graph.node))
    later = rng.randrange(index, len(graph.node))
    node, producer = graph.node[index], graph.node[later]
    if not node.input or not producer.output:
        raise _NotApplicable
    node.input[rng.randrange(len(node.input))] = producer.output[0]
    return f"node {index} reads the output of node {later}"


def _function_recursion(rng: random.Random, model: onnx.ModelProto,
                        files: dict[str, Any]) -> str:
    function = _pick(rng, list(model.functions))
    callee = rng.choice(list(model.functions))
    node = _pick(rng, [n for n in function.node if n.input and n.output])
    node.op_type, node.domain = callee.name, callee.domain
    del node.attribute[:]
    node.input[:] = list(node.input)[:1] * len(callee.input)
    node.output[:] = [f"{node.output[0]}_{k}" if k else node.output[0]
                      for k in range(len(callee.output))]
    return f"{function.name} calls {callee.name}"


def _wrong_attribute_type(rng: random.Random, model: onnx.ModelProto,
                          files: dict[str, Any]) -> str:
    node = _pick(rng, [n for n in _all_nodes(model) if n.attribute])
    attribute = rng.choice(node.attribute)
    choice = rng.choice(["type", "graph", "ref", "empty"])
    if choice == "type":
        attribute.type = rng.choice(list(onnx.AttributeProto.AttributeType.values()))
    elif choice == "graph":
        attribute.type = onnx.AttributeProto.GRAPH
        attribute.ClearField("g")
    elif choice == "ref":
        attribute.ref_attr_name = rng.choice(["nonexistent", "alpha", ""])
    else:
        kind = attribute.type
        attribute.Clear()
        attribute.name, attribute.type = "", kind
    return f"attribute {choice} on {node.op_type}"


def _wrong_node(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    node = _pick(rng, _all_nodes(model))
    choice = rng.choice(["op", "domain", "empty op", "graph on plain op", "no outputs",
                         "extra inputs", "empty names"])
    if choice == "op":
        node.op_type = rng.choice(["NoSuchOp", "If", "Loop", "Scan", "MatMul", "Concat"])
    elif choice == "domain":
        node.domain = rng.choice(["com.unknown", "local", "ai.onnx.ml", "ai.onnx"])
    elif choice == "empty op":
        node.op_type = ""
    elif choice == "graph on plain op":
        node.attribute.append(helper.make_attribute(
            "body", helper.make_graph([], "stray", [], [])))
    elif choice == "no outputs":
        del node.output[:]
    elif choice == "extra inputs":
        node.input.extend(list(node.input) * 3 or ["x"])
    else:
        node.input[:] = ["" for _ in node.input]
        node.output[:] = ["" for _ in node.output]
    return f"{choice} ({node.name})"


def _absurd_dims(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    value = rng.choice([2**62, 2**63 - 1, -1, -(2**63), 0, 10**12])
    if rng.random() < 0.5 and _tensors(model):
        tensor = rng.choice(_tensors(model))
        dims = list(tensor.dims) or [1]
        dims[rng.randrange(len(dims))] = value
        if rng.random() < 0.3:
            dims = dims * 20
        tensor.dims[:] = dims
        return f"tensor {tensor.name!r} dims {dims[:4]}"
    info = _pick(rng, [v for v in _value_infos(model)
                       if v.type.tensor_type.shape.dim])
    dim = rng.choice(info.type.tensor_type.shape.dim)
    dim.dim_value = value
    return f"value {info.name!r} dim {value}"


def _element_types(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    value = rng.choice([0, 8, 16, 23, 99, 2**31 - 1, -3])
    if rng.random() < 0.5 and _tensors(model):
        tensor = rng.choice(_tensors(model))
        tensor.data_type = value
        return f"tensor {tensor.name!r} data_type {value}"
    info = _pick(rng, [v for v in _value_infos(model) if v.type.HasField("tensor_type")])
    info.type.tensor_type.elem_type = value
    return f"value {info.name!r} elem_type {value}"


def _tensor_data(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    tensor = _pick(rng, [t for t in _tensors(model) if t.data_location != TensorProto.EXTERNAL])
    choice = rng.choice(["short raw", "no data", "both", "strings", "segment"])
    if choice == "short raw":
        raw = numpy_helper.to_array(tensor).tobytes()
        for name in ("float_data", "int64_data", "int32_data"):
            tensor.ClearField(name)
        tensor.raw_data = raw[: rng.randrange(len(raw) + 1)]
    elif choice == "no data":
        for name in ("raw_data", "float_data", "int64_data", "int32_data"):
            tensor.ClearField(name)
    elif choice == "both":
        tensor.float_data.extend([1.0, 2.0])
        tensor.int64_data.extend([3])
    elif choice == "strings":
        tensor.data_type = TensorProto.STRING
        tensor.string_data.extend([b"\xff\xfe", b"x" * 10])
    else:
        tensor.segment.begin, tensor.segment.end = 5, 2
    return f"{choice} in {tensor.name!r}"


_LOCATIONS = ["../escape.bin", "/etc/hostname", "sub/../../escape.bin", "", "link.bin",
              "missing.bin", "./mlp.weights", "sub/../mlp.weights", "C:\\weights.bin",
              "\\\\server\\share", "mlp.weights\0.txt", "dir_not_file"]


def _external_data(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    tensors = [t for t in model.graph.initializer]
    tensor = _pick(rng, tensors)
    if tensor.data_location != TensorProto.EXTERNAL:
        raw = numpy_helper.to_array(tensor).tobytes()
        for name in ("raw_data", "float_data", "int64_data", "int32_data"):
            tensor.ClearField(name)
        tensor.data_location = TensorProto.EXTERNAL
        tensor.external_data.add(key="location", value="mlp.weights")
        tensor.external_data.add(key="offset", value="0")
        tensor.external_data.add(key="length", value=str(len(raw)))
        files.setdefault("mlp.weights", raw)
    entries = {e.key: e for e in tensor.external_data}
    choice = rng.choice(["location", "offset", "length", "extra key", "no location",
                         "symlink out", "symlink dir out"])
    if choice == "location":
        location = rng.choice(_LOCATIONS)
        entries["location"].value = location
        if location == "dir_not_file":
            files["dir_not_file/x"] = b""
        detail = location
    elif choice in ("offset", "length"):
        value = rng.choice(["-1", "abc", "1e3", "", " 8", "99999999999999999999",
                            str(2**63), "0x10", "7"])
        if choice in entries:
            entries[choice].value = value
        else:
            tensor.external_data.add(key=choice, value=value)
        detail = value
    elif choice == "extra key":
        tensor.external_data.add(key=rng.choice(["checksum", "location", "basepath"]),
                                 value="../x")
        detail = "extra"
    elif choice == "no location":
        kept = [e for e in tensor.external_data if e.key != "location"]
        del tensor.external_data[:]
        tensor.external_data.extend(kept)
        detail = "-"
    elif choice == "symlink out":
        files["link.bin"] = ("symlink", "@outside/secret.bin")
        entries["location"].value = "link.bin"
        detail = "link.bin"
    else:
        files["linked"] = ("symlink", "@outside")
        entries["location"].value = "linked/secret.bin"
        detail = "linked/secret.bin"
    return f"external {choice} {detail!r} on {tensor.name!r}"


def _model_fields(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    choice = rng.choice(["ir_version", "opset version", "no default opset", "no graph",
                         "empty graph", "long name", "odd names"])
    if choice == "ir_version":
        model.ir_version = rng.choice([0, -1, 1, 3, 2**62])
    elif choice == "opset version":
        model.opset_import[0].version = rng.choice([0, -1, 1, 10**6])
    elif choice == "no default opset":
        kept = [o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    elif choice == "no graph":
        model.ClearField("graph")
    elif choice == "empty graph":
        del model.graph.node[:]
    elif choice == "long name":
        node = _pick(rng, list(model.graph.node))
        node.name = "n" * 1_000_000
    else:
        node = _pick(rng, list(model.graph.node))
        node.name = rng.choice(["\x00", "a/b/../c", "\u202e", "x" * 300, " "])
        if node.output:
            old = node.output[0]
            new = rng.choice(["\x00", "name with spaces", "ü", "a::b"])
            for other in _all_nodes(model):
                other.input[:] = [new if n == old else n for n in other.input]
            node.output[0] = new
            for info in _value_infos(model):
                if info.name == old:
                    info.name = new
    return choice


def _value_types(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    info = _pick(rng, _value_infos(model))
    choice = rng.choice(["empty type", "sequence", "map", "optional", "sparse",
                         "dim param", "no elem"])
    if choice == "empty type":
        info.type.Clear()
    elif choice == "sequence":
        info.type.CopyFrom(helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    elif choice == "map":
        info.type.CopyFrom(helper.make_map_type_proto(
            TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    elif choice == "optional":
        info.type.CopyFrom(helper.make_optional_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    elif choice == "sparse":
        info.type.CopyFrom(helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [2, 2]))
    elif choice == "dim param":
        for dim in info.type.tensor_type.shape.dim:
            dim.dim_param = rng.choice(["", "?", "-1", "batch"])
    else:
        info.type.tensor_type.elem_type = 0
    return f"{choice} on {info.name!r}"


def _wire_type(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    """Append a field with a known number but the wrong wire type, or unknown enum values."""
    targets: list[tuple[str, Any, int, bool]] = [
        ("model.graph", model, 7, False),           # graph (message) as varint
        ("model.ir_version", model, 1, True),       # ir_version (varint) as bytes
        ("graph.node", model.graph, 1, False),
    ]
    for node in _all_nodes(model)[:3]:
        targets.append((f"node {node.name}.input", node, 1, False))
        for attribute in node.attribute[:1]:
            targets.append((f"attr {attribute.name}.type", attribute, 20, False))
    for tensor in _tensors(model)[:2]:
        targets.append((f"tensor {tensor.name}.data_location", tensor, 14, False))
    name, message, number, as_bytes = rng.choice(targets)
    if as_bytes:
        payload = _varint(number << 3 | 2) + b"\x03abc"
    else:
        value = rng.choice([7, 99, 2**40])
        payload = _varint(number << 3) + _varint(value)
    message.MergeFromString(payload)
    return name


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _sparse(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp")
    indices = numpy_helper.from_array(np.array(rng.choice([[0, 3], [0, 99], [-1, 0], [1]]),
                                               np.int64), "sp_idx")
    sparse = helper.make_sparse_tensor(values, indices, rng.choice([[4], [2, 2], [0], [-1]]))
    model.graph.sparse_initializer.append(sparse)
    if rng.random() < 0.5:
        model.graph.node[0].input.append("sp")
    return "sparse initializer"


def _subgraph_scope(rng: random.Random, model: onnx.ModelProto, files: dict[str, Any]) -> str:
    subgraphs = [g for g in _graphs(model) if g is not model.graph and g.node]
    graph = _pick(rng, subgraphs)
    choice = rng.choice(["capture later value", "shadow outer", "capture from function",
                         "output from outer"])
    node = rng.choice(graph.node)
    if choice == "capture later value":
        node.input[0] = model.graph.node[-1].output[0] if model.graph.node[-1].output else "y"
    elif choice == "shadow outer":
        node.output[0] = model.graph.input[0].name
    elif choice == "capture from function":
        node.input[0] = "i"
    else:
        graph.output[0].name = model.graph.input[0].name
    return choice


STRUCTURAL: dict[str, Mutator] = {
    "dangling input": _dangling_input,
    "dangling output": _dangling_output,
    "duplicate definition": _duplicate_definition,
    "duplicate entries": _duplicate_entries,
    "cycle": _cycle,
    "function recursion": _function_recursion,
    "wrong attribute": _wrong_attribute_type,
    "wrong node": _wrong_node,
    "absurd dims": _absurd_dims,
    "element types": _element_types,
    "tensor data": _tensor_data,
    "external data": _external_data,
    "model fields": _model_fields,
    "value types": _value_types,
    "wire type": _wire_type,
    "sparse": _sparse,
    "subgraph scope": _subgraph_scope,
}


def _bytes_mutation(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    choice = rng.choice(["flip", "truncate", "insert", "splice", "zero run", "length"])
    if not data:
        return "empty", data
    buffer = bytearray(data)
    if choice == "flip":
        for _ in range(rng.randint(1, 8)):
            buffer[rng.randrange(len(buffer))] ^= 1 << rng.randrange(8)
    elif choice == "truncate":
        del buffer[rng.randrange(len(buffer)):]
    elif choice == "insert":
        position = rng.randrange(len(buffer) + 1)
        buffer[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif choice == "splice":
        start = rng.randrange(len(buffer))
        chunk = buffer[start:start + rng.randint(1, 64)]
        position = rng.randrange(len(buffer) + 1)
        buffer[position:position] = chunk
    elif choice == "zero run":
        start = rng.randrange(len(buffer))
        buffer[start:start + rng.randint(1, 32)] = bytes(min(32, len(buffer) - start))
    else:  # set a byte that is likely a length prefix to a large varint
        position = rng.randrange(len(buffer))
        buffer[position:position + 1] = b"\xff\xff\xff\xff\x0f"
    return choice, bytes(buffer)


# ================================================================ large inputs
def _chain(length: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu" if k % 2 else "Neg", [f"v{k}" if k else "x"], [f"v{k + 1}"])
             for k in range(length)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(f"v{length}", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=OPSET)


def _call_chain(depth: int) -> onnx.ModelProto:
    """Function F0 calls F1 ... calls F{depth-1}, which computes Relu."""
    opsets = [*OPSET, helper.make_opsetid("local", 1)]
    functions = []
    for k in range(depth):
        node = (helper.make_node(f"F{k + 1}", ["x"], ["y"], domain="local") if k + 1 < depth
                else helper.make_node("Relu", ["x"], ["y"]))
        functions.append(helper.make_function("local", f"F{k}", ["x"], ["y"], [node], opsets))
    graph = helper.make_graph(
        [helper.make_node("F0", ["x"], ["y"], domain="local")], "calls",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=opsets, functions=functions)


def _nested_ifs(depth: int) -> onnx.ModelProto:
    """``depth`` If nodes, each in the then-branch of the one above; the inner reads x."""
    inner = helper.make_graph([helper.make_node("Neg", ["x"], ["out0"])], "leaf", [],
                              [helper.make_tensor_value_info("out0", TensorProto.FLOAT, [2])])
    for level in range(1, depth + 1):
        other = helper.make_graph(
            [helper.make_node("Identity", ["x"], [f"other{level}"])], f"else{level}", [],
            [helper.make_tensor_value_info(f"other{level}", TensorProto.FLOAT, [2])])
        node = helper.make_node("If", ["c"], [f"out{level}"], then_branch=inner,
                                else_branch=other)
        inner = helper.make_graph(
            [node], f"level{level}", [],
            [helper.make_tensor_value_info(f"out{level}", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        list(inner.node), "nested",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        list(inner.output))
    return helper.make_model(graph, opset_imports=OPSET)


def _nested_types(depth: int) -> bytes:
    """The mlp seed with a value_info whose type nests sequences ``depth`` deep (bytes)."""
    element = _field(1, _field(1, _varint(TensorProto.FLOAT), wire=0))  # tensor_type
    for _ in range(depth):
        element = _field(4, _field(1, element))  # sequence_type { elem_type }
    value_info = _field(1, b"h2") + _field(2, element)
    # A second occurrence of the singular field ``graph`` merges into the first.
    return _mlp().SerializeToString() + _field(7, _field(13, value_info))


def _many_attributes(count: int) -> onnx.ModelProto:
    model = _mlp()
    model.graph.node[2].attribute.extend(helper.make_attribute(f"a{k}", k) for k in range(count))
    return model


def _wide(count: int) -> onnx.ModelProto:
    inputs = [f"x{k % 50}" for k in range(count)]
    graph = helper.make_graph(
        [helper.make_node("Sum", inputs, ["y"], name="sum")], "wide",
        [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [2]) for k in range(50)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=OPSET)


def _many_initializers(count: int) -> onnx.ModelProto:
    model = _mlp()
    model.graph.initializer.extend(
        numpy_helper.from_array(np.array([k], np.float32), f"unused{k}") for k in range(count))
    return model


def _huge_declared_tensor() -> onnx.ModelProto:
    model = _mlp()
    tensor = onnx.TensorProto(name="huge", data_type=TensorProto.FLOAT, dims=[2**20, 2**20])
    model.graph.initializer.append(tensor)
    model.graph.node[1].input[1] = "huge"
    return model


def _huge_constant_of_shape() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([2**31, 2**31], np.int64), "big_shape")
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["big_shape"], ["z"]),
         helper.make_node("ReduceSum", ["z"], ["s"], keepdims=0),
         helper.make_node("Add", ["x", "s"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [shape])
    return helper.make_model(graph, opset_imports=OPSET)


LARGE: dict[str, Callable[[], onnx.ModelProto]] = {
    "chain of 10,000 nodes": lambda: _chain(10_000),
    "10,000-deep call chain": lambda: _call_chain(10_000),
    "ifs nested 25 deep": lambda: _nested_ifs(25),
    "20,000 attributes on a node": lambda: _many_attributes(20_000),
    "20,000 inputs to a node": lambda: _wide(20_000),
    "10,000 unused initializers": lambda: _many_initializers(10_000),
    "declared 2**40-element tensor without data": _huge_declared_tensor,
    "ConstantOfShape of 2**62 elements": _huge_constant_of_shape,
}
"""Inputs that are hostile by size (built once, not random)."""


def _nesting_bytes(depth: int) -> bytes:
    """A ModelProto nesting graph -> node -> attribute ``depth`` times, written by hand.

    The Python protobuf API cannot build messages this deep (its serializer shares
    the parser's limit), so the bytes are assembled directly.
    """
    graph = b""
    for _ in range(depth):
        attribute = _field(1, b"then_branch") + _field(20, _varint(5), wire=0) + _field(6, graph)
        node = _field(4, b"If") + _field(1, b"c") + _field(2, b"o") + _field(5, attribute)
        graph = _field(1, node)
    return _field(1, _varint(8), wire=0) + _field(7, graph) + _field(8, _field(2, _varint(18),
                                                                           wire=0))


def _field(number: int, payload: bytes, wire: int = 2) -> bytes:
    if wire == 0:
        return _varint(number << 3) + payload
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


LARGE_BYTES: dict[str, Callable[[], bytes]] = {
    "subgraphs nested 40 deep (past protobuf's limit)": lambda: _nesting_bytes(40),
    "subgraphs nested 10,000 deep": lambda: _nesting_bytes(10_000),
    "types nested 30 deep": lambda: _nested_types(30),
    "types nested 200 deep": lambda: _nested_types(200),
}


# ===================================================================== cases
def large_cases() -> list[Case]:
    """Every size-hostile input, once."""
    cases = [Case(f"large/{name}", name, build().SerializeToString())
             for name, build in LARGE.items()]
    cases.extend(Case(f"large/{name}", name, build()) for name, build in LARGE_BYTES.items())
    return cases


def make_case(seed: int, index: int, seeds: list[Seed] | None = None) -> Case:
    """The ``index``-th hostile input of run ``seed`` (the same every time)."""
    rng = random.Random(f"{seed}:{index}")
    seeds = seeds if seeds is not None else seed_models()
    start = rng.choice(seeds)
    files = dict(start.files)
    for _attempt in range(20):
        model = _copy(start.proto)
        files = dict(start.files)
        names = []
        try:
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                name = rng.choice(sorted(STRUCTURAL))
                names.append(f"{name}: {STRUCTURAL[name](rng, model, files)}")
        except Exception:  # this mutation does not fit the model: draw again
            continue
        break
    else:
        model, names = _copy(start.proto), ["none"]
    data = model.SerializeToString()
    if not names or rng.random() < 0.35:
        kind, data = _bytes_mutation(rng, data)
        names.append(f"bytes: {kind}")
        if rng.random() < 0.3:
            kind, data = _bytes_mutation(rng, data)
            names.append(f"bytes: {kind}")
    return Case(f"{seed}/{index}", f"{start.name}: " + "; ".join(names), data, files)


def cases(seed: int, count: int) -> Iterator[Case]:
    """``count`` random cases of run ``seed``."""
    seeds = seed_models()
    for index in range(count):
        yield make_case(seed, index, seeds)


# ================================================================== outcomes
@dataclass
class Outcome:
    """What one pipeline (or CLI command) made of a case."""

    case: str
    step: str
    category: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        """Whether this outcome is a bug."""
        return self.category.split(":")[0] in FAILURES


def error_category(error: BaseException) -> str:
    """``error: <Class>: <first words>``, with names and numbers blanked out."""
    text = getattr(error, "message", str(error))
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "…", text.splitlines()[0] if text else "")
    text = re.sub(r"\d+", "N", text)
    words = text.replace(":", " ").split()
    return f"error: {type(error).__name__}: {' '.join(words[:7])}"


def _is_clear(error: BaseException) -> bool:
    import graphpass

    if not isinstance(error, graphpass.GraphpassError) or not str(error).strip():
        return False
    if isinstance(error, graphpass.PassError):
        cause = error.__cause__
        return cause is None or isinstance(cause, graphpass.GraphpassError)
    return True


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checker_ok(path: Path) -> bool:
    try:
        onnx.checker.check_model(str(path))
    except Exception:
        return False
    return True


def run_pipeline(model_path: Path, pipeline: str, out_dir: Path) -> Outcome:
    """load -> pipeline -> save -> load again, in this process."""
    import graphpass

    case = model_path.parent.name
    before = _digest(model_path)
    passes, _, checkpoint = pipeline.partition("+")
    checkpoints = [model_path.parent / CHECKPOINT] if checkpoint else []
    try:
        model = graphpass.load(model_path)
        result = graphpass.PassManager(passes.split(","), checkpoints=checkpoints).run(model)
        if not result.ok:
            outcome = Outcome(case, pipeline, "findings",
                              ", ".join(sorted({f.code for f in result.errors})))
        else:
            out = graphpass.save(result.model, out_dir / "out.onnx")
            again = graphpass.load(out)
            graphpass.validate(again)
            if _checker_ok(model_path) and not _checker_ok(out):
                outcome = Outcome(case, pipeline, "bad output",
                                  "the input passes onnx.checker, the output does not")
            else:
                outcome = Outcome(case, pipeline, "ok")
    except MemoryError:
        outcome = Outcome(case, pipeline, "memory", traceback.format_exc(limit=-6))
    except _Timeout:
        outcome = Outcome(case, pipeline, "hang", traceback.format_exc(limit=-6))
    except Exception as error:
        if _is_clear(error):
            outcome = Outcome(case, pipeline, error_category(error), str(error)[:300])
        else:
            cause = error.__cause__ or error
            outcome = Outcome(case, pipeline, f"crash: {type(cause).__name__}",
                              "".join(traceback.format_exception(cause, limit=-8)))
    if _digest(model_path) != before:
        outcome = Outcome(case, pipeline, "bad output", "the input file changed")
    leftovers = [p.name for p in out_dir.iterdir() if p.name.endswith(".graphpass-tmp")] \
        if out_dir.exists() else []
    if leftovers:
        outcome = Outcome(case, pipeline, "bad output", f"temporary files left: {leftovers}")
    return outcome


def run_cli(model_path: Path, command: str, out_dir: Path) -> Outcome:
    """One ``graphpass`` command, in this process: exit 0/1/2, one message, no traceback."""
    from graphpass.cli import main

    case = model_path.parent.name
    arguments = {
        "run": ["run", str(model_path), "-o", str(out_dir / "cli.onnx"), "-p",
                "inline-functions,remove-unused,topological-sort"],
        "lint": ["lint", str(model_path), "-p", "check,lint-gradients,detect-missing-buffers"],
        "inspect": ["inspect", str(model_path), "--format", "json"],
    }[command]
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(arguments)
    except _Timeout:
        return Outcome(case, f"cli {command}", "hang")
    except MemoryError:
        return Outcome(case, f"cli {command}", "memory")
    text = stderr.getvalue()
    errors = [line for line in text.splitlines()
              if line.startswith("graphpass: ") and ": error:" in line]
    if code not in (0, 1, 2) or "Traceback" in text or "internal error" in text:
        return Outcome(case, f"cli {command}", "crash: cli", f"exit {code}: {text[-2000:]}")
    if code == 2 and len(errors) != 1:
        return Outcome(case, f"cli {command}", "crash: cli message",
                       f"expected one error message, got: {text[-2000:]}")
    return Outcome(case, f"cli {command}", "ok" if code == 0 else f"exit {code}")


# ==================================================================== worker
class _Timeout(BaseException):
    """Raised by the alarm in the worker (a BaseException so passes cannot swallow it)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def _worker() -> None:
    """Read case requests (JSON lines) from stdin; answer with outcomes (JSON lines)."""
    import resource

    limit = int(os.environ.get("FUZZ_MEMORY_LIMIT", MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _on_alarm)
    import graphpass  # noqa: F401  (imported before the first case: not timed)
    from graphpass.framework import default_registry

    default_registry()
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    print("ready", file=out, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        model_path = Path(request["model"])
        outcomes = []
        signal.alarm(int(request["seconds"]))
        try:
            for index, step in enumerate(request["steps"]):
                out_dir = model_path.parent / f"out{index}"
                if step.startswith("cli "):
                    outcome = run_cli(model_path, step[4:], out_dir)
                else:
                    checkpoint = model_path.parent / CHECKPOINT
                    if step.endswith("+checkpoint") and not checkpoint.exists():
                        continue
                    outcome = run_pipeline(model_path, step, out_dir)
                outcomes.append(outcome.__dict__)
        except _Timeout:
            outcomes.append(Outcome(model_path.parent.name, "?", "hang").__dict__)
        except BaseException as error:  # report it rather than die
            outcomes.append(Outcome(model_path.parent.name, "?",
                                    f"crash: worker {type(error).__name__}",
                                    traceback.format_exc(limit=-8)).__dict__)
        finally:
            signal.alarm(0)
        print(json.dumps(outcomes), file=out, flush=True)


class Sandbox:
    """Runs cases in a worker process: memory-limited, timed, restarted when it dies."""

    def __init__(self, root: Path, *, seconds: float = CASE_SECONDS,
                 memory_limit: int = MEMORY_LIMIT, restart_every: int = 500):
        self.root = root
        self.seconds = seconds
        self.restart_every = restart_every
        self.worker = WorkerProcess(root, "import _mutations; _mutations._worker()", {
            "FUZZ_MEMORY_LIMIT": str(memory_limit), "OPENBLAS_NUM_THREADS": "1",
            "GRAPHPASS_DISABLE_PLUGINS": None})
        self._served = 0

    def run(self, case: Case, steps: list[str]) -> list[Outcome]:
        """Run ``steps`` (pipelines, or ``cli run|lint|inspect``) on a case."""
        folder = Path(tempfile.mkdtemp(prefix="case-", dir=self.root))
        try:
            model = case.write(folder / "case")
            if self._served >= self.restart_every:
                self.close()  # a fresh worker now and then: no state carried too long
                self._served = 0
            self._served += 1
            request = {"model": str(model), "steps": steps, "seconds": self.seconds}
            line = self.worker.ask(request, self.seconds + 30)
            if line is None:
                died = self.worker.exit_code
                category = "hang" if died is None else f"died: exit {died}"
                stderr = self.worker.stderr_tail(3000)
                return [Outcome(case.ident, "all", category, f"{case.mutation}\n{stderr}")]
            return [Outcome(**entry) for entry in json.loads(line)]
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Stop the worker."""
        self.worker.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Tally:
    """Counts of outcomes by category, and the failures in full."""

    cases: int = 0
    steps: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[Case, Outcome]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, case: Case, outcomes: list[Outcome]) -> None:
        """Count one case's outcomes."""
        self.cases += 1
        for outcome in outcomes:
            self.steps += 1
            self.counts[outcome.category] = self.counts.get(outcome.category, 0) + 1
            if outcome.failed:
                self.failures.append((case, outcome))

    def summary(self) -> str:
        """Counts by category, clear errors grouped, failures listed."""
        lines = [f"{self.cases} cases, {self.steps} pipeline/CLI runs in {self.seconds:.0f} s"]
        groups = {"valid result": 0, "stopped on error findings": 0, "clear error": 0,
                  "FAILURE": 0}
        for category, count in self.counts.items():
            head = category.split(":")[0]
            if category in ("ok", "exit 1", "exit 0"):
                groups["valid result" if category != "exit 1" else
                       "stopped on error findings"] += count
            elif category == "findings":
                groups["stopped on error findings"] += count
            elif head in FAILURES:
                groups["FAILURE"] += count
            else:
                groups["clear error"] += count
        lines.extend(f"  {name}: {count}" for name, count in groups.items())
        lines.append("by category:")
        lines.extend(f"  {count:6d}  {category}" for category, count in
                     sorted(self.counts.items(), key=lambda item: (-item[1], item[0])))
        for case, outcome in self.failures[:20]:
            lines.append(f"FAILURE {outcome.category} in {outcome.step} on case {case.ident} "
                         f"({case.mutation}):\n{outcome.detail}")
        return "\n".join(lines)


def run_cases(sandbox: Sandbox, cases: Iterable[Case], steps: Sequence[str] = PIPELINES, *,
              cli_every: int = 0, progress: Callable[[Tally], None] | None = None) -> Tally:
    """Run every case through ``steps``, and every ``cli_every``-th also through the CLI."""
    tally = Tally()
    for case in cases:
        chosen = list(steps)
        if cli_every and tally.cases % cli_every == 0:
            chosen += CLI_STEPS
        tally.add(case, sandbox.run(case, chosen))
        if progress is not None:
            progress(tally)
    return tally


def run_for(seed: int, seconds: float, *, root: Path, cli_every: int = 10,
            first: int = 0, include_large: bool = True,
            progress: Callable[[Tally], None] | None = None) -> Tally:
    """Run the large cases, then random cases of ``seed``, until ``seconds`` have passed."""
    start = time.monotonic()
    seeds = seed_models()
    queue = itertools.chain(large_cases() if include_large else [],
                            (make_case(seed, index, seeds) for index in itertools.count(first)))
    in_time = itertools.takewhile(lambda _: time.monotonic() - start < seconds, queue)
    with Sandbox(root) as sandbox:
        tally = run_cases(sandbox, in_time, cli_every=cli_every, progress=progress)
    tally.seconds = time.monotonic() - start
    return tally
