"""Files: never read or write outside where told, never touch the input, never a half model.

Complements ``test_files.py`` (``..``/absolute/symlinked external data, atomic saves):

* external data reached through a linked folder or a chain of links leading out of the
  model's folder, and data "files" that are folders or pipes, are refused;
* the output is never the input under another name (symlink, hard link, ``x/../``)
  unless asked (``overwrite_input=True`` / ``--in-place``); neither is a data file the
  model reads (the input's, or a checkpoint's), nor a ``--report`` file;
* data files are written only inside the output folder, in subfolders too;
* a save that fails, raises or is interrupted (SIGINT) leaves the previous output as it
  was and no temporary file; a save killed outright (SIGKILL) leaves the previous output
  intact and only hidden ``*.graphpass-tmp`` files (and the output's lock file), which
  the next save removes;
* Ctrl-C as a save or a training state's write creates a temporary, before it can note
  the name, leaves no file either.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass import ExternalDataError, ModelSaveError, Tensor
from graphpass.files import read_snapshot, write_snapshot


def _model(size: int = 1024) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
        [numpy_helper.from_array(np.arange(size, dtype=np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _external(folder: Path, location: str = "weights.bin", size: int = 1024,
              spare: int = 0) -> Path:
    """``folder/m.onnx`` with ``w`` in ``location`` (followed by ``spare`` unused bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    model = _model(size)
    tensor = model.graph.initializer[0]
    data = tensor.raw_data
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(len(data)))):
        tensor.external_data.add(key=key, value=value)
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    with open(folder / location, "wb") as handle:
        handle.write(data)
        if spare:
            handle.truncate(len(data) + spare)
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


_HIDDEN = (".graphpass-tmp", ".graphpass-lock")
"""A save's temporary files, and the lock of the output it writes (left if killed)."""


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.endswith(_HIDDEN)}


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(_HIDDEN))


# ================================================================ reading out
def test_external_data_through_a_linked_folder_leading_out_is_refused(tmp_path: Path) -> None:
    path = _external(tmp_path / "model", location="store/weights.bin")
    os.replace(tmp_path / "model" / "store", tmp_path / "elsewhere")
    (tmp_path / "model" / "store").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ExternalDataError, match="link leading outside"):
        graphpass.load(path)


def test_a_chain_of_links_leading_out_is_refused(tmp_path: Path) -> None:
    path = _external(tmp_path / "model")
    os.replace(tmp_path / "model" / "weights.bin", tmp_path / "secret.bin")
    (tmp_path / "model" / "hop.bin").symlink_to(tmp_path / "secret.bin")
    (tmp_path / "model" / "weights.bin").symlink_to("hop.bin")  # inside, then out
    with pytest.raises(ExternalDataError, match="link leading outside"):
        graphpass.load(path)


@pytest.mark.parametrize("kind", ["folder", "pipe"])
def test_external_data_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    path = _external(tmp_path)
    (tmp_path / "weights.bin").unlink()
    if kind == "folder":
        (tmp_path / "weights.bin").mkdir()
    else:
        os.mkfifo(tmp_path / "weights.bin")  # reading it would block forever
    with pytest.raises(ExternalDataError, match="not a regular file"):
        graphpass.load(path)


# ============================================================ the input stays
def _aliases(path: Path) -> dict[str, Path]:
    folder = path.parent
    (folder / "link.onnx").symlink_to(path.name)
    os.link(path, folder / "hard.onnx")
    (folder / "sub").mkdir()
    return {"symlink": folder / "link.onnx", "hard link": folder / "hard.onnx",
            "dot-dot": folder / "sub" / ".." / path.name,
            "missing-dir dot-dot": folder / "nothing" / ".." / path.name,
            "relative": Path(os.path.relpath(path))}


@pytest.mark.parametrize("alias", ["symlink", "hard link", "dot-dot", "missing-dir dot-dot",
                                   "relative"])
