"""Crash consistency of every writer: killed at every step, the output is the old or the new.

``tests/_crash_atomic.py`` runs each writer of graphpass (the metrics log, the plot,
``Trainer.save_checkpoint``, ``graphpass.torch.save_state``, a state snapshot, the
onnxruntime-training artifacts, the training-graph directory with and without an
atomic exchange of folders) in a forked child and kills it with ``SIGKILL`` at every
step of the write (the test hook ``GRAPHPASS_TEST_KILL_AT``). After each kill a reader
must find the whole old output or the whole new one, never nothing and never a mix;
the next write must give the new one with nothing left over beside it.
``benchmarks/crash_atomic.py`` also kills each writer entering every system call that
changes the output's folder (``strace``), which measures any version of graphpass.
(``save``'s own crash tests: ``tests/test_crash_writes.py``.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import _crash_atomic as crash
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("matplotlib")

DRIVER = Path(__file__).resolve().parent / "_crash_atomic.py"


@pytest.fixture(scope="module")
def counts() -> dict[str, dict[str, dict[str, object]]]:
    result = subprocess.run([sys.executable, str(DRIVER)], capture_output=True, text=True,
                            timeout=900, check=False, cwd=DRIVER.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, dict[str, dict[str, object]]] = json.loads(result.stdout.splitlines()[-1])
    print(json.dumps(data, indent=1)[:8000])
    return data


@pytest.mark.parametrize("writer", crash.WRITERS)
def test_a_kill_at_every_step_leaves_the_old_or_the_new_output(counts, writer: str) -> None:
    tally = counts[writer]["points"]
    assert tally["failures"] == []
    assert tally["lost"] == tally["torn"] == tally["left over"] == 0
    assert tally["runs"] == tally["kill_points"] == tally["recovered"] >= 5
    outcomes = tally["outcomes"]
    assert set(outcomes) == {"old", "new"}  # kills land on both sides of the commit
    assert outcomes["new"] >= 2 and outcomes["old"] >= 2


@pytest.mark.parametrize(("writer", "expected", "absent"), [
    ("training directory", "training directory exchanged", "old training directory renamed aside"),
    ("training directory (no exchange)", "old training directory renamed aside",
     "training directory exchanged"),
    ("artifacts", "artifacts exchanged", "old artifacts renamed aside")])
def test_each_way_of_replacing_a_folder_is_swept(counts, writer: str, expected: str,
                                                 absent: str) -> None:
    steps = counts[writer]["points"]["steps"]
    if not sys.platform.startswith("linux"):
        pytest.skip("the exchange is Linux's renameat2")
    assert expected in steps and absent not in steps
    # Without an exchange, a kill after the old folder went aside and before the new
    # one is in place leaves no folder at the path: the reader's open
    # (read_manifest) finishes the replacement. With one, there is no such moment.
    missing = counts[writer]["points"]["missing before recovery"]
    assert missing == (1 if "renamed aside" in expected else 0)
