"""What a plugin author meets when plugins go wrong: clashes, failures, tracebacks.

Real packages from ``tests/plugins/``, pip-installed into throwaway folders (see
``conftest.install_plugin``):

* ``example`` and ``duplicate`` both give ``prefix-node-names``: the clash is reported
  by ``graphpass plugins`` and by the commands that use that name, and nothing else
  stops working;
* ``half`` (in the ``broken`` package) gives ``half-pass`` but its loaders hook raises,
  so the plugin fails: asking for ``half-pass`` names the plugin and why it failed;
* ``raising`` (same package) raises in its passes hook: the plugin's own traceback is
  kept on ``PluginInfo.exception`` and printed with ``--traceback``.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass import PipelineError, PluginError
from graphpass.framework import build_registry

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def sites(install_plugin: Callable[[str], Path]) -> dict[str, Path]:
    return {name: install_plugin(name) for name in ("example", "duplicate", "broken")}


@pytest.fixture
def use(plugins_on_path: Callable[..., None]) -> Callable[..., None]:
    """Put the named plugins on sys.path (for build_registry and the in-process CLI)."""
    return plugins_on_path


def _model(folder: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


# ================================================================== clashes
def test_a_clash_is_recorded_not_raised_and_the_name_is_held_back(use) -> None:
    use("example", "duplicate")
    registry = build_registry()
    assert "prefix-node-names" not in registry.passes  # neither plugin's pass is used
    assert registry.plugin_of("passes", "example-op-counts") == "example"  # the rest works
    assert registry.clashes == {("passes", "prefix-node-names"): ["duplicate", "example"]}
    with pytest.raises(PluginError) as caught:
        graphpass.PassManager(["prefix-node-names"], registry=registry)
    message = str(caught.value)
    assert "two plugins give the pass 'prefix-node-names': 'duplicate' and 'example'" in message
    assert "passe " not in message
    assert "--disable-plugin duplicate" in message
    # Passes that do not clash plan and run as before.
    graphpass.PassManager(["example-op-counts", "check"], registry=registry)


def test_strict_plugins_still_makes_a_clash_fatal(use) -> None:
    use("example", "duplicate")
    with pytest.raises(PluginError, match="two plugins give the pass 'prefix-node-names'"):
        build_registry(strict=True)


def test_cli_reports_a_clash_in_plugins_and_where_the_name_is_used_only(
        use, cli, tmp_path: Path) -> None:
    use("example", "duplicate")
    model = _model(tmp_path)
    code, stdout, stderr = cli("plugins")
    assert code == 0, stderr
    assert "prefix-node-names" in stdout and "duplicate" in stdout
    assert "also given by" in stdout
    code, stdout, _ = cli("plugins", "--format", "json")
    assert json.loads(stdout)["clashes"] == [{"kind": "pass", "name": "prefix-node-names",
                                              "plugins": ["duplicate", "example"]}]
    for args in (("passes",), ("lint", model), ("plan", "-p", "example-op-counts")):
        code, _, stderr = cli(*args)
        assert code == 0, (args, stderr)
        assert "Traceback" not in stderr
    code, _, stderr = cli("run", model, "-o", tmp_path / "out.onnx", "-p", "prefix-node-names")
    assert code == 2
    assert "two plugins give the pass 'prefix-node-names': 'duplicate' and 'example'" in stderr
    assert not (tmp_path / "out.onnx").exists()
    code, _, stderr = cli("run", model, "-o", tmp_path / "out.onnx", "-p", "prefix-node-names",
                          "--disable-plugin", "duplicate")
    assert code == 0, stderr


def test_a_clash_in_a_pipeline_file_names_the_file_and_both_plugins(
        use, cli, tmp_path: Path) -> None:
    use("example", "duplicate")
    (tmp_path / "p.toml").write_text('[pipeline]\npasses = ["check", "prefix-node-names"]\n')
    code, _, stderr = cli("plan", "-c", tmp_path / "p.toml")
    assert code == 2
    assert "p.toml:2" in stderr
    assert "'duplicate' and 'example'" in stderr


def test_the_docs_example_pass_is_not_called_count_ops() -> None:
    assert "count-ops" not in (REPO / "docs" / "plugins.md").read_text()
    example = REPO / "tests" / "plugins" / "graphpass-example-plugin" / "src"
    assert not any("count-ops" in path.read_text() for path in example.rglob("*.py"))


# ============================================== a pass of a plugin that failed
def test_a_pass_of_a_failed_plugin_names_the_plugin_and_why(use) -> None:
    use("broken")
    registry = build_registry()
    half = registry.plugin("half")
    assert half is not None and half.status == "failed"
    assert "half-pass" not in registry.passes
    with pytest.raises(PluginError) as caught:
        graphpass.PassManager(["half-pass"], registry=registry)
    message = str(caught.value)
    assert ("pass 'half-pass' would be given by plugin 'half 0.0.1', which was skipped: hook "
            "graphpass_checkpoint_loaders raised RuntimeError") in message
    assert "the half plugin's loader hook fell over" in message
    # A name nobody could give is still unknown, with a word about the plugins that failed
    # before saying what they give.
    with pytest.raises(PipelineError) as unknown:
        graphpass.PassManager(["nobody-gives-this"], registry=registry)
    assert "unknown pass or pipeline 'nobody-gives-this'" in str(unknown.value)
    assert "'broken 0.0.1'" in str(unknown.value)


def test_cli_names_the_failed_plugin_of_a_pass(use, cli, tmp_path: Path) -> None:
    use("broken")
    code, _, stderr = cli("lint", _model(tmp_path), "-p", "half-pass")
    assert code == 2 and "Traceback" not in stderr
    assert "would be given by plugin 'half 0.0.1', which was skipped: hook" in stderr
    assert "unknown pass" not in stderr


# ================================================================ tracebacks
def test_the_plugins_own_exception_is_kept(use) -> None:
    use("broken")
    registry = build_registry()
    raising = registry.plugin("raising")
    broken = registry.plugin("broken")
    assert raising is not None and broken is not None
    assert isinstance(raising.exception, RuntimeError)
    assert isinstance(broken.exception, ModuleNotFoundError)
    frames = traceback.extract_tb(raising.exception.__traceback__)
    assert any(frame.filename.endswith("graphpass_raising_plugin/__init__.py")
               for frame in frames)


def test_traceback_shows_the_plugins_own_frames(sites, tmp_path: Path,
                                                graphpass_process) -> None:
    strict = graphpass_process("passes", "--strict-plugins", "--traceback",
                               "--disable-plugin", "broken", "--disable-plugin", "half",
                               cwd=tmp_path, sites=[sites["broken"]])
    assert strict.returncode == 2
    assert "graphpass_raising_plugin/__init__.py" in strict.stderr
    assert "the raising plugin's hook fell over" in strict.stderr
    assert "_PluginFailed" not in strict.stderr
    lenient = graphpass_process("plugins", "--traceback", cwd=tmp_path, sites=[sites["broken"]])
    assert lenient.returncode == 0
    assert "graphpass_raising_plugin/__init__.py" in lenient.stderr
    assert "graphpass_module_that_does_not_exist" in lenient.stderr
    quiet = graphpass_process("plugins", cwd=tmp_path, sites=[sites["broken"]])
    assert "Traceback" not in quiet.stderr
