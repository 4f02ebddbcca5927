"""Crash runs of every writer but ``save``: killed at every step, and entering each system call.

``tests/_crash_atomic.py`` does the work; ``tests/test_crash_atomic.py`` runs the kills
at every crash point in ``make test``. This runs both sweeps over every writer (the
metrics log, the plot, ``Trainer.save_checkpoint``, ``graphpass.torch.save_state``, a
state snapshot, the onnxruntime-training artifacts, the training-graph directory with
and without an atomic exchange of folders):

* a kill (``SIGKILL``, test hook ``GRAPHPASS_TEST_KILL_AT``) at every step of the write;
* with ``strace``: the write killed as it enters each system call that changes the
  output's folder, one call at a time. This needs no test hook, so it measures any
  version of graphpass: ``PYTHONPATH`` naming another checkout's package measures that
  one (the points sweep then finds no step to kill at in writers without one).

After every kill the reader's view of the output must be the whole old or the whole
new one (``lost``: nothing at the path; ``torn``: anything else), and the next write
must leave the output alone in its folder (``left over`` counts the kills after which
it did not: temporaries that nothing removes). Prints the counts; the exit code is 1 on
any failure.

Usage::

    .venv/bin/python benchmarks/crash_atomic.py [--no-strace] [--writers a,b] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _crash_atomic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", default=",".join(_crash_atomic.WRITERS))
    parser.add_argument("--no-strace", action="store_true", help="skip the strace sweep")
    parser.add_argument("--json", type=Path, help="also write the counts as JSON")
    args = parser.parse_args()
    arguments = ["--writers", args.writers] + ([] if args.no_strace else ["--strace"])
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        _crash_atomic.main(arguments)
    results: dict[str, dict[str, dict[str, object]]] = json.loads(
        output.getvalue().splitlines()[-1])
    failures = 0
    print(f"{'writer':<34} {'kind':<7} {'kill points':>11}  lost torn  left over  outcomes")
    for writer, entry in results.items():
        if writer == "seconds":
            continue
        for kind, tally in entry.items():
            failures += len(tally["failures"])  # type: ignore[arg-type]
            outcomes = ", ".join(f"{k} {v}" for k, v in tally["outcomes"].items())  # type: ignore[attr-defined]
            print(f"{writer:<34} {kind:<7} {tally['kill_points']:>11}  {tally['lost']:>4} "
                  f"{tally['torn']:>4} {tally['left over']:>10}  {outcomes}")
            for failure in tally["failures"][:3]:  # type: ignore[index]
                print(f"    {str(failure)[:300]}")
    print(f"seconds: {results['seconds']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
