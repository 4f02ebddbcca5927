"""Crash consistency of ``graphpass train --state-dir``: killed anywhere, resumed to the same end.

``tests/_crash_training.py`` trains a small MLP (3 shuffled epochs, evaluations, the
state saved every 5 steps, always the same command with ``--resume``) and kills it
with ``SIGKILL`` at every step of two state writes, the second and the last (the
commit protocol's test hook: each file written and synced, each rename, the pointer,
the old snapshot's removal), and at random moments (training, evaluating or saving),
the resumed run too. After every kill the state folder holds a whole state (or none
yet), never a torn one; the resumed run then ends with the uninterrupted run's state,
bit for bit, and the folder holds the pointer and one snapshot. The same holds for an
extended run: a finished run of 1 epoch resumed with ``--epochs 3``, killed at every
step of the extension's first and last state writes and at random, ends as the run of
3 epochs straight.
``benchmarks/crash_training.py`` runs the long version (every state write, hundreds
of random kills).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

DRIVER = Path(__file__).resolve().parent / "_crash_training.py"
RANDOM = 6


@pytest.fixture(scope="module")
def counts() -> dict[str, dict[str, object]]:
    result = subprocess.run([sys.executable, str(DRIVER), "--saves", "2,-1", "--random",
                             str(RANDOM), "--extend", "1,-1"], capture_output=True,
                            text=True, timeout=900, check=False, cwd=DRIVER.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, dict[str, object]] = json.loads(result.stdout.splitlines()[-1])
    print(json.dumps(data, indent=1))
    return data


def test_a_kill_at_every_step_of_a_state_write_leaves_a_whole_state(counts) -> None:
    sweep = counts["sweep"]
    assert sweep["failures"] == [] and sweep["torn"] == 0
    assert sweep["kills"] == sweep["resumes"] == sweep["equal"] >= 20
    assert set(sweep["reached"]) >= {"state files written", "state folder renamed into place",
                                     "pointer renamed into place", "old state removed"}
    assert sweep["outcomes"] == {"whole": sweep["kills"]}  # each write has one before it


def test_random_kills_then_resume_end_as_the_uninterrupted_run(counts) -> None:
    tally = counts["random"]
    assert tally["failures"] == [] and tally["torn"] == 0
    assert tally["kills"] == 2 * RANDOM and tally["resumes"] == tally["equal"] == RANDOM
    assert set(tally["outcomes"]) <= {"none", "whole"}


def test_an_extended_run_killed_anywhere_ends_as_the_straight_run(counts) -> None:
    extended = counts["extend"]
    assert extended["run"]["from step"] == 16 and extended["run"]["steps"] == 48
    assert extended["run"]["equal"] is True  # uninterrupted: 1 epoch, then 2 more
    sweep, tally = extended["sweep"], extended["random"]
    assert sweep["failures"] == [] and sweep["torn"] == 0
    assert sweep["kills"] == sweep["resumes"] == sweep["equal"] >= 20
    assert sweep["outcomes"] == {"whole": sweep["kills"]}  # the 1-epoch state, or a later one
    assert tally["failures"] == [] and tally["torn"] == 0
    assert tally["kills"] == 2 * RANDOM and tally["resumes"] == tally["equal"] == RANDOM
    assert set(tally["outcomes"]) == {"whole"}
