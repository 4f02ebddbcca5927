"""Hostile model files: each ends in one clear GraphpassError, never another exception.

One test per kind of damage the mutation fuzzer (``tests/_mutations.py``,
``benchmarks/fuzz_mutations.py``) found crashing graphpass, plus the cases the
hardening issue names: nesting past protobuf's limit, absurd dimensions, unknown
element types, unsafe or malformed external data, names that are not UTF-8.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from _mutations import PIPELINES as FUZZ_PIPELINES
from _mutations import _call_chain, _mlp, _nested_types, _nesting_bytes, _with_external_data
from onnx import TensorProto, helper, numpy_helper

import graphpass

PIPELINES = tuple(p for p in FUZZ_PIPELINES if not p.endswith("+checkpoint"))
"""The fuzzer's pipelines, less the one that needs a checkpoint."""


def _write(tmp_path: Path, data: bytes | onnx.ModelProto, files: dict[str, bytes] | None = None
           ) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(data if isinstance(data, bytes) else data.SerializeToString())
    for name, content in (files or {}).items():
        (tmp_path / name).write_bytes(content)
    return path


def _assert_one_message(ran: tuple[int, str, str], *fragments: str) -> None:
    """``ran`` (what the ``cli`` fixture gives) exited 2 with one message holding each fragment."""
    code, _, stderr = ran
    assert code == 2, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    assert stderr.count("graphpass: error:") == 1, stderr
    for fragment in fragments:
        assert fragment in stderr


def _external(tmp_path: Path, **entries: str) -> Path:
    data, files = _with_external_data(_mlp(), "mlp.weights")
    model = onnx.load_model_from_string(data)
    tensor = model.graph.initializer[0]
    current = {e.key: e.value for e in tensor.external_data}
    current.update(entries)
    del tensor.external_data[:]
    for key, value in current.items():
        tensor.external_data.add(key=key, value=value)
    return _write(tmp_path, model, files)


# =============================================================== external data
@pytest.mark.parametrize("key", ["offset", "length"])
@pytest.mark.parametrize("value", ["abc", "0x10", "1e3", "-1", " 8", "9" * 30, "٣"])
def test_external_offset_or_length_that_is_not_a_whole_number_is_refused(
        tmp_path: Path, key: str, value: str, cli) -> None:
    path = _external(tmp_path, **{key: value})
    with pytest.raises(graphpass.ExternalDataError) as caught:
        graphpass.load(path)
    assert f"external data {key}" in caught.value.message and "'w1'" in caught.value.message
    _assert_one_message(cli("inspect", path), "not a non-negative whole number")


def test_external_location_with_a_nul_character_is_refused(tmp_path: Path) -> None:
    path = _external(tmp_path, location="mlp.weights\0.txt")
    with pytest.raises(graphpass.ExternalDataError, match="NUL character"):
        graphpass.load(path)


def test_string_tensor_with_external_data_is_refused(tmp_path: Path) -> None:
    data, files = _with_external_data(_mlp(), "mlp.weights")
    model = onnx.load_model_from_string(data)
    model.graph.initializer[2].data_type = TensorProto.STRING
    path = _write(tmp_path, model, files)
    with pytest.raises(graphpass.ExternalDataError, match="holds strings"):
        graphpass.load(path)


# =============================================================== element types
@pytest.mark.parametrize("data_type", [99, 2**31 - 1, -3])
def test_unknown_element_type_of_an_initializer_is_refused_naming_it(
        tmp_path: Path, data_type: int, cli) -> None:
    model = _mlp()
    model.graph.initializer[1].data_type = data_type
    path = _write(tmp_path, model)
    with pytest.raises(graphpass.InvalidModelError) as caught:
        graphpass.load(path)
    assert "tensor 'b1'" in caught.value.message
    assert f"element type {data_type}" in caught.value.message
    _assert_one_message(cli("run", path, "-o", tmp_path / "out.onnx", "-p", "remove-unused"),
                        "element type")


