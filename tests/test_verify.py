"""Semantic verification: generated inputs, runs, comparisons, and the --verify instrument."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.framework import (
    VerifyOptions,
    VerifySemantics,
    compare_outputs,
    make_inputs,
    run_model,
)


def _mlp_proto() -> onnx.ModelProto:
    """y = Relu(x @ W + b) @ V, with a local function for the first layer."""
    rng = np.random.default_rng(0)
    layer = helper.make_function(
        "local", "Layer", ["a", "w", "c"], ["o"],
        [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "c"], ["s"]),
         helper.make_node("Relu", ["s"], ["o"])],
        [helper.make_opsetid("", 18)])
    graph = helper.make_graph(
        [helper.make_node("Layer", ["x", "W", "b"], ["h"], domain="local", name="layer1"),
         helper.make_node("MatMul", ["h", "V"], ["y"], name="head")],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b"),
         numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "V")])
    return helper.make_model(graph, functions=[layer], opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])


class _Scale(graphpass.Pass):
    """A wrong pass: says it preserves semantics, scales W."""

    name = "scale-w"
    description = "Scale W (wrong on purpose)."

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        weight = model.graph.initializers["W"].numpy() * np.float32(2)
        model.graph.set_initializer(graphpass.Tensor.from_array("W", weight))
        return graphpass.PassResult(changed=True)


class _Refill(_Scale):
    """Changes values on purpose, and says so (like reconcile-initializers)."""

    name = "refill-w"
    preserves_semantics = False


# ---------------------------------------------------------------- the pieces
def test_inputs_follow_declared_types_and_symbolic_dims() -> None:
    model = graphpass.Model.from_proto(_mlp_proto())
    inputs = make_inputs(model, VerifyOptions(dims={"batch": 3}))
    assert inputs["x"].shape == (3, 4) and inputs["x"].dtype == np.float32
    assert make_inputs(model)["x"].shape == (2, 4)


def test_integer_indices_stay_in_range_of_what_they_index() -> None:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 2])],
        [numpy_helper.from_array(np.ones((5, 2), np.float32), "table")])
    model = graphpass.Model.from_proto(helper.make_model(graph))
    ids = make_inputs(model)["ids"]
    assert ids.min() >= 0 and ids.max() < 5
    assert run_model(model, {"ids": ids}).outputs is not None


def test_inputs_from_an_npz_file(tmp_path: Path) -> None:
    model = graphpass.Model.from_proto(_mlp_proto())
    np.savez(tmp_path / "feeds.npz", x=np.ones((7, 4), np.float32))
    assert make_inputs(model, VerifyOptions(inputs=tmp_path / "feeds.npz"))["x"].shape == (7, 4)
    np.savez(tmp_path / "wrong.npz", z=np.ones(1))
    with pytest.raises(graphpass.GraphpassError, match="no array named 'x'"):
        make_inputs(model, VerifyOptions(inputs=tmp_path / "wrong.npz"))


def test_both_backends_agree_and_comparison_finds_differences() -> None:
    model = graphpass.Model.from_proto(_mlp_proto())
    inputs = make_inputs(model)
    ort = run_model(model, inputs, "onnxruntime")
    ref = run_model(model, inputs, "reference")
    assert ort.backend == "onnxruntime" and ref.backend == "reference"
    assert ort.outputs is not None and ref.outputs is not None
    assert compare_outputs(ort.outputs, ref.outputs) == []
    changed = {"y": ort.outputs["y"] + 1e-2}
    [mismatch] = compare_outputs(ort.outputs, changed)
    assert mismatch.output == "y" and "values differ" in mismatch.detail
    assert compare_outputs({"y": np.array([np.nan, 1.0])}, {"y": np.array([np.nan, 1.0])}) == []
    assert "shape" in compare_outputs({"y": np.zeros(2)}, {"y": np.zeros(3)})[0].detail


def test_a_model_that_cannot_run_says_why() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["missing"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = graphpass.Model.from_proto(helper.make_model(graph))
    outcome = run_model(model, {})
    assert outcome.outputs is None and "onnxruntime" in outcome.reason


# ------------------------------------------------------------ the instrument
def test_verify_passes_a_correct_pipeline_and_says_so() -> None:
    model = graphpass.Model.from_proto(_mlp_proto())
    result = graphpass.PassManager(["inline-functions", "remove-unused"],
                                   instruments=[VerifySemantics()]).run(model)
    assert result.ok
    [verified] = [f for f in result.findings if f.code == "GP600"]
    assert "the input model" in verified.message


@pytest.mark.parametrize("each", [False, True])
def test_verify_names_the_first_pass_whose_outputs_differ(each: bool) -> None:
    model = graphpass.Model.from_proto(_mlp_proto())
    result = graphpass.PassManager(
        ["inline-functions", _Scale, "remove-unused"],
        instruments=[VerifySemantics(VerifyOptions(each=each))]).run(model)
    assert not result.ok
    [error] = result.errors
    assert error.code == "GP601" and error.pass_name == "scale-w"
    assert "'scale-w' changed what the model computes" in error.message


def test_verify_takes_its_reference_after_passes_that_change_values_on_purpose() -> None:
    model = graphpass.Model.from_proto(_mlp_proto())
    result = graphpass.PassManager(["inline-functions", _Refill, "remove-unused"],
                                   instruments=[VerifySemantics()]).run(model)
    assert result.ok, result.findings
    [verified] = [f for f in result.findings if f.code == "GP600"]
    assert "after 'refill-w'" in verified.message


def test_verify_fails_when_nothing_could_be_checked_unless_told_it_is_optional() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = graphpass.Model.from_proto(helper.make_model(graph))
    result = graphpass.PassManager(["remove-unused"], instruments=[VerifySemantics()]).run(model)
    [error] = [f for f in result.findings if f.code == "GP602"]
    assert error.severity is graphpass.Severity.ERROR and not result.ok
    assert "nothing was verified" in error.message
    assert "--verify-inputs" in (error.hint or "")
    result = graphpass.PassManager(["remove-unused"], instruments=[
        VerifySemantics(VerifyOptions(optional=True))]).run(model)
    [warning] = [f for f in result.findings if f.code == "GP602"]
    assert warning.severity is graphpass.Severity.WARNING and result.ok


def _nested_if_proto() -> onnx.ModelProto:
    """``x`` (``n`` values) reshaped to three rows inside nested ``If`` branches.

    Every branch reshapes ``x`` to ``[3, -1]``: the generated inputs (``n`` = 2) make the
    *input* model fail in onnxruntime, as real voice models with nested ``If`` branches
    do; six values (an inputs file) run.
    """
    rows = numpy_helper.from_array(np.array([3, -1], np.int64), "rows")

    def branch(name: str, body: list[onnx.NodeProto]) -> onnx.GraphProto:
        return helper.make_graph(body, name, [],
                                 [helper.make_tensor_value_info(f"{name}_out",
                                                                TensorProto.FLOAT, None)])

    def reshape(name: str, scale: str) -> onnx.GraphProto:
        return branch(name, [helper.make_node("Reshape", ["x", "shape"], [f"{name}_r"]),
                             helper.make_node("Mul", [f"{name}_r", scale], [f"{name}_out"])])

    inner = helper.make_node("If", ["c2"], ["inner_out"], name="inner_if",
                             then_branch=reshape("inner_then", "two"),
                             else_branch=reshape("inner_else", "three"))
    outer_then = branch("outer_then", [inner, helper.make_node("Identity", ["inner_out"],
                                                               ["outer_then_out"])])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["shape"], value=rows),
         helper.make_node("If", ["c1"], ["y"], name="outer_if", then_branch=outer_then,
                          else_branch=reshape("outer_else", "two"))],
        "nested", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                   helper.make_tensor_value_info("c1", TensorProto.BOOL, []),
                   helper.make_tensor_value_info("c2", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, None])],
        [numpy_helper.from_array(np.float32(2), "two"),
         numpy_helper.from_array(np.float32(3), "three")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_cli_verify_that_verified_nothing_does_not_pass(tmp_path: Path, cli) -> None:
    pytest.importorskip("onnxruntime")
    onnx.checker.check_model(_nested_if_proto(), full_check=True)
    onnx.save(_nested_if_proto(), tmp_path / "model.onnx")
    code, stdout, stderr = cli("run", tmp_path / "model.onnx", "-o", tmp_path / "out.onnx",
                               "-p", "topological-sort", "--verify", "--format", "json")
    assert code == 1, stdout + stderr
    assert not (tmp_path / "out.onnx").exists()
    [finding] = [f for f in json.loads(stdout)["findings"] if f["code"] == "GP602"]
    assert finding["severity"] == "error"
    assert "the input model could not run" in finding["message"]
    assert "onnxruntime" in finding["message"]
    assert "--verify-inputs" in finding["hint"] and "--verify-optional" in finding["hint"]
    # The explicit opt-out: a warning, and the model is written.
    code, stdout, stderr = cli("run", tmp_path / "model.onnx", "-o", tmp_path / "out.onnx",
                               "-p", "topological-sort", "--verify", "--verify-optional")
    assert code == 0, stdout + stderr
    assert "nothing was verified" in stdout and (tmp_path / "out.onnx").exists()
    # Inputs the model accepts: verified.
    np.savez(tmp_path / "feeds.npz", x=np.arange(6, dtype=np.float32), c1=np.array(True),
             c2=np.array(False))
    code, stdout, stderr = cli("run", tmp_path / "model.onnx", "-o", tmp_path / "out2.onnx",
                               "-p", "topological-sort", "--verify", "--verify-inputs",
                               tmp_path / "feeds.npz")
    assert code == 0, stdout + stderr
    assert "GP600" in stdout


def test_a_pipeline_file_can_make_verification_optional(tmp_path: Path, cli) -> None:
    onnx.save(_nested_if_proto(), tmp_path / "model.onnx")
    (tmp_path / "p.toml").write_text('[pipeline]\npasses = ["topological-sort"]\n\n'
                                     '[instrument]\nverify = { optional = true }\n')
    code, stdout, stderr = cli("run", tmp_path / "model.onnx", "-o", tmp_path / "out.onnx",
                               "-c", tmp_path / "p.toml")
    assert code == 0, stdout + stderr
    assert "GP602" in stdout


# ------------------------------------------------------------ command line
@pytest.fixture(scope="module")
def perturb_site(install_plugin: Callable[[str], Path]) -> Path:
    """The perturbing plugin, pip-installed into its own folder."""
    return install_plugin("perturb")


def test_cli_verify_catches_a_wrong_plugin_pass_and_names_it(perturb_site: Path,
                                                              tmp_path: Path,
                                                              graphpass_process) -> None:
    onnx.save(_mlp_proto(), tmp_path / "model.onnx")
    done = graphpass_process("run", "model.onnx", "-o", "out.onnx", "-p",
                             "train-ready,tidy-weights", "--verify", "--format", "json",
                             cwd=tmp_path, sites=[perturb_site])
    assert done.returncode == 1, done.stderr
    assert not (tmp_path / "out.onnx").exists()
    report = json.loads(done.stdout)
    [error] = [f for f in report["findings"] if f["severity"] == "error"]
    assert error["code"] == "GP601" and error["pass"] == "tidy-weights"
    # Without the wrong pass the same run verifies and writes.
    done = graphpass_process("run", "model.onnx", "-o", "out.onnx", "-p", "train-ready",
                             "--verify", cwd=tmp_path, sites=[perturb_site])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified" in done.stdout and (tmp_path / "out.onnx").exists()


def test_verify_from_a_pipeline_file(tmp_path: Path, graphpass_process) -> None:
    onnx.save(_mlp_proto(), tmp_path / "model.onnx")
    np.savez(tmp_path / "feeds.npz", x=np.ones((5, 4), np.float32))
    (tmp_path / "pipeline.toml").write_text(
        '[pipeline]\npreset = "train-ready"\n\n'
        '[instrument]\nverify = { inputs = "feeds.npz", rtol = 1e-3, each = true }\n')
    done = graphpass_process("run", "model.onnx", "-o", "out.onnx", "-c", "pipeline.toml",
                             "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [verified] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "GP600"]
    assert "rtol=0.001" in verified["message"]
    (tmp_path / "bad.toml").write_text('[pipeline]\npasses = ["check"]\n\n'
                                       '[instrument]\nverify = { rtool = 1e-3 }\n')
    done = graphpass_process("run", "model.onnx", "-o", "out2.onnx", "-c", "bad.toml",
                             cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "bad.toml:5" in done.stderr and "rtol" in done.stderr
