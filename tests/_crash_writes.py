"""Crash tests of save's commit protocol: ``graphpass run`` killed at every step, and at random.

Each *layout* rewrites an output whose weights are external, from an old pair (weights
``OLD``) to a new one (weights ``NEW``, same shapes, other values):

* ``stream``: the input's data file is half unused, so the new weights are streamed into
  ``out/m.onnx.data``, replacing the old one;
* ``copy``: the input's data file ``w.bin`` is used whole, so it is copied
  (``copy_file_range``) over ``out/w.bin``, which the old model references;
* ``reference``: the input sits next to the output, so ``out/m.onnx`` references the
  input's ``b.onnx.data`` in place, and the old ``out/m.onnx.data`` goes;
* ``in-place``: ``graphpass run out/m.onnx --in-place`` fills new weights from a
  checkpoint (``reconcile-initializers``), replacing ``out/m.onnx.data``;
* ``fresh``: no previous output (``none`` is then the old state).

A run is a forked child of this process calling ``graphpass.cli.main`` (``graphpass
run`` without the interpreter's start-up), killed with ``SIGKILL`` by the test hook
``GRAPHPASS_TEST_KILL_AT=<n>`` at the n-th step of the write path, or from outside after
a random delay. After each kill the output is opened with ``onnx.load`` (which reads the
external data) and classified: ``old``, ``new``, ``none`` (no model file; fresh only) or
``other: why`` (a failure). Then an uninterrupted run must give the new pair with the
folder holding exactly the expected files (stale files removed).

Run as a script (fresh process, so forking is safe)::

    python tests/_crash_writes.py [--random N] [--double] [--concurrent N] [--json FILE]

It prints the counts as JSON on the last line of standard output.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from _crash_harness import CALL, decode_status, run_cli, start_cli, strace_works
from onnx import TensorProto, helper, numpy_helper

SIZES = (4096, 300_000, 7)  # a small tensor, one over 1 MiB (64 KiB alignment), a tiny one
NAMES = tuple(f"W{i}" for i in range(len(SIZES)))
OLD = {name: np.arange(size, dtype=np.float32) for name, size in zip(NAMES, SIZES, strict=True)}
NEW = {name: -2.0 - np.arange(size, dtype=np.float32) for name, size in zip(NAMES, SIZES,
                                                                            strict=True)}
LAYOUTS = ("stream", "copy", "reference", "in-place", "fresh")


def set_scale(scale: int) -> None:
    """Make the weights ``scale`` times larger (longer writes, for random kills)."""
    global SIZES, OLD, NEW
    SIZES = tuple(size * scale for size in (4096, 300_000, 7))
    OLD = {name: np.arange(size, dtype=np.float32) for name, size in zip(NAMES, SIZES,
                                                                          strict=True)}
    NEW = {name: -2.0 - np.arange(size, dtype=np.float32) for name, size in zip(NAMES, SIZES,
                                                                                strict=True)}
HIDDEN = (".graphpass-tmp", ".graphpass-lock")


# ======================================================================= models
def model_proto(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``Y_i = X_i + W_i`` for each weight (embedded)."""
    nodes, inputs, outputs = [], [], []
    for i, (name, size) in enumerate(zip(NAMES, SIZES, strict=True)):
        nodes.append(helper.make_node("Add", [f"X{i}", name], [f"Y{i}"], name=f"add{i}"))
        inputs.append(helper.make_tensor_value_info(f"X{i}", TensorProto.FLOAT, [size]))
        outputs.append(helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, [size]))
    initializers = [numpy_helper.from_array(weights[name], name) for name in NAMES]
    graph = helper.make_graph(nodes, "crash", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def write_external(path: Path, weights: dict[str, np.ndarray], location: str,
                   spare: int = 0) -> Path:
    """A model at ``path`` whose weights are in ``location`` (plus ``spare`` unused bytes)."""
    proto = model_proto(weights)
    path.parent.mkdir(parents=True, exist_ok=True)
    offset = 0
    with open(path.parent / location, "wb") as handle:
        for tensor in proto.graph.initializer:
            data = tensor.raw_data
            tensor.ClearField("raw_data")
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(offset)),
                               ("length", str(len(data)))):
                tensor.external_data.add(key=key, value=value)
            handle.write(data)
            offset += len(data)
        handle.write(b"\0" * spare)
    path.write_bytes(proto.SerializeToString())
    return path