def test_unknown_element_type_in_a_constant_ends_clearly(tmp_path: Path) -> None:
    model = _mlp()
    constant = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
        np.ones(3, np.float32)))
    constant.attribute[0].t.data_type = 99
    model.graph.node.insert(0, constant)
    model.graph.node[-1].input.append("k")  # keep it used
    path = _write(tmp_path, model)
    for pipeline in PIPELINES:
        try:
            result = graphpass.PassManager(pipeline.split(",")).run(graphpass.load(path))
            if result.ok:
                graphpass.save(result.model, tmp_path / "out" / "out.onnx")
        except graphpass.PassError as error:
            assert error.__cause__ is None or isinstance(error.__cause__,
                                                         graphpass.GraphpassError)
        except graphpass.GraphpassError:
            pass


# ========================================================== absurd dimensions
def test_sizes_of_tensors_with_huge_dimensions_are_exact() -> None:
    tensor = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 2**61 + 1])
    tensor.raw_data = b"\0" * 8
    loaded = graphpass.Tensor.from_proto(tensor)
    assert loaded.nbytes == 3 * (2**61 + 1) * 4  # a float would round this
    assert "needs 27670116110564327436" in (loaded.data_problem() or "")
    packed = onnx.TensorProto(name="p", data_type=TensorProto.INT4, dims=[3])
    assert graphpass.Tensor.from_proto(packed).nbytes == 2


@pytest.mark.parametrize("dims", [[-1, 3], [2**63 - 1] * 4, [2**63 - 1] * 400, [2**32, 2**31]])
def test_tensor_shapes_no_tensor_can_have_are_refused_naming_the_tensor(
        tmp_path: Path, dims: list[int], cli) -> None:
    model = _mlp()
    model.graph.initializer[0].dims[:] = dims
    path = _write(tmp_path, model)
    with pytest.raises(graphpass.InvalidModelError, match="tensor 'w1' has"):
        graphpass.load(path)
    _assert_one_message(cli("inspect", path, "--format", "json"), "tensor 'w1'")


def test_declared_tensor_without_data_is_a_clear_save_error(tmp_path: Path) -> None:
    model = _mlp()
    model.graph.initializer.append(onnx.TensorProto(name="huge", data_type=TensorProto.FLOAT,
                                                    dims=[2**20, 2**20]))
    model.graph.node[1].input[1] = "huge"
    path = _write(tmp_path, model)
    result = graphpass.PassManager(["remove-unused"]).run(graphpass.load(path))
    with pytest.raises(graphpass.ModelSaveError, match="'huge' cannot be read: the tensor "
                                                       "holds no data"):
        graphpass.save(result.model, tmp_path / "out" / "out.onnx")
    assert not (tmp_path / "out" / "out.onnx").exists()
    assert not list((tmp_path / "out").iterdir())


# ======================================================================= text
def _with_invalid_utf8(model: onnx.ModelProto, placeholder: str) -> bytes:
    data = model.SerializeToString()
    assert data.count(placeholder.encode()) >= 1
    return data.replace(placeholder.encode(), placeholder[:-1].encode() + b"\xff")


@pytest.mark.parametrize("where", ["node input", "node output", "node name", "op_type",
                                   "attribute name", "graph name", "initializer name",
                                   "metadata key", "function name", "value_info name",
                                   "doc_string", "opset domain"])
