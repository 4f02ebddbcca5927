"""Typed analyses between passes: given, asked for by type, dropped when the model changes.

The parity test is the reason they exist: ``build-training-graph`` used to read
``reconcile-initializers``' stats and reopen its checkpoints, so the same training graphs
built from Python (``build_training_graphs`` + ``write_training_directory``) lacked the
torch names, the tied keys and the checkpoint's other keys. Now both take the pass's
:class:`~graphpass.checkpoint.ReconcileResult` and write the same directory.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass.checkpoint import ReconcileResult, open_checkpoint
from graphpass.errors import PassError
from graphpass.findings import Finding, Severity
from graphpass.framework import Registry
from graphpass.torch.folding import UnrestorableParameters
from graphpass.training import AdamW, build_training_graphs, write_training_directory
from graphpass.training.rules import SelectionReport, trainable_weights

torch = pytest.importorskip("torch")


# ===================================================================== parity
class _Net(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _export_and_checkpoint(folder: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """An export of one net, and a DataParallel checkpoint (``module.`` keys) of another."""
    torch.manual_seed(0)
    exported = _Net().eval()
    path = folder / "net.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(exported, (torch.randn(2, 4),), str(path), dynamo=True,
                          optimize=False, input_names=["x"])
    torch.manual_seed(1)
    trained = _Net()
    with torch.no_grad():
        trained.bn.running_mean.uniform_(-1, 1)
        trained.bn.num_batches_tracked.fill_(7)
    state = {f"module.{key}": value for key, value in trained.state_dict().items()}
    checkpoint = folder / "trained.pt"
    torch.save(state, checkpoint)
    return path, checkpoint, {k: v.detach().numpy() for k, v in state.items()}


def test_the_pass_and_the_python_function_write_the_same_directory(tmp_path: Path) -> None:
    path, checkpoint, state = _export_and_checkpoint(tmp_path)
    by_pass = tmp_path / "by-pass"
    ran = graphpass.PassManager(
        ["inline-functions", "reconcile-initializers", "build-training-graph"],
        options={"build-training-graph": {"directory": str(by_pass)}},
        checkpoints=[checkpoint]).run(graphpass.load(path))
    assert ran.ok, [f.message for f in ran.findings]

    filled = graphpass.PassManager(["inline-functions", "reconcile-initializers"],
                                   checkpoints=[checkpoint]).run(graphpass.load(path))
    reconciled = filled.analysis(ReconcileResult)
    assert reconciled is not None and reconciled.keys["fc1.weight"] == "module.fc1.weight"
    by_python = tmp_path / "by-python"
    weights = trainable_weights(filled.model.graph, codes={"no-match": "-", "not-float": "-"},
                                trainer="me", initializers_only=True)  # the pass's selection
    graphs = build_training_graphs(filled.model, trainable=weights.trainable,
                                   frozen=weights.frozen, optimizer=AdamW(weight_decay=0.01),
                                   reconciled=reconciled)
    write_training_directory(graphs, by_python)

    files = sorted(p.name for p in by_pass.iterdir())
    assert files == sorted(p.name for p in by_python.iterdir())
    assert "torch_extra.safetensors" in files  # module.bn.num_batches_tracked, from the checkpoint
    for name in files:
        if name != "manifest.json":
            assert (by_pass / name).read_bytes() == (by_python / name).read_bytes(), name
    manifest = json.loads((by_pass / "manifest.json").read_text())
    python_manifest = json.loads((by_python / "manifest.json").read_text())
    assert {k: v for k, v in manifest.items() if k != "options"} == \
        {k: v for k, v in python_manifest.items() if k != "options"}
    # What the reconcile gave: the checkpoint's names, values and its other keys.
    assert manifest["torch_names"]["fc2.bias"] == "module.fc2.bias"
    assert manifest["torch_state"]["keys"]["module.bn.num_batches_tracked"] is None
    written = open_checkpoint(by_pass / "weights.safetensors")
    assert manifest["trainable"] == weights.trainable
    for name in manifest["trainable"]:
        np.testing.assert_array_equal(written[name].numpy(), state[f"module.{name}"])
    extra = open_checkpoint(by_pass / "torch_extra.safetensors")
    assert int(extra["module.bn.num_batches_tracked"].numpy()) == 7


# ================================================================ invalidation
@dataclass(frozen=True)
class _Fact:
    nodes: int


SEEN: list[_Fact | None] = []


class _Provides(graphpass.AnalysisPass):
    name = "provides"
    description = "gives the node count as an analysis"
    provides = (_Fact,)

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        return graphpass.PassResult(analyses=[_Fact(len(list(model.graph)))])


class _ProvidesAgain(_Provides):
    name = "provides-again"


class _Asks(graphpass.AnalysisPass):
    name = "asks"
    description = "records what it is given"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        SEEN.append(context.analysis(_Fact))
        return graphpass.PassResult()


class _Changes(graphpass.Pass):
    name = "changes"
    description = "drops the last node, preserving nothing"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        model.graph.remove(list(model.graph)[-1], safe=False)
        return graphpass.PassResult(changed=True)


class _Keeps(_Changes):
    name = "keeps"
    description = "changes the model, promising the fact stays true"
    preserves = (_Fact,)


class _Idle(graphpass.Pass):
    name = "idle"
    description = "a transforming pass that changes nothing"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        return graphpass.PassResult()


class _Stray(graphpass.AnalysisPass):
    name = "stray"
    description = "gives an analysis it does not declare"

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        return graphpass.PassResult(analyses=[_Fact(0)])


def _model() -> graphpass.Model:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])])
    return graphpass.Model.from_proto(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


@pytest.mark.parametrize(("between", "expected"), [
    ((), _Fact(2)),               # nothing in between
    (("idle",), _Fact(2)),        # a transforming pass that changed nothing
    (("changes",), None),         # changed the model, preserves nothing: dropped
    (("keeps",), _Fact(2)),       # changed it, but preserves the fact
    (("changes", "provides-again"), _Fact(1)),  # given again, for the model as it is now
])
def test_a_change_drops_the_analyses_its_pass_does_not_preserve(
        between: tuple[str, ...], expected: _Fact | None) -> None:
    registry = Registry()
    for pass_class in (_Provides, _ProvidesAgain, _Asks, _Changes, _Keeps, _Idle, _Stray):
        registry.add("passes", pass_class.name, pass_class, "testplugin")
    SEEN.clear()
    result = graphpass.PassManager(["provides", *between, "asks"], registry=registry).run(
        _model())
    assert [expected] == SEEN
    assert result.analysis(_Fact) == expected


def test_an_analysis_the_pass_does_not_declare_is_a_bug_named_as_such() -> None:
    registry = Registry()
    registry.add("passes", "stray", _Stray, "testplugin")
    with pytest.raises(PassError, match="gave an analysis of type _Fact, which its provides "
                                        "does not list"):
        graphpass.PassManager(["stray"], registry=registry).run(_model())


def test_built_in_passes_say_what_they_provide_and_preserve() -> None:
    from graphpass.framework import default_registry
    passes = default_registry().passes
    provides = {name: tuple(entry.item.provides) for name, entry in passes.items()
                if entry.item.provides}
    assert provides == {"reconcile-initializers": (ReconcileResult,),
                        "restore-parameters": (UnrestorableParameters,),
                        "lint-gradients": (SelectionReport,)}
    # Between reconcile-initializers and build-training-graph in train-ready: they keep
    # initializers' names and values, so the checkpoint mapping survives them.
    for name in ("restore-parameters", "fix-training-ops", "remove-unused"):
        assert ReconcileResult in passes[name].item.preserves, name
    # Removing what nothing reads cannot make a pattern match: the report survives it.
    assert SelectionReport in passes["remove-unused"].item.preserves


def test_a_request_problem_the_lint_reported_is_not_reported_again_after_remove_unused(
        tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.0, 0.0, 0.0, 1.0]),
                     helper.make_tensor("spare", TensorProto.FLOAT, [1], [0.0])])
    model = graphpass.Model.from_proto(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    request = {"trainable": ["w", "nope*"]}
    result = graphpass.PassManager(  # what graphpass run -p train-ready --emit-training-graph does
        ["train-ready", "build-training-graph"],
        options={"lint-gradients": request,
                 "build-training-graph": {**request, "directory": str(tmp_path / "t")}},
        stop_on_error=False).run(model)
    plan = list(result.plan)
    assert plan.index("lint-gradients") < plan.index("remove-unused") < plan.index(
        "build-training-graph")
    assert next(r for r in result.records if r.name == "remove-unused").changed
    about = [(f.code, f.pass_name) for f in result.findings if f.value == "nope*"]
    assert about == [(about[0][0], "lint-gradients")], about  # once, by the lint


def test_a_pass_that_renames_an_initializer_drops_the_reconcile_result(tmp_path: Path) -> None:
    path, checkpoint, _ = _export_and_checkpoint(tmp_path)

    class Renames(graphpass.Pass):
        name = "renames"
        description = "renames a weight (so the checkpoint mapping is no longer true)"

        def run(self, model: graphpass.Model,
                context: graphpass.PassContext) -> graphpass.PassResult:
            model.graph.rename_value("fc1.weight", "first.weight")
            return graphpass.PassResult(changed=True, findings=[Finding(
                "X001", Severity.INFO, "renamed")])

    from graphpass.framework import default_registry
    registry = default_registry()
    registry.add("passes", "renames", Renames, "testplugin")
    kept = graphpass.PassManager(["reconcile-initializers", "remove-unused"], registry=registry,
                                 checkpoints=[checkpoint]).run(graphpass.load(path))
    assert kept.analysis(ReconcileResult) is not None
    dropped = graphpass.PassManager(["reconcile-initializers", "renames"], registry=registry,
                                    checkpoints=[checkpoint]).run(graphpass.load(path))
    assert dropped.analysis(ReconcileResult) is None


def test_the_plugins_page_example_of_an_analysis_runs_as_it_says() -> None:
    from _docs_runner import block_after

    page = (Path(__file__).resolve().parent.parent / "docs" / "plugins.md").read_text()
    heading = "### Analyses: what a pass tells later passes"
    namespace: dict[str, Any] = {}
    exec(compile(block_after(page, heading, "python"), "plugins.md", "exec"), namespace)
    registry = Registry()
    for pass_class in (namespace["TakesCensus"], namespace["ReadsCensus"], _Changes):
        registry.add("passes", pass_class.name, pass_class, "docs")

    def reads(*passes: str) -> dict[str, Any]:
        result = graphpass.PassManager([*passes, "read-census"], registry=registry).run(
            _model())
        return next(r.stats for r in result.records if r.name == "read-census")

    assert reads("take-census") == {"relu": 1, "from census": True}
    assert reads() == {"relu": 1, "from census": False}
    assert reads("take-census", "changes") == {"relu": 1, "from census": False}
