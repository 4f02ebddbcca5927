"""Checkpoints never unpickle arbitrary objects: payloads are refused and never run.

Each payload, if unpickled unsafely, would create a marker file (``os.system`` through
``__reduce__``). Every test asserts a clear ``CheckpointError`` (or one CLI message)
*and* that the marker was not created. Complements the weights_only tests of
``test_checkpoint_loaders.py`` (a payload inside a ``torch.save`` dict, a whole module).
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.checkpoint import open_checkpoint

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _payload(marker: Path) -> bytes:
    return pickle.dumps({"w": _RunsCode(marker)}, protocol=2)


def _assert_refused(path: Path, marker: Path, *fragments: str) -> None:
    with pytest.raises(graphpass.CheckpointError) as caught:
        open_checkpoint(path)
    for fragment in fragments:
        assert fragment in str(caught.value)
    assert not marker.exists(), "the payload ran"


def test_the_payload_is_live(tmp_path: Path) -> None:
    """Unpickled unsafely, the payload does create its marker: the other tests mean something."""
    marker = tmp_path / "pwned"
    pickle.loads(_payload(marker))  # on purpose: a harmless payload
    assert marker.exists()


def test_torch_zip_whose_pickle_was_swapped_for_a_payload(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    honest = tmp_path / "honest.pt"
    torch.save({"w": torch.ones(3)}, honest)
    evil = tmp_path / "evil.pt"
    with zipfile.ZipFile(honest) as source, zipfile.ZipFile(evil, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.endswith("data.pkl"):
                data = _payload(marker)
            target.writestr(item, data)
    _assert_refused(evil, marker, "weights_only", "never loads such pickles")


def test_legacy_torch_format_with_a_payload(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2), "payload": _RunsCode(marker)}, path,
               _use_new_zipfile_serialization=False)
    _assert_refused(path, marker, "weights_only")


def test_plain_pickle_with_a_payload(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "weights.pt"
    path.write_bytes(_payload(marker))
    _assert_refused(path, marker, "never unpickles arbitrary objects")


def test_npz_with_an_object_array_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "weights.npz"
    payload = np.empty(1, dtype=object)
    payload[0] = _RunsCode(marker)
    np.savez(path, payload=payload)
    _assert_refused(path, marker, "holds no arrays")
    np.savez(path, payload=payload, w=np.ones(3, np.float32))
    checkpoint = open_checkpoint(path)
    assert list(checkpoint) == ["w"] and "payload" in checkpoint.skipped
    assert not marker.exists()


def _model_file(folder: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.zeros(3, np.float32), "w")])
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_cli_with_a_payload_checkpoint_is_one_message_and_runs_nothing(tmp_path: Path,
                                                                       cli) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(3), "payload": _RunsCode(marker)}, evil)
    model = _model_file(tmp_path)
    code, _, stderr = cli("run", model, "-o", tmp_path / "out.onnx", "--checkpoint", evil,
                          "-p", "train-ready")
    assert code == 2 and stderr.count("graphpass: error:") == 1
    assert "never loads such pickles" in stderr
    assert not marker.exists() and not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("content", ["pickle", "corrupt zip"])
def test_verify_inputs_that_are_pickles_or_corrupt_are_a_clear_error(tmp_path: Path,
                                                                       content: str,
                                                                       cli) -> None:
    marker = tmp_path / "pwned"
    inputs = tmp_path / "inputs.npz"
    if content == "pickle":
        inputs.write_bytes(_payload(marker))
    else:
        inputs.write_bytes(b"PK\x03\x04" + b"\0" * 64)
    model = _model_file(tmp_path)
    code, stdout, stderr = cli("run", model, "-o", tmp_path / "out.onnx", "-p",
                               "topological-sort", "--verify", "--verify-inputs", inputs,
                               "--format", "json")
    assert code == 1, stderr  # nothing could be verified: an error, GP602; nothing written
    findings = json.loads(stdout)["findings"]
    assert [(f["code"], f["severity"]) for f in findings] == [("GP602", "error")]
    assert "cannot read inputs" in findings[0]["message"]
    assert not marker.exists() and not (tmp_path / "out.onnx").exists()


def test_every_torch_load_in_graphpass_passes_weights_only() -> None:
    """No code path may call torch.load (or pickle.load) without weights_only=True."""
    calls = []
    for path in sorted((REPO / "core").rglob("*.py")) + sorted((REPO / "passes").rglob("*.py")) \
            + sorted((REPO / "plugins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            name = f"{getattr(owner, 'id', '?')}.{node.func.attr}"
            if name in ("pickle.load", "pickle.loads", "pickle.Unpickler"):
                calls.append((path.name, name, "pickle"))
            elif name == "torch.load":
                keywords = {k.arg: k.value for k in node.keywords}
                safe = isinstance(keywords.get("weights_only"), ast.Constant) and \
                    keywords["weights_only"].value is True
                calls.append((path.name, name, "safe" if safe else "UNSAFE"))
    assert calls, "expected the torch loader's calls"
    assert all(kind == "safe" for _, _, kind in calls), calls