def test_names_that_are_not_utf8_are_refused_while_loading(tmp_path: Path, where: str,
                                                           cli) -> None:
    model = _mlp()
    placeholder = "Zq9"
    if where == "node input":
        model.graph.node[2].input[0] = placeholder
    elif where == "node output":
        model.graph.node[2].output[0] = placeholder
    elif where == "node name":
        model.graph.node[2].name = placeholder
    elif where == "op_type":
        model.graph.node[2].op_type = placeholder
    elif where == "attribute name":
        model.graph.node[2].attribute[0].name = placeholder
    elif where == "graph name":
        model.graph.name = placeholder
    elif where == "initializer name":
        model.graph.initializer[0].name = placeholder
    elif where == "metadata key":
        model.metadata_props.add(key=placeholder, value="v")
    elif where == "function name":
        model.functions.append(helper.make_function("local", placeholder, ["x"], ["y"],
                                                    [helper.make_node("Neg", ["x"], ["y"])],
                                                    [helper.make_opsetid("", 18)]))
    elif where == "value_info name":
        model.graph.value_info[0].name = placeholder
    elif where == "doc_string":
        model.graph.doc_string = placeholder
    else:
        model.opset_import.add(domain=placeholder, version=1)
    path = _write(tmp_path, _with_invalid_utf8(model, placeholder))
    with pytest.raises(graphpass.InvalidModelError, match="not valid UTF-8") as caught:
        graphpass.load(path)
    assert "Zq" in caught.value.message
    _assert_one_message(cli("lint", path), "not valid UTF-8")


# ===================================================================== nesting
@pytest.mark.parametrize("data", [
    pytest.param(lambda: _nesting_bytes(40), id="subgraphs 40 deep"),
    pytest.param(lambda: _nesting_bytes(10_000), id="subgraphs 10000 deep"),
    pytest.param(lambda: _nested_types(200), id="types 200 deep"),
])
def test_nesting_past_protobufs_limit_is_a_clear_load_error(tmp_path: Path, data, cli) -> None:
    path = _write(tmp_path, data())
    with pytest.raises(graphpass.ModelLoadError, match="deeper than protobuf's limit"):
        graphpass.load(path)
    _assert_one_message(cli("inspect", path), "nests messages")


def test_nesting_within_protobufs_limit_loads_and_round_trips(tmp_path: Path) -> None:
    path = _write(tmp_path, _nested_types(30))
    model = graphpass.load(path)
    assert model.to_proto() == onnx.load(path)


# =============================================================== infer-shapes
def test_infer_shapes_on_too_deep_function_calls_is_a_warning(tmp_path: Path) -> None:
    model = graphpass.Model.from_proto(_call_chain(300))  # onnx refuses deep call chains
    result = graphpass.PassManager(["infer-shapes"]).run(model)
    assert [f.code for f in result.findings] == ["GP510"]
    assert "depth" in result.findings[0].message
    assert not result.changed


def test_infer_shapes_skips_data_propagation_for_long_vectors(tmp_path: Path) -> None:
    """onnx's data propagation holds ~140 bytes per element of a 1-D tensor: [10**8] would
    need 14 GB. The pass runs in a process limited to 1.5 GiB to prove it stays small."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [10**8])
    shape = numpy_helper.from_array(np.array([-1], np.int64), "flat")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "flat"], ["r"]),
         helper.make_node("Add", ["r", "r"], ["y"])], "long",
        [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape])
    path = _write(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("",
                                                                                        18)]))
    script = (
        "import sys, graphpass\n"
        "result = graphpass.PassManager(['infer-shapes']).run(graphpass.load(sys.argv[1]))\n"
        "print(sorted(f.code for f in result.findings),\n"
        "      result.model.graph.value('y').shape)\n")
    limit = 3 * 2**29

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True,
                          text=True, preexec_fn=limit_memory, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("]")[0] == "['GP511'"
    assert "100000000" in done.stdout  # shapes known without data propagation still come


def test_infer_shapes_keeps_data_propagation_for_shape_computations() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Mul", ["s", "ones"], ["n"]),
         helper.make_node("Reshape", ["x", "n"], ["y"])], "dyn", [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(3, np.int64), "ones")])
    model = graphpass.Model.from_proto(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]))
    result = graphpass.PassManager(["infer-shapes"]).run(model)
    assert result.findings == []
    assert result.model.graph.value("y").shape == (2, 3, 4)
