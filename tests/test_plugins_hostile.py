"""Plugins that misbehave: caught, reported by plugin name, and never a crash.

The package ``tests/plugins/graphpass-hostile-plugin`` is pip-installed into a
throwaway folder (like the packages of ``test_plugins.py``). Its entry points:

* ``hostile-exit`` calls ``sys.exit(3)`` while imported;
* ``hostile-hooks`` returns a generator that raises halfway, and an object whose
  iteration raises;
* ``hostile-name`` gives a pass class whose ``name`` raises when read;
* ``hostile-items`` gives a pass named ``42``, ``requires = "check"``, a ``None``
  description with ``Options = int``, a pass whose ``__init__`` raises, a preset naming a
  pass nobody gives, and a checkpoint loader that is a bare ``object()``;
* ``hostile-runtime`` gives passes that load fine and then raise, return ``None`` or a
  dict, report strings or malformed findings, return unusable stats, call
  ``sys.exit``, recurse forever, or (analysis passes) rename nodes and edit metadata.

Loading problems skip the plugin with a warning, or fail with one message under
``--strict-plugins``; problems while running fail the run cleanly with a
``PassError`` naming the pass and its plugin, and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass import PassError, PipelineError, PluginError
from graphpass.framework import build_registry, reset_default_registry

RUNTIME = "hostile-runtime"


@pytest.fixture(scope="session")
def hostile_site(install_plugin: Callable[[str], Path]) -> Path:
    """The hostile plugin package, installed into its own folder."""
    return install_plugin("hostile")


@pytest.fixture
def hostile(hostile_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("GRAPHPASS_DISABLE_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(hostile_site))
    reset_default_registry()
    yield hostile_site
    reset_default_registry()


def _model_file(folder: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["a"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    helper.set_model_props(model, {"owner": "tests"})
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path


# ====================================================================== loading
def test_loading_problems_skip_the_plugin_and_name_it(hostile: Path) -> None:
    registry = build_registry()
    statuses = {name: registry.plugin(name) for name in (
        "hostile-exit", "hostile-hooks", "hostile-name", "hostile-items", RUNTIME)}
    exited, hooks, named, items, runtime = statuses.values()
    assert exited is not None and exited.status == "failed"
    assert exited.error == "failed to import: SystemExit: 3"
    assert hooks is not None and hooks.status == "failed"
    assert "graphpass_passes raised RuntimeError: the generator broke halfway" in (
        hooks.error or "")
    assert "hostile-hooks-fine" not in registry.passes  # nothing of a failed plugin counts
    assert named is not None and named.status == "failed"
    assert "asking for the name fails" in (named.error or "")
    assert items is not None and items.status == "active"
    warnings = "\n".join(items.warnings)
    assert "NumberName: the pass has no name" in warnings
    assert "StringRequires: `requires` must be a list of pass names" in warnings
    assert "OddAttributes: `description` must be a string" in warnings
    assert "graphpass_checkpoint_loaders gave <object object" in warnings
    assert runtime is not None and runtime.status == "active"
    assert "check" in registry.passes  # the built-ins are untouched
    problems = "\n".join(registry.problems)
    for name in ("hostile-exit", "hostile-hooks", "hostile-name", "hostile-items"):
        assert f"plugin '{name} 0.6.6'" in problems


def test_strict_makes_the_first_loading_problem_one_error(hostile: Path) -> None:
    with pytest.raises(PluginError, match=r"plugin 'hostile-exit 0\.6\.6' failed: failed to "
                                          r"import: SystemExit: 3"):
        build_registry(strict=True)
    with pytest.raises(PluginError, match="NumberName"):
        build_registry(strict=True, disable=["hostile-exit", "hostile-hooks", "hostile-name"])


def test_items_that_fail_only_when_used_fail_the_plan_naming_the_plugin(hostile: Path) -> None:
    registry = build_registry()
    with pytest.raises(PipelineError, match=r"cannot create pass 'hostile-init-raises' "
                                            r"\(plugin 'hostile-items'\)"):
        graphpass.PassManager(["hostile-init-raises"], registry=registry)
    with pytest.raises(PipelineError, match="unknown pass or pipeline 'no-such-pass'"):
        graphpass.PassManager(["hostile-broken-preset"], registry=registry)


def test_cli_lists_with_warnings_and_strict_is_one_message(hostile: Path, cli) -> None:
    for command in ("passes", "plugins"):
        code, stdout, stderr = cli(command)
        assert code == 0, stderr
        assert "Traceback" not in stderr and "internal error" not in stderr
    code, stdout, stderr = cli("plugins")
    assert "hostile-exit" in stdout and "failed" in stdout
    code, _, stderr = cli("passes")
    assert "plugin 'hostile-hooks 0.6.6' failed and was skipped" in stderr
    code, _, stderr = cli("passes", "--strict-plugins")
    assert code == 2 and stderr.count("graphpass: error:") == 1
    assert "hostile-exit" in stderr and "Traceback" not in stderr


# ====================================================================== running
RUNTIME_FAILURES = {
    "hostile-raises": "ValueError: the hostile pass fell over",
    "hostile-returns-none": "run() returned NoneType, not a graphpass.PassResult",
    "hostile-returns-dict": "run() returned dict, not a graphpass.PassResult",
    "hostile-bad-finding": "reported 'not a finding', which is not a graphpass.Finding",
    "hostile-findings-none": "returned findings that are NoneType",
    "hostile-finding-fields": "Finding.code must be a string, not int",
    "hostile-stats-list": "returned stats that are list",
    "hostile-renames": "changed the model, but it is an analysis pass",
    "hostile-edits-metadata": "changed the model, but it is an analysis pass",
    "hostile-exits": "called sys.exit(3)",
    "hostile-recurses": "RecursionError",
}


@pytest.mark.parametrize("pass_name", sorted(RUNTIME_FAILURES))
def test_a_misbehaving_pass_is_a_pass_error_naming_it_and_its_plugin(
        hostile: Path, tmp_path: Path, pass_name: str) -> None:
    registry = build_registry(disable=["hostile-exit"])
    model = graphpass.load(_model_file(tmp_path))
    before = model.to_proto()
    with pytest.raises(PassError) as caught:
        graphpass.PassManager(["topological-sort", pass_name], registry=registry).run(model)
    error = caught.value
    assert (error.pass_name, error.plugin) == (pass_name, RUNTIME)
    assert error.ran_before == ("topological-sort",)
    assert RUNTIME_FAILURES[pass_name] in error.message
    assert f"plugin '{RUNTIME}'" in str(error)
    assert model.to_proto() == before  # the caller's model is never touched


@pytest.mark.parametrize("pass_name", sorted(RUNTIME_FAILURES))
def test_cli_run_with_a_misbehaving_pass_is_one_message_and_writes_nothing(
        hostile: Path, tmp_path: Path, pass_name: str, cli) -> None:
    model = _model_file(tmp_path)
    out = tmp_path / "out" / "model.onnx"
    code, _, stderr = cli("run", model, "-o", out, "-p", f"{pass_name},check",
                          "--format", "sarif", "--disable-plugin", "hostile-exit")
    assert code == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("graphpass: error:")]
    assert len(errors) == 1 and pass_name in errors[0] and RUNTIME in errors[0]
    assert "Traceback" not in stderr and "internal error" not in stderr
    assert not out.exists() and not (tmp_path / "out").exists()


def test_stats_json_cannot_hold_are_kept_readable_in_every_report(hostile: Path,
                                                                   tmp_path: Path, cli) -> None:
    model = _model_file(tmp_path)
    for report_format in ("json", "sarif", "text"):
        code, stdout, stderr = cli("run", model, "-o", tmp_path / "out.onnx", "-p",
                                   "hostile-bad-stats", "--format", report_format,
                                   "--disable-plugin", "hostile-exit")
        assert code == 0, stderr
        if report_format == "json":
            stats = json.loads(stdout)["passes"][0]["stats"]
            assert set(stats) == {"('a', 'tuple')", "7"}
        elif report_format == "sarif":
            assert json.loads(stdout)["version"] == "2.1.0"


def test_console_script_with_hostile_plugins_never_shows_a_traceback(
        hostile_site: Path, tmp_path: Path, graphpass_process) -> None:
    model = _model_file(tmp_path)
    for arguments, expected in ((["passes"], 0), (["plugins", "--format", "json"], 0),
                                (["run", str(model), "-o", str(tmp_path / "o.onnx"), "-p",
                                  "hostile-exits"], 2),
                                (["lint", str(model), "-p", "hostile-renames"], 2)):
        done = graphpass_process(*arguments, sites=[hostile_site])
        assert done.returncode == expected, done.stderr
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not (tmp_path / "o.onnx").exists()
