"""Mutation fuzzer: hostile model files through load -> pipelines -> save and the CLI.

Every input must end in a clear ``GraphpassError`` (or error findings, or a valid
result): never another exception, a hang, or unbounded memory. Cases come from
``tests/_mutations.py``: damaged bytes, structural damage (dangling names,
duplicates, cycles, wrong attribute and wire types, absurd dimensions, unknown
element types, unsafe external data) and inputs hostile by size (10,000-deep
chains, deep nesting, 20,000 attributes). Each runs in a worker process with an
address-space limit and a timeout; the worker is restarted when it dies.

Usage::

    .venv/bin/python benchmarks/fuzz_mutations.py [--seconds 300] [--seed 0]
        [--first 0] [--no-large] [--case SEED/INDEX [--keep DIR]] [--json FILE]

``--case`` reruns one case (as printed in a failure) and ``--keep`` writes its files
to a folder to look at. The exit code is 1 when any case crashed, hung, ran out of
memory or wrote a bad output.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _mutations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long to run")
    parser.add_argument("--seed", type=int, default=0, help="which random cases")
    parser.add_argument("--first", type=int, default=0, help="index of the first random case")
    parser.add_argument("--no-large", action="store_true", help="skip the size-hostile inputs")
    parser.add_argument("--cli-every", type=int, default=10,
                        help="also run the CLI commands on every N-th case (0: never)")
    parser.add_argument("--case", help="run one case, SEED/INDEX or large/NAME")
    parser.add_argument("--keep", type=Path, help="with --case: write its files here")
    parser.add_argument("--json", type=Path, help="also write the counts as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="graphpass-fuzz-") as scratch:
        root = Path(scratch)
        if args.case:
            return _one(args.case, args.keep, root)
        last = [0]

        def progress(tally: _mutations.Tally) -> None:
            if tally.cases - last[0] >= 50:
                last[0] = tally.cases
                failures = len(tally.failures)
                print(f"... {tally.cases} cases, {failures} failures", file=sys.stderr)

        tally = _mutations.run_for(args.seed, args.seconds, root=root, cli_every=args.cli_every,
                                   first=args.first, include_large=not args.no_large,
                                   progress=progress)
    print(tally.summary())
    if args.json:
        args.json.write_text(json.dumps({
            "seed": args.seed, "seconds": round(tally.seconds), "cases": tally.cases,
            "runs": tally.steps, "counts": dict(sorted(tally.counts.items())),
            "failures": [{"case": c.ident, "mutation": c.mutation, "step": o.step,
                          "category": o.category} for c, o in tally.failures]}, indent=2))
    return 1 if tally.failures else 0


def _one(ident: str, keep: Path | None, root: Path) -> int:
    if ident.startswith("large/"):
        case = next(c for c in _mutations.large_cases() if c.ident == ident)
    else:
        seed, index = (int(part) for part in ident.split("/"))
        case = _mutations.make_case(seed, index)
    print(f"case {case.ident}: {case.mutation}")
    if keep is not None:
        print(f"model written to {case.write(keep)}")
    steps = [*_mutations.PIPELINES, *_mutations.CLI_STEPS]
    with _mutations.Sandbox(root) as sandbox:
        outcomes = sandbox.run(case, steps)
    for outcome in outcomes:
        print(f"{outcome.step}: {outcome.category}")
        if outcome.failed or outcome.detail:
            print("   " + outcome.detail.replace("\n", "\n   "))
    return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
