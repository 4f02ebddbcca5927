"""A tied weight's second key is used, not "unused" (GP202), and counts read as English.

A head tied to its embedding (one ``Parameter``, as GPT-2's ``lm_head`` and
``transformer.wte``), exported with ``dynamo=True, optimize=False``: the export holds one
initializer, torch's record names both. A checkpoint saved without shared storage (an
``.npz`` of ``state_dict()``) gives both keys, equal: the model trains that one tensor,
so neither key is unused (GP255 explains the tie).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

Process = Callable[..., subprocess.CompletedProcess[str]]


class _TiedLM(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, 11, bias=False)
        self.head.weight = self.embed.weight  # tied: one Parameter

    def forward(self, ids: Any) -> Any:
        return self.head(self.norm(self.embed(ids)))


def _export(folder: Path, extra: dict[str, np.ndarray] | None = None) -> tuple[Path, Path]:
    torch.manual_seed(0)
    module = _TiedLM().eval()
    path = folder / "tied.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randint(0, 11, (2, 5)),), str(path), dynamo=True,
                          optimize=False, input_names=["ids"])
    state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    checkpoint = folder / "state.npz"
    np.savez(checkpoint, **state, **(extra or {}))
    return path, checkpoint


def test_the_tied_key_is_not_listed_as_unused(graphpass_process: Process,
                                              tmp_path: Path) -> None:
    path, checkpoint = _export(tmp_path)
    done = graphpass_process("run", path, "--checkpoint", checkpoint, "-p", "train-ready",
                             "-o", tmp_path / "ready.onnx", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    findings = json.loads(done.stdout)["findings"]
    codes = {f["code"] for f in findings}
    assert "GP255" in codes  # the tie, explained
    assert "GP202" not in codes, [f["message"] for f in findings if f["code"] == "GP202"]


def test_one_unused_key_reads_in_the_singular(graphpass_process: Process,
                                              tmp_path: Path) -> None:
    path, checkpoint = _export(tmp_path, {"stray.weight": np.zeros(3, np.float32)})
    done = graphpass_process("run", path, "--checkpoint", checkpoint, "-p", "train-ready",
                             "-o", tmp_path / "ready.onnx")
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert "1 checkpoint key was not used: stray.weight" in text
    assert "keys were not used" not in text
