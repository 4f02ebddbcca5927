"""The zoo's cache: entries appear whole or not at all, and are built once."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("filelock")

from zoo import cache


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRAPHPASS_ZOO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_failed_build_leaves_nothing(_own_cache: Path) -> None:
    def build(folder: Path) -> None:
        (folder / "model.onnx").write_bytes(b"half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        cache.cached_entry("case", "dynamo", build, sources=())
    left = [p.name for p in (_own_cache / "case").iterdir() if not p.name.endswith(".lock")]
    assert left == []


def test_an_entry_is_reused_and_keyed_by_kind(_own_cache: Path) -> None:
    calls: list[str] = []

    def build(folder: Path) -> None:
        calls.append(folder.name)
        (folder / "x").write_text("1")

    first = cache.cached_entry("case", "dynamo", build, sources=())
    again = cache.cached_entry("case", "dynamo", build, sources=())
    other = cache.cached_entry("case", "legacy-functions", build, sources=())
    assert first == again != other
    assert len(calls) == 2
    assert (first / "x").read_text() == "1"
    assert first.parent == _own_cache / "case"


def test_an_entry_is_keyed_by_the_versions_it_names(_own_cache: Path) -> None:
    # The Optimum venv's entries name its package versions: another version, another entry.
    def build(folder: Path) -> None:
        (folder / "x").write_text("1")

    old = cache.cached_entry("case", "optimum", build, sources=(),
                             extra={"optimum-venv:transformers": "4.57.6"})
    new = cache.cached_entry("case", "optimum", build, sources=(),
                             extra={"optimum-venv:transformers": "4.57.5"})
    plain = cache.cached_entry("case", "optimum", build, sources=())
    assert len({old, new, plain}) == 3
    assert old == cache.cached_entry("case", "optimum", build, sources=(),
                                     extra={"optimum-venv:transformers": "4.57.6"})


def _slow_build(folder: Path) -> None:
    with open(os.environ["ZOO_TEST_LOG"], "a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(0.5)
    (folder / "done").write_text("yes")


def _worker(_: int) -> str:
    return str(cache.cached_entry("case", "dynamo", _slow_build, sources=()))


def test_two_processes_build_an_entry_once(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "builds.txt"
    monkeypatch.setenv("ZOO_TEST_LOG", str(log))
    with multiprocessing.get_context("fork").Pool(2) as pool:
        folders = pool.map(_worker, range(2))
    assert folders[0] == folders[1]
    assert len(log.read_text().split()) == 1
    assert (Path(folders[0]) / "done").read_text() == "yes"


def _hanging_build(folder: Path) -> None:
    (folder / "model.onnx").write_bytes(b"half")
    Path(os.environ["ZOO_TEST_LOG"]).write_text("started")
    time.sleep(60)


def _hanging_worker() -> None:
    cache.cached_entry("case", "dynamo", _hanging_build, sources=())


def test_a_killed_build_leaves_no_entry_and_the_next_one_builds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "started.txt"
    monkeypatch.setenv("ZOO_TEST_LOG", str(log))
    process = multiprocessing.get_context("fork").Process(target=_hanging_worker)
    process.start()
    deadline = time.monotonic() + 30
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.kill()
    process.join()
    assert log.exists()
    folder = cache.cached_entry("case", "dynamo", lambda f: (f / "x").write_text("1"),
                                sources=())
    assert sorted(p.name for p in folder.iterdir()) == ["x"]


def test_a_sweep_case_is_keyed_by_the_sweep_s_list_and_a_zoo_case_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[tuple[str, ...]] = []
    monkeypatch.setattr(cache, "_source_hash", lambda sources: hashed.append(sources) or "")
    cache.entry_key("gemma", "dynamo", ("exporting.py",))
    cache.entry_key("llama", "dynamo", ("exporting.py",))
    assert hashed == [("exporting.py", "sweep_cases.py"), ("exporting.py",)]
