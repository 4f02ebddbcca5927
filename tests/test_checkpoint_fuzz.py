"""Hostile checkpoints end in a ``CheckpointError`` naming the file, in bounded memory and time.

``tests/_checkpoint_mutations.py`` makes them (every kind of lie once, the catalogue,
plus seeded random damage; ``benchmarks/fuzz_checkpoints.py`` runs for longer): lying
safetensors headers (offsets past the end or overlapping, huge or negative shapes,
unknown dtypes, a 100 MB header), torch archives holding pickled code, truncated or
compressed (zip bombs) or with storages that outgrow their records, ``.npz`` files
with object arrays or lying headers, sharded indexes pointing outside their folder
(``../``, absolute paths, links, pipes) or at missing shards. Each is opened in a
forked child under an address-space limit and a timeout; an audit hook sees every file
Python opens, and payloads would create a marker file if they ever ran.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import _checkpoint_mutations as fuzz
import pytest

from graphpass.checkpoint import open_checkpoint
from graphpass.errors import CheckpointError

pytest.importorskip("torch")
pytest.importorskip("safetensors")

RANDOM_CASES = 60
PEAK_LIMIT = 1024 * 2**20  # no case may grow its process by a gigabyte
SLOW = 30.0


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory):
    with fuzz.Sandbox(tmp_path_factory.mktemp("checkpoints")) as box:
        yield box


def test_every_kind_of_hostile_checkpoint_ends_clearly(sandbox: fuzz.Sandbox) -> None:
    chosen = fuzz.catalogue()
    tally = fuzz.run_cases(sandbox, chosen)
    print(tally.summary())
    assert tally.failures == [], tally.summary()
    assert tally.cases == len(chosen)
    # Seeds and the honest oddities load; every lie is refused, none slips through.
    loaded = {outcome.what for outcome in tally.outcomes if outcome.category == "ok"}
    assert loaded == {c.what for c in chosen if c.family == "seed"} | fuzz.LOADS
    assert max(tally.peak_rss.values()) < PEAK_LIMIT
    assert max(tally.slowest.values()) < SLOW


def test_seeded_random_damage_ends_clearly(sandbox: fuzz.Sandbox) -> None:
    tally = fuzz.run_cases(sandbox, fuzz.cases(0, RANDOM_CASES, first=8))
    print(tally.summary())
    assert tally.failures == [], tally.summary()
    assert max(tally.peak_rss.values()) < PEAK_LIMIT


def test_the_payloads_are_live(tmp_path: Path) -> None:
    """Unpickled unsafely each payload creates its marker: the fuzzer's check means something."""
    script = ("import pickle, sys; sys.path.insert(0, sys.argv[1]); import _checkpoint_mutations "
              "as m; from pathlib import Path\n"
              "for i, name in enumerate(m._PAYLOADS):\n"
              "    pickle.loads(m._payload(name, Path(sys.argv[2]) / str(i)))")
    subprocess.run([sys.executable, "-c", script, str(Path(fuzz.__file__).parent), str(tmp_path)],
                   check=True, timeout=60)
    assert len(list(tmp_path.iterdir())) == len(fuzz._PAYLOADS)
    assert pickle  # (the payloads are plain pickles)


@pytest.mark.parametrize("what", ["weight_map naming a link that leads out",
                                  "weight_map through a linked folder",
                                  "weight_map with ../"])
def test_a_shard_outside_the_folder_is_refused_before_it_is_opened(tmp_path: Path,
                                                                   what: str) -> None:
    """Seen from the kernel (``strace``): no call of the process names the outside file."""
    import _crash_harness

    case = next(c for c in fuzz.catalogue() if c.what == f"sharded: {what}")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "outside").mkdir()
    index = case.build(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="outside") as caught:
        open_checkpoint(index)
    assert str(index) in str(caught.value)
    if not _crash_harness.strace_works():
        pytest.skip("strace cannot run here")
    log = tmp_path / "trace.txt"
    code = ("import sys; from graphpass.checkpoint import open_checkpoint\n"
            "try: open_checkpoint(sys.argv[1])\nexcept Exception as e: print(type(e).__name__)")
    result = subprocess.run(["strace", "-f", "-e", "trace=open,openat,openat2", "-o", str(log),
                             sys.executable, "-c", code, str(index)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.stdout.strip() == "CheckpointError"
    secret = str((tmp_path / "outside").resolve())
    opened = [line for line in log.read_text().splitlines() if secret in line]
    assert opened == []


def test_hugging_face_cache_links_into_blobs_are_followed(tmp_path: Path) -> None:
    """``<repo>/snapshots/<rev>/*`` are links to ``<repo>/blobs/<hash>``: that layout loads."""
    import numpy as np

    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "blobs" / "f00d").write_bytes(fuzz._honest_safetensors(
        {"w": np.arange(4, dtype=np.float32)}))
    (snapshot / "model-00001-of-00001.safetensors").symlink_to(Path("../../blobs/f00d"))
    (repo / "blobs" / "1ndex").write_text(
        '{"weight_map": {"w": "model-00001-of-00001.safetensors"}}')
    (snapshot / "model.safetensors.index.json").symlink_to(Path("../../blobs/1ndex"))
    for path in (snapshot, snapshot / "model.safetensors.index.json"):
        checkpoint = open_checkpoint(path)
        assert list(checkpoint) == ["w"]
        assert checkpoint["w"].numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    os.unlink(snapshot / "model-00001-of-00001.safetensors")
    (snapshot / "model-00001-of-00001.safetensors").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(b"")
    with pytest.raises(CheckpointError, match="leads outside"):
        open_checkpoint(snapshot)
