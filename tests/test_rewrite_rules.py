"""graphpass_rewrite_rules: a plugin's onnxscript pattern rewrites become graphpass passes.

The plugin is a real package (``tests/plugins/graphpass-rewrite-plugin``), installed with
pip into a folder of its own like the other test plugins. It has two entry points: the
example (``rewrite``: two rules) and ``rewrite-misuse`` (what graphpass does with items
it cannot use, and with a rule that raises while it runs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass import PassError, PassManager
from graphpass.framework import build_registry

REPO = Path(__file__).resolve().parent.parent
PLUGIN_SOURCE = (REPO / "tests" / "plugins" / "graphpass-rewrite-plugin" / "src"
                 / "graphpass_rewrite_plugin" / "plugin.py")


@pytest.fixture(scope="module")
def site(install_plugin: Callable[[str], Path]) -> Path:
    return install_plugin("rewrite")


@pytest.fixture
def registry(site: Path, monkeypatch: pytest.MonkeyPatch) -> graphpass.framework.Registry:
    monkeypatch.delenv("GRAPHPASS_DISABLE_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(site))
    return build_registry()


def _negations(path: Path) -> Path:
    """y = Relu(Neg(Neg(x)) * 1), with the 1 a scalar initializer."""
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["a"], name="neg1"),
         helper.make_node("Neg", ["a"], ["b"], name="neg2"),
         helper.make_node("Mul", ["b", "one"], ["c"], name="mul"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(1, np.float32), "one")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_each_rule_set_is_a_pass_credited_to_its_plugin(registry) -> None:
    assert registry.plugin_of("passes", "fold-double-negation") == "rewrite"
    assert registry.plugin_of("passes", "drop-multiply-by-one") == "rewrite"
    info = registry.plugin("rewrite")
    assert info is not None and info.status == "active" and info.warnings == []
    assert info.provides == {"passes": ["fold-double-negation", "drop-multiply-by-one"]}
    drop = registry.pass_class("drop-multiply-by-one")
    assert issubclass(drop, graphpass.OnnxIRPass)
    assert drop.description == "Replace x * 1 by x (1: a constant scalar)."
    assert tuple(drop.after) == ("fold-double-negation",)


def test_the_rewrites_run_in_a_pipeline_and_keep_what_the_model_computes(
        tmp_path: Path, site: Path, graphpass_process) -> None:
    source = _negations(tmp_path / "model.onnx")
    out = tmp_path / "out.onnx"
    done = graphpass_process("run", source, "-o", out, "-p",
                             "drop-multiply-by-one,fold-double-negation,"
                             "onnx-ir-identity-elimination", "--verify", "--format", "json",
                             "--disable-plugin", "rewrite-misuse", sites=[site])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    records = {r["name"]: r for r in report["passes"]}
    assert list(records) == ["fold-double-negation", "drop-multiply-by-one",
                             "onnx-ir-identity-elimination"]  # `after` orders them
    assert {r["plugin"] for r in report["passes"]} == {"rewrite", "ecosystem"}
    assert "GP600" in {f["code"] for f in report["findings"]}
    rewritten = onnx.load(out)
    assert [n.op_type for n in rewritten.graph.node] == ["Relu"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    before = onnxruntime.InferenceSession(str(source)).run(None, {"x": x})[0]
    after = onnxruntime.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(after, np.maximum(x, 0))


def test_items_the_hook_cannot_use_are_reported_and_skipped(registry) -> None:
    misuse = registry.plugin("rewrite-misuse")
    assert misuse is not None and misuse.status == "active"
    assert misuse.provides == {"passes": ["explode-on-relu"]}
    assert misuse.warnings == [
        "graphpass_rewrite_rules gave 'not rules at all': not a graphpass.RewriteRules; skipped",
        "graphpass_rewrite_rules gave rewrite rules 'not-onnxscript-rules' that cannot be used: "
        "graphpass_rewrite_rules.<locals>.<lambda> is not an onnxscript.rewriter.RewriteRule; "
        "skipped",
    ]


def test_strict_plugins_makes_a_misused_hook_fatal(tmp_path: Path, site: Path,
                                                   graphpass_process) -> None:
    done = graphpass_process("passes", "--strict-plugins", sites=[site])
    assert done.returncode == 2
    assert "plugin 'rewrite-misuse 0.3.0': graphpass_rewrite_rules gave 'not rules at all'" in (
        done.stderr)


def test_a_rule_that_raises_is_a_pass_error_naming_the_pass_and_its_plugin(
        registry, tmp_path: Path, site: Path, graphpass_process) -> None:
    source = _negations(tmp_path / "model.onnx")
    model = graphpass.load(source)
    with pytest.raises(PassError) as raised:
        PassManager(["explode-on-relu"], registry=registry).run(model)
    assert (raised.value.pass_name, raised.value.plugin) == ("explode-on-relu", "rewrite-misuse")
    assert str(raised.value).startswith(
        "pass 'explode-on-relu' (plugin 'rewrite-misuse') failed: onnxscript raised "
        "RuntimeError: the condition of explode-on-relu fails on purpose")
    out = tmp_path / "out.onnx"
    done = graphpass_process("run", source, "-o", out, "-p", "explode-on-relu", sites=[site])
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "pass 'explode-on-relu' (plugin 'rewrite-misuse') failed" in done.stderr
    assert not out.exists()


def test_the_plugin_guide_shows_the_plugin_as_it_is() -> None:
    from _docs_runner import block_after

    guide = (REPO / "docs" / "plugins.md").read_text()
    shown = block_after(guide, "## Pattern rewrites in a few lines", "python")
    assert shown.strip() == PLUGIN_SOURCE.read_text().strip()
