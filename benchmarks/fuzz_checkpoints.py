"""Checkpoint fuzzer: hostile safetensors, torch, ``.npz`` and sharded checkpoints, for a while.

Every checkpoint must end in a ``CheckpointError`` that names a file of it (or load,
for honest ones): never another exception, a crash, a hang, memory past a limit, code
that runs, or a file read outside the checkpoint's folder. Cases come from
``tests/_checkpoint_mutations.py``: first the catalogue (every kind of lie once), then
seeded random ones (byte damage of valid checkpoints, and lies with random parts) until
the time is up. Each runs in a forked child with an address-space limit and a timeout;
the table gives counts by family and outcome, peak memory and the slowest case.

Usage::

    .venv/bin/python benchmarks/fuzz_checkpoints.py [--seconds 300] [--seed 0] [--json FILE]

The exit code is 1 when any case failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _checkpoint_mutations as fuzz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long to run")
    parser.add_argument("--seed", type=int, default=0, help="which random cases")
    parser.add_argument("--json", type=Path, help="also write the counts as JSON")
    args = parser.parse_args()
    deadline = time.perf_counter() + args.seconds
    last = [0]

    def progress(tally: fuzz.Tally) -> None:
        if tally.cases - last[0] >= 200:
            last[0] = tally.cases
            print(f"... {tally.cases} checkpoints, {len(tally.failures)} failures",
                  file=sys.stderr, flush=True)

    def chosen():  # the catalogue, then random cases until the deadline
        for case in itertools.chain(fuzz.catalogue(), (fuzz.make_case(args.seed, index)
                                                       for index in itertools.count())):
            if time.perf_counter() >= deadline:
                return
            yield case

    with tempfile.TemporaryDirectory(prefix="graphpass-ckfuzz-") as scratch, \
            fuzz.Sandbox(Path(scratch)) as sandbox:
        tally = fuzz.run_cases(sandbox, chosen(), progress)
    print(tally.summary())
    if args.json:
        args.json.write_text(json.dumps(tally.as_dict(), indent=2))
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
