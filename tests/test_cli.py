"""The command line: exit codes, one-line errors, nothing written on failure, every command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
import graphpass.framework._plugin_loading
from graphpass import AnalysisPass, Finding, Pass, PassContext, PassResult, Severity
from graphpass.framework import build_registry
from graphpass.ir import Model


def _model_proto(*, dead: bool = True) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Mul", ["a", "w"], ["y"], name="mul")]
    if dead:
        nodes.append(helper.make_node("Neg", ["x"], ["unused"], name="dead"))
    body = helper.make_function("lib", "Twice", ["fx"], ["fy"],
                                [helper.make_node("Add", ["fx", "fx"], ["fy"])],
                                [helper.make_opsetid("", 18)])
    nodes.append(helper.make_node("Twice", ["x"], ["z"], domain="lib", name="call1"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 2])],
        [numpy_helper.from_array(np.array([2.0, 3.0], np.float32), "w"),
         numpy_helper.from_array(np.zeros(100, np.float32), "unused_weight")])
    return helper.make_model(graph, functions=[body],
                             opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid("lib", 1)])


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(_model_proto(), path)
    return path


class _Explodes(Pass):
    name = "explodes"
    description = "raises"

    def run(self, model: Model, context: PassContext) -> PassResult:
        model.graph.remove(model.graph.nodes[0], safe=False)
        raise RuntimeError("kaboom")


class _Interrupted(Pass):
    name = "interrupted"
    description = "as if the user pressed Ctrl-C"

    def run(self, model: Model, context: PassContext) -> PassResult:
        raise KeyboardInterrupt


class _Complains(AnalysisPass):
    name = "complains"
    description = "reports an error"

    def run(self, model: Model, context: PassContext) -> PassResult:
        return PassResult(findings=[Finding("GP999", Severity.ERROR, "this model is wrong",
                                            node="relu", hint="fix it")])


@pytest.fixture
def extra_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the default registry the built-ins plus three test passes."""
    registry = build_registry()
    for pass_class in (_Explodes, _Interrupted, _Complains):
        registry.add("passes", pass_class.name, pass_class, "tests")
    monkeypatch.setattr(graphpass.framework._plugin_loading, "_DEFAULT", registry)


def _one_message(stderr: str) -> None:
    assert "Traceback" not in stderr
    assert stderr.startswith("graphpass")
    assert len([line for line in stderr.splitlines() if not line.startswith("  ")]) == 1


