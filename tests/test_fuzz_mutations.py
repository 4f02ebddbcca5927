"""A short, seeded slice of the mutation fuzzer (``benchmarks/fuzz_mutations.py`` runs long).

Hostile model files (``tests/_mutations.py``: damaged bytes, dangling names,
duplicates, cycles, wrong attribute and wire types, absurd dimensions, unknown element
types, unsafe external data, 10,000-deep chains and nestings, 20,000 attributes ...)
go through load -> each built-in pipeline -> save -> load again, and through
``graphpass run``/``lint``/``inspect``, in a worker process with an address-space limit
and a timeout. Each must end in a clear ``GraphpassError``, in error findings, or in a
valid result: never another exception, a hang, a memory blow-up, a changed input, a
leftover temporary file, or an output worse than its input.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _mutations
import pytest

SEED = 0
CASES = 1500


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory):
    with _mutations.Sandbox(tmp_path_factory.mktemp("fuzz")) as box:
        yield box


def test_seeded_random_cases_end_clearly(sandbox: _mutations.Sandbox) -> None:
    tally = _mutations.run_cases(sandbox, _mutations.cases(SEED, CASES), cli_every=10)
    print(tally.summary())
    assert not tally.failures, tally.summary()
    # The slice reaches every kind of outcome, not just parse errors.
    assert tally.counts.get("ok", 0) >= 100
    assert tally.counts.get("findings", 0) >= 100
    clear = [c for c in tally.counts if c.startswith("error: ")]
    assert {c.split(":")[1].strip() for c in clear} >= {
        "ModelLoadError", "InvalidModelError", "ExternalDataError", "PassError"}


def test_inputs_hostile_by_size_end_clearly(sandbox: _mutations.Sandbox) -> None:
    steps = ["inline-functions,remove-unused,topological-sort", "infer-shapes,check",
             "cli inspect"]
    tally = _mutations.run_cases(sandbox, _mutations.large_cases(), steps)
    print(tally.summary())
    assert not tally.failures, tally.summary()
    assert tally.cases == len(_mutations.LARGE) + len(_mutations.LARGE_BYTES)


def test_console_script_on_hostile_files_is_one_message_without_traceback(
        tmp_path: Path) -> None:
    """The real entry point, in fresh processes, on a few cases of different kinds."""
    chosen = [_mutations.make_case(SEED, index) for index in (0, 1, 2, 3, 5, 8)]
    chosen.append(next(c for c in _mutations.large_cases() if "40 deep" in c.ident))
    env = {k: v for k, v in os.environ.items() if k != "GRAPHPASS_DISABLE_PLUGINS"}
    codes = set()
    for number, case in enumerate(chosen):
        model = case.write(tmp_path / f"case{number}")
        for arguments in (["run", str(model), "-o", str(tmp_path / f"out{number}.onnx"), "-p",
                           "train-ready"], ["inspect", str(model)]):
            done = subprocess.run([sys.executable, "-m", "graphpass", *arguments], env=env,
                                  capture_output=True, text=True, timeout=300, check=False)
            codes.add(done.returncode)
            assert done.returncode in (0, 1, 2), (case.mutation, done.stderr)
            assert "Traceback" not in done.stderr and "internal error" not in done.stderr
            if done.returncode == 2:
                assert done.stderr.count("graphpass: error:") == 1, done.stderr
    assert 2 in codes  # some of them are refused
