"""Crash runs of ``graphpass train --state-dir``, long (``make bench``).

``tests/_crash_training.py`` does the work; ``tests/test_crash_training.py`` runs a
short version in ``make test`` (every step of the second and the last state write,
a few random kills).
This kills the run at every step of every state write and at hundreds of random
moments (the resumed run killed again at random each time); after every kill the
state folder must be whole (or empty), and every resumed run must end with the
uninterrupted run's state, bit for bit. Prints the counts; exit code 1 on any other
outcome.

Usage::

    .venv/bin/python benchmarks/crash_training.py [--random 200] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    done = subprocess.run([sys.executable, str(TESTS / "_crash_training.py"), "--saves", "all",
                           "--random", str(args.random)], capture_output=True, text=True,
                          cwd=TESTS, check=False)
    if done.returncode != 0:
        print(done.stderr[-3000:])
        return 1
    results = json.loads(done.stdout.splitlines()[-1])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=1))
    bad = [part for part in ("sweep", "random") if results[part]["failures"]
           or results[part]["torn"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
