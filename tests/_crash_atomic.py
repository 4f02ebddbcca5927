"""Crash tests of every writer of graphpass: killed at every step, the output is whole.

Each *writer* replaces an output that an earlier write made (the ``old`` version) by a
new one (the ``new`` version), through graphpass's own code:

* ``metrics``: ``MetricsLog(path, after_step=3)`` (a resumed run drops later lines);
* ``plot``: ``plot_metrics`` (a PNG);
* ``checkpoint``: ``Trainer.save_checkpoint`` (after one training step);
* ``torch state``: ``graphpass.torch.save_state``;
* ``snapshot``: ``write_snapshot`` (what ``graphpass train --state-dir`` saves);
* ``artifacts``: the onnxruntime-training plugin putting its artifacts into place (the
  folder holds a file of the user's too, which stays);
* ``training directory``: ``build-training-graph`` replacing an earlier directory;
* ``training directory (no exchange)``: the same where the system has no atomic
  exchange of two folders (test hook ``GRAPHPASS_TEST_NO_EXCHANGE=1``).

(``save`` itself, the model and its data files, has its own: ``tests/_crash_writes.py``.)

A write is a forked child of this process (or, with ``--strace``, a fresh ``python``
under ``strace``), killed with ``SIGKILL``:

* ``points``: at every :func:`~graphpass.files._atomic.crash_point` of the write (the
  test hook ``GRAPHPASS_TEST_KILL_AT=<n>``), n = 1, 2 ... to the last;
* ``strace``: entering each system call that changes the output's folder (``rename``,
  ``unlink``, ``mkdir``, ``rmdir``, ``link``, ``fsync`` ... on a path in it), one
  at a time (``strace -e inject=<call>:signal=SIGKILL:when=<n>``). This needs no test
  hook, so it measures any version of graphpass (the counts before the atomic-write
  module came are in ``docs/guarantees.md``).

After each kill the output is opened as its reader opens it (``read_manifest`` for the
training directory, which finishes an interrupted replacement; ``read_snapshot`` for a
state; the bytes of a file) and classified: ``old``, ``new``, ``lost`` (nothing at the
path) or ``torn: why`` (anything else). Then an uninterrupted write must give ``new``
with nothing else in the folder (``left over`` counts the runs where something was:
temporaries nobody removes).

Run as a script (a fresh process, so forking is safe)::

    python tests/_crash_atomic.py [--writers a,b] [--strace] [--json FILE]

It prints the counts as JSON on the last line of standard output.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _crash_harness import CALL, mlp_proto, run, strace_works

WRITERS = ("metrics", "plot", "checkpoint", "torch state", "snapshot", "artifacts",
           "training directory", "training directory (no exchange)")
OUTPUT = {"metrics": "metrics.jsonl", "plot": "loss.png", "checkpoint": "model.safetensors",
          "torch state": "state.safetensors", "snapshot": "state", "artifacts": "artifacts",
          "training directory": "train", "training directory (no exchange)": "train"}
NO_EXCHANGE = "GRAPHPASS_TEST_NO_EXCHANGE"
WIDTH = 32


# ======================================================================= writing
def perform(writer: str, out: Path, version: str, inputs: Path) -> None:
    """Write ``version`` (``old`` or ``new``) of ``writer``'s output into the folder ``out``."""
    value = 1.0 if version == "old" else 2.0
    target = out / OUTPUT[writer]
    if writer == "metrics":
        from graphpass.training._metrics import MetricsLog

        if version == "old":
            with MetricsLog(target) as log:
                for step in range(1, 7):
                    log.write({"step": step, "loss": 1.0 / step})
        else:
            MetricsLog(target, after_step=3).close()
    elif writer == "plot":
        from graphpass.training import plot_metrics

        plot_metrics([{"step": step, "loss": value / step} for step in range(1, 9)], target)
    elif writer == "checkpoint":
        from graphpass.training import Trainer

        trainer = Trainer(inputs / "train")
        if version == "new":
            x = np.random.default_rng(0).standard_normal((4, WIDTH), dtype=np.float32)
            trainer.step({"x": x, "target": np.tanh(x)})
        trainer.save_checkpoint(target)
    elif writer == "torch state":
        import torch

        from graphpass.torch import save_state

        save_state({"w": torch.full((256, 256), value), "b": torch.arange(64) * value}, target)
    elif writer == "snapshot":
        from graphpass.files import write_snapshot

        def files(folder: Path) -> None:
            (folder / "arrays.bin").write_bytes(np.full(50_000, value, np.float32).tobytes())
            (folder / "record.json").write_text(json.dumps({"value": value}))

        write_snapshot(target, f"step-{int(value)}", files)
    elif writer == "artifacts":
        _publish_artifacts(target, value)
        if version == "old":
            (target / "notes.txt").write_text("the user's own file\n")
    elif writer.startswith("training directory"):
        import graphpass

        result = graphpass.PassManager(["build-training-graph"], options={
            "build-training-graph": {"directory": str(target), "lr": 0.01}}).run(
            graphpass.Model.from_proto(mlp_proto(WIDTH, 2, value)))
        if not result.ok:
            raise AssertionError(result.findings)
    else:
        raise ValueError(writer)


