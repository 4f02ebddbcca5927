"""The same input and passes give the same bytes, whatever the process's hash seed.

Each run is a fresh Python process with its own ``PYTHONHASHSEED`` (set and dict
orders of strings change with it) that drives the command line over the same files
in its own folder (so that every path in a report is the same relative path):
``run`` with ``train-ready`` and with the hygiene pipeline (models with functions,
nested calls, ``If``/``Loop`` bodies reading outer values, external data), ``lint``
and ``inspect``, reports in text, JSON and SARIF with ``--no-timing``. Every file
written and every report must be byte-identical across the processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
from _mutations import _call_chain, _control_flow, _functions, _with_external_data

REPO = Path(__file__).resolve().parent.parent
HASH_SEEDS = ("0", "1", "4242")

DRIVER = """
import contextlib, io, json, sys
from pathlib import Path
from graphpass.cli import main

results = {}
for name, arguments in json.loads(Path("commands.json").read_text()).items():
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(arguments)
    results[name] = {"code": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}
Path("results.json").write_text(json.dumps(results, indent=1))
"""


def _models(folder: Path) -> list[str]:
    folder.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "tiny_classifier.onnx", folder / "tiny.onnx")
    onnx.save(_functions(), folder / "functions.onnx")
    onnx.save(_call_chain(30), folder / "calls.onnx")
    data, files = _with_external_data(_control_flow(), "control.weights")
    (folder / "control.onnx").write_bytes(data)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return ["tiny.onnx", "functions.onnx", "calls.onnx", "control.onnx"]


def _commands(models: list[str]) -> dict[str, list[str]]:
    commands: dict[str, list[str]] = {}
    for model in models:
        stem = model.removesuffix(".onnx")
        commands[f"{stem} train-ready json"] = [
            "run", model, "-o", f"out-{stem}/ready.onnx", "-p", "train-ready", "--format",
            "json", "--no-timing", "--keep-going"]
        commands[f"{stem} hygiene sarif"] = [
            "run", model, "-o", f"out-{stem}/tidy.onnx", "-p",
            "inline-functions,remove-unused,topological-sort,infer-shapes", "--format", "sarif",
            "--no-timing"]
        commands[f"{stem} hygiene text"] = [
            "run", model, "-o", f"out-{stem}/text.onnx", "-p",
            "inline-functions,remove-unused,infer-shapes,check", "--no-timing", "--time"]
        commands[f"{stem} lint json"] = [
            "lint", model, "-p", "check,lint-gradients,detect-missing-buffers", "--format",
            "json", "--no-timing"]
        commands[f"{stem} inspect"] = ["inspect", model, "--format", "json"]
    return commands


def _run_everything(folder: Path, hash_seed: str) -> dict[str, bytes]:
    models = _models(folder)
    (folder / "commands.json").write_text(json.dumps(_commands(models)))
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    env.pop("GRAPHPASS_DISABLE_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def test_files_and_reports_are_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    runs = {seed: _run_everything(tmp_path / f"seed-{seed}", seed) for seed in HASH_SEEDS}
    reference = runs[HASH_SEEDS[0]]
    results = json.loads(reference["results.json"])
    for name, outcome in results.items():
        assert outcome["code"] in (0, 1), (name, outcome["stderr"])
        assert "seconds" not in outcome["stdout"], name
    written = [name for name in reference if name.startswith("out-")]
    assert len(written) >= 10 and any(name.endswith(".data") for name in written)
    for seed, files in runs.items():
        assert sorted(files) == sorted(reference), seed
        differing = [name for name in files if files[name] != reference[name]]
        assert not differing, (seed, differing)


def test_reports_without_no_timing_differ_only_in_seconds(tmp_path: Path) -> None:
    import graphpass
    from graphpass.reporting import ReportInfo, report_dict

    model = graphpass.Model.from_proto(_functions())
    result = graphpass.PassManager(["inline-functions", "remove-unused"]).run(model)
    timed = report_dict(result, ReportInfo(model="m.onnx"))
    untimed = report_dict(result, ReportInfo(model="m.onnx", timing=False))
    for record in timed["passes"]:
        assert isinstance(record.pop("seconds"), float)
    assert timed == untimed
