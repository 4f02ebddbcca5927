"""Crash consistency of ``save``: the model and its data files are replaced as one.

``tests/_crash_writes.py`` runs ``graphpass run`` (forked from one fresh process) over
five layouts (a new data file streamed next to the output, a data file copied over the
one the output references, the input's data file referenced in place, ``--in-place``
with new weights from a checkpoint, a first write) and kills it with ``SIGKILL`` at
every step of the write path (the test hook ``GRAPHPASS_TEST_KILL_AT``) and at random
moments; after each kill, ``onnx.load`` must find the whole old or the whole new
weights, and the next run must leave exactly the model and the data it references.
``strace`` (when it can run here) checks that every rename waits for the ``fsync`` it
depends on (what survives a power loss), and reproduces the kill from issue 16.
``benchmarks/crash_writes.py`` runs the long version (random kills by the hundred, a
kill before each system call of the real command).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import _crash_writes as crash
import numpy as np
import onnx
import pytest

import graphpass
from graphpass import Model, Tensor
from graphpass.files._atomic import KILL_AT_ENV, STEPS_ENV
from graphpass.files._commit import name_variant

DRIVER = Path(__file__).resolve().parent / "_crash_writes.py"
RANDOM = 8  # random kills per layout (benchmarks/crash_writes.py runs hundreds)
ROUNDS = 8  # rounds of two writers at once
KILL_POINTS = {"stream": 12, "copy": 12, "reference": 7, "in-place": 12, "fresh": 11}


@pytest.fixture(scope="module")
def counts() -> dict[str, dict[str, dict[str, object]]]:
    """One fresh process: every kill point of every layout, random kills, two writers."""
    result = subprocess.run([sys.executable, str(DRIVER), "--random", str(RANDOM),
                             "--concurrent", str(ROUNDS)],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, dict[str, dict[str, object]]] = json.loads(result.stdout.splitlines()[-1])
    print(json.dumps({k: v for k, v in data.items()}, indent=1)[:6000])
    return data


@pytest.mark.parametrize("layout", crash.LAYOUTS)
def test_a_kill_at_any_step_leaves_the_old_or_the_new_pair(counts, layout: str) -> None:
    sweep = counts[layout]["sweep"]
    assert sweep["failures"] == []
    assert sweep["kill_points"] == KILL_POINTS[layout] == sweep["runs"]
    outcomes = sweep["outcomes"]
    assert set(outcomes) <= {"old", "new", "none"}
    # Both sides of the commit were reached: the kill points are not all before it.
    assert outcomes.get("new", 0) >= 2
    assert outcomes.get("none" if layout == "fresh" else "old", 0) >= 4
    assert sweep["recovered"] == sweep["runs"]  # the next run tidies up


@pytest.mark.parametrize("layout", crash.LAYOUTS)
def test_random_kills_leave_a_whole_pair_and_the_next_run_tidies_up(counts, layout: str) -> None:
    random_kills = counts[layout]["random"]
    assert random_kills["failures"] == []
    assert random_kills["runs"] == RANDOM and random_kills["recovered"] == 1
    assert set(random_kills["outcomes"]) <= {"old", "new"}


@pytest.mark.parametrize("kind", ["concurrent same output", "concurrent two outputs"])
def test_two_writers_at_once_each_end_well(counts, kind: str) -> None:
    """Two processes write at once (the same output, or two outputs in one folder).

    Both exit 0, the output holds one of the two whole models, and no file is left
    over: neither took the other's fresh data file for a stale one.
    """
    tally = counts[kind]
    assert tally["failures"] == [] and tally["recovered"] == ROUNDS
    if kind == "concurrent two outputs":
        assert tally["outcomes"] == {"old": ROUNDS, "new": ROUNDS}
    else:
        assert set(tally["outcomes"]) <= {"old", "new"}


# ===================================================================== strace
needs_strace = pytest.mark.skipif(not crash.strace_works(), reason="strace cannot run here")


@needs_strace
@pytest.mark.parametrize("layout", crash.LAYOUTS)
def test_every_rename_waits_for_the_fsyncs_it_depends_on(tmp_path: Path, layout: str) -> None:
    """What a power loss keeps: only synced bytes and synced renames.

    The system calls of a real ``graphpass run`` must sync each file before renaming
    it, sync the data files' folders before the model's rename, and sync that before
    removing the old data.
    """
    case = crash.Layout(layout, tmp_path / "case")
    case.reset()
    log = tmp_path / "trace.txt"
    crash.strace_run(case, log).check_returncode()
    calls = crash.parse_trace(log, case.out.parent)
    renames = [c for c in calls if c.name.startswith("rename")]
    assert renames and renames[-1].paths[-1] == str(case.out.resolve())  # the model is last
    assert crash.durability_problems(calls, case.out) == []
    assert case.classify() == "new" and not case.leftovers()


@needs_strace
def test_the_checker_of_sync_order_finds_a_missing_fsync(tmp_path: Path) -> None:
    calls = [crash.Call("write", ("/o/.m.onnx.1.x.graphpass-tmp",), "4"),
             crash.Call("rename", ("/o/.m.onnx.1.x.graphpass-tmp", "/o/m.onnx.data"), "0"),
             crash.Call("write", ("/o/.m.onnx.1.y.graphpass-tmp",), "4"),
             crash.Call("fsync", ("/o/.m.onnx.1.y.graphpass-tmp",), "0"),
             crash.Call("rename", ("/o/.m.onnx.1.y.graphpass-tmp", "/o/m.onnx"), "0"),
             crash.Call("unlink", ("/o/old.data",), "0")]
    problems = crash.durability_problems(calls, Path("/o/m.onnx"))
    assert len(problems) == 3
    assert "bytes were not synced" in problems[0]
    assert "commits while" in problems[1] and "before the commit is synced" in problems[2]


@needs_strace
def test_the_kill_from_issue_16_leaves_the_old_pair(tmp_path: Path) -> None:
    """``strace -e inject=rename,renameat,renameat2:signal=SIGKILL:when=2``.

    Before the fix the second rename (the model's) came after the data file had been
    replaced, and the old model read the new weights (-2.0 where it held 0.0).
    """
    case = crash.Layout("stream", tmp_path / "case")
    case.reset()
    killed = crash.strace_run(case, tmp_path / "trace.txt", "-e",
                              "inject=rename,renameat,renameat2:signal=SIGKILL:when=2")
    assert killed.returncode != 0
    assert case.classify() == "old"


# ===================================================================== names
def _external_model(folder: Path, name: str, value: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    proto = crash.model_proto({k: np.full_like(v, value) for k, v in crash.OLD.items()})
    path = folder / name
    graphpass.save(Model.from_proto(proto), path, external_data=True)
    return path


def _locations(path: Path) -> set[str]:
    return crash.referenced(path)


def test_rewriting_an_output_alternates_between_two_data_file_names(tmp_path: Path) -> None:
    out = _external_model(tmp_path, "m.onnx", 1.0)
    assert _locations(out) == {"m.onnx.data"}
    names = []
    for value in (2.0, 3.0, 4.0):
        model = graphpass.load(out)
        for tensor in list(model.graph.initializers.values()):
            model.graph.set_initializer(Tensor.from_array(
                tensor.name, np.full(tensor.shape, value, np.float32)))
        graphpass.save(model, out, overwrite_input=True, external_data=True)
        names.append(sorted(_locations(out)))
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.onnx", *names[-1]])
        arrays = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
        assert all((a == value).all() for a in arrays.values())
    assert names == [["m.onnx.1.data"], ["m.onnx.data"], ["m.onnx.1.data"]]


def test_a_data_file_another_model_references_is_never_replaced_or_removed(
        tmp_path: Path) -> None:
    """``lint.onnx`` references ``m.onnx.data`` in place; rewriting ``m.onnx`` keeps it."""
    out = _external_model(tmp_path, "m.onnx", 1.0)
    graphpass.save(graphpass.load(out), tmp_path / "lint.onnx")  # a reference, no copy
    assert _locations(tmp_path / "lint.onnx") == {"m.onnx.data"}
    before = (tmp_path / "m.onnx.data").read_bytes()
    for value in (2.0, 3.0):
        model = graphpass.load(out)
        for tensor in list(model.graph.initializers.values()):
            model.graph.set_initializer(Tensor.from_array(
                tensor.name, np.full(tensor.shape, value, np.float32)))
        graphpass.save(model, out, overwrite_input=True, external_data=True)
    assert (tmp_path / "m.onnx.data").read_bytes() == before
    assert _locations(out) == {"m.onnx.2.data"}  # .data is lint's, .1 was the first rewrite
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "lint.onnx", "m.onnx", "m.onnx.2.data", "m.onnx.data"]
    for tensor in onnx.load(tmp_path / "lint.onnx").graph.initializer:
        assert (onnx.numpy_helper.to_array(tensor) == 1.0).all()


def test_stale_files_are_removed_and_running_saves_left_alone(tmp_path: Path) -> None:
    out = _external_model(tmp_path, "m.onnx", 1.0)
    dead = _dead_pid()
    stale = [tmp_path / f".m.onnx.{dead}.abcd1234.graphpass-tmp", tmp_path / "m.onnx.1.data",
             tmp_path / f".other.onnx.{dead}.abcd1234.graphpass-tmp"]
    alive = [tmp_path / f".m.onnx.{os.getppid()}.abcd1234.graphpass-tmp",
             tmp_path / "notes.data", tmp_path / "m.onnx.x.data"]
    for path in stale + alive:
        path.write_bytes(b"left over")
    model = graphpass.load(out)
    graphpass.save(model, tmp_path / "copy.onnx")  # another output: only the other's tmp
    assert [p.exists() for p in stale] == [False, True, False]  # m.onnx.1.data: m.onnx's
    graphpass.save(model, out, overwrite_input=True)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in alive)
    assert not list(tmp_path.glob("*.graphpass-lock"))


def test_a_killed_save_leaves_its_lock_and_the_next_one_goes_ahead(tmp_path: Path) -> None:
    out = _external_model(tmp_path, "m.onnx", 1.0)
    code = _run_killed(out, "locked")
    assert code == -9 and (tmp_path / ".m.onnx.graphpass-lock").exists()
    graphpass.save(graphpass.load(out), out, overwrite_input=True)
    assert not (tmp_path / ".m.onnx.graphpass-lock").exists()


def test_the_step_hook_logs_every_step(tmp_path: Path) -> None:
    out = _external_model(tmp_path, "m.onnx", 1.0)
    steps = tmp_path / "steps.txt"
    script = ("import sys, graphpass; m = graphpass.load(sys.argv[1]); "
              "graphpass.save(m, sys.argv[1], overwrite_input=True, external_data=True, "
              "size_threshold=0)")
    env = {**os.environ, STEPS_ENV: str(steps)}
    subprocess.run([sys.executable, "-c", script, str(out)], env=env, check=True)
    lines = [line.split(" ") for line in steps.read_text().splitlines()]
    assert [int(line[0]) for line in lines] == list(range(1, len(lines) + 1))
    names = [" ".join(line[1:-1]) for line in lines]
    assert names[0] == "locked" and "model renamed into place" in names
    assert names.index("data renamed into place") < names.index("model renamed into place")


def test_name_variants() -> None:
    assert name_variant(Path("m.onnx.data"), 0) == Path("m.onnx.data")
    assert name_variant(Path("m.onnx.data"), 1) == Path("m.onnx.1.data")
    assert name_variant(Path("sub/w.bin"), 2) == Path("sub/w.2.bin")
    assert name_variant(Path("weights"), 1) == Path("weights.1")


def _run_killed(out: Path, step: str) -> int:
    script = ("import sys, graphpass; m = graphpass.load(sys.argv[1]); "
              "graphpass.save(m, sys.argv[1], overwrite_input=True)")
    env = {**os.environ, KILL_AT_ENV: step}
    return subprocess.run([sys.executable, "-c", script, str(out)], env=env,
                          check=False).returncode


def _dead_pid() -> int:
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                             capture_output=True, text=True, check=True)
    return int(process.stdout)