def _publish_artifacts(target: Path, value: float) -> None:
    """What the plugin does once onnxruntime-training wrote the artifacts into a scratch."""
    from graphpass.plugins import ort_training

    contents = {name: np.full(20_000 + 1000 * index, value, np.float32).tobytes()
                for index, name in enumerate(("training_model.onnx", "eval_model.onnx",
                                              "optimizer_model.onnx", "checkpoint"))}
    publish = getattr(ort_training, "_publish", None)
    if publish is not None:
        from graphpass.files import temporary_folder

        with temporary_folder(target.parent, target.name) as scratch:
            for name, data in contents.items():
                (scratch / name).write_bytes(data)
            publish(scratch, target)
    else:  # graphpass before files.atomic: a temporary folder of its own, files moved in
        with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as name:
            for file, data in contents.items():
                (Path(name) / file).write_bytes(data)
            ort_training._move_into(Path(name), target)


# ======================================================================= reading
def view(writer: str, out: Path) -> dict[str, bytes] | None:
    """What a reader of the output finds (``None``: nothing at the path); raises if torn."""
    target = out / OUTPUT[writer]
    if writer.startswith("training directory"):
        from graphpass.training._directory import read_manifest

        read_manifest(target)  # as the trainer opens it (finishes an interrupted swap)
        if not target.exists():
            return None
        if read_manifest(target) is None:
            raise ValueError("no valid manifest")
        return _files(target)
    if writer == "snapshot":
        from graphpass.files import read_snapshot

        found = read_snapshot(target)
        return None if found is None else _files(found[0])  # (its name may vary)
    if writer == "artifacts":
        return _files(target) if target.exists() else None
    return {target.name: _content(target)} if target.exists() else None


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): _content(path)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def _content(path: Path) -> bytes:
    """A file's bytes; a safetensors file's tensors and metadata (its header's order varies)."""
    if path.suffix != ".safetensors":
        return path.read_bytes()
    from safetensors import safe_open

    with safe_open(str(path), "numpy") as handle:
        parts = [json.dumps(handle.metadata(), sort_keys=True).encode()]
        for key in sorted(handle.keys()):
            array = handle.get_tensor(key)
            parts += [key.encode(), str(array.dtype).encode(), str(array.shape).encode(),
                      array.tobytes()]
    return b"\0".join(parts)


def classify(writer: str, out: Path, references: dict[str, dict[str, bytes]]) -> str:
    """``old``, ``new``, ``lost`` or ``torn: why``."""
    try:
        found = view(writer, out)
    except Exception as error:  # anything: this is the verdict
        return f"torn: {type(error).__name__}: {str(error)[:200]}"
    if found is None:
        return "lost"
    for label in ("old", "new"):
        if found == references[label]:
            return label
    return f"torn: neither the old nor the new content ({sorted(found)[:6]})"


def leftovers(writer: str, out: Path) -> list[str]:
    """What the output's folder holds besides the output."""
    return sorted(p.name for p in out.iterdir() if p.name != OUTPUT[writer])


# ======================================================================= running
def forked(writer: str, out: Path, version: str, inputs: Path, log: Path, **env: str) -> int:
    """Run one write in a forked child; its exit code, or ``-signal``."""
    if writer.endswith("(no exchange)"):
        env = {**env, NO_EXCHANGE: "1"}

    def body() -> int:
        perform(writer, out, version, inputs)
        return 0
    return run(body, log, **env)


