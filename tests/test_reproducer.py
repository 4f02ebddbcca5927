"""A pass that crashes leaves a reproducer whose one command fails the same way.

The plugin ``graphpass-crash-plugin`` (installed from ``tests/plugins/``) has a pass with a
bug: it raises, and its message counts the nodes and names the initializers of the model
it is given. It runs after ``remove-unused``, which changes the model, so only the model
as it entered the failing pass (not the input file) replays the same message.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass.errors import PassError
from graphpass.framework import Registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Process = Callable[..., subprocess.CompletedProcess[str]]


def _model_file(folder: Path) -> Path:
    """Relu of x; a dead Neg and an unused initializer that remove-unused removes."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu"),
         helper.make_node("Neg", ["x"], ["dead"], name="dead")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[helper.make_tensor("unused", TensorProto.FLOAT, [1], [1.0])])
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _crash_line(text: str) -> str:
    """The plugin's own exception, as graphpass quotes it."""
    found = re.search(r"RuntimeError: kaboom: [^\n]*", text)
    assert found, text
    return found.group(0)


def test_a_crashing_plugin_pass_leaves_a_reproducer_that_fails_the_same_way(
        graphpass_process: Process, install_plugin: Callable[[str], Path],
        tmp_path: Path) -> None:
    site = install_plugin("crash")
    model = _model_file(tmp_path)
    reproducers = tmp_path / "reproducers"
    done = graphpass_process("run", model, "-o", tmp_path / "out.onnx",
                             "-p", "remove-unused,crash-count,check",
                             "-O", 'crash-count.word="kaboom"', "--reproducer", reproducers,
                             sites=[site], cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    crash = _crash_line(done.stderr)
    assert crash == "RuntimeError: kaboom: 1 nodes, initializers []"  # after remove-unused
    (folder,) = reproducers.iterdir()
    assert f"a reproducer is in {folder}" in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "out.onnx").exists()

    # What it holds: the model the pass saw, the rest of the pipeline, versions, the error.
    entered = onnx.load(folder / "model.onnx")
    assert [n.op_type for n in entered.graph.node] == ["Relu"]
    pipeline = tomllib.loads((folder / "pipeline.toml").read_text())
    assert pipeline["pipeline"]["passes"] == ["crash-count", "check"]
    assert pipeline["passes"]["crash-count"] == {"word": "kaboom"}
    versions = tomllib.loads((folder / "versions.toml").read_text())
    assert versions["versions"]["graphpass"] == importlib.metadata.version("graphpass")
    assert versions["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert versions["plugins"]["crash"]["version"] == "0.3.1"
    assert crash in (folder / "error.txt").read_text()

    # Its one command, in a fresh process, from an empty folder, with the plugin installed.
    clean = tmp_path / "elsewhere"
    clean.mkdir()
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
           "PYTHONPATH": str(site), "HOME": str(clean)}
    replayed = subprocess.run(["sh", str(folder / "replay.sh")], cwd=clean, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
    assert replayed.returncode == 2, replayed.stdout + replayed.stderr
    assert _crash_line(replayed.stderr) == crash
    assert list(clean.iterdir()) == []  # the replay writes nothing where it is run from


class _Shrinks(graphpass.Pass):
    name = "shrinks"
    description = "drops the last node"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        model.graph.remove(list(model.graph)[-1], safe=False)
        return graphpass.PassResult(changed=True)


class _Buggy(graphpass.AnalysisPass):
    name = "buggy"
    description = "raises, naming the node count"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        raise KeyError(f"{len(list(model.graph))} nodes")


class _Refuses(graphpass.AnalysisPass):
    name = "refuses"
    description = "refuses the model on purpose"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        raise PassError("this model is not for me", hint="give another")


def test_the_python_api_writes_one_for_a_bug_only_and_leaves_the_model_alone(
        tmp_path: Path) -> None:
    model = graphpass.load(_model_file(tmp_path))
    registry = Registry()
    for pass_class in (_Shrinks, _Buggy, _Refuses):
        registry.add("passes", pass_class.name, pass_class, "testplugin")
    manager = graphpass.PassManager(["shrinks", "buggy"], registry=registry,
                                    reproducer=tmp_path / "r")
    with pytest.raises(PassError, match="a reproducer is in") as raised:
        manager.run(model)
    assert raised.value.reproducer is not None
    assert "KeyError: '1 nodes'" in str(raised.value)  # 2 nodes before shrinks
    entered = onnx.load(raised.value.reproducer / "model.onnx")
    assert len(entered.graph.node) == 1
    assert len(list(model.graph)) == 2  # the caller's model is untouched

    refusing = graphpass.PassManager(["refuses"], registry=registry, reproducer=tmp_path / "s")
    with pytest.raises(PassError, match="not for me") as refused:
        refusing.run(model)
    assert refused.value.reproducer is None and not (tmp_path / "s").exists()


def test_a_model_changed_in_place_and_not_from_a_file_still_leaves_the_rest(
        tmp_path: Path) -> None:
    model = graphpass.Model.from_proto(onnx.load(_model_file(tmp_path)))
    registry = Registry()
    for pass_class in (_Shrinks, _Buggy):
        registry.add("passes", pass_class.name, pass_class, "testplugin")
    manager = graphpass.PassManager(["shrinks", "buggy"], registry=registry,
                                    reproducer=tmp_path / "r")
    with pytest.raises(PassError, match="could not be rebuilt") as raised:
        manager.run(model, copy=False)
    folder = raised.value.reproducer
    assert folder is not None
    assert sorted(p.name for p in folder.iterdir()) == [
        "error.txt", "pipeline.toml", "replay.sh", "versions.toml"]
    assert "could not be rebuilt" in (folder / "error.txt").read_text()
