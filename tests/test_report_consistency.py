"""Reports agree with themselves: one pass per finding, one word per severity, JSON always.

* a finding is credited to the same pass in the pass table (and the JSON ``passes``)
  as in the findings list, also when an instrument reports it after a later pass;
* the info severity is "info" everywhere (text summary, tables, JSON);
* ``--format json`` prints a JSON error object on standard output when the command
  fails with exit code 2, and ``inspect --format json`` has a ``schema`` like the run
  report;
* text tables end no line with spaces.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console

import graphpass
import graphpass.framework._plugin_loading
from graphpass import Finding, PassContext, PassResult, Severity
from graphpass.framework import VerifyOptions, VerifySemantics, build_registry
from graphpass.reporting import ReportInfo, render_text, report_dict


class _ScaleWeights(graphpass.Pass):
    """Claims to preserve semantics; scales the weight by 1.5."""

    name = "scale-weights"
    description = "wrong on purpose"

    def run(self, model: graphpass.Model, context: PassContext) -> PassResult:
        tensor = model.graph.initializers["w"]
        model.graph.set_initializer(graphpass.Tensor.from_array("w", tensor.numpy() * 1.5))
        return PassResult(changed=True)


class _Borrowed(graphpass.AnalysisPass):
    """Reports a finding built by another pass's code (credited to that pass's name)."""

    name = "borrowed"
    description = "reports under another pass's name"

    def run(self, model: graphpass.Model, context: PassContext) -> PassResult:
        return PassResult(findings=[Finding("GP950", Severity.WARNING, "borrowed",
                                            pass_name="somebody-else")])


def _proto() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"], name="mul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch):
    registry = build_registry()
    registry.add("passes", "scale-weights", _ScaleWeights, "tests")
    registry.add("passes", "borrowed", _Borrowed, "tests")
    monkeypatch.setattr(graphpass.framework._plugin_loading, "_DEFAULT", registry)
    return registry


def _counted_and_listed(report: dict) -> tuple[dict, dict]:
    counted = {p["name"]: sum(p["findings"].values()) for p in report["passes"]
               if sum(p["findings"].values())}
    listed: dict[str, int] = {}
    for finding in report["findings"]:
        listed[finding["pass"]] = listed.get(finding["pass"], 0) + 1
    return counted, listed


def test_a_verify_finding_is_credited_to_the_pass_at_fault_in_both_places(registry) -> None:
    model = graphpass.Model.from_proto(_proto())
    result = graphpass.PassManager(
        ["scale-weights", "check"], registry=registry, stop_on_error=False,
        instruments=[VerifySemantics(VerifyOptions())]).run(model)
    report = report_dict(result, ReportInfo(command="run"))
    mismatch = next(f for f in report["findings"] if f["code"] == "GP601")
    assert mismatch["pass"] == "scale-weights"
    counted, listed = _counted_and_listed(report)
    assert counted == {"scale-weights": 1}
    assert listed == counted
    text = io.StringIO()
    render_text(result, Console(file=text, width=150, markup=False), ReportInfo(command="run"))
    rows = {line.split()[0]: line for line in text.getvalue().splitlines()
            if line.split() and line.split()[0] in ("scale-weights", "check")}
    assert "1 error" in rows["scale-weights"] and "error" not in rows["check"]
    assert "findings of scale-weights" in text.getvalue()


def test_a_passing_verify_is_a_finding_of_the_run_not_of_the_last_pass(registry) -> None:
    model = graphpass.Model.from_proto(_proto())
    result = graphpass.PassManager(
        ["remove-unused", "check"], registry=registry,
        instruments=[VerifySemantics(VerifyOptions())]).run(model)
    report = report_dict(result, ReportInfo(command="run"))
    verified = next(f for f in report["findings"] if f["code"] == "GP600")
    counted, listed = _counted_and_listed(report)
    assert verified["pass"] not in counted  # no pass row claims it
    assert counted == {k: v for k, v in listed.items() if k != verified["pass"]}


def test_a_finding_named_after_another_pass_is_credited_to_the_pass_that_reported_it(
        registry) -> None:
    model = graphpass.Model.from_proto(_proto())
    result = graphpass.PassManager(["borrowed"], registry=registry).run(model)
    (finding,) = result.findings
    assert finding.pass_name == "borrowed"
    counted, listed = _counted_and_listed(report_dict(result, ReportInfo()))
    assert counted == listed == {"borrowed": 1}


def test_info_is_one_word_everywhere(cli, tmp_path: Path, registry) -> None:
    onnx.save(_proto(), tmp_path / "m.onnx")
    code, stdout, stderr = cli("run", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-p",
                               "check", "--verify")
    assert code == 0, stderr
    assert "note" not in stdout
    assert re.search(r"0 errors, 0 warnings, 1 info from 1 pass", stdout), stdout
    code, stdout, _ = cli("run", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-p",
                          "check", "--verify", "--format", "json")
    assert json.loads(stdout)["summary"] == {"error": 0, "warning": 0, "info": 1}


@pytest.mark.parametrize("args", [
    ("lint", "missing.onnx"),
    ("run", "m.onnx", "-o", "o.onnx", "-p", "no-such-pass"),
    ("lint", "m.onnx", "--frobnicate"),
    ("inspect", "missing.onnx"),
])
def test_json_format_prints_an_error_object_on_exit_2(cli, tmp_path: Path, monkeypatch,
                                                      args: tuple[str, ...]) -> None:
    onnx.save(_proto(), tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = cli(*args, "--format", "json")
    assert code == 2
    error = json.loads(stdout)
    assert error["schema"] == "graphpass-error/1"
    assert error["ok"] is False and error["exit_code"] == 2
    assert error["error"]["message"] and error["error"]["message"] in stderr
    assert stderr.startswith("graphpass")  # the readable message is still on stderr


def test_inspect_json_has_a_schema(cli, tmp_path: Path) -> None:
    onnx.save(_proto(), tmp_path / "m.onnx")
    code, stdout, _ = cli("inspect", tmp_path / "m.onnx", "--format", "json")
    assert code == 0
    assert json.loads(stdout)["schema"] == "graphpass-inspect/1"


@pytest.mark.parametrize("command", ["passes", "plugins", "plan", "lint", "inspect", "run"])
def test_text_tables_have_no_trailing_spaces(cli, tmp_path: Path, command: str) -> None:
    onnx.save(_proto(), tmp_path / "m.onnx")
    args = {"passes": ["passes"], "plugins": ["plugins"],
            "plan": ["plan", "-p", "inline-functions,check"],
            "lint": ["lint", tmp_path / "m.onnx"], "inspect": ["inspect", tmp_path / "m.onnx"],
            "run": ["run", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-p",
                    "remove-unused,check", "--time"]}[command]
    code, stdout, stderr = cli(*args)
    assert code == 0, stderr
    padded = [line for line in stdout.splitlines() if line != line.rstrip()]
    assert not padded, padded[:3]
