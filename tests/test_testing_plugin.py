"""graphpass.testing: the pytest plugin plugin authors test their passes with.

The example plugin (``tests/plugins/graphpass-example-plugin``) has tests of its own
that use the fixtures; they run here with pytest in a fresh process, against the
plugin pip-installed into a throwaway folder, as its author would run them.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _docs_runner import block_after, blocks

import graphpass
from graphpass.framework import Registry
from graphpass.testing import PassRunner, models, plugin_registry

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "tests" / "plugins" / "graphpass-example-plugin"


def _pytest(folder: Path, *args: str,
            sites: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GRAPHPASS_DISABLE_PLUGINS", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join(str(site) for site in sites)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=folder, env=env, capture_output=True, text=True,
                          check=False, timeout=300)


def test_the_plugin_is_registered_with_pytest() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="pytest11")
                if e.name == "graphpass"]
    assert entry.value == "graphpass.testing.pytest_plugin"


def test_the_example_plugin_tests_itself_with_the_fixtures(
        install_plugin: Callable[[str], Path], tmp_path: Path) -> None:
    site = install_plugin("example")
    project = tmp_path / "graphpass-example-plugin"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("src", "__pycache__"))
    done = _pytest(project, sites=(site,))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout


def test_fixtures_are_listed_and_harmless_where_nobody_uses_them(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text("def test_nothing_to_do_with_graphpass():\n"
                                            "    assert True\n")
    done = _pytest(tmp_path)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    listed = _pytest(tmp_path, "--fixtures")
    for fixture in ("graphpass_registry", "graphpass_models", "graphpass_runner",
                    "graphpass_plugin_name"):
        assert fixture in listed.stdout


def test_the_registry_fixture_says_how_to_name_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "test_mine.py").write_text("def test_it(graphpass_registry):\n    pass\n")
    done = _pytest(tmp_path)
    assert done.returncode == 1
    assert "graphpass_plugin" in done.stdout and "pyproject.toml" in done.stdout


def test_plugin_registry_holds_the_builtin_and_only_that_plugin(install_plugin,
                                                                 monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(install_plugin("example")))
    monkeypatch.syspath_prepend(str(install_plugin("duplicate")))  # installed, but left out
    registry = plugin_registry("example")
    assert registry.plugin_of("passes", "prefix-node-names") == "example"
    assert {info.name for info in registry.plugins if info.status == "active"} == {
        "builtin", "example"}
    with pytest.raises(graphpass.PluginError, match="no plugin called 'exampel'"):
        plugin_registry("exampel")


class _Scales(graphpass.Pass):
    name = "scales"
    description = "multiplies the first weight by 2 but claims to preserve semantics"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        name, tensor = next(iter(model.graph.initializers.items()))
        model.graph.set_initializer(graphpass.Tensor.from_array(name, tensor.numpy() * 2))
        return graphpass.PassResult(changed=True)


def test_the_runner_catches_a_pass_that_changes_what_the_model_computes() -> None:
    registry = Registry()
    registry.add("passes", "scales", _Scales, "tests")
    runner = PassRunner(registry)
    model = models.mlp()
    with pytest.raises(AssertionError) as caught:
        runner.assert_preserves_semantics("scales", model)
    assert "pass 'scales' changed what the model computes" in str(caught.value)
    result = runner.run("scales", model)
    assert result.changed
    assert not np.array_equal(next(iter(result.model.graph.initializers.values())).numpy(),
                              next(iter(model.graph.initializers.values())).numpy())


def test_model_builders_give_valid_models() -> None:
    for model in (models.chain("Relu", "Neg"), models.mlp(), models.with_function(),
                  models.with_if(), models.with_identity_output()):
        graphpass.validate(model)
        assert PassRunner(plugin_registry()).run("check", model).ok


def test_the_plugins_page_shows_the_example_tests_as_they_are() -> None:
    page = (REPO / "docs" / "plugins.md").read_text()
    shown = [b.body for b in blocks(page) if b.lang == "python"]
    for source in (EXAMPLE / "tests" / "test_passes.py",
                   EXAMPLE / "src" / "graphpass_example_plugin" / "passes.py",
                   EXAMPLE / "src" / "graphpass_example_plugin" / "plugin.py"):
        text = source.read_text()
        body = text.split('"""', 2)[2].lstrip("\n") if text.startswith('"""') else text
        assert body in shown, f"docs/plugins.md does not show {source.name} as it is"


def test_the_plugins_page_keyword_options_example_runs(install_plugin, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(install_plugin("example")))
    page = (REPO / "docs" / "plugins.md").read_text()
    exec(compile(block_after(page, "these make the same pass", "python"), "plugins.md", "exec"),
         {})


@pytest.mark.parametrize("plugin", ["raising", "misspelled"])
def test_a_broken_plugin_under_test_gets_a_hint_for_a_test_not_the_command_line(
        plugin: str, install_plugin, monkeypatch) -> None:
    monkeypatch.delenv("GRAPHPASS_DISABLE_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(install_plugin("broken")))
    monkeypatch.syspath_prepend(str(install_plugin("misspelled")))
    with pytest.raises(graphpass.PluginError) as caught:
        plugin_registry(plugin)
    hint = caught.value.hint or ""
    assert "--disable-plugin" not in hint and "--strict-plugins" not in hint
    assert "GRAPHPASS_DISABLE_PLUGINS" not in hint
    assert f"plugin {plugin!r}" in hint
    if plugin == "raising":  # the plugin's own exception stays the cause
        assert isinstance(caught.value.__cause__, RuntimeError)


def test_the_build_node_format_is_documented_and_the_example_runs() -> None:
    page = (REPO / "docs" / "plugins.md").read_text()
    assert "### Models for tests" in page
    namespace: dict[str, object] = {}
    exec(compile(block_after(page, "### Models for tests", "python"), "plugins.md", "exec"),
         namespace)
    model = namespace["model"]
    assert isinstance(model, graphpass.Model)
    assert [node.op_type for node in model.graph] == ["MatMul", "LeakyRelu", "Add"]
    graphpass.validate(model)