def write_checkpoint(path: Path, weights: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(dict(weights), str(path))
    return path


def classify(out: Path, *, fresh: bool = False) -> str:
    """``old``, ``new``, ``none`` or ``other: why``: what a reader opening ``out`` finds."""
    if not out.exists():
        return "none" if fresh else "other: no model file"
    try:
        proto = onnx.load(str(out))
        arrays = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    except Exception as error:  # anything: this is the verdict
        return f"other: {type(error).__name__}: {str(error)[:200]}"
    for label, expected in (("old", OLD), ("new", NEW)):
        if arrays.keys() == expected.keys() and all(
                np.array_equal(arrays[k], v) for k, v in expected.items()):
            return label
    mixed = {k: ("old" if np.array_equal(v, OLD.get(k)) else
                 "new" if np.array_equal(v, NEW.get(k)) else "?") for k, v in arrays.items()}
    return f"other: weights {mixed}"


# ====================================================================== layouts
@dataclass
class Layout:
    """A rewrite: how to set up the old state, the command, and the final folder."""

    name: str
    root: Path
    command: list[str] = field(default_factory=list)
    inputs: set[str] = field(default_factory=set)
    """Files of the output folder that are not the output's (an input next to it)."""

    @property
    def out(self) -> Path:
        return self.root / "out" / "m.onnx"

    def reset(self) -> None:
        """The old state: the inputs, and the old pair at the output."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.inputs = set()
        out_dir = self.root / "out"
        out_dir.mkdir(parents=True)
        inputs = self.root / "in"
        if self.name == "stream":
            write_external(inputs / "b.onnx", NEW, "b.bin", spare=sum(SIZES) * 4)
            self._old(location=None)
            self.command = ["run", str(inputs / "b.onnx"), "-o", str(self.out),
                            "-p", "topological-sort"]
        elif self.name == "copy":
            write_external(inputs / "b.onnx", NEW, "w.bin")
            self._old(location="w.bin")
            self.command = ["run", str(inputs / "b.onnx"), "-o", str(self.out),
                            "-p", "topological-sort"]
        elif self.name == "reference":
            write_external(out_dir / "b.onnx", NEW, "b.onnx.data")
            self.inputs = {"b.onnx", "b.onnx.data"}
            self._old(location=None)
            self.command = ["run", str(out_dir / "b.onnx"), "-o", str(self.out),
                            "-p", "topological-sort"]
        elif self.name == "in-place":
            checkpoint = write_checkpoint(inputs / "new.safetensors", NEW)
            self._old(location=None)
            self.command = ["run", str(self.out), "--in-place", "-p", "reconcile-initializers",
                            "--checkpoint", str(checkpoint)]
        elif self.name == "fresh":
            write_external(inputs / "b.onnx", NEW, "b.bin", spare=sum(SIZES) * 4)
            self.command = ["run", str(inputs / "b.onnx"), "-o", str(self.out),
                            "-p", "topological-sort"]
        else:
            raise ValueError(self.name)

    def _old(self, location: str | None) -> None:
        import graphpass

        graphpass.save(graphpass.Model.from_proto(model_proto(OLD)), self.out,
                       external_data=True, location=location)

    def classify(self) -> str:
        return classify(self.out, fresh=self.name == "fresh")

    def leftovers(self) -> set[str]:
        """The output folder's files that are neither the output, its data nor an input."""
        return leftovers(self.out, self.inputs)


def referenced(model_path: Path) -> set[str]:
    """The data file names a model file references."""
    proto = onnx.load(str(model_path), load_external_data=False)
    return {entry.value for tensor in proto.graph.initializer for entry in tensor.external_data
            if entry.key == "location"}


def leftovers(out: Path, inputs: set[str]) -> set[str]:
    """What the folder of ``out`` holds beyond the model, the data it references and ``inputs``.

    Also the expected files that are missing.
    """
    expected = {out.name, *inputs}
    if out.exists():
        expected |= referenced(out)
    return {p.name for p in out.parent.iterdir()} ^ expected


# ====================================================================== running
def steps_of(layout: Layout, scratch: Path, *, reset: bool = True) -> list[tuple[str, float]]:
    """The steps of the write path an uninterrupted run goes through, with their times.

    A time is in seconds from the start of the run.
    """
    if reset:
        layout.reset()
    trace = scratch / "steps.txt"
    trace.unlink(missing_ok=True)
    started = time.monotonic()
    code = run_cli(layout.command, scratch / "log.txt", GRAPHPASS_TEST_STEPS=str(trace))
    if code != 0:
        raise AssertionError(f"{layout.name}: the run failed ({code}): "
                             f"{(scratch / 'log.txt').read_text()}")
    steps = []
    for line in trace.read_text().splitlines():
        _, rest = line.split(" ", 1)
        name, at = rest.rsplit(" ", 1)
        steps.append((name, float(at) - started))
    return steps


@dataclass
class Tally:
    """Counts of one layout's runs."""

    kill_points: int = 0
    steps: list[str] = field(default_factory=list)
    runs: int = 0
    reached: Counter[str] = field(default_factory=Counter)
    """Random kills: the last step each killed run had reached."""
    outcomes: Counter[str] = field(default_factory=Counter)
    recovered: int = 0
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "kill_points": self.kill_points, "runs": self.runs,
            "outcomes": dict(sorted(self.outcomes.items())), "recovered": self.recovered,
            "failures": self.failures[:20], "steps": self.steps}
        if self.reached:
            data["last step reached"] = dict(self.reached.most_common())
        return data