def test_output_that_is_the_input_under_another_name_is_refused(tmp_path: Path, alias: str,
                                                                cli) -> None:
    path = _external(tmp_path)
    target = _aliases(path)[alias]
    before = _digests(tmp_path)
    model = graphpass.load(path)
    with pytest.raises(ModelSaveError, match="overwrite the input"):
        graphpass.save(model, target)
    code, _, stderr = cli("run", path, "-o", target, "-p", "topological-sort")
    assert code == 2 and "is the input model" in stderr and "Traceback" not in stderr
    assert _digests(tmp_path) == before
    assert not _temporaries(tmp_path)
    code, _, stderr = cli("run", path, "-o", target, "-p", "topological-sort", "--in-place")
    assert code == 0, stderr


def test_report_file_that_is_a_model_is_refused(tmp_path: Path, cli) -> None:
    path = _external(tmp_path)
    before = _digests(tmp_path)
    for arguments in (["run", str(path), "-o", str(tmp_path / "out.onnx"), "-p", "check",
                       "--report", str(path)],
                      ["run", str(path), "-o", str(tmp_path / "out.onnx"), "-p", "check",
                       "--report", str(tmp_path / "out.onnx")],
                      ["lint", str(path), "--report", str(tmp_path / "sub" / ".." / "m.onnx")]):
        code, _, stderr = cli(*arguments)
        assert code == 2 and "refusing to write the report over it" in stderr
    assert _digests(tmp_path) == before


def test_save_refuses_to_replace_the_input_models_data_file(tmp_path: Path) -> None:
    path = _external(tmp_path)
    before = _digests(tmp_path)
    model = graphpass.load(path)
    model.graph.set_initializer(Tensor.from_array("extra", np.ones(2048, np.float32)))
    with pytest.raises(ModelSaveError, match="reads weights from it"):
        graphpass.save(model, tmp_path / "out.onnx", external_data=True,
                       location="weights.bin")
    assert _digests(tmp_path) == before and not _temporaries(tmp_path)
    np.testing.assert_array_equal(graphpass.load(path).graph.initializers["w"].numpy(),
                                  np.arange(1024, dtype=np.float32))
    # Asked for, it is allowed: the input model keeps its data file, and the output
    # gets one of its own under the next free name.
    graphpass.save(model, tmp_path / "out.onnx", external_data=True, location="weights.bin",
                   overwrite_input=True)
    assert _digests(tmp_path)["weights.bin"] == before["weights.bin"]
    assert _digests(tmp_path)["m.onnx"] == before["m.onnx"]
    saved = onnx.load(tmp_path / "out.onnx")
    assert {entry.value for t in saved.graph.initializer for entry in t.external_data
            if entry.key == "location"} <= {"weights.1.bin"}
    arrays = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    np.testing.assert_array_equal(arrays["w"], np.arange(1024, dtype=np.float32))
    np.testing.assert_array_equal(arrays["extra"], np.ones(2048, np.float32))


def test_save_refuses_to_replace_a_checkpoint_the_weights_come_from(tmp_path: Path) -> None:
    checkpoint = tmp_path / "weights.bin"
    values = np.linspace(0, 1, 1024, dtype=np.float32)
    checkpoint.write_bytes(values.tobytes() + b"\0" * 4096)
    model = graphpass.Model.from_proto(_model())
    model.graph.set_initializer(Tensor.from_file_region("w", TensorProto.FLOAT, [1024],
                                                        checkpoint, 0, 4096))
    with pytest.raises(ModelSaveError, match="reads weights from it"):
        graphpass.save(model, tmp_path / "m.onnx", location="weights.bin")
    assert checkpoint.read_bytes()[:4096] == values.tobytes()
    with pytest.raises(ModelSaveError, match="over a data file"):
        graphpass.save(model, checkpoint, overwrite_input=True)
    assert checkpoint.read_bytes()[:4096] == values.tobytes()


