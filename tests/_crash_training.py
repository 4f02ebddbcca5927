"""Crash tests of ``graphpass train --state-dir``: killed at any moment, resumed to the same end.

A small MLP trains 3 shuffled epochs of 16 steps (AdamW, an evaluation every 7 steps,
the state saved every 5 steps and at the end), always with the same command,
``--resume`` included (a folder without a state yet starts from the beginning). A run
is a forked child of this process calling ``graphpass.cli.main``
(:func:`_crash_harness.start_cli`), killed with ``SIGKILL``:

* ``sweep``: at each step of the state writes (the test hook
  ``GRAPHPASS_TEST_KILL_AT=<n>`` of the commit protocol: locking, the snapshot's
  files written and synced, each rename, the pointer, removing the old snapshot), for
  the writes chosen;
* ``random``: from outside after a random delay within the run (steps, evaluations and
  state writes alike), then the resumed run killed again at random, then resumed;
* ``extend`` (with ``--extend``): both again on an extended run: each state folder
  starts as a copy of a finished run of 1 epoch, which the 3-epoch command extends
  (``--resume`` with a larger ``--epochs``), killed at every step of its state writes
  chosen and at random.

After each kill the state folder is classified: ``none`` (no state yet), ``whole``
(the pointer names a snapshot whose files load, with every value its record lists)
or ``torn: why``. The last run must exit 0 with the final state bit-identical to an
uninterrupted run's (of 3 epochs straight, for an extended run too) and the folder
holding the pointer and one snapshot.

Run as a script (a fresh process, so forking is safe)::

    python tests/_crash_training.py [--saves 2] [--random N] [--extend 1] [--seed S] [--json FILE]

It prints the counts as JSON on the last line of standard output.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _crash_harness import decode_status, mlp_proto, run_cli, start_cli

WIDTH, SAMPLES, BATCH = 64, 64, 4


def build(root: Path) -> list[str]:
    """The training graphs and the data under ``root``; the command without the state folder."""
    import graphpass

    model = graphpass.Model.from_proto(mlp_proto(WIDTH, 3))
    result = graphpass.PassManager(["inline-functions", "build-training-graph"], options={
        "build-training-graph": {"directory": str(root / "train"), "lr": 0.01}}).run(model)
    assert result.ok, result.findings
    for name, count, seed in (("data", SAMPLES, 1), ("eval", 8, 2)):
        values = np.random.default_rng(seed).standard_normal((count, WIDTH), dtype=np.float32)
        np.savez(root / f"{name}.npz", x=values, target=np.tanh(values[:, ::-1]))
    return ["train", str(root / "train"), "--data", str(root / "data.npz"), "--batch-size",
            str(BATCH), "--epochs", "3", "--shuffle", "--seed", "1", "--eval-data",
            str(root / "eval.npz"), "--eval-every", "7", "--save-every", "5", "--format",
            "json"]


def command(base: list[str], state: Path) -> list[str]:
    return [*base, "--state-dir", str(state), "--resume", str(state)]


def with_epochs(base: list[str], epochs: int) -> list[str]:
    """``base`` training ``epochs`` epochs instead."""
    at = base.index("--epochs")
    return [*base[:at + 1], str(epochs), *base[at + 2:]]


def fresh(state: Path, start_from: Path | None) -> None:
    """A trial's state folder: none yet, or a copy of ``start_from`` (a shorter run's)."""
    if start_from is not None:
        shutil.copytree(start_from, state)


def final_arrays(state: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    from graphpass.files import read_snapshot

    found = read_snapshot(state)
    assert found is not None
    return load_file(str(found[0] / "arrays.safetensors"))


def classify(state: Path) -> str:
    """``none``, ``whole`` or ``torn: why``: what a resumed run would find."""
    from safetensors.numpy import load_file

    from graphpass.files import read_snapshot

    try:
        found = read_snapshot(state)
    except Exception as error:  # anything: this is the verdict
        return f"torn: {type(error).__name__}: {str(error)[:200]}"
    if found is None:
        return "none"
    try:
        record = json.loads((found[0] / "trainer.json").read_text())
        arrays = load_file(str(found[0] / "arrays.safetensors"))
    except Exception as error:  # anything: this is the verdict
        return f"torn: {type(error).__name__}: {str(error)[:200]}"
    if set(arrays) != set(record["arrays"]) or int(arrays["step"]) != record["steps"]:
        return "torn: the arrays do not match the record"
    return "whole"


def leftovers(state: Path) -> list[str]:
    """What the folder holds besides the pointer and the one snapshot it names."""
    from graphpass.files import read_snapshot

    found = read_snapshot(state)
    names = {p.name for p in state.iterdir()}
    return sorted(names - {"pointer.json", found[0].name if found else ""})


@dataclass
class Tally:
    kills: int = 0
    resumes: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    equal: int = 0
    failures: list[str] = field(default_factory=list)
    reached: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {"kills": self.kills, "resumes": self.resumes, "equal": self.equal,
                "outcomes": dict(sorted(self.outcomes.items())),
                "torn": sum(v for k, v in self.outcomes.items() if k.startswith("torn")),
                "failures": self.failures[:20], "reached": dict(self.reached.most_common())}


def _judge_kill(tally: Tally, state: Path, code: int, what: str) -> None:
    tally.kills += 1
    verdict = classify(state)
    tally.outcomes[verdict.split(":")[0]] += 1
    if verdict.startswith("torn") or code not in (0, -signal.SIGKILL):
        tally.failures.append(f"{what}: exit {code}, {verdict}")


def _finish(tally: Tally, base: list[str], state: Path, scratch: Path,
            reference: dict[str, np.ndarray], what: str) -> None:
    code = run_cli(command(base, state), scratch / "log.txt")
    tally.resumes += 1
    if code != 0:
        tally.failures.append(f"{what}: the resumed run exited {code}: "
                              f"{(scratch / 'log.txt').read_text()[-500:]}")
        return
    extra = leftovers(state)
    if same(final_arrays(state), reference) and not extra:
        tally.equal += 1
    else:
        tally.failures.append(f"{what}: the final state differs from the uninterrupted run's"
                              f" (files off: {extra})")


def same(arrays: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> bool:
    """Whether ``arrays`` are ``reference``, bit for bit."""
    return arrays.keys() == reference.keys() and all(
        np.array_equal(arrays[k], reference[k]) for k in reference)


def points(base: list[str], scratch: Path, start_from: Path | None = None,
           ) -> tuple[list[str], float, dict[str, np.ndarray]]:
    """The crash points of an uninterrupted run, its seconds, and its final state."""
    state = scratch / ("reference" if start_from is None else "extended-reference")
    fresh(state, start_from)
    trace = scratch / "steps.txt"
    trace.unlink(missing_ok=True)
    started = time.monotonic()
    code = run_cli(command(base, state), scratch / "log.txt", GRAPHPASS_TEST_STEPS=str(trace))
    seconds = time.monotonic() - started
    if code != 0:
        raise AssertionError(f"the uninterrupted run failed: {(scratch / 'log.txt').read_text()}")
    names = [line.split(" ", 1)[1].rsplit(" ", 1)[0] for line in trace.read_text().splitlines()]
    return names, seconds, final_arrays(state)


def sweep(base: list[str], scratch: Path, names: list[str], saves: list[int],
          reference: dict[str, np.ndarray], start_from: Path | None = None) -> Tally:
    """A kill at every crash point of the chosen state writes (1 = the first), then resume.

    With ``start_from``, each run starts from a copy of that state folder.
    """
    tally = Tally()
    starts = [i for i, name in enumerate(names) if name == "state locked"]
    chosen = []
    for save in saves:
        index = save - 1 if save > 0 else len(starts) + save
        end = starts[index + 1] if index + 1 < len(starts) else len(names)
        chosen.extend(range(starts[index], end))
    for point in chosen:
        state = scratch / f"sweep-{point}{'-extended' * (start_from is not None)}"
        fresh(state, start_from)
        code = run_cli(command(base, state), scratch / "log.txt",
                   GRAPHPASS_TEST_KILL_AT=str(point + 1))
        tally.reached[names[point]] += 1
        _judge_kill(tally, state, code, f"kill at {point + 1} ({names[point]})")
        _finish(tally, base, state, scratch, reference, f"kill at {point + 1}")
    return tally


def random_kills(base: list[str], scratch: Path, trials: int, seconds: float,
                 reference: dict[str, np.ndarray], seed: int,
                 start_from: Path | None = None) -> Tally:
    """Kill a run at a random moment, then its resumed run too, then resume to the end.

    With ``start_from``, each trial starts from a copy of that state folder.
    """
    chooser = random.Random(seed)
    tally = Tally()
    for trial in range(trials):
        state = scratch / f"random-{trial}{'-extended' * (start_from is not None)}"
        fresh(state, start_from)
        for attempt in range(2):
            trace = scratch / "random-steps.txt"
            trace.unlink(missing_ok=True)
            pid = start_cli(command(base, state), {"GRAPHPASS_TEST_STEPS": str(trace)},
                        scratch / "log.txt")
            time.sleep(chooser.uniform(0.05, seconds * 1.1))
            signal_sent = True
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                signal_sent = False
            code = decode_status(os.waitpid(pid, 0)[1])
            lines = trace.read_text().splitlines() if trace.exists() else []
            last = lines[-1].split(" ", 1)[1].rsplit(" ", 1)[0] if lines else None
            tally.reached["finished before the kill" if not signal_sent or code == 0 else
                          "killed while training, before any state write" if last is None
                          else "killed during a state write" if last not in (
                              "pointer folder synced", "old state removed")
                          else "killed while training, after a state write"] += 1
            _judge_kill(tally, state, code, f"random trial {trial} run {attempt + 1}")
        _finish(tally, base, state, scratch, reference, f"random trial {trial}")
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", default="2",
                        help="the state writes to kill at every step of (1 = the first, -1 = "
                             "the last; comma-separated, or 'all')")
    parser.add_argument("--random", type=int, default=0, help="random-kill trials")
    parser.add_argument("--extend", metavar="SAVES",
                        help="also extend a finished run of 1 epoch to 3, killed at every step "
                             "of these state writes of the extension (as --saves) and at "
                             "random (--random trials)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import graphpass.cli  # noqa: F401  (imported once, before forking)
    from graphpass.framework import default_registry

    default_registry()
    started = time.perf_counter()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="graphpass-crash-train-") as scratch_name:
        scratch = Path(scratch_name)
        base = build(scratch)
        names, seconds, reference = points(base, scratch)
        writes = names.count("state locked")
        saves = _saves(args.saves, writes)
        results["run"] = {"seconds": round(seconds, 3), "state writes": writes,
                          "crash points": len(names), "steps": int(reference["step"])}
        results["sweep"] = sweep(base, scratch, names, saves, reference).as_dict()
        if args.random:
            results["random"] = random_kills(base, scratch, args.random, seconds, reference,
                                             args.seed).as_dict()
        if args.extend:
            results["extend"] = extend(base, scratch, args.extend, args.random, reference,
                                       args.seed)
    results["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results))
    return 0


def extend(base: list[str], scratch: Path, saves: str, trials: int,
           reference: dict[str, np.ndarray], seed: int) -> dict[str, object]:
    """The sweep and random kills of a finished 1-epoch run extended to the 3 epochs."""
    short = scratch / "one-epoch"
    code = run_cli(command(with_epochs(base, 1), short), scratch / "log.txt")
    if code != 0:
        raise AssertionError(f"the 1-epoch run failed: {(scratch / 'log.txt').read_text()}")
    names, seconds, final = points(base, scratch, start_from=short)
    writes = names.count("state locked")
    return {"run": {"seconds": round(seconds, 3), "state writes": writes,
                    "crash points": len(names), "from step": int(final_arrays(short)["step"]),
                    "steps": int(final["step"]), "equal": same(final, reference)},
            "sweep": sweep(base, scratch, names, _saves(saves, writes), reference,
                           start_from=short).as_dict(),
            "random": random_kills(base, scratch, trials, seconds, reference, seed + 1,
                                   start_from=short).as_dict()}


def _saves(spec: str, writes: int) -> list[int]:
    return list(range(1, writes + 1)) if spec == "all" else [int(s) for s in spec.split(",")]


if __name__ == "__main__":
    sys.exit(main())
