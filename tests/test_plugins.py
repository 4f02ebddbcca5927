"""Plugins: real packages, pip-installed into throwaway folders, found through entry points.

The packages live in ``tests/plugins/``. Each is installed with ``pip install --target``
into its own folder (never into the shared venv: the broken ones would break every
other test), and made visible by putting that folder on ``sys.path`` (in process) or
``PYTHONPATH`` (for the command line in a subprocess).
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass import PluginError
from graphpass.framework import build_registry

NAMES = ("example", "broken", "misspelled", "duplicate")


@pytest.fixture(scope="session")
def plugin_sites(install_plugin: Callable[[str], Path]) -> dict[str, Path]:
    """Install each test plugin package into its own folder; return the folders by name."""
    return {name: install_plugin(name) for name in NAMES}


@pytest.fixture
def use_plugins(plugin_sites: dict[str, Path], monkeypatch: pytest.MonkeyPatch):
    """Put the named plugin folders on sys.path for this test."""
    monkeypatch.delenv("GRAPHPASS_DISABLE_PLUGINS", raising=False)

    def use(*names: str) -> None:
        for name in names:
            monkeypatch.syspath_prepend(str(plugin_sites[name]))

    return use


# ------------------------------------------------------------- in process
def test_example_plugin_passes_and_preset_are_credited_to_it(use_plugins) -> None:
    use_plugins("example")
    registry = build_registry()
    assert registry.plugin_of("passes", "prefix-node-names") == "example"
    assert registry.plugin_of("passes", "example-op-counts") == "example"
    assert registry.plugin_of("pipelines", "example-tidy") == "example"
    assert registry.plugin_of("passes", "check") == "builtin"
    info = registry.plugin("example")
    assert info is not None
    assert (info.version, info.status, info.distribution) == (
        "1.2.0", "active", "graphpass-example-plugin")
    assert info.provides == {"passes": ["prefix-node-names", "example-op-counts"],
                             "pipelines": ["example-tidy"]}
    assert registry.problems == []


def test_broken_plugins_are_reported_by_name_and_version_and_skipped(use_plugins) -> None:
    use_plugins("example", "broken")
    registry = build_registry()
    broken = registry.plugin("broken")
    raising = registry.plugin("raising")
    assert broken is not None and raising is not None
    assert broken.status == "failed" and broken.version == "0.0.1"
    assert "failed to import" in (broken.error or "")
    assert "graphpass_module_that_does_not_exist" in (broken.error or "")
    assert raising.status == "failed"
    assert "hook graphpass_passes raised RuntimeError" in (raising.error or "")
    # Nothing of a failed plugin is registered, not even what its other hooks give.
    assert "raising-preset" not in registry.pipelines
    assert "prefix-node-names" in registry.passes  # the good plugin still works
    problems = "\n".join(registry.problems)
    assert "plugin 'broken 0.0.1' failed and was skipped" in problems
    assert "plugin 'raising 0.0.1' failed and was skipped" in problems


def test_strict_makes_a_broken_plugin_fatal(use_plugins) -> None:
    use_plugins("broken")
    with pytest.raises(PluginError, match=r"plugin 'broken 0\.0\.1' failed: failed to import"):
        build_registry(strict=True)


def test_misspelled_hook_and_garbage_items_are_reported_and_skipped(use_plugins) -> None:
    use_plugins("misspelled")
    registry = build_registry()
    info = registry.plugin("misspelled")
    assert info is not None and info.status == "active"
    assert info.provides == {"passes": ["misspelled-good"]}
    warnings = "\n".join(info.warnings)
    assert "'graphpass_pases' is not a graphpass hook" in warnings
    assert "did you mean 'graphpass_passes'?" in warnings
    assert "NamelessPass: the pass has no name" in warnings
    assert "'not-a-pass-class': not a graphpass.Pass subclass" in warnings
    assert "graphpass_checkpoint_loaders returned int, not a list" in warnings
    with pytest.raises(PluginError, match="graphpass_pases"):
        build_registry(strict=True)


def test_duplicate_pass_name_is_an_error_naming_both_plugins_when_used(use_plugins) -> None:
    use_plugins("example", "duplicate")
    registry = build_registry()  # the clash does not stop the registry (test_plugin_problems)
    with pytest.raises(PluginError) as caught:
        registry.pass_class("prefix-node-names")
    message = str(caught.value)
    assert "'prefix-node-names'" in message
    assert "'example'" in message and "'duplicate'" in message


def test_disable_by_argument_and_environment(use_plugins, monkeypatch) -> None:
    use_plugins("example", "duplicate")
    registry = build_registry(disable=["duplicate"])
    assert registry.plugin("duplicate").status == "disabled"  # type: ignore[union-attr]
    assert registry.plugin_of("passes", "prefix-node-names") == "example"
    monkeypatch.setenv("GRAPHPASS_DISABLE_PLUGINS", "example, broken")
    registry = build_registry()
    assert registry.plugin("example").status == "disabled"  # type: ignore[union-attr]
    assert registry.plugin_of("passes", "prefix-node-names") == "duplicate"
    assert any("no plugin called 'broken' to disable" in p for p in registry.problems)


def test_example_pass_runs_with_options_in_process(use_plugins) -> None:
    use_plugins("example")
    registry = build_registry()
    model = graphpass.Model.from_proto(_model_proto())
    result = graphpass.PassManager(
        ["example-tidy"], {"prefix-node-names": {"unnamed": "op-type"}},
        registry=registry).run(model)
    assert [n.name for n in result.model.graph] == ["tidy_relu", "tidy_Neg1"]
    assert [r.plugin for r in result.records] == ["example", "example"]
    assert result.findings[0].code == "GP901"


# ------------------------------------------------------- the command line
def _model_proto() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_cli_lists_plans_and_runs_the_example_pass_from_a_pipeline_file(
        plugin_sites: dict[str, Path], tmp_path: Path, graphpass_process) -> None:
    sites = [plugin_sites["example"]]
    listed = graphpass_process("passes", cwd=tmp_path, sites=sites)
    assert listed.returncode == 0, listed.stderr
    assert "prefix-node-names" in listed.stdout and "example" in listed.stdout
    assert "only-ops" in listed.stdout and "list of string" in listed.stdout

    plugins = graphpass_process("plugins", cwd=tmp_path, sites=sites)
    assert plugins.returncode == 0, plugins.stderr
    assert "example" in plugins.stdout and "1.2.0" in plugins.stdout

    planned = graphpass_process("plan", "-p",
                                "example-op-counts,prefix-node-names,inline-functions",
                                cwd=tmp_path, sites=sites)
    assert planned.returncode == 0, planned.stderr
    lines = [line for line in planned.stdout.splitlines() if line.strip()]
    order = [name for line in lines for name in ("example-op-counts", "prefix-node-names",
                                                  "inline-functions") if name in line.split()]
    # prefix-node-names declares after = inline-functions.
    assert order.index("inline-functions") < order.index("prefix-node-names")

    onnx.save(_model_proto(), tmp_path / "model.onnx")
    (tmp_path / "pipeline.toml").write_text(
        '[pipeline]\npasses = ["prefix-node-names", "example-op-counts"]\n\n'
        '[passes.prefix-node-names]\nprefix = "p_"\nonly-ops = ["Relu", "Neg"]\n'
        'unnamed = "op-type"\n\n[passes.example-op-counts]\nmax-nodes = 1\n')
    ran = graphpass_process("run", "model.onnx", "-o", "out.onnx", "-c", "pipeline.toml",
                            "--format", "json", cwd=tmp_path, sites=sites)
    assert ran.returncode == 0, ran.stderr
    import json

    report = json.loads(ran.stdout)
    assert [p["name"] for p in report["passes"]] == ["prefix-node-names", "example-op-counts"]
    assert report["passes"][0]["plugin"] == "example"
    assert {f["code"] for f in report["findings"]} == {"GP901", "GP902"}
    out = onnx.load(tmp_path / "out.onnx")
    assert [n.name for n in out.graph.node] == ["p_relu", "p_Neg1"]


def test_cli_reports_broken_plugins_and_still_works(plugin_sites: dict[str, Path],
                                                    tmp_path: Path, graphpass_process) -> None:
    sites = [plugin_sites["example"], plugin_sites["broken"], plugin_sites["misspelled"]]
    listed = graphpass_process("plugins", cwd=tmp_path, sites=sites)
    assert listed.returncode == 0, listed.stderr
    assert "failed" in listed.stdout and "broken" in listed.stdout
    assert "graphpass_pases" in listed.stdout
    passes = graphpass_process("passes", cwd=tmp_path, sites=sites)
    assert passes.returncode == 0
    assert "prefix-node-names" in passes.stdout and "misspelled-good" in passes.stdout
    assert "plugin 'broken 0.0.1' failed and was skipped" in passes.stderr
    assert "Traceback" not in passes.stderr
    strict = graphpass_process("passes", "--strict-plugins", cwd=tmp_path, sites=sites)
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    assert "broken" in strict.stderr


def test_cli_duplicate_pass_name_fails_naming_both(plugin_sites: dict[str, Path],
                                                   tmp_path: Path, graphpass_process) -> None:
    sites = [plugin_sites["example"], plugin_sites["duplicate"]]
    failed = graphpass_process("plan", "-p", "prefix-node-names", cwd=tmp_path, sites=sites)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert "'example'" in failed.stderr and "'duplicate'" in failed.stderr
    fixed = graphpass_process("plan", "-p", "prefix-node-names", "--disable-plugin",
                              "duplicate", cwd=tmp_path, sites=sites)
    assert fixed.returncode == 0, fixed.stderr


def test_without_its_builtin_entry_point_graphpass_says_to_install_it(tmp_path: Path) -> None:
    """graphpass run from a copy of the source, not installed: its entry points are absent."""
    repo = Path(__file__).resolve().parent.parent
    ignore = shutil.ignore_patterns("__pycache__")
    package = tmp_path / "src" / "graphpass"
    shutil.copytree(repo / "core", package, ignore=ignore)
    shutil.copytree(repo / "passes", package / "passes", ignore=ignore)
    shutil.copytree(repo / "plugins", package / "plugins", ignore=ignore)
    libraries = tmp_path / "site"  # the venv's packages, but graphpass's installation
    libraries.mkdir()
    for entry in Path(site.getsitepackages()[0]).iterdir():
        if not entry.name.lower().replace("-", "_").startswith(("graphpass", "__editable__")):
            (libraries / entry.name).symlink_to(entry)
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
            "from graphpass.cli import main; sys.exit(main(['passes']))")
    done = subprocess.run([sys.executable, "-S", "-c", code, str(package.parent), str(libraries)],
                          capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr
    assert "built-in plugin is not registered" in done.stderr
    assert "install graphpass" in done.stderr
