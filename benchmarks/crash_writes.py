"""Crash and concurrency runs of save's commit protocol, long (``make bench``).

``tests/_crash_writes.py`` does the work; ``tests/test_crash_writes.py`` runs a short
version in ``make test``. This runs, over five layouts (a data file streamed next to
the output, a data file copied over the one the output references, the input's data
referenced in place, ``--in-place`` with new weights from a checkpoint, a first
write):

* a kill (``SIGKILL``, test hook ``GRAPHPASS_TEST_KILL_AT``) at every step of the write
  path, and with ``--double`` again at every step of the run after it;
* with ``strace``: the real ``graphpass`` command killed as it enters each system call
  of the write path, one call at a time;
* ``--random N`` kills from outside at random moments of a write (weights ``--scale``
  times larger, so that kills land inside it), the output's state carried from run
  to run;
* ``--concurrent N`` rounds of two writers at once (same output, and two outputs in
  one folder), with a reader opening the output all the while.

After every kill ``onnx.load`` must find the whole old or the whole new weights, and
the next run must leave exactly the model and the data it references. Prints the
counts; the exit code is 1 on any other outcome.

Usage::

    .venv/bin/python benchmarks/crash_writes.py [--random 300] [--concurrent 100]
        [--no-strace] [--no-double] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _crash_writes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--random", type=int, default=300, help="random kills per layout")
    parser.add_argument("--scale", type=int, default=20, help="weights this many times larger")
    parser.add_argument("--concurrent", type=int, default=100, help="rounds of two writers")
    parser.add_argument("--no-strace", action="store_true", help="skip the strace sweep")
    parser.add_argument("--no-double", action="store_true", help="skip kills of the next run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the counts as JSON")
    args = parser.parse_args()

    sweeps = ["--concurrent", str(args.concurrent), "--readers"]
    if not args.no_double:
        sweeps.append("--double")
    if not args.no_strace:
        sweeps.append("--strace")
    results = {"every step": _run(sweeps), "random kills": _run([
        "--no-sweep", "--random", str(args.random), "--scale", str(args.scale),
        "--seed", str(args.seed)])}
    failures = _print(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if failures else 0


def _run(arguments: list[str]) -> dict[str, dict[str, object]]:
    import contextlib
    import io

    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        _crash_writes.main(arguments)
    data: dict[str, dict[str, object]] = json.loads(output.getvalue().splitlines()[-1])
    return data


def _print(results: dict[str, dict[str, dict[str, object]]]) -> int:
    failures = 0
    print(f"{'layout':<24} {'kind':<8} {'kill points':>11} {'runs':>6}  outcomes")
    for part in results.values():
        for layout, entry in part.items():
            if layout == "seconds":
                continue
            kinds = entry.items() if "runs" not in entry else [("", entry)]
            for kind, tally in kinds:
                if not isinstance(tally, dict):
                    continue
                failures += len(tally["failures"])
                outcomes = ", ".join(f"{k} {v}" for k, v in tally["outcomes"].items())
                print(f"{layout:<24} {kind:<8} {tally['kill_points']:>11} {tally['runs']:>6}  "
                      f"{outcomes}; next run tidy: {tally['recovered']}; "
                      f"failures: {len(tally['failures'])}")
                for failure in tally["failures"][:5]:
                    print(f"    {failure[:300]}")
                if tally.get("last step reached"):
                    print("    " + "; ".join(f"{k}: {v}" for k, v in
                                             tally["last step reached"].items()))
    print(f"seconds: {', '.join(str(part['seconds']) for part in results.values())}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