@dataclass
class Tally:
    """Counts of one writer's kills."""

    kill_points: int = 0
    runs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    left_over: int = 0
    missing: int = 0
    """Kills that left nothing at the path until a reader opened it (and recovered it)."""
    recovered: int = 0
    failures: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"kill_points": self.kill_points, "runs": self.runs,
                "outcomes": dict(sorted(self.outcomes.items())),
                "lost": self.outcomes.get("lost", 0),
                "torn": sum(v for k, v in self.outcomes.items() if k.startswith("torn")),
                "left over": self.left_over, "missing before recovery": self.missing,
                "recovered": self.recovered,
                "failures": self.failures[:12], "steps": self.steps}


class Case:
    """One writer's folders: the inputs, a template of the old output, the references."""

    def __init__(self, writer: str, root: Path, inputs: Path):
        self.writer, self.root, self.inputs = writer, root, inputs
        self.out = root / "out"
        self.template = root / "template"
        self.log = root / "log.txt"
        shutil.rmtree(root, ignore_errors=True)
        self.template.mkdir(parents=True)
        self._write(self.template, "old")
        self.references = {"old": self._view(self.template)}
        self.reset()
        self._write(self.out, "new")
        self.references["new"] = self._view(self.out)
        assert self.references["old"] != self.references["new"], writer

    def _write(self, out: Path, version: str, **env: str) -> int:
        code = forked(self.writer, out, version, self.inputs, self.log, **env)
        if code != 0 and not env:
            raise AssertionError(f"{self.writer}: the {version} write failed ({code}): "
                                 f"{self.log.read_text()[-2000:]}")
        return code

    def _view(self, out: Path) -> dict[str, bytes]:
        found = view(self.writer, out)
        assert found is not None
        return found

    def reset(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)
        shutil.copytree(self.template, self.out, symlinks=True)

    def judge(self, tally: Tally, code: int, what: str) -> None:
        """Classify the output after a killed write, then write again and check the folder."""
        target = self.out / OUTPUT[self.writer]
        if self.references["old"] and not target.exists() and not target.is_symlink():
            tally.missing += 1
        verdict = classify(self.writer, self.out, self.references)
        tally.runs += 1
        tally.outcomes[verdict.split(":")[0]] += 1
        if code not in (0, -signal.SIGKILL) or verdict.startswith(("torn", "lost")):
            tally.failures.append(f"{what}: exit {code}, {verdict}: "
                                  f"{self.log.read_text()[-300:] if code > 0 else ''}")
        self._write(self.out, "new")
        verdict = classify(self.writer, self.out, self.references)
        extra = leftovers(self.writer, self.out)
        if extra:
            tally.left_over += 1
        if verdict == "new" and not extra:
            tally.recovered += 1
        else:
            tally.failures.append(f"{what}: the next write gave {verdict}, files off {extra}")


def sweep_points(case: Case) -> Tally:
    """Kill the write at each of its crash points, one run each."""
    tally = Tally()
    steps = case.root / "steps.txt"
    steps.unlink(missing_ok=True)
    case.reset()
    case._write(case.out, "new", GRAPHPASS_TEST_STEPS=str(steps))
    tally.steps = [line.split(" ", 1)[1].rsplit(" ", 1)[0]
                   for line in steps.read_text().splitlines()] if steps.exists() else []
    tally.kill_points = len(tally.steps)
    for point in range(1, tally.kill_points + 1):
        case.reset()
        code = case._write(case.out, "new", GRAPHPASS_TEST_KILL_AT=str(point))
        case.judge(tally, code, f"kill at {point} ({tally.steps[point - 1]})")
    return tally


# ======================================================================= strace
KILLABLE = ("rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir", "mkdir",
            "mkdirat", "link", "linkat", "symlink", "symlinkat", "fsync", "fdatasync")


