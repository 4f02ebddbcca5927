"""Plugins cannot take what is graphpass's own, and a plugin's mistakes are its own.

Real packages from ``tests/plugins/``, pip-installed into throwaway folders (see
``conftest.install_plugin``). ``graphpass-trap-plugin`` holds one plugin per trap a new
plugin author falls into:

* ``clash`` gives a pass named ``check`` that checks nothing: graphpass keeps its own
  ``check`` (a CI gate stays a gate), refuses the plugin's with a warning naming the
  package, and never suggests switching ``builtin`` off;
* ``dupe`` gives two passes named ``dupe-pass`` (its own error, naming both classes) and
  one class twice (listed once);
* ``misorder`` has ``after = ("inline-function",)``: a typo that used to be ignored;
* ``bad-name`` names its pass ``Bad_Name``, although names are lowercase and dashed;
* ``careless`` has a pass that changes the model behind ``changed=False`` and one that
  leaves a node reading a value nothing defines.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass import PluginError
from graphpass.framework import build_registry

TRAPS = ("clash", "dupe", "misorder", "bad-name", "careless")


@pytest.fixture
def use(plugins_on_path: Callable[..., None]) -> Callable[..., None]:
    """Put the named packages on sys.path (for build_registry and the in-process CLI)."""
    return plugins_on_path


def _only(*keep: str) -> list[str]:
    """The trap plugins to switch off so that only ``keep`` are active."""
    return [name for name in TRAPS if name not in keep]


def _model(folder: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["h"], name="relu"),
                               helper.make_node("Neg", ["h"], ["y"], name="neg")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _broken_model(folder: Path) -> Path:
    """A model the ONNX checker refuses (a node reads a name nothing defines)."""
    graph = helper.make_graph([helper.make_node("Neg", ["nowhere"], ["y"], name="neg")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = folder / "broken.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


# ============================================== 1. a plugin never replaces a builtin
def test_a_plugin_pass_named_like_a_builtin_is_refused_and_the_builtin_kept(use) -> None:
    use("trap")
    registry = build_registry(disable=_only("clash"))
    from graphpass.passes.check import Check

    assert registry.passes["check"].item is Check
    assert registry.plugin_of("passes", "check") == "builtin"
    assert registry.clashes == {}
    clash = registry.plugin("clash")
    assert clash is not None and clash.status == "active"
    assert clash.provides == {"passes": ["clash-helper"]}  # the rest of it works
    warning, builder_warning = clash.warnings
    assert "pass 'check'" in warning and "graphpass-trap-plugin" in warning
    assert "builtin" in warning and "refused" in warning
    # The same for every kind: its gradient builder for Relu is refused, graphpass's kept.
    assert "gradient builder 'Relu'" in builder_warning and "refused" in builder_warning
    assert registry.plugin_of("gradient_builders", "Relu") == "builtin"
    problems = "\n".join(registry.problems)
    assert "--disable-plugin builtin" not in problems


def test_lint_stays_a_gate_with_the_impostor_installed(use, cli, tmp_path: Path) -> None:
    use("trap")
    broken = _broken_model(tmp_path)
    code, stdout, stderr = cli("lint", broken, "--disable-plugin", "dupe")
    assert code == 1, stdout + stderr  # graphpass's check found the error
    assert "GP501" in stdout
    assert "two plugins give" not in stderr
    assert "--disable-plugin builtin" not in stdout + stderr
    assert "graphpass-trap-plugin" in stderr and "'check'" in stderr
    code, stdout, _ = cli("lint", broken, "-p", "check", "--format", "json")
    (record,) = json.loads(stdout)["passes"]
    assert record["plugin"] == "builtin"


def test_switching_builtin_off_does_not_hand_its_names_to_a_plugin(use) -> None:
    use("trap")
    registry = build_registry(disable=["builtin", *_only("clash")])
    assert "check" not in registry.passes
    clash = registry.plugin("clash")
    assert clash is not None and any("'check'" in w for w in clash.warnings)


def test_strict_plugins_makes_the_refusal_an_error_that_never_suggests_builtin(use) -> None:
    use("trap")
    with pytest.raises(PluginError) as caught:
        build_registry(disable=_only("clash"), strict=True)
    text = str(caught.value)
    assert "'check'" in text and "graphpass-trap-plugin" in text
    assert "--disable-plugin builtin" not in text


# ==================================== 2. two passes of one name in one plugin
def test_one_plugin_giving_one_name_twice_is_that_plugins_own_error(use) -> None:
    use("trap")
    registry = build_registry(disable=_only("dupe"))
    assert registry.clashes == {}
    assert "dupe-pass" not in registry.passes
    dupe = registry.plugin("dupe")
    assert dupe is not None
    (warning,) = dupe.warnings
    assert "two passes named 'dupe-pass'" in warning
    assert "DupeFirst" in warning and "DupeSecond" in warning
    assert "also given by ;" not in warning
    # The class given twice is one pass, listed once.
    assert dupe.provides == {"passes": ["dupe-given-twice"]}
    with pytest.raises(PluginError) as caught:
        graphpass.PassManager(["dupe-pass"], registry=registry)
    message = str(caught.value)
    assert "plugin 'dupe 0.4.0'" in message
    assert "DupeFirst" in message and "DupeSecond" in message
    assert "--disable-plugin dupe or --disable-plugin dupe" not in message


def test_the_plugins_listing_shows_the_duplicate_once_and_no_clash(use, cli) -> None:
    use("trap")
    code, stdout, stderr = cli("plugins", "--disable-plugin", "clash")
    assert code == 0, stderr
    assert "also given by ;" not in stdout
    assert "dupe-given-twice, dupe-given-twice" not in stdout
    assert "clash:" not in stdout
    assert "DupeFirst" in stdout
    # A plugin that gave only what was refused is not said to give nothing "here".
    bad_name = next(line for line in stdout.splitlines() if line.startswith("bad-name"))
    assert "nothing here" not in bad_name and "warning" in bad_name
    assert "'Bad_Name' is not a usable pass name" in " ".join(stdout.split())  # it wraps


# =================================== 3. a misspelled after/before is reported
def test_a_misspelled_ordering_name_is_a_warning_with_a_suggestion(use) -> None:
    use("trap")
    registry = build_registry(disable=_only("misorder"))
    misorder = registry.plugin("misorder")
    assert misorder is not None
    text = "\n".join(misorder.warnings)
    assert "'inline-function'" in text and "did you mean 'inline-functions'?" in text
    assert "'topological-srot'" in text and "did you mean 'topological-sort'?" in text
    assert "misordered" in registry.passes  # it still works
    builtin = registry.plugin("builtin")
    assert builtin is not None and builtin.warnings == []  # graphpass's own names are right


def test_the_misspelling_shows_in_passes_and_plan_and_fails_strict(use, cli) -> None:
    use("trap")
    off = [arg for name in _only("misorder") for arg in ("--disable-plugin", name)]
    code, stdout, stderr = cli("passes", *off)
    assert code == 0, stderr
    row = " ".join(stdout[stdout.index("misordered"):].split())  # the table wraps
    assert "did you mean 'inline-functions'?" in row[:400]
    code, stdout, stderr = cli("plan", "-p", "misordered,inline-functions", *off)
    assert code == 0, stderr
    assert "did you mean 'inline-functions'?" in stdout + stderr
    code, _, stderr = cli("plan", "-p", "misordered", "--strict-plugins", *off)
    assert code == 2
    assert "inline-function" in stderr and "did you mean 'inline-functions'?" in stderr


# ================================================================ 5. the smaller ones
def test_plan_says_why_a_pass_moved(use, cli) -> None:
    use("example")
    code, stdout, stderr = cli("plan", "-p", "prefix-node-names,example-op-counts,"
                               "inline-functions")
    assert code == 0, stderr
    line = next(row for row in stdout.splitlines() if "prefix-node-names" in row)
    assert "after inline-functions" in line
    code, stdout, _ = cli("plan", "-p", "prefix-node-names,inline-functions", "--format",
                          "json")
    plan = {entry["name"]: entry for entry in json.loads(stdout)["plan"]}
    assert plan["prefix-node-names"]["runs_after"] == [
        {"pass": "inline-functions", "because": "after"}]
    assert plan["inline-functions"]["runs_after"] == []


def test_a_pass_named_against_the_rules_is_refused(use) -> None:
    use("trap")
    registry = build_registry(disable=_only("bad-name"))
    assert "Bad_Name" not in registry.passes
    bad = registry.plugin("bad-name")
    assert bad is not None
    (warning,) = bad.warnings
    assert "'Bad_Name'" in warning and "lowercase" in warning and "'bad-name'" in warning


def test_a_plugin_whose_hook_raised_is_not_said_to_have_failed_to_load(use) -> None:
    use("broken")
    registry = build_registry()
    with pytest.raises(PluginError) as caught:
        graphpass.PassManager(["half-pass"], registry=registry)
    message = str(caught.value)
    assert "failed to load" not in message
    assert "hook graphpass_checkpoint_loaders raised RuntimeError" in message
    with pytest.raises(graphpass.PipelineError) as unknown:
        graphpass.PassManager(["nobody-gives-this"], registry=registry)
    assert "failed to load" not in str(unknown.value)


def test_a_failed_plugin_is_logged_for_python_callers(use, caplog) -> None:
    use("broken")
    with caplog.at_level(logging.WARNING, logger="graphpass"):
        build_registry()
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("graphpass"))
    assert "plugin 'raising 0.0.1'" in logged
    assert "the raising plugin's hook fell over" in logged


def test_the_command_line_prints_plugin_problems_once(use, cli, tmp_path: Path) -> None:
    use("broken")
    code, _, stderr = cli("lint", _model(tmp_path))
    assert code == 0, stderr
    assert stderr.count("the raising plugin's hook fell over") == 1


def test_a_wrong_changed_false_is_corrected_and_the_author_warned(use) -> None:
    use("trap")
    registry = build_registry(disable=_only("careless"))
    model = _tiny()
    result = graphpass.PassManager(["careless-rename"], registry=registry).run(model)
    assert result.changed
    (finding,) = result.findings
    assert finding.severity is graphpass.Severity.WARNING
    assert finding.pass_name == "careless-rename"
    assert "changed=False" in finding.message and "'careless'" in (finding.hint or "")


def test_builtin_passes_never_trigger_the_changed_warning(tmp_path: Path) -> None:
    model = graphpass.Model.from_proto(onnx.load(_model(tmp_path)))
    result = graphpass.PassManager(["inline-functions", "remove-unused", "topological-sort",
                                    "infer-shapes", "check"]).run(model)
    assert [f for f in result.findings if f.code == "GP002"] == []


def test_a_dangling_input_is_named_without_verify_each(use, cli, tmp_path: Path) -> None:
    use("trap")
    off = [arg for name in _only("careless") for arg in ("--disable-plugin", name)]
    code, stdout, stderr = cli("run", _model(tmp_path), "-o", tmp_path / "out.onnx", "-p",
                               "careless-drop", *off)
    assert code == 1, stdout + stderr
    assert "careless-drop" in stdout and "'h'" in stdout and "neg" in stdout
    assert "may be missing from the export" not in stdout + stderr
    assert not (tmp_path / "out.onnx").exists()


def test_a_model_broken_on_arrival_is_not_blamed_on_the_first_pass(tmp_path: Path) -> None:
    model = graphpass.Model.from_proto(onnx.load(_broken_model(tmp_path)))
    result = graphpass.PassManager(["topological-sort"]).run(model)
    assert [f for f in result.findings if f.code == "GP003"] == []


def _tiny() -> graphpass.Model:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["h"], name="relu"),
                               helper.make_node("Neg", ["h"], ["y"], name="neg")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return graphpass.Model.from_proto(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


# ======================================= the docs: `after` or `requires` for an analysis
def test_the_docs_say_when_an_analysis_pass_uses_after_or_requires(tmp_path: Path) -> None:
    from _docs_runner import block_after

    from graphpass.batch import Settings
    from graphpass.testing import models

    page = (Path(__file__).resolve().parent.parent / "docs" / "plugins.md").read_text()
    heading = "### An analysis pass: `after` or `requires`?"
    assert heading in page
    namespace: dict[str, object] = {}
    exec(compile(block_after(page, heading, "python"), "plugins.md", "exec"), namespace)
    needs, orders = namespace["CountsInlinedOps"], namespace["CountsOpsLate"]
    registry = build_registry()
    for pass_class in (needs, orders):
        registry.add("passes", pass_class.name, pass_class, "docs")
    # `requires`: in `run`, the model written is inlined, as a side effect of the analysis.
    result = graphpass.PassManager([needs.name], registry=registry).run(models.with_function())
    assert result.plan == ("inline-functions", needs.name)
    assert not result.model.functions and result.changed
    # In `lint` it is allowed: inlining happens on the lint's copy, nothing is written.
    Settings(command="lint", passes=(needs.name,)).manager(registry, None)
    # `after`: it orders itself only, so it never inlines; asking for the inlining too is
    # what `lint` refuses.
    result = graphpass.PassManager([orders.name], registry=registry).run(models.with_function())
    assert result.plan == (orders.name,) and result.model.functions
    with pytest.raises(graphpass.PipelineError, match="lint runs analysis passes only"):
        Settings(command="lint", passes=(orders.name, "inline-functions")).manager(registry,
                                                                                   None)