def _recover(layout: Layout, scratch: Path, tally: Tally, what: str) -> None:
    """An uninterrupted run after a kill: the new pair, and nothing else in the folder."""
    code = run_cli(layout.command, scratch / "log.txt")
    verdict = layout.classify()
    extra = layout.leftovers()
    if code == 0 and verdict == "new" and not extra:
        tally.recovered += 1
    else:
        tally.failures.append(f"{what}: the next run gave {code}, {verdict}, "
                              f"files off {sorted(extra)}: {(scratch / 'log.txt').read_text()}")


def sweep(layout: Layout, scratch: Path, *, double: bool = False) -> Tally:
    """Kill at every step (and, with ``double``, again at every step of the next run)."""
    tally = Tally()
    tally.steps = [name for name, _ in steps_of(layout, scratch)]
    tally.kill_points = len(tally.steps)
    for point in range(1, tally.kill_points + 1):
        seconds = [point] + ([*range(1, tally.kill_points + 1)] if double else [])
        for second in seconds if double else [None]:
            layout.reset()
            _kill_at(layout, scratch, tally, point, f"kill at {point} ({tally.steps[point - 1]})")
            if second is not None:
                _kill_at(layout, scratch, tally, second, f"then at {second}")
            _recover(layout, scratch, tally, f"{layout.name}: kill at {point}/{second}")
    return tally


def _kill_at(layout: Layout, scratch: Path, tally: Tally, point: int, what: str) -> None:
    code = run_cli(layout.command, scratch / "log.txt", GRAPHPASS_TEST_KILL_AT=str(point))
    verdict = layout.classify()
    tally.runs += 1
    tally.outcomes[verdict.split(":")[0]] += 1
    if code not in (-signal.SIGKILL, 0) or verdict.startswith("other"):
        tally.failures.append(f"{layout.name}: {what}: exit {code}, {verdict}: "
                              f"{(scratch / 'log.txt').read_text()[-500:]}")


