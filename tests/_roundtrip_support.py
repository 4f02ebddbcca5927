"""Helpers shared by the round-trip, file and validation tests (not a test module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import graphpass


def ir_round_trip(proto: onnx.ModelProto, base_dir: Path | str | None = None) -> onnx.ModelProto:
    """Return ``Model.from_proto(proto).to_proto()``."""
    return graphpass.Model.from_proto(proto, base_dir).to_proto()


def graphs_of(proto: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """Every GraphProto of a model: main graph, subgraphs, training_info graphs."""
    stack: list[onnx.GraphProto] = [proto.graph]
    for info in proto.training_info:
        stack.extend([info.initialization, info.algorithm])
    nodes: list[onnx.NodeProto] = [n for f in proto.functions for n in f.node]
    while stack or nodes:
        if stack:
            graph = stack.pop()
            yield graph
            nodes.extend(graph.node)
            continue
        node = nodes.pop()
        for attribute in node.attribute:
            if attribute.HasField("g"):
                stack.append(attribute.g)
            stack.extend(attribute.graphs)


def tensor_data(tensor: onnx.TensorProto, base_dir: Path | str | None) -> tuple[object, ...]:
    """A tensor's identity and contents, independent of how its bytes are stored."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        info = {entry.key: entry.value for entry in tensor.external_data}
        assert base_dir is not None
        path = Path(base_dir) / info["location"]
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read() if length is None else handle.read(length)
        embedded = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        embedded.raw_data = data
        tensor = embedded
    array = numpy_helper.to_array(tensor)
    if array.dtype == object:
        payload: object = tuple(array.reshape(-1).tolist())
    else:
        payload = np.ascontiguousarray(array).tobytes()
    return (tensor.name, tensor.data_type, tuple(tensor.dims), payload)


def without_tensor_storage(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose initializers keep only name, type and shape."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for graph in graphs_of(copy):
        for tensor in graph.initializer:
            keep = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
            if tensor.HasField("doc_string"):
                keep.doc_string = tensor.doc_string
            keep.metadata_props.extend(tensor.metadata_props)
            tensor.CopyFrom(keep)
    return copy


def assert_same_model(expected: onnx.ModelProto, expected_dir: Path | str | None,
                      actual: onnx.ModelProto, actual_dir: Path | str | None) -> None:
    """Equal models, allowing only a different storage of initializer bytes."""
    assert without_tensor_storage(actual) == without_tensor_storage(expected)
    for want_graph, got_graph in zip(graphs_of(expected), graphs_of(actual), strict=True):
        want = [tensor_data(t, expected_dir) for t in want_graph.initializer]
        got = [tensor_data(t, actual_dir) for t in got_graph.initializer]
        assert got == want


def file_round_trips(proto: onnx.ModelProto, folder: Path, base_dir: Path | None = None) -> None:
    """Save through graphpass with and without external data; check nothing changed."""
    model = graphpass.Model.from_proto(proto, base_dir)
    embedded = folder / "embedded" / "model.onnx"
    graphpass.save(model, embedded, external_data=False, validate=False)
    loaded = onnx.load(embedded, load_external_data=False)
    if not any(t.data_location == onnx.TensorProto.EXTERNAL
               for g in graphs_of(proto) for t in g.initializer):
        assert loaded == proto
    assert_same_model(proto, base_dir, loaded, embedded.parent)
    assert graphpass.load(embedded).to_proto() == loaded

    external = folder / "external" / "model.onnx"
    graphpass.save(model, external, external_data=True, size_threshold=0, validate=False)
    loaded = onnx.load(external, load_external_data=False)
    assert_same_model(proto, base_dir, loaded, external.parent)
    assert graphpass.load(external).to_proto() == loaded
