"""``graphpass train --resume``: a run killed half way and resumed ends bit for bit as one run.

On zoo models (a ResNet: BatchNorm statistics carried; GPT-2: a tied head), ``graphpass
train`` runs 3 shuffled epochs of 10 steps with an evaluation every 5 steps and the
state saved every 15: once straight, once killed (``SIGKILL``, the test hook of the
commit protocol) the moment its state at step 15 is committed, then resumed with
``--resume`` and the same command. The weights, the optimizer's moments, the running
statistics and the step count end bit-identical, and so do the metrics logs (bar the
timings) and the checkpoints. A finished run of 1 epoch extended with ``--epochs 3
--resume`` ends as the 3 epochs straight in the same way (a constant schedule after the
warmup: no learning rate depends on the run's length).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import zoo
from safetensors.numpy import load_file

from graphpass.files import read_snapshot
from graphpass.files._atomic import KILL_AT_ENV

pytestmark = [pytest.mark.torch, pytest.mark.slow]
SAMPLES, BATCH = 20, 2


def _data(case: zoo.Case, folder: Path, seed: int, count: int) -> Path:
    rng = np.random.default_rng(seed)
    inputs = case.inputs()
    arrays = {}
    for name, value in inputs.items():
        shape = (count, *value.shape[1:])
        if name == "attention_mask":
            arrays[name] = np.ones(shape, np.int64)
        elif value.dtype == np.int64:
            arrays[name] = rng.integers(1, zoo.cases.VOCAB, size=shape, dtype=np.int64)
        else:
            arrays[name] = rng.standard_normal(shape, dtype=np.float32)
    exported = zoo.export(case, "dynamo-full-state")
    output = exported.manifest["output_shape"]
    arrays["target"] = rng.standard_normal((count, *output[1:]), dtype=np.float32)
    path = folder / f"data-{seed}.npz"
    np.savez(path, **arrays)
    return path


def _training_graphs(case: zoo.Case, folder: Path) -> Path:
    exported = zoo.export(case, "dynamo-full-state")
    directory = folder / "train"
    subprocess.run([sys.executable, "-m", "graphpass", "run", str(exported.model), "-o",
                    str(folder / "ready.onnx"), "-p", "train-ready", "--checkpoint",
                    str(exported.checkpoint), "--emit-training-graph", str(directory)],
                   check=True, capture_output=True)
    return directory


def _train(directory: Path, data: Path, held_out: Path, state: Path, log: Path,
           *extra: str, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({KILL_AT_ENV: kill_at} if kill_at else {})}
    return subprocess.run(
        [sys.executable, "-m", "graphpass", "train", str(directory), "--data", str(data),
         "--batch-size", str(BATCH), "--epochs", "3", "--shuffle", "--seed", "5",
         "--eval-data", str(held_out), "--eval-every", "5", "--save-every", "15",
         "--state-dir", str(state), "--log", str(log), "--schedule", "linear", "--warmup",
         "4", "--checkpoint-out", str(state.parent / f"{state.name}.safetensors"),
         "--format", "json", *extra], capture_output=True, text=True, env=env, check=False)


def _timeless(log: Path) -> list[dict[str, object]]:
    return [{k: v for k, v in json.loads(line).items() if k != "samples_per_s"}
            for line in log.read_text().splitlines()]


@pytest.mark.parametrize("name", ["resnet", "gpt2"])
def test_killed_and_resumed_equals_straight(name: str, tmp_path: Path) -> None:
    case = zoo.case(name)
    directory = _training_graphs(case, tmp_path)
    data, held_out = _data(case, tmp_path, 0, SAMPLES), _data(case, tmp_path, 1, 4)

    straight = _train(directory, data, held_out, tmp_path / "straight", tmp_path / "a.jsonl")
    assert straight.returncode == 0, straight.stderr[-2000:]
    killed = _train(directory, data, held_out, tmp_path / "resumed", tmp_path / "b.jsonl",
                    kill_at="pointer renamed into place")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    found = read_snapshot(tmp_path / "resumed")
    assert found is not None and found[0].name == "step-15"
    resumed = _train(directory, data, held_out, tmp_path / "resumed", tmp_path / "b.jsonl",
                     "--resume", str(tmp_path / "resumed"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    report = json.loads(resumed.stdout)
    assert report["resumed_from"] == 15 and len(report["losses"]) == 15

    final = {run: read_snapshot(tmp_path / run) for run in ("straight", "resumed")}
    arrays = {run: load_file(str(found[0] / "arrays.safetensors"))
              for run, found in final.items() if found is not None}
    assert arrays["straight"].keys() == arrays["resumed"].keys()
    manifest = json.loads((directory / "manifest.json").read_text())
    kinds = {"weights": manifest["trainable"], "statistics": manifest["buffers"],
             "moments": [n for n in arrays["straight"] if n.endswith((".exp_avg", ".m", ".v"))
                         or ".exp_avg" in n]}
    assert kinds["weights"] and (name != "resnet" or kinds["statistics"])
    for key, value in arrays["straight"].items():
        assert value.dtype == arrays["resumed"][key].dtype
        assert np.array_equal(value, arrays["resumed"][key]), key  # bit for bit
    assert int(arrays["straight"]["step"]) == 30
    assert len(arrays["straight"]) > len(kinds["weights"]) + len(kinds["statistics"]) + 1
    assert _timeless(tmp_path / "a.jsonl") == _timeless(tmp_path / "b.jsonl")
    evaluations = [r for r in _timeless(tmp_path / "a.jsonl") if r.get("eval")]
    assert [r["step"] for r in evaluations] == [5, 10, 15, 20, 25, 30]
    checkpoints = [load_file(str(tmp_path / f"{run}.safetensors"))
                   for run in ("straight", "resumed")]
    assert checkpoints[0].keys() == checkpoints[1].keys()
    assert all(np.array_equal(checkpoints[0][k], checkpoints[1][k]) for k in checkpoints[0])
    # the state folder holds the pointer and one snapshot, nothing else
    assert sorted(p.name for p in (tmp_path / "resumed").iterdir()) == ["pointer.json",
                                                                         "step-30"]


def test_a_finished_run_extended_equals_the_longer_run_straight(tmp_path: Path) -> None:
    case = zoo.case("resnet")  # BatchNorm statistics carried
    directory = _training_graphs(case, tmp_path)
    data, held_out = _data(case, tmp_path, 0, SAMPLES), _data(case, tmp_path, 1, 4)
    constant = ("--schedule", "constant")
    runs = {run: (tmp_path / run, tmp_path / f"{run}.jsonl") for run in ("straight", "extended")}
    straight = _train(directory, data, held_out, *runs["straight"], *constant)
    assert straight.returncode == 0, straight.stderr[-2000:]
    short = _train(directory, data, held_out, *runs["extended"], *constant, "--epochs", "1")
    assert short.returncode == 0, short.stderr[-2000:]
    extended = _train(directory, data, held_out, *runs["extended"], *constant, "--resume",
                      str(tmp_path / "extended"))
    assert extended.returncode == 0, extended.stderr[-2000:]
    report = json.loads(extended.stdout)
    assert report["resumed_from"] == 10 and len(report["losses"]) == 20
    assert report["notes"] == ["extended the saved run of 1 epoch (10 steps) to 3 epochs "
                               "(30 steps)"]
    final = {}
    for run, (state, _) in runs.items():
        found = read_snapshot(state)
        assert found is not None and found[0].name == "step-30"
        final[run] = load_file(str(found[0] / "arrays.safetensors"))
    assert final["straight"].keys() == final["extended"].keys()
    for key, value in final["straight"].items():
        assert np.array_equal(value, final["extended"][key]), key  # bit for bit
    assert _timeless(runs["straight"][1]) == _timeless(runs["extended"][1])
    checkpoints = [load_file(str(tmp_path / f"{run}.safetensors")) for run in runs]
    assert all(np.array_equal(checkpoints[0][k], checkpoints[1][k]) for k in checkpoints[0])


def test_a_resume_with_other_settings_is_refused(tmp_path: Path) -> None:
    case = zoo.case("resnet")
    directory = _training_graphs(case, tmp_path)
    data, held_out = _data(case, tmp_path, 0, 8), _data(case, tmp_path, 1, 2)
    assert _train(directory, data, held_out, tmp_path / "s", tmp_path / "a.jsonl").returncode \
        == 0
    done = _train(directory, data, held_out, tmp_path / "s", tmp_path / "a.jsonl", "--resume",
                  str(tmp_path / "s"), "--seed", "6")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "the saved run was made with other settings" in done.stderr
    assert "seed" in done.stderr