# ========================================================================== run
def test_run_writes_the_result_and_reports(cli, model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    code, stdout, stderr = cli("run", model_file, "-o", out, "-p", "remove-unused,check",
                               "--time")
    assert code == 0, stderr
    written = onnx.load(out)
    assert [n.name for n in written.graph.node] == ["relu", "mul", "call1"]
    assert "remove-unused" in stdout and "seconds" in stdout
    assert f"wrote {out}" in stdout.replace("\n", "")


def test_run_json_report_has_a_stable_schema(cli, model_file: Path, tmp_path: Path) -> None:
    code, stdout, _ = cli("run", model_file, "-o", tmp_path / "out.onnx", "-p", "remove-unused",
                          "--format", "json")
    assert code == 0
    report = json.loads(stdout)
    assert set(report) == {"schema", "tool", "command", "model", "output", "ok", "changed",
                           "stopped_after", "iterations", "plan", "summary", "passes",
                           "findings"}
    assert report["schema"] == "graphpass-report/1"
    assert report["ok"] and report["changed"] and report["command"] == "run"
    (record,) = report["passes"]
    assert set(record) == {"name", "plugin", "iteration", "analysis", "seconds", "changed",
                           "findings", "stats"}
    assert record["stats"]["removed nodes"] == 1
    assert report["summary"] == {"error": 0, "warning": 0, "info": 0}


def test_run_refuses_to_overwrite_the_model_without_in_place(cli, model_file: Path) -> None:
    before = model_file.read_bytes()
    code, stdout, stderr = cli("run", model_file, "-o", model_file, "-p", "remove-unused")
    assert code == 2 and stdout == ""
    _one_message(stderr)
    assert "--in-place" in stderr
    assert model_file.read_bytes() == before
    code, _, stderr = cli("run", model_file, "--in-place", "-p", "remove-unused")
    assert code == 0, stderr
    assert len(onnx.load(model_file).graph.node) == 3


def test_run_needs_an_output_and_passes(cli, model_file: Path, tmp_path: Path) -> None:
    code, _, stderr = cli("run", model_file, "-p", "check")
    assert code == 2 and "-o OUT" in stderr
    code, _, stderr = cli("run", model_file, "-o", tmp_path / "o.onnx")
    assert code == 2 and "nothing to run" in stderr
    _one_message(stderr)


def test_unknown_pass_is_one_message_with_a_suggestion(cli, model_file: Path,
                                                       tmp_path: Path) -> None:
    code, stdout, stderr = cli("run", model_file, "-o", tmp_path / "o.onnx", "-p",
                               "remove-unsued")
    assert code == 2 and stdout == ""
    _one_message(stderr)
    assert "unknown pass or pipeline 'remove-unsued'" in stderr
    assert "did you mean 'remove-unused'" in stderr
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("content", [None, b"", b"\x08\x07garbage that is not protobuf\xff",
                                     b"folder"])
def test_unreadable_models_are_one_message(cli, tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "bad.onnx"
    if content == b"folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    for command in (["run", path, "-o", tmp_path / "o.onnx", "-p", "check"],
                    ["lint", path], ["inspect", path]):
        code, stdout, stderr = cli(*command)
        assert code == 2 and stdout == ""
        _one_message(stderr)
        assert str(path) in stderr
    assert not (tmp_path / "o.onnx").exists()


def test_bad_toml_is_one_message_with_file_and_line(cli, model_file: Path,
                                                    tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text('[pipeline]\npasses = ["check"\n\n[passes.check]\n')
    code, stdout, stderr = cli("run", model_file, "-o", tmp_path / "o.onnx", "-c", config)
    assert code == 2 and stdout == ""
    _one_message(stderr)
    assert f"{config}:" in stderr and "invalid TOML" in stderr
    config.write_text('[pipeline]\npasses = ["check"]\n\n[passes.check]\nfull_chek = true\n')
    code, _, stderr = cli("lint", model_file, "-c", config)
    assert code == 2
    _one_message(stderr)
    assert f"{config}:5" in stderr and "key passes.check.full_chek" in stderr
    assert "did you mean 'full-check'" in stderr


def test_error_findings_exit_1_and_write_nothing(cli, extra_passes, model_file: Path,
                                                 tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    code, stdout, _ = cli("run", model_file, "-o", out, "-p",
                          "remove-unused,complains,topological-sort")
    assert code == 1
    assert not out.exists()
    assert "this model is wrong" in stdout and "hint: fix it" in stdout
    assert "stopped after 'complains'" in stdout and "nothing was written" in stdout
    code, stdout, _ = cli("run", model_file, "-o", out, "-p", "complains,topological-sort",
                          "--keep-going", "--format", "json")
    assert code == 1 and not out.exists()
    assert [p["name"] for p in json.loads(stdout)["passes"]] == ["complains",
                                                                 "topological-sort"]


def test_a_pass_that_raises_is_one_message_and_writes_nothing(cli, extra_passes,
                                                              model_file: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    code, stdout, stderr = cli("run", model_file, "-o", out, "-p", "remove-unused,explodes")
    assert code == 2 and stdout == "" and not out.exists()
    assert "Traceback" not in stderr
    assert "pass 'explodes' (plugin 'tests') failed: RuntimeError: kaboom" in stderr
    assert "passes run before it: remove-unused" in stderr
    code, _, stderr = cli("run", model_file, "-o", out, "-p", "explodes", "--traceback")
    assert code == 2 and "Traceback" in stderr and "kaboom" in stderr


def test_interrupt_exits_130_with_no_output(cli, extra_passes, model_file: Path,
                                            tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    code, stdout, stderr = cli("run", model_file, "-o", out, "-p",
                               "remove-unused,interrupted")
    assert code == 130 and stdout == "" and not out.exists()
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == [model_file]  # no temporary files either


def test_instruments_from_the_command_line(cli, model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "result.onnx"
    code, stdout, stderr = cli("run", model_file, "-o", out, "-p",
                               "remove-unused,topological-sort", "--verify-each",
                               "--dump-after", "remove-unused", "--fixed-point",
                               "--format", "json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["iterations"] == 2  # the second round changed nothing
    dumped = tmp_path / "out" / "model.after-remove-unused.onnx"
    assert dumped.exists() and len(onnx.load(dumped).graph.node) == 3
    assert any(f["code"] == "GP011" for f in report["findings"])


def test_disable_pass_and_option_overrides(cli, model_file: Path, tmp_path: Path) -> None:
    code, stdout, _ = cli("plan", "-p", "remove-unused,check", "--disable-pass", "check",
                          "--format", "json")
    assert code == 0
    assert [p["name"] for p in json.loads(stdout)["plan"]] == ["remove-unused"]
    out = tmp_path / "o.onnx"
    code, _, stderr = cli("run", model_file, "-o", out, "-p", "remove-unused",
                          "-O", "remove-unused.nodes=false")
    assert code == 0, stderr
    assert len(onnx.load(out).graph.node) == 4  # dead node kept
    assert [t.name for t in onnx.load(out).graph.initializer] == ["w"]
    code, _, stderr = cli("run", model_file, "-o", out, "-p", "remove-unused",
                          "-O", "remove-unused.nodes=maybe")
    assert code == 2 and 'must be true or false, got "maybe"' in stderr
    _one_message(stderr)
    code, _, stderr = cli("run", model_file, "-o", out, "-p", "check", "-O", "nodot=1")
    assert code == 2 and "PASS.OPTION=VALUE" in stderr


def test_report_file_and_sarif(cli, model_file: Path, tmp_path: Path) -> None:
    broken = _model_proto()
    broken.graph.node[1].input[1] = "nowhere"
    bad = tmp_path / "broken.onnx"
    onnx.save(broken, bad)
    report = tmp_path / "report.sarif"
    code, stdout, _ = cli("lint", bad, "--format", "sarif", "--report", report)
    # The console gets the summary line and where the report went, not the report.
    assert code == 1 and stdout.splitlines() == [
        f"1 error, 0 warnings, 0 info from 1 pass in {stdout.split(' in ')[1].split(';')[0]}"
        f"; report written to {report}"]
    sarif = json.loads(report.read_text())
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "GP501" and result["level"] == "error"
    assert sarif["runs"][0]["tool"]["driver"]["rules"][0]["shortDescription"]["text"] == (
        "The model breaks a rule of the ONNX checker.")


# ========================================================================= lint
def test_lint_runs_analysis_passes_and_writes_nothing(cli, model_file: Path,
                                                      tmp_path: Path) -> None:
    before = sorted(tmp_path.iterdir())
    code, stdout, stderr = cli("lint", model_file)
    assert code == 0, stderr
    assert "check" in stdout  # the default lint
    assert sorted(tmp_path.iterdir()) == before


def test_lint_refuses_transforming_passes(cli, model_file: Path) -> None:
    code, stdout, stderr = cli("lint", model_file, "-p", "check,remove-unused")
    assert code == 2 and stdout == ""
    _one_message(stderr)
    assert "'remove-unused'" in stderr and "graphpass run" in stderr


def test_lint_reports_every_error_and_exits_1(cli, extra_passes, model_file: Path) -> None:
    code, stdout, _ = cli("lint", model_file, "-p", "complains,check", "--format", "json")
    assert code == 1
    report = json.loads(stdout)
    assert [p["name"] for p in report["passes"]] == ["complains", "check"]
    assert report["output"] is None and not report["ok"]


# ======================================================= passes, plan, plugins
def test_passes_lists_names_plugins_and_typed_options(cli) -> None:
    code, stdout, _ = cli("passes", "--format", "json")
    assert code == 0
    passes = {p["name"]: p for p in json.loads(stdout)["passes"]}
    assert {"remove-unused", "topological-sort", "infer-shapes", "check"} <= set(passes)
    assert passes["remove-unused"]["plugin"] == "builtin"
    assert {"name": "nodes", "type": "boolean", "default": True} in passes[
        "remove-unused"]["options"]
    assert passes["check"]["kind"] == "analysis"
    code, stdout, _ = cli("passes")
    assert code == 0 and "remove-unused" in stdout and "full-check" in stdout


def test_plan_notes_passes_pulled_in_by_requires(cli, monkeypatch) -> None:
    class NeedsSort(AnalysisPass):
        name = "needs-sort"
        description = "requires topological-sort"
        requires = ("topological-sort",)

        def run(self, model: Model, context: PassContext) -> PassResult:
            return PassResult()

    registry = build_registry()
    registry.add("passes", "needs-sort", NeedsSort, "tests")
    monkeypatch.setattr(graphpass.framework._plugin_loading, "_DEFAULT", registry)
    code, stdout, _ = cli("plan", "-p", "check,needs-sort")
    assert code == 0
    lines = [line.split() for line in stdout.splitlines()[1:]]
    assert [line[1] for line in lines] == ["check", "topological-sort", "needs-sort"]
    assert "required by needs-sort" in stdout
    code, stdout, _ = cli("plan", "-p", "check,needs-sort", "--format", "json")
    plan = json.loads(stdout)["plan"]
    assert plan[1] == {"position": 2, "name": "topological-sort", "plugin": "builtin",
                       "kind": "transform", "requested": False, "required_by": ["needs-sort"],
                       "runs_after": [], "preset": None, "options": {}}
    assert plan[2]["runs_after"] == [{"pass": "topological-sort", "because": "requires"}]


def test_presets_in_a_pipeline_file_with_a_step_that_needs_a_checkpoint(
        cli, model_file: Path, tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text('[presets.tidy]\npasses = ["remove-unused", '
                      '{ pass = "infer-shapes", when = "checkpoint" }, "check"]\n\n'
                      '[presets.tidy.options.remove-unused]\nfunctions = false\n')
    code, stdout, stderr = cli("plan", "-c", config, "-p", "tidy", "--format", "json")
    assert code == 0, stderr
    plan = json.loads(stdout)["plan"]
    assert [p["name"] for p in plan] == ["remove-unused", "check"]
    assert plan[0]["preset"] == "tidy" and plan[0]["options"]["functions"] is False
    checkpoint = tmp_path / "weights.safetensors"
    code, _, stderr = cli("plan", "-c", config, "-p", "tidy", "--checkpoint", checkpoint)
    assert code == 2 and "no such file" in stderr
    checkpoint.write_bytes(b"")
    code, stdout, _ = cli("plan", "-c", config, "-p", "tidy", "--checkpoint", checkpoint,
                          "--format", "json")
    assert [p["name"] for p in json.loads(stdout)["plan"]] == [
        "remove-unused", "infer-shapes", "check"]
    code, stdout, _ = cli("run", model_file, "-o", tmp_path / "o.onnx", "-c", config, "-p",
                          "tidy", "--format", "json")
    assert code == 0 and [p["name"] for p in json.loads(stdout)["passes"]] == [
        "remove-unused", "check"]


def test_plugins_lists_the_builtin_plugin(cli) -> None:
    code, stdout, _ = cli("plugins", "--format", "json")
    assert code == 0
    builtin = next(p for p in json.loads(stdout)["plugins"] if p["name"] == "builtin")
    assert builtin["status"] == "active" and "remove-unused" in builtin["provides"]["passes"]


def test_usage_errors_are_one_message(cli) -> None:
    for args in (["frobnicate"], ["run"], ["passes", "--format", "xml"], ["lint"]):
        code, stdout, stderr = cli(*args)
        assert code == 2 and stdout == ""
        _one_message(stderr)


# ====================================================================== inspect
def test_inspect_summarizes_the_model(cli, tmp_path: Path) -> None:
    proto = _model_proto()
    onnx.save(proto, tmp_path / "ext.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=64)
    code, stdout, stderr = cli("inspect", tmp_path / "ext.onnx", "--format", "json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["nodes"]["by_op"] == {"Relu": 1, "Mul": 1, "Neg": 1, "lib::Twice": 1}
    assert summary["functions"] == [{"id": "lib::Twice", "nodes": 1, "calls": 1}]
    assert summary["initializers"]["count"] == 2
    assert summary["initializers"]["bytes"] == 8 + 400
    assert summary["initializers"]["external_files"] == {"weights.bin": {"tensors": 1,
                                                                         "bytes": 400}}
    assert summary["inputs"] == [{"name": "x", "type": "FLOAT", "shape": ["n", 2]}]
    assert summary["opset_imports"] == {"ai.onnx": 18, "lib": 1}
    code, stdout, _ = cli("inspect", tmp_path / "ext.onnx")
    assert code == 0
    for text in ("lib::Twice", "weights.bin", "FLOAT", "[n, 2]", "408 B"):
        assert text in stdout


# ============================================================ real subprocesses
def test_console_script_has_no_traceback_for_bad_input(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01\x02 not a model")
    config = tmp_path / "p.toml"
    config.write_text("[pipeline\n")
    script = Path(sys.executable).parent / "graphpass"
    for args in ([str(garbage), "-o", str(tmp_path / "o.onnx"), "-p", "check"],
                 [str(garbage), "-o", str(tmp_path / "o.onnx"), "-c", str(config)]):
        done = subprocess.run([str(script), "run", *args], capture_output=True, text=True,
                              check=False, timeout=120)
        assert done.returncode == 2
        assert "Traceback" not in done.stderr and done.stdout == ""
        assert done.stderr.startswith("graphpass: error:")
    assert not (tmp_path / "o.onnx").exists()