def random_kills(layout: Layout, scratch: Path, runs: int, seed: int) -> Tally:
    """Kill runs from outside after a random delay, ``runs`` times, without resetting.

    The state carries over: each run starts from what the previous kill left (an old
    or new pair, stale files), and the weights alternate between the two sets, so
    each run rewrites the output with the other one.
    """
    chooser = random.Random(seed)
    tally = Tally()
    timed = steps_of(layout, scratch)
    # Kills land anywhere from a little before the write starts to a little after it ends.
    first, last = timed[0][1], timed[-1][1]
    window = (max(0.0, first - (last - first) * 0.2), last + (last - first) * 0.2 + 0.002)
    flip = _Flipper(layout)
    trace = scratch / "steps.txt"
    for index in range(runs):
        flip.toggle()
        trace.unlink(missing_ok=True)
        pid = start_cli(layout.command, {"GRAPHPASS_TEST_STEPS": str(trace)}, scratch / "log.txt")
        time.sleep(chooser.uniform(*window))
        with_signal = True
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            with_signal = False
        _, status = os.waitpid(pid, 0)
        verdict = flip.classify()
        tally.runs += 1
        lines = trace.read_text().splitlines() if trace.exists() else []
        if decode_status(status) == 0:
            tally.reached["not killed: finished"] += 1
        elif lines:
            tally.reached[f"after {lines[-1].split(' ', 1)[1].rsplit(' ', 1)[0]}"] += 1
        else:
            tally.reached["before the write began"] += 1
        tally.outcomes[verdict.split(":")[0]] += 1
        if verdict.startswith("other") or (decode_status(status) not in (0, -signal.SIGKILL)):
            tally.failures.append(f"{layout.name}: random run {index} (signal sent: "
                                  f"{with_signal}): {decode_status(status)} {verdict}")
    flip.toggle()
    code = run_cli(layout.command, scratch / "log.txt")
    if code == 0 and flip.classify() == "new" and not layout.leftovers():
        tally.recovered += 1
    else:
        tally.failures.append(f"{layout.name}: the last run left {sorted(layout.leftovers())}")
    return tally