# ============================================================ writing inside
def test_data_location_in_a_subfolder_is_written_there(tmp_path: Path) -> None:
    model = graphpass.Model.from_proto(_model())
    graphpass.save(model, tmp_path / "m.onnx", external_data=True, location="data/w.bin",
                   size_threshold=0)
    assert (tmp_path / "data" / "w.bin").stat().st_size >= 4096
    assert not _temporaries(tmp_path) and not _temporaries(tmp_path / "data")
    np.testing.assert_array_equal(numpy_helper.to_array(onnx.load(tmp_path / "m.onnx").graph
                                                        .initializer[0]),
                                  np.arange(1024, dtype=np.float32))


def test_data_folder_that_is_a_link_leading_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "data").symlink_to(tmp_path / "outside")
    model = graphpass.Model.from_proto(_model())
    with pytest.raises(ModelSaveError, match="outside the output folder"):
        graphpass.save(model, tmp_path / "out" / "m.onnx", external_data=True,
                       location="data/w.bin", size_threshold=0)
    assert not list((tmp_path / "outside").iterdir())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["data"]


def test_a_folder_where_a_file_goes_is_refused_before_writing(tmp_path: Path) -> None:
    previous = _external(tmp_path / "out")
    before = _digests(tmp_path / "out")
    (tmp_path / "out" / "m.onnx.data").mkdir()
    model = graphpass.Model.from_proto(_model())
    with pytest.raises(ModelSaveError, match="would replace a folder"):
        graphpass.save(model, previous, external_data=True, size_threshold=0)
    (tmp_path / "out" / "x.onnx").mkdir()
    with pytest.raises(ModelSaveError, match="is a folder"):
        graphpass.save(model, tmp_path / "out" / "x.onnx")
    assert _digests(tmp_path / "out") == before and not _temporaries(tmp_path / "out")


def test_a_failing_save_leaves_the_previous_output_as_it_was(tmp_path: Path) -> None:
    previous = _external(tmp_path / "out")
    before = _digests(tmp_path / "out")
    source = _external(tmp_path / "in", size=4096)
    model = graphpass.load(source)
    model.graph.set_initializer(Tensor.from_array("extra", np.ones(4096, np.float32)))
    (tmp_path / "in" / "weights.bin").write_bytes(b"\0" * 100)  # cut short after loading
    with pytest.raises(ModelSaveError, match="is 100 bytes"):
        graphpass.save(model, previous, overwrite_input=True)
    assert _digests(tmp_path / "out") == before and not _temporaries(tmp_path / "out")


# ================================================================ interrupted
def test_an_interrupt_between_creating_a_temporary_and_recording_it_leaves_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The window CI hit once: SIGINT after mkstemp made the file, before the save knew it.
    previous = _external(tmp_path / "out")
    before = _digests(tmp_path / "out")
    made = []
    real_mkstemp = tempfile.mkstemp

    def interrupted_mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        handle, name = real_mkstemp(*args, **kwargs)
        os.close(handle)
        made.append(name)
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "mkstemp", interrupted_mkstemp)
    model = graphpass.Model.from_proto(_model())
    with pytest.raises(KeyboardInterrupt):
        graphpass.save(model, previous, external_data=True, size_threshold=0)
    assert made and all(Path(name).parent == tmp_path / "out" for name in made)
    assert _digests(tmp_path / "out") == before and not _temporaries(tmp_path / "out")


_BIG = 48 * 2**20  # floats: 192 MiB of weights, streamed in 16 MiB chunks


def _big_run(tmp_path: Path) -> tuple[list[str], Path, dict[str, str]]:
    """A CLI run that streams ~192 MiB into ``tmp_path/out`` (the data file is half used).

    Runs it once to the end; returns the command, the output folder and the digests
    of that first, complete output.
    """
    source = _external(tmp_path / "in", size=_BIG, spare=_BIG * 4)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "graphpass", "run", str(source), "-o",
               str(out / "m.onnx"), "-p", "topological-sort"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert first.returncode == 0, first.stderr
    return command, out, _digests(out)


