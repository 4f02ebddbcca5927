"""`graphpass lint MODEL -p lint-gradients`: exit codes and findings in text, JSON and SARIF."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _save(path: Path, nodes, initializers) -> Path:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.fixture
def failing(tmp_path: Path) -> Path:
    return _save(tmp_path / "failing.onnx", [
        helper.make_node("Mul", ["x", "W"], ["a"], name="mul"),
        helper.make_node("CumSum", ["a", "axis"], ["c"], name="cumsum"),
        helper.make_node("ReduceSum", ["c"], ["y"], keepdims=0, name="loss")],
        [numpy_helper.from_array(np.ones((3, 3), np.float32), "W"),
         numpy_helper.from_array(np.array(1, np.int64), "axis")])


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    return _save(tmp_path / "clean.onnx", [
        helper.make_node("Mul", ["x", "W"], ["a"], name="mul"),
        helper.make_node("ReduceSum", ["a"], ["y"], keepdims=0, name="loss")],
        [numpy_helper.from_array(np.ones((3, 3), np.float32), "W")])


def test_errors_exit_1_with_the_finding_in_text(cli, failing: Path):
    code, out, _ = cli("lint", failing, "-p", "lint-gradients")
    assert code == 1
    assert "GP401" in out and "cumsum" in out and "CumSum" in out
    assert "hint:" in out and "1 error" in out


def test_json_report(cli, failing: Path):
    code, out, _ = cli("lint", failing, "-p", "lint-gradients", "--format", "json")
    assert code == 1
    report = json.loads(out)
    (finding,) = report["findings"]
    assert (finding["code"], finding["node"], finding["pass"]) == ("GP401", "cumsum",
                                                                   "lint-gradients")
    assert finding["data"]["blocks"] == ["W"] and finding["severity"] == "error"
    assert report["passes"][0]["stats"]["rules"] == "onnxruntime-training 1.19.2"


def test_sarif_report(cli, failing: Path):
    code, out, _ = cli("lint", failing, "-p", "lint-gradients", "--format", "sarif")
    assert code == 1
    run = json.loads(out)["runs"][0]
    (result,) = run["results"]
    assert (result["ruleId"], result["level"]) == ("GP401", "error")
    assert result["locations"][0]["logicalLocations"][0]["name"] == "cumsum"
    assert "GP401" in [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    (rule,) = run["tool"]["driver"]["rules"]
    assert rule["shortDescription"]["text"] == "No gradient builder for a node's operator."


def test_a_clean_model_exits_0(cli, clean: Path):
    code, out, _ = cli("lint", clean, "-p", "lint-gradients")
    assert code == 0 and "0 errors" in out


def test_options_from_the_command_line(cli, failing: Path):
    code, _, _ = cli("lint", failing, "-p", "lint-gradients", "-O",
                     'lint-gradients.frozen=["W"]')
    assert code == 0  # no trainable weight left: nothing on the path


def test_options_from_a_pipeline_file(cli, failing: Path, tmp_path: Path):
    config = tmp_path / "pipeline.toml"
    config.write_text('[pipeline]\npasses = ["lint-gradients"]\n\n'
                      '[passes.lint-gradients]\nfrozen = ["W"]\n')
    code, _, _ = cli("lint", failing, "-c", config)
    assert code == 0


@pytest.mark.parametrize(("option", "message"), [
    ('lint-gradients.loss=["nope"]', "loss 'nope' is not a value of the model"),
    ("lint-gradients.rules=nope", "unknown gradient rule set 'nope'"),
    ("lint-gradients.trainable=3", "trainable"),
])
def test_bad_options_exit_2_with_one_message(cli, failing: Path, option: str, message: str):
    code, out, err = cli("lint", failing, "-p", "lint-gradients", "-O", option)
    assert code == 2
    assert message in err and "Traceback" not in err + out
