"""``graphpass train --resume`` with a larger ``--steps`` or ``--epochs``: the run is extended.

On the crash tests' MLP (``_crash_training.build``: three MatMul + Tanh layers, AdamW,
onnxruntime): a run of 4 steps resumed to 8 ends bit for bit as a straight run of 8 on a
schedule that does not depend on the run's length (constant, with a warmup), and a run
of 1 epoch resumed to 3 as a straight run of 3 epochs (shuffled, evaluated), metrics
file included. On ``linear`` and ``cosine`` the schedule is recomputed over the new
length, as Hugging Face's Trainer does, and one line says so: the extended steps take
the learning rates of a straight run of the new length. A resume whose new end the saved
run has passed is refused. ``tests/test_crash_training.py`` kills extended runs too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from _crash_training import build, final_arrays

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The MLP's ``train`` command (3 epochs), without the state folder and the format."""
    command = build(tmp_path_factory.mktemp("mlp"))
    return [part for part in command if part not in ("--format", "json")]


def _with(base: list[str], **flags: object) -> list[str]:
    """``base`` with ``--flag value`` replaced or added (``None`` drops the flag)."""
    command = list(base)
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if flag in command:
            at = command.index(flag)
            del command[at:at + 2]
        if value is not None:
            command += [flag, str(value)]
    return command


def _steps(log: Path) -> list[dict[str, object]]:
    return [{k: v for k, v in json.loads(line).items() if k != "samples_per_s"}
            for line in log.read_text().splitlines()]


def _same_arrays(one: Path, other: Path) -> None:
    first, second = final_arrays(one), final_arrays(other)
    assert first.keys() == second.keys()
    for name, value in first.items():
        assert value.dtype == second[name].dtype
        assert np.array_equal(value, second[name]), name  # bit for bit


def test_four_steps_resumed_to_eight_equal_eight_straight(cli: Cli, base: list[str],
                                                          tmp_path: Path) -> None:
    steps = _with(base, epochs=None, eval_data=None, eval_every=None, save_every=None,
                  warmup=2)  # constant after a warmup: no rate depends on the length
    code, out, err = cli(*_with(steps, steps=8, state_dir=tmp_path / "straight",
                                log=tmp_path / "straight.jsonl"))
    assert code == 0, err
    code, out, err = cli(*_with(steps, steps=4, state_dir=tmp_path / "s",
                                log=tmp_path / "s.jsonl"))
    assert code == 0, err
    code, out, err = cli(*_with(steps, steps=8, resume=tmp_path / "s",
                                log=tmp_path / "s.jsonl"), "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["resumed_from"] == 4 and len(report["losses"]) == 4
    assert report["notes"] == ["extended the saved run of 4 steps to 8 steps"]
    _same_arrays(tmp_path / "straight", tmp_path / "s")
    assert int(final_arrays(tmp_path / "s")["step"]) == 8
    assert _steps(tmp_path / "s.jsonl") == _steps(tmp_path / "straight.jsonl")
    # the extended run is the run now: the same command again has nothing left to do
    code, out, err = cli(*_with(steps, steps=8, resume=tmp_path / "s"))
    assert code == 0, err
    assert "nothing left to train: the saved run ended at step 8" in out


def test_one_epoch_resumed_to_three_equals_three_straight(cli: Cli, base: list[str],
                                                         tmp_path: Path) -> None:
    code, _, err = cli(*_with(base, state_dir=tmp_path / "straight",
                              log=tmp_path / "straight.jsonl"))
    assert code == 0, err
    code, _, err = cli(*_with(base, epochs=1, state_dir=tmp_path / "s",
                              log=tmp_path / "s.jsonl"))
    assert code == 0, err
    code, out, err = cli(*_with(base, epochs=2, resume=tmp_path / "s",
                                log=tmp_path / "s.jsonl"))
    assert code == 0, err
    assert "extended the saved run of 1 epoch (16 steps) to 2 epochs (32 steps)" in out
    code, out, err = cli(*_with(base, resume=tmp_path / "s", log=tmp_path / "s.jsonl"))
    assert code == 0, err
    assert "trained 16 steps (adamw, lr 0.01, resumed after step 32)" in out
    _same_arrays(tmp_path / "straight", tmp_path / "s")
    assert int(final_arrays(tmp_path / "s")["step"]) == 48
    # shuffled epochs, evaluations every 7 steps and at each epoch's end: one run's file
    assert _steps(tmp_path / "s.jsonl") == _steps(tmp_path / "straight.jsonl")
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["pointer.json", "step-48"]
    code, _, err = cli(*_with(base, epochs=2, resume=tmp_path / "s"))
    assert code == 2 and "Traceback" not in err
    assert ("the saved run has taken 48 steps (3 epochs), past the end of a run of 2 epochs "
            "(32 steps)") in err and "give --epochs 3 or more" in err


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_a_decaying_schedule_is_recomputed_over_the_new_length(
        cli: Cli, base: list[str], tmp_path: Path, kind: str) -> None:
    steps = _with(base, epochs=None, eval_data=None, eval_every=None, save_every=None,
                  schedule=kind, warmup=1)
    logs = {run: tmp_path / f"{run}.jsonl" for run in ("four", "eight", "extended")}
    for run, count in (("four", 4), ("eight", 8)):
        code, _, err = cli(*_with(steps, steps=count, state_dir=tmp_path / run,
                                  log=logs[run]))
        assert code == 0, err
    code, out, err = cli(*_with(steps, steps=4, state_dir=tmp_path / "s",
                                log=logs["extended"]))
    assert code == 0, err
    code, out, err = cli(*_with(steps, steps=8, resume=tmp_path / "s", log=logs["extended"]))
    assert code == 0, err
    rates = {run: [r["lr"] for r in _steps(log)] for run, log in logs.items()}
    # the saved run's steps took the 4-step schedule; the new ones take the 8-step one's
    assert rates["extended"] == rates["four"] + rates["eight"][4:]
    assert rates["four"][-1] < rates["eight"][4]
    notes = [line for line in out.splitlines() if line.startswith("extended")]
    assert notes == [f"extended the saved run of 4 steps to 8 steps: the {kind} schedule was "
                     f"recomputed over the 8 steps, and steps 5 to 8 take the learning rates "
                     f"of a straight run of 8 (step 5: {rates['eight'][4]:.6g}; the saved "
                     f"run's last step had {rates['four'][-1]:.6g})"]
    # the weights then differ from the straight run's only through the first 4 rates
    assert not np.array_equal(final_arrays(tmp_path / "s")["w0"],
                              final_arrays(tmp_path / "eight")["w0"])


def test_a_resume_past_the_new_end_is_refused(cli: Cli, base: list[str],
                                              tmp_path: Path) -> None:
    steps = _with(base, epochs=None, eval_data=None, eval_every=None, save_every=None)
    code, _, err = cli(*_with(steps, steps=6, state_dir=tmp_path / "s"))
    assert code == 0, err
    code, _, err = cli(*_with(steps, steps=4, resume=tmp_path / "s"))
    assert code == 2 and "Traceback" not in err
    assert "the saved run has taken 6 steps, past the end of a run of 4 steps" in err
    assert "give --steps 6 or more" in err
    # other settings are still compared: the length is the only one that may change
    code, _, err = cli(*_with(steps, steps=8, seed=2, resume=tmp_path / "s"))
    assert code == 2 and "the saved run was made with other settings" in err
    assert "seed" in err