def _interrupt_mid_write(command: list[str], out: Path, sig: int) -> subprocess.CompletedProcess[
        str]:
    """Start ``command``, send ``sig`` once it has a temporary file in ``out``.

    On a loaded machine the run can create, fill and commit its files between two looks
    of this watcher (CI saw three misses in a row), so it is tried up to ten times.
    """
    seen = []
    for _attempt in range(10):
        # SIGINT as the default action in the child, whatever this process inherited (a
        # background job starts with it ignored, and Python would keep it ignored)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True,
                                   preexec_fn=_default_sigint)  # noqa: PLW1509 (one call)
        deadline = time.monotonic() + 120
        sent = False
        while process.poll() is None and time.monotonic() < deadline:
            writing = [p for p in out.glob(".*.graphpass-tmp") if f".{process.pid}." in p.name]
            if writing:
                process.send_signal(sig)
                sent = True
                break
            time.sleep(0.001)
        stdout, stderr = process.communicate(timeout=120)
        if sent and process.returncode != 0:  # exit 0: the signal came after the commit
            return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
        seen.append(f"signal {'sent' if sent else 'not sent'}, exit {process.returncode}")
    raise AssertionError("the run finished before it could be interrupted ten times: "
                         + "; ".join(seen))


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_mid_write_leaves_the_previous_output_and_no_temporary_files(
        tmp_path: Path) -> None:
    command, out, before = _big_run(tmp_path)
    assert set(before) == {"m.onnx", "m.onnx.data"}
    interrupted = _interrupt_mid_write(command, out, signal.SIGINT)
    assert interrupted.returncode == 130, interrupted.stderr
    assert "interrupted; nothing was written" in interrupted.stderr
    assert "Traceback" not in interrupted.stderr
    assert _digests(out) == before
    assert not _temporaries(out)


def test_sigkill_mid_write_leaves_the_previous_output_and_the_next_save_tidies_up(
        tmp_path: Path) -> None:
    command, out, before = _big_run(tmp_path)
    killed = _interrupt_mid_write(command, out, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert _digests(out) == before  # the previous output, whole
    leftovers = _temporaries(out)
    assert leftovers and all(name.startswith(".") for name in leftovers)
    assert {p.name for p in out.iterdir()} == {"m.onnx", "m.onnx.data", *leftovers}
    graphpass.save(graphpass.Model.from_proto(_model()), out / "other.onnx")
    assert not _temporaries(out)  # the killed process's files are gone
    assert _digests(out)["m.onnx"] == before["m.onnx"]


def test_temporary_files_of_running_saves_are_left_alone(tmp_path: Path) -> None:
    mine = tmp_path / f".m.onnx.{os.getpid()}.abcd1234.graphpass-tmp"
    parent = tmp_path / f".m.onnx.{os.getppid()}.abcd1234.graphpass-tmp"
    other = tmp_path / ".notes.graphpass-tmp.txt"
    for path in (mine, parent, other):
        path.write_bytes(b"in progress")
    graphpass.save(graphpass.Model.from_proto(_model()), tmp_path / "m.onnx")
    assert mine.exists() and parent.exists() and other.exists()


@pytest.mark.parametrize("maker", ["mkdtemp", "mkstemp"])
def test_a_state_write_interrupted_as_it_creates_a_temporary_leaves_the_previous_state(
        maker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # mkdtemp makes the snapshot's temporary folder, mkstemp the pointer's temporary file.
    state = tmp_path / "state"
    write_snapshot(state, "step-1", lambda folder: (folder / "w.bin").write_bytes(b"1"))
    before = sorted(p.name for p in state.iterdir())
    real = getattr(tempfile, maker)
    made = []

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, maker, interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_snapshot(state, "step-2", lambda folder: (folder / "w.bin").write_bytes(b"2"))
    assert made
    assert sorted(p.name for p in state.iterdir()) == before
    found = read_snapshot(state)
    assert found is not None and (found[0] / "w.bin").read_bytes() == b"1"