def _strace(case: Case, log: Path, *extra: str) -> int:
    # No HOME to write to (a file): onnxruntime's import syncs a database there a varying
    # number of times, which would shift the numbering of the fsync calls between runs.
    (case.root / "no-home").touch()
    env = {**os.environ, "HOME": str(case.root / "no-home"),
           "MPLCONFIGDIR": str(case.root / "home")}
    if case.writer.endswith("(no exchange)"):
        env[NO_EXCHANGE] = "1"
    command = ["strace", "-f", "-y", "-qq", "-e", f"trace={','.join(KILLABLE)}", "-o", str(log),
               *extra, sys.executable, __file__, "--child", case.writer, str(case.out), "new",
               str(case.inputs)]
    with open(case.log, "wb") as sink:
        return subprocess.run(command, stdout=sink, stderr=sink, env=env, check=False).returncode


def sweep_strace(case: Case) -> Tally:
    """Kill the write entering each system call that changes the output's folder."""
    tally = Tally()
    (case.root / "home").mkdir(exist_ok=True)
    reference = case.root / "reference.trace"
    for _ in range(2):  # the first run fills caches under HOME (matplotlib's fonts ...)
        case.reset()
        if _strace(case, reference) != 0:
            raise AssertionError(f"{case.writer}: the traced write failed: "
                                 f"{case.log.read_text()}")
    inside = str(case.out.resolve())
    points = [(name, number, what) for name, number, what, args in _calls(reference)
              if inside in args]
    tally.kill_points = len(points)
    for name, number, what in points:
        case.reset()
        killed = case.root / "killed.trace"
        code = _strace(case, killed, "-e", f"inject={name}:signal=SIGKILL:when={number}")
        tally.steps.append(what.replace(inside, ""))
        calls = _calls(killed)
        if not calls or calls[-1][2] != what:
            tally.failures.append(f"killed entering {what}: the trace ends elsewhere "
                                  f"({calls[-1][2] if calls else 'no call'})")
        case.judge(tally, -signal.SIGKILL if code in (137, -9) else code,
                   f"killed entering {what}")
    return tally


def _calls(trace: Path) -> list[tuple[str, int, str, str]]:
    """The main process's calls: name, number among its calls of that name, summary, arguments."""
    calls = []
    counts: Counter[str] = Counter()
    main_pid = None
    for line in trace.read_text(errors="replace").splitlines():
        match = CALL.match(line) or re.match(r"^(?P<pid>\d+)\s+(?P<name>\w+)\((?P<args>.*?)"
                                              r"(?: <unfinished|\) += \?)", line)
        if match is None:
            continue
        main_pid = main_pid or match["pid"]
        if match["pid"] != main_pid:
            continue
        counts[match["name"]] += 1
        # (temporaries are hidden names with random parts: they differ from run to run)
        summary = re.sub(r"/\.[^/\"<>]*", "/.*", match["args"])
        calls.append((match["name"], counts[match["name"]],
                      f"{match['name']}({summary[:160]})", match["args"]))
    return calls


# ======================================================================= main
def prepare_inputs(inputs: Path) -> None:
    """The training directory the checkpoint writer trains (built once)."""
    inputs.mkdir(parents=True, exist_ok=True)
    log = inputs / "log.txt"
    if forked("training directory", inputs, "old", inputs, log) != 0:
        raise AssertionError(log.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default=",".join(WRITERS))
    parser.add_argument("--no-points", action="store_true", help="no kill at each crash point")
    parser.add_argument("--strace", action="store_true",
                        help="kill entering each system call that changes the output's folder")
    parser.add_argument("--child", nargs=4, metavar=("WRITER", "OUT", "VERSION", "INPUTS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        writer, out, version, inputs = args.child
        perform(writer, Path(out), version, Path(inputs))
        return 0
    import graphpass  # noqa: F401  (imported once, before forking)
    from graphpass.framework import default_registry

    default_registry()
    results: dict[str, object] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphpass-crash-atomic-") as scratch_name:
        scratch = Path(scratch_name)
        inputs = scratch / "inputs"
        prepare_inputs(inputs)
        for writer in args.writers.split(","):
            case = Case(writer, scratch / re.sub(r"\W+", "-", writer), inputs)
            entry: dict[str, object] = {}
            if not args.no_points:
                entry["points"] = sweep_points(case).as_dict()
            if args.strace and strace_works():
                entry["strace"] = sweep_strace(case).as_dict()
            results[writer] = entry
    results["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
