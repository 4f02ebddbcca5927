"""``graphpass.files._atomic``: replacing a file or a folder, temporaries, recovery.

The kills at every step of every writer are ``tests/test_crash_atomic.py``; these are the
module's own promises, one at a time, on real files.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from graphpass.files import _atomic as atomic


def _dead_pid() -> int:
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                             capture_output=True, text=True, check=True)
    return int(process.stdout)


def _stale(folder: Path, owner: str, *, is_folder: bool = False) -> Path:
    path = folder / f".{owner}.{_dead_pid()}.abcd1234.graphpass-tmp"
    if is_folder:
        path.mkdir()
        (path / "half-written").write_bytes(b"x")
    else:
        path.write_bytes(b"left by a killed write")
    return path


def test_replace_file_takes_bytes_text_or_a_writer(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    atomic.replace_file(target, b"one")
    assert target.read_bytes() == b"one"
    atomic.replace_file(target, "two \N{GREEK SMALL LETTER ALPHA}")
    assert target.read_text(encoding="utf-8") == "two \N{GREEK SMALL LETTER ALPHA}"
    atomic.replace_file(target, lambda path: path.write_bytes(b"three"))
    assert target.read_bytes() == b"three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0o600


def test_a_failing_write_leaves_the_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_bytes(b"before")

    def fails(path: Path) -> None:
        path.write_bytes(b"half")
        raise RuntimeError("the writer failed")

    with pytest.raises(RuntimeError, match="the writer failed"):
        atomic.replace_file(target, fails)
    assert target.read_bytes() == b"before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_write_removes_its_outputs_stale_temporaries_only(tmp_path: Path) -> None:
    stale = [_stale(tmp_path, "out.txt"), _stale(tmp_path, "out.txt", is_folder=True)]
    others = [_stale(tmp_path, "other.txt"),  # another output's: its own write removes it
              tmp_path / f".out.txt.{os.getppid()}.abcd1234.graphpass-tmp"]  # a running one
    others[1].write_bytes(b"being written")
    atomic.replace_file(tmp_path / "out.txt", b"new")
    assert not any(p.exists() for p in stale) and all(p.exists() for p in others)


def test_a_link_is_followed_and_a_device_written_as_it_is(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_bytes(b"old")
    (tmp_path / "link.txt").symlink_to(real)
    atomic.replace_file(tmp_path / "link.txt", b"new")
    assert (tmp_path / "link.txt").is_symlink() and real.read_bytes() == b"new"
    atomic.replace_file(os.devnull, b"nothing")  # /dev/null: nothing to replace
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def _folder(parent: Path, name: str, files: dict[str, bytes]) -> Path:
    folder = parent / name
    folder.mkdir()
    for file, data in files.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_bytes(data)
    return folder


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("exchange", [True, False])
def test_replace_folder_replaces_it_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          exchange: bool) -> None:
    if not exchange:
        monkeypatch.setenv(atomic.NO_EXCHANGE_ENV, "1")
    target = _folder(tmp_path, "train", {"a.onnx": b"old a", "only-old": b"x"})
    _stale(tmp_path, "train", is_folder=True)
    with atomic.temporary_folder(tmp_path, "train") as scratch:
        (scratch / "a.onnx").write_bytes(b"new a")
        (scratch / "sub").mkdir()
        (scratch / "sub" / "b").write_bytes(b"new b")
        assert atomic.replace_folder(target, scratch) == target
    assert _contents(target) == {"a.onnx": b"new a", "sub/b": b"new b"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]  # no old, lock, marker


def test_replace_folder_makes_a_new_one_and_refuses_a_file(tmp_path: Path) -> None:
    with atomic.temporary_folder(tmp_path, "out") as scratch:
        (scratch / "f").write_bytes(b"1")
        atomic.replace_folder(tmp_path / "out", scratch)
    assert _contents(tmp_path / "out") == {"f": b"1"}
    (tmp_path / "file").write_bytes(b"a file")
    with atomic.temporary_folder(tmp_path, "file") as scratch, \
            pytest.raises(NotADirectoryError):
        atomic.replace_folder(tmp_path / "file", scratch)
    assert (tmp_path / "file").read_bytes() == b"a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "out"]


@pytest.mark.parametrize("left", ["new", "old"])
def test_recovery_puts_back_a_folder_a_kill_left_aside(tmp_path: Path, left: str) -> None:
    """A kill between the two renames (no exchange): the marker names both folders.

    The new folder goes into place when it is there (it was whole and synced before the
    marker was written), else the old one comes back.
    """
    dead = _dead_pid()
    new = _folder(tmp_path, f".train.{dead}.aaaa1111.graphpass-tmp", {"f": b"new"})
    old = _folder(tmp_path, f".train.{dead}.bbbb2222.graphpass-tmp", {"f": b"old"})
    (tmp_path / ".train.graphpass-swap").write_text(json.dumps({"new": new.name,
                                                                "old": old.name}))
    if left == "old":
        for path in new.iterdir():
            path.unlink()
        new.rmdir()
    atomic.recover_folder(tmp_path / "train")
    assert _contents(tmp_path / "train") == {"f": left.encode()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]


def test_without_a_marker_recovery_touches_nothing(tmp_path: Path) -> None:
    running = tmp_path / f".train.{os.getpid()}.cccc3333.graphpass-tmp"
    running.mkdir()
    atomic.recover_folder(tmp_path / "train")
    assert running.exists() and not (tmp_path / "train").exists()


def test_recovery_takes_the_paths_a_user_types(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``train/`` and ``.`` (inside the folder) name the folder as its absolute path does."""
    new = _folder(tmp_path, f".train.{_dead_pid()}.aaaa1111.graphpass-tmp", {"f": b"new"})
    (tmp_path / ".train.graphpass-swap").write_text(json.dumps({"new": new.name, "old": "x"}))
    monkeypatch.chdir(tmp_path)
    atomic.recover_folder("train/")
    assert _contents(tmp_path / "train") == {"f": b"new"}
    monkeypatch.chdir(tmp_path / "train")
    atomic.recover_folder(".")  # no marker for it: nothing to do, no error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]


def test_a_folder_where_the_file_goes_is_an_error_and_stays(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic.replace_file(tmp_path / "taken", b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert not any((tmp_path / "taken").iterdir())