class _Flipper:
    """Swaps which weight set the layout's input holds, so that every run rewrites."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.current = NEW  # what the last complete run wrote

    def toggle(self) -> None:
        """Make the input hold the other set (the output's previous state stays)."""
        self.current = OLD if self.current is NEW else NEW
        target = self.current
        root = self.layout.root
        if self.layout.name in ("stream", "fresh"):
            write_external(root / "in" / "b.onnx", target, "b.bin", spare=sum(SIZES) * 4)
        elif self.layout.name == "copy":
            write_external(root / "in" / "b.onnx", target, "w.bin")
        elif self.layout.name == "reference":
            # Rewriting b.onnx.data would change the output, which references it: keep
            # two inputs and alternate between them.
            name = "b.onnx" if target is NEW else "a.onnx"
            if not (root / "out" / name).exists():
                write_external(root / "out" / name, target, f"{name}.data")
            self.layout.command[1] = str(root / "out" / name)
            self.layout.inputs = {"a.onnx", "a.onnx.data", "b.onnx", "b.onnx.data"}
        elif self.layout.name == "in-place":
            write_checkpoint(root / "in" / "new.safetensors", target)

    def classify(self) -> str:
        """``old``/``new`` relative to the run in progress (new: the set it writes)."""
        verdict = self.layout.classify()
        if self.current is OLD and verdict in ("old", "new"):
            return "new" if verdict == "old" else "old"
        return verdict


def concurrent_writers(scratch: Path, rounds: int, *, same_output: bool = True,
                       readers: bool = False) -> Tally:
    """Two writers at once, ``rounds`` times: each ends well, the result is one whole model.

    With ``same_output`` both write ``out/m.onnx`` (one from the OLD weights, one from
    the NEW); otherwise they write ``m1.onnx`` and ``m2.onnx`` in the same folder. With
    ``readers``, a third process opens the output with ``onnx.load`` again and again
    meanwhile; what it finds is counted under ``reads``.
    """
    tally = Tally()
    root = scratch / "concurrent"
    shutil.rmtree(root, ignore_errors=True)
    write_external(root / "in" / "a.onnx", OLD, "a.bin", spare=sum(SIZES) * 4)
    write_external(root / "in" / "b.onnx", NEW, "b.bin", spare=sum(SIZES) * 4)
    out_dir = root / "out"
    out_dir.mkdir(parents=True)
    outputs = (["m.onnx", "m.onnx"] if same_output else ["m1.onnx", "m2.onnx"])
    stop, counts_file = scratch / "stop-reading", scratch / "reads.json"
    stop.unlink(missing_ok=True)
    reader = None
    for index in range(rounds):
        if readers and index == 1:  # once there is an output to read
            reader = _start_reader(out_dir / outputs[0], stop, counts_file)
        read_end, write_end = os.pipe()
        pids = [start_cli(["run", str(root / "in" / source), "-o", str(out_dir / output),
                           "-p", "topological-sort"], {}, scratch / f"log{n}.txt",
                          gate=read_end)
                for n, (source, output) in enumerate(zip(("a.onnx", "b.onnx"), outputs,
                                                         strict=True))]
        os.write(write_end, b"go")
        codes = [decode_status(os.waitpid(pid, 0)[1]) for pid in pids]
        os.close(read_end)
        os.close(write_end)
        tally.runs += 2
        verdicts = [classify(out_dir / output) for output in sorted(set(outputs))]
        for verdict in verdicts:
            tally.outcomes[verdict.split(":")[0]] += 1
        extra = leftovers(out_dir / outputs[0], set(outputs[1:]) | (
            referenced(out_dir / outputs[1]) if outputs[1] != outputs[0] else set()))
        bad = [v for v in verdicts if v.startswith("other")]
        if not same_output and verdicts != ["old", "new"]:
            bad.append(f"m1/m2 hold {verdicts}")
        if codes != [0, 0] or bad or extra:
            logs = " | ".join((scratch / f"log{n}.txt").read_text()[-300:] for n in range(2))
            tally.failures.append(f"round {index}: exits {codes}, {verdicts}, files off "
                                  f"{sorted(extra)}: {logs}")
        else:
            tally.recovered += 1
    if reader is not None:
        stop.touch()
        os.waitpid(reader, 0)
        tally.reached.update({f"read: {k}": v for k, v in
                              json.loads(counts_file.read_text()).items()})
    return tally


def _start_reader(out: Path, stop: Path, counts_file: Path) -> int:
    """Fork a process that reads ``out`` until ``stop`` exists, then writes its counts."""
    pid = os.fork()
    if pid:
        return pid
    counts: Counter[str] = Counter()
    try:
        while not stop.exists():
            verdict = classify(out, fresh=True)
            verdict = "no model yet" if verdict == "none" else verdict
            counts[re.sub(r"/\S*/", ".../", verdict)[:200]] += 1  # (folders left out)
        counts_file.write_text(json.dumps(counts))
    finally:
        os._exit(0)


# ======================================================================= strace
TRACED = "openat,write,pwrite64,fsync,fdatasync,chmod,rename,renameat,renameat2,unlink,unlinkat," \
         "link,linkat,flock,mkdir,copy_file_range,sendfile"
"""The system calls of the write path (what ``strace`` traces, and injects kills into)."""


@dataclass(frozen=True)
class Call:
    """One traced system call: its name, the paths it names, and what it returned."""

    name: str
    paths: tuple[str, ...]
    result: str

    def __str__(self) -> str:
        return f"{self.name}({', '.join(self.paths)})"


def strace_run(layout: Layout, log: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``graphpass <command>`` under strace, logging the write path's calls to ``log``.

    ``HOME`` is a fresh folder: onnxruntime's import writes to a database under it,
    and the number of calls it makes otherwise varies from run to run.
    """
    with tempfile.TemporaryDirectory(prefix="graphpass-home-") as home:
        return subprocess.run(strace_command(layout, log, *extra), capture_output=True,
                              text=True, check=False, env={**os.environ, "HOME": home})


def strace_command(layout: Layout, log: Path, *extra: str) -> list[str]:
    return ["strace", "-f", "-y", "-qq", "-e", f"trace={TRACED}", "-o", str(log), *extra,
            sys.executable, "-m", "graphpass", *layout.command]


def parse_trace(log: Path, folder: Path) -> list[Call]:
    """The calls of the main process that name a path in ``folder`` (``-y`` resolves fds)."""
    calls: list[Call] = []
    main_pid = None
    inside = str(folder.resolve())
    for line in log.read_text(errors="replace").splitlines():
        match = CALL.match(line)
        if match is None:
            continue
        main_pid = main_pid or match["pid"]
        if match["pid"] != main_pid:
            continue
        args = match["args"]
        paths = tuple(p for p in re.findall(r'"([^"]*)"|<([^>]*)>', args) for p in p if p)
        paths = tuple(p for p in paths if p.startswith(inside))
        if paths:
            calls.append(Call(match["name"], paths, match["result"]))
    return calls


def durability_problems(calls: list[Call], out: Path) -> list[str]:
    """Where the write path could lose data on power loss (a crash of the machine).

    After a power loss only what was ``fsync``ed is sure to be there: a file's bytes
    after an ``fsync`` of the file, a rename or removal after an ``fsync`` of its
    folder. So every rename must find its source's bytes synced; the model's rename
    (the commit) must find every earlier data rename's folder synced; and removing
    old data must wait until the folder of the model's rename is synced.
    """
    model = str(out.resolve())
    dirty: set[str] = set()  # files written since their last fsync
    unsynced: dict[str, str] = {}  # folder -> a rename in it that no fsync has covered yet
    problems: list[str] = []
    committed = False
    for index, call in enumerate(calls):
        where = f"call {index} {call}"
        if call.name in ("write", "pwrite64", "copy_file_range", "sendfile"):
            dirty.add(call.paths[-1])
        elif call.name in ("fsync", "fdatasync"):
            dirty.discard(call.paths[0])
            unsynced.pop(call.paths[0], None)
        elif call.name.startswith("rename"):
            source, destination = call.paths[0], call.paths[-1]
            if source in dirty:
                problems.append(f"{where}: renames a file whose bytes were not synced")
            if destination == model:
                if unsynced:
                    problems.append(f"{where}: commits while {sorted(unsynced.values())} "
                                    "are not synced")
                committed = True
            unsynced[os.path.dirname(destination)] = str(call)
        elif (call.name.startswith("unlink") and committed
              and not call.paths[0].endswith(HIDDEN) and os.path.dirname(model) in unsynced):
            problems.append(f"{where}: removes old data before the commit is synced")
    return problems


def strace_sweep(layout: Layout, scratch: Path) -> Tally:
    """Kill the real ``graphpass`` before each system call of the write path, one by one.

    ``strace -e inject=<call>:signal=SIGKILL:when=N`` kills the process as it enters
    its N-th call of that name; a reference run gives every call of :data:`TRACED`
    from the first one on the output folder to the last, and the number of each
    among the calls of its name. Each killed run's own trace must end in the call
    the reference run made at that point (the runs make the same calls).
    """
    tally = Tally()
    layout.reset()
    reference_log = scratch / "reference.trace"
    strace_run(layout, reference_log).check_returncode()
    calls = _main_calls(reference_log)
    inside = str(layout.out.parent.resolve())
    touching = [i for i, line in enumerate(calls) if inside in line]
    first, last = touching[0], touching[-1]
    tally.kill_points = last - first + 1
    for index in range(first, last + 1):
        layout.reset()
        log = scratch / "killed.trace"
        name = calls[index].split("(", 1)[0]
        number = sum(1 for call in calls[:index + 1] if call.split("(", 1)[0] == name)
        killed = strace_run(layout, log, "-e", f"inject={name}:signal=SIGKILL:when={number}")
        verdict = layout.classify()
        tally.runs += 1
        tally.outcomes[verdict.split(":")[0]] += 1
        own = _main_calls(log)
        expected = re.sub(r"\.\d+\.\w{8}\.graphpass-tmp", "", _call_head(calls[index]))
        seen = re.sub(r"\.\d+\.\w{8}\.graphpass-tmp", "", _call_head(own[-1])) if own else ""
        tally.steps.append(expected)
        if verdict.startswith("other") or killed.returncode in (0, 1, 2) or seen != expected:
            tally.failures.append(f"{layout.name}: killed entering {name} #{number} "
                                  f"({expected}; the trace ends in {seen}): exit "
                                  f"{killed.returncode}, {verdict}")
        _recover(layout, scratch, tally, f"{layout.name}: killed entering {name} #{number}")
    return tally


def _main_calls(log: Path) -> list[str]:
    lines = [line for line in log.read_text(errors="replace").splitlines()
             if CALL.match(line) or "<unfinished" in line]
    if not lines:
        return []
    main_pid = lines[0].split()[0]
    return [line.split(None, 1)[1] for line in lines if line.split()[0] == main_pid]


def _call_head(line: str) -> str:
    """A call's name and first path, for comparing two runs' traces."""
    name = line.split("(", 1)[0]
    quoted = re.findall(r'"([^"]*)"', line)
    first = quoted[0] if quoted else next(iter(re.findall(r"<([^>]*)>", line)), "")
    return f"{name}({Path(first).name})"


def _layouts(root: Path, names: Iterator[str] | tuple[str, ...]) -> Iterator[Layout]:
    for name in names:
        yield Layout(name, root / name.replace("-", "_"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--random", type=int, default=0, help="random kills per layout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-sweep", action="store_true", help="no kill at every step")
    parser.add_argument("--double", action="store_true",
                        help="after each kill, kill the next run at every step too")
    parser.add_argument("--strace", action="store_true",
                        help="also kill the real command before each system call (strace)")
    parser.add_argument("--concurrent", type=int, default=0,
                        help="rounds of two writers at once (same output, then two outputs)")
    parser.add_argument("--readers", action="store_true",
                        help="with --concurrent, a reader opens the output meanwhile")
    parser.add_argument("--scale", type=int, default=1, help="weights this many times larger")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    set_scale(args.scale)
    import graphpass.cli  # noqa: F401  (imported once, before forking)
    from graphpass.framework import default_registry

    default_registry()
    results: dict[str, object] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphpass-crash-") as scratch_name:
        scratch = Path(scratch_name)
        for layout in _layouts(scratch, tuple(args.layouts.split(","))):
            entry: dict[str, object] = {}
            if not args.no_sweep:
                entry["sweep"] = sweep(layout, scratch, double=args.double).as_dict()
            if args.strace and strace_works():
                entry["strace"] = strace_sweep(layout, scratch).as_dict()
            if args.random:
                entry["random"] = random_kills(layout, scratch, args.random,
                                               args.seed).as_dict()
            results[layout.name] = entry
        if args.concurrent:
            results["concurrent same output"] = concurrent_writers(
                scratch, args.concurrent, readers=args.readers).as_dict()
            results["concurrent two outputs"] = concurrent_writers(
                scratch, args.concurrent, same_output=False).as_dict()
    results["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
