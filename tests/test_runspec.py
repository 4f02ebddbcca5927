"""graphpass.RunSpec: one frozen run specification, from a pipeline file, presets, options
and overrides; it gives the registry and the manager, and checks the run's inputs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx
import pytest

import graphpass
from graphpass import ConfigError, ExitCode, PipelineError, RunSpec

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "examples" / "tiny_classifier.onnx"

PIPELINE = """\
[pipeline]
passes = ["tidy", "lint-gradients"]

[passes.lint-gradients]
frozen = ["fc1.*"]

[presets.tidy]
description = "tidy up"
passes = ["remove-unused", "topological-sort"]

[presets.tidy.options.remove-unused]
functions = false

[instrument]
verify-each = true
disable = ["topological-sort"]
"""


def _plan(manager: graphpass.PassManager) -> list[tuple[str, dict[str, object]]]:
    from graphpass.reporting import plan_data

    return [(entry["name"], entry["options"]) for entry in plan_data(manager.plan)]


def test_a_pipeline_file_gives_the_plan_the_command_line_shows(cli, tmp_path: Path) -> None:
    file = tmp_path / "pipeline.toml"
    file.write_text(PIPELINE)
    spec = RunSpec.from_pipeline(file)
    assert spec.base_dir == tmp_path and spec.verify_each and spec.disable == (
        "topological-sort",)
    code, stdout, stderr = cli("plan", "-c", file, "--format", "json")
    assert code == ExitCode.OK, stderr
    shown = [(entry["name"], entry["options"]) for entry in json.loads(stdout)["plan"]]
    planned = _plan(spec.manager())
    assert planned == shown
    names = [name for name, _ in planned]
    assert "topological-sort" not in names and names[-1] == "lint-gradients"
    assert dict(planned)["remove-unused"]["functions"] is False
    assert dict(planned)["lint-gradients"]["frozen"] == ["fc1.*"]


def test_a_pipeline_file_runs_as_the_command_line_runs_it(cli, tmp_path: Path) -> None:
    file = tmp_path / "pipeline.toml"
    # (the tiny classifier has findings for the lint, which would stop the write)
    file.write_text(PIPELINE.replace('"lint-gradients"]', '"check"]'))
    code, stdout, stderr = cli("run", TINY, "-c", file, "-o", tmp_path / "cli.onnx",
                               "--format", "json", "--no-timing")
    assert code == ExitCode.OK, stderr
    result = RunSpec.from_pipeline(file).manager().run(graphpass.load(TINY))
    report = json.loads(stdout)
    assert [p["name"] for p in report["passes"]] == list(result.plan)
    assert sorted(f["code"] for f in report["findings"]) == sorted(
        f.code for f in result.findings)
    graphpass.save(result.model, tmp_path / "python.onnx")
    assert (onnx.load(tmp_path / "python.onnx").graph
            == onnx.load(tmp_path / "cli.onnx").graph)


def test_overrides_make_a_new_spec_over_the_old_one(tmp_path: Path) -> None:
    file = tmp_path / "pipeline.toml"
    file.write_text(PIPELINE)
    spec = RunSpec.from_pipeline(file)
    changed = spec.with_overrides(
        passes=["check"], options={"lint-gradients": {"trainable": ["fc2.*"]}},
        disable=["infer-shapes"], add_passes=["lint-gradients"], max_iterations=3,
        verify_each=None)
    assert spec.passes == ("tidy", "lint-gradients") and spec.max_iterations == 10
    assert changed.passes == ("check", "lint-gradients")
    assert changed.options["lint-gradients"] == {"frozen": ["fc1.*"], "trainable": ["fc2.*"]}
    assert changed.disable == ("topological-sort", "infer-shapes")
    assert changed.max_iterations == 3 and changed.verify_each  # None keeps the file's
    assert changed.with_overrides(passes=None).passes == changed.passes
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.passes = ("check",)  # type: ignore[misc]
    with pytest.raises(TypeError, match="'verify_every'"):
        spec.with_overrides(verify_every=True)
    with pytest.raises(PipelineError, match="max-iterations must be at least 1"):
        spec.with_overrides(max_iterations=0)


def test_the_manager_of_a_spec_plans_as_pass_manager_does() -> None:
    spec = RunSpec(passes=("train-ready",), options={"lint-gradients": {"frozen": ["w"]}})
    manager = graphpass.PassManager(["train-ready"],
                                    options={"lint-gradients": {"frozen": ["w"]}})
    assert _plan(spec.manager()) == _plan(manager)
    with pytest.raises(PipelineError, match="nothing to run"):
        RunSpec().manager()
    with pytest.raises(PipelineError, match="lint runs analysis passes only"):
        RunSpec(passes=("remove-unused",), analysis_only=True).manager()


def test_the_training_graph_preset_carries_what_lint_and_builder_share(tmp_path: Path) -> None:
    directory = str(tmp_path / "train")
    spec = RunSpec(passes=("train-ready", "training-graph"),
                   options={"lint-gradients": {"frozen": ["fc1.*"]},
                            "build-training-graph": {"directory": directory}})
    manager = spec.manager()
    planned = dict(_plan(manager))
    assert planned["lint-gradients"]["rules"] == "graphpass"
    assert planned["build-training-graph"]["frozen"] == ["fc1.*"]
    assert planned["build-training-graph"]["directory"] == directory
    assert manager.warnings == []  # what the preset carries is nobody's unplanned option
    # The user's own options win over what the preset carries and shares.
    own = dict(_plan(spec.with_overrides(options={
        "lint-gradients": {"rules": "onnxruntime-training"},
        "build-training-graph": {"frozen": ["out.*"]}}).manager()))
    assert own["lint-gradients"]["rules"] == "onnxruntime-training"
    assert own["build-training-graph"]["frozen"] == ["out.*"]
    # Without the lint planned, nothing is shared and nothing is warned about.
    alone = RunSpec(passes=("training-graph",),
                    options={"build-training-graph": {"directory": directory}}).manager()
    assert "lint-gradients" not in alone.plan_names and alone.warnings == []
    assert dict(_plan(alone))["build-training-graph"]["frozen"] == []  # its default


def test_emit_training_graph_trains_what_the_lint_was_told(cli, tmp_path: Path) -> None:
    """End to end: ``-O lint-gradients.frozen`` keeps those weights out of the training
    graph too (the preset shares it; the command line does not copy it)."""
    pytest.importorskip("torch")
    from _training_models import exported

    model = exported("mlp")
    code, stdout, stderr = cli("run", model, "-o", tmp_path / "ready.onnx", "-p", "train-ready",
                               "-O", 'lint-gradients.frozen=["fc1.*"]',
                               "--emit-training-graph", tmp_path / "train")
    assert code == ExitCode.OK, stdout + stderr
    manifest = json.loads((tmp_path / "train" / "manifest.json").read_text())
    assert sorted(manifest["trainable"]) == ["fc2.bias", "fc2.weight", "out.bias",
                                             "out.weight"]


def test_a_missing_checkpoint_is_one_error_with_the_usage_exit_code(cli, tmp_path: Path) -> None:
    missing = tmp_path / "weights.safetensors"
    with pytest.raises(ConfigError, match="no such file or folder") as caught:
        RunSpec(passes=("check",), checkpoints=(missing,)).manager()
    assert caught.value.exit_code is ExitCode.USAGE == 2
    relative = RunSpec(passes=("check",), checkpoints=("w.safetensors",), base_dir=tmp_path)
    with pytest.raises(ConfigError, match=f"relative paths are read from {tmp_path}"):
        relative.check()
    file = tmp_path / "pipeline.toml"
    file.write_text('[pipeline]\npasses = ["check"]\ncheckpoints = ["w.safetensors"]\n')
    with pytest.raises(ConfigError, match="no such checkpoint") as caught:
        RunSpec.from_pipeline(file).check()
    assert caught.value.where == f"{file}:3"
    code, stdout, stderr = cli("run", TINY, "-o", tmp_path / "out.onnx", "-p", "check",
                               "--checkpoint", missing, "--format", "json")
    assert code == ExitCode.USAGE
    assert f"checkpoint {missing}: no such file or folder" in stderr
    document = json.loads(stdout)
    assert document["exit_code"] == ExitCode.USAGE and document["error"]["type"] == "ConfigError"
    assert not (tmp_path / "out.onnx").exists()
    code, _, stderr = cli("lint", TINY, "-c", file)
    assert code == ExitCode.USAGE and f"{file}:3" in stderr


def test_a_missing_verify_inputs_file_is_checked_where_checkpoints_are(cli, tmp_path: Path) -> None:
    """One place checks the run's input files: the flag, the pipeline file and Python agree."""
    from graphpass.framework import VerifyOptions

    missing = tmp_path / "feeds.npz"
    with pytest.raises(ConfigError, match="no such file") as caught:
        RunSpec(passes=("check",), verify=VerifyOptions(inputs=missing)).manager()
    assert caught.value.exit_code is ExitCode.USAGE
    file = tmp_path / "pipeline.toml"
    file.write_text('[pipeline]\npasses = ["check"]\n\n[instrument]\n'
                    'verify = { inputs = "feeds.npz" }\n')
    with pytest.raises(ConfigError, match="no such file") as caught:
        RunSpec.from_pipeline(file).check()
    assert caught.value.where is not None and caught.value.where.startswith(f"{file}:5")
    out = tmp_path / "out.onnx"
    code, _, stderr = cli("run", TINY, "-o", out, "-p", "check", "--verify",
                          "--verify-inputs", missing)
    assert code == ExitCode.USAGE
    assert f"verify inputs {missing} (--verify-inputs): no such file" in stderr
    assert not out.exists()
    code, _, stderr = cli("run", TINY, "-o", out, "-c", file)
    assert code == ExitCode.USAGE and f"{file}:5" in stderr and not out.exists()
