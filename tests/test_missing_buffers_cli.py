"""`graphpass run` / `lint` with detect-missing-buffers: error findings stop before writing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def graphpass_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "graphpass", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300, check=False)


def write_model(path: Path, *, with_buffer: bool) -> Path:
    """x * block.scale + block.offset; the buffer and the constant present or not."""
    initializers = [numpy_helper.from_array(np.arange(4, dtype=np.float32), "block.offset")]
    if with_buffer:
        initializers.append(numpy_helper.from_array(np.full(4, 2.0, np.float32), "block.scale"))
    else:
        initializers = []
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "block.scale"], ["h"], name="mul"),
         helper.make_node("Add", ["h", "block.offset"], ["y"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_run_stops_before_writing_and_exits_1(tmp_path: Path):
    model = write_model(tmp_path / "incomplete.onnx", with_buffer=False)
    done = graphpass_cli("run", str(model), "-o", "out.onnx", "-p", "detect-missing-buffers",
                         "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert not (tmp_path / "out.onnx").exists()
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert report["output"] is None
    assert report["stopped_after"] == "detect-missing-buffers"
    findings = report["findings"]
    assert sorted((f["code"], f["value"]) for f in findings) == [
        ("GP301", "block.offset"), ("GP301", "block.scale")]
    assert all(f["severity"] == "error" and f["data"]["module"] == "block" for f in findings)


def test_run_shows_the_findings_in_text(tmp_path: Path):
    model = write_model(tmp_path / "incomplete.onnx", with_buffer=False)
    done = graphpass_cli("run", str(model), "-o", "out.onnx", "-p", "detect-missing-buffers",
                         cwd=tmp_path)
    assert done.returncode == 1
    text = done.stdout + done.stderr
    assert "GP301" in text
    assert "block.scale" in text
    assert "block.offset" in text
    assert not (tmp_path / "out.onnx").exists()


def test_run_writes_a_complete_model_and_exits_0(tmp_path: Path):
    model = write_model(tmp_path / "complete.onnx", with_buffer=True)
    done = graphpass_cli("run", str(model), "-o", "out.onnx", "-p", "detect-missing-buffers",
                         cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "out.onnx").exists()
    assert "GP3" not in done.stdout


def test_lint_exits_1_and_writes_nothing(tmp_path: Path):
    model = write_model(tmp_path / "incomplete.onnx", with_buffer=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = graphpass_cli("lint", str(model), "-p", "detect-missing-buffers", cwd=tmp_path)
    assert done.returncode == 1
    assert "block.scale" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before
