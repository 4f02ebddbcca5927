"""PassManager: planning (requires, after/before, cycles, options) and running."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass import (
    AnalysisPass,
    Finding,
    Pass,
    PassContext,
    PassError,
    PassManager,
    PassResult,
    Pipeline,
    PipelineError,
    PipelineStep,
    Severity,
)
from graphpass.framework import Registry
from graphpass.ir import Model, Node


def _model() -> Model:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["a"], ["y"], name="neg")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return Model.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


RAN: list[str] = []


def _recording(name: str, *, requires: tuple[str, ...] = (), after: tuple[str, ...] = (),
               before: tuple[str, ...] = (), analysis: bool = True) -> type[Pass]:
    base = AnalysisPass if analysis else Pass

    def run(self: Pass, model: Model, context: PassContext) -> PassResult:
        RAN.append(name)
        return PassResult()

    return type(name.title().replace("-", ""), (base,), {
        "name": name, "description": f"test pass {name}", "requires": requires,
        "after": after, "before": before, "run": run})


def _registry(*classes: type[Pass], pipelines: tuple[Pipeline, ...] = ()) -> Registry:
    registry = Registry()
    for pass_class in classes:
        registry.add("passes", pass_class.name, pass_class, "testplugin")
    for pipeline in pipelines:
        registry.add("pipelines", pipeline.name, pipeline, "testplugin")
    return registry


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


# ---------------------------------------------------------------- planning
def test_requires_pulls_passes_in_transitively_and_first() -> None:
    registry = _registry(_recording("a"), _recording("b", requires=("a",)),
                         _recording("c", requires=("b",)))
    manager = PassManager(["c"], registry=registry)
    assert manager.plan_names == ("a", "b", "c")
    plan = {p.name: p for p in manager.plan}
    assert plan["c"].requested and not plan["a"].requested
    assert plan["b"].required_by == ("c",)
    assert plan["a"].required_by == ("b",)
    manager.run(_model())
    assert RAN == ["a", "b", "c"]


def test_after_and_before_order_only_present_passes() -> None:
    registry = _registry(_recording("x", after=("y", "absent")), _recording("y"),
                         _recording("z", before=("y", "absent")))
    assert PassManager(["x", "y"], registry=registry).plan_names == ("y", "x")
    assert PassManager(["x", "y", "z"], registry=registry).plan_names == ("z", "y", "x")
    # "absent" is never pulled in by after/before.
    assert PassManager(["x"], registry=registry).plan_names == ("x",)


def test_user_order_breaks_ties() -> None:
    registry = _registry(_recording("p"), _recording("q"), _recording("r"))
    assert PassManager(["r", "p", "q"], registry=registry).plan_names == ("r", "p", "q")
    assert PassManager(["q", "r", "p"], registry=registry).plan_names == ("q", "r", "p")


def test_a_pass_named_twice_runs_once() -> None:
    registry = _registry(_recording("p"), _recording("q"))
    assert PassManager(["p", "q", "p"], registry=registry).plan_names == ("p", "q")


def test_cycle_fails_before_any_pass_runs_and_names_the_passes() -> None:
    registry = _registry(_recording("first"), _recording("a", requires=("b",)),
                         _recording("b", after=("a",)))
    with pytest.raises(PipelineError) as caught:
        PassManager(["first", "a"], registry=registry)
    message = str(caught.value)
    assert "the passes form a cycle" in message
    assert "a -> b -> a" in message or "b -> a -> b" in message
    assert "a requires b" in message and "b runs after a" in message
    assert RAN == []


def test_requires_cycle_is_reported() -> None:
    registry = _registry(_recording("a", requires=("b",)), _recording("b", requires=("a",)))
    with pytest.raises(PipelineError, match="cycle"):
        PassManager(["a"], registry=registry)


def test_unknown_pass_suggests_the_closest_name() -> None:
    registry = _registry(_recording("remove-unused"))
    with pytest.raises(PipelineError) as caught:
        PassManager(["remove-unsued"], registry=registry)
    assert "unknown pass or pipeline 'remove-unsued'" in str(caught.value)
    assert "did you mean 'remove-unused'?" in str(caught.value)


def test_unknown_required_pass_names_the_requirer() -> None:
    registry = _registry(_recording("a", requires=("missing-pass",)))
    with pytest.raises(PipelineError, match="pass 'a' requires unknown pass 'missing-pass'"):
        PassManager(["a"], registry=registry)


class _WithOptions(Pass):
    name = "with-options"
    description = "a pass with typed options"

    @dataclass
    class Options:
        mode: Literal["fast", "exact"] = "fast"
        limit: int = 3
        names: list[str] = field(default_factory=list)

    seen: ClassVar[list[object]] = []

    def run(self, model: Model, context: PassContext) -> PassResult:
        type(self).seen.append(self.options)
        return PassResult()


def test_bad_option_value_names_option_type_and_allowed_values() -> None:
    registry = _registry(_WithOptions)
    with pytest.raises(PipelineError) as caught:
        PassManager(["with-options"], {"with-options": {"mode": "slow"}}, registry=registry)
    message = str(caught.value)
    assert "'mode'" in message and "'with-options'" in message
    assert 'one of "fast", "exact"' in message and 'got "slow"' in message
    with pytest.raises(PipelineError, match="must be an integer"):
        PassManager(["with-options"], {"with-options": {"limit": "many"}}, registry=registry)


def test_unknown_option_suggests_and_options_for_unknown_pass_fail() -> None:
    registry = _registry(_WithOptions)
    with pytest.raises(PipelineError, match="did you mean 'limit'"):
        PassManager(["with-options"], {"with-options": {"limti": 2}}, registry=registry)
    with pytest.raises(PipelineError, match="options given for unknown pass 'with-option'"):
        PassManager(["with-options"], {"with-option": {"limit": 2}}, registry=registry)


def test_options_reach_the_pass() -> None:
    registry = _registry(_WithOptions)
    _WithOptions.seen.clear()
    PassManager(["with-options"], {"with-options": {"limit": 7, "names": ["a"]}},
                registry=registry).run(_model())
    (options,) = _WithOptions.seen
    assert options.limit == 7 and options.names == ["a"] and options.mode == "fast"


def test_preset_expands_with_conditional_step_and_user_options_win() -> None:
    preset = Pipeline("my-preset", "test preset", [
        "a", PipelineStep("with-options", {"limit": 5}, when="checkpoint"), "b"],
        options={"with-options": {"mode": "exact"}})
    registry = _registry(_recording("a"), _recording("b"), _WithOptions, pipelines=(preset,))
    assert PassManager(["my-preset"], registry=registry).plan_names == ("a", "b")
    manager = PassManager(["my-preset"], {"with-options": {"limit": 9}}, registry=registry,
                          checkpoints=["weights.safetensors"])
    assert manager.plan_names == ("a", "with-options", "b")
    planned = {p.name: p for p in manager.plan}
    assert planned["with-options"].preset == "my-preset"
    options = planned["with-options"].instance.options
    assert (options.mode, options.limit) == ("exact", 9)


def test_disable_drops_a_pass_but_not_a_required_one() -> None:
    registry = _registry(_recording("a"), _recording("b", requires=("a",)), _recording("c"))
    assert PassManager(["b", "c"], registry=registry, disable=["c"]).plan_names == ("a", "b")
    with pytest.raises(PipelineError, match="'a' is disabled, but 'b' requires it"):
        PassManager(["b"], registry=registry, disable=["a"])
    with pytest.raises(PipelineError, match="did you mean 'c'"):
        PassManager(["b"], registry=registry, disable=["cc"])


def test_pass_classes_and_instances_can_be_given_directly() -> None:
    manager = PassManager([_WithOptions(options={"limit": 1})], registry=Registry())
    assert manager.plan[0].plugin == "<user>"
    assert manager.plan[0].instance.options.limit == 1
    assert PassManager(_WithOptions, registry=Registry()).plan_names == ("with-options",)


# ----------------------------------------------------------------- running
class _AddIdentity(Pass):
    """Insert an Identity before the last node (a real, semantics-preserving change)."""

    name = "add-identity"
    description = "test transform"

    def run(self, model: Model, context: PassContext) -> PassResult:
        graph = model.graph
        last = graph.nodes[-1]
        fresh = f"{last.inputs[0]}_id{len(graph)}"
        graph.insert_before(last, Node("Identity", [last.inputs[0]], [fresh],
                                       name=f"identity{len(graph)}"))
        last.set_input(0, fresh)
        return PassResult(changed=True, stats={"identities": 1})


class _Explode(Pass):
    name = "explode"
    description = "raises halfway through"

    def run(self, model: Model, context: PassContext) -> PassResult:
        model.graph.remove(model.graph.nodes[-1], safe=False)
        raise ZeroDivisionError("boom")


def test_a_pass_that_raises_leaves_the_model_untouched_and_names_everything() -> None:
    registry = _registry(_AddIdentity, _recording("a"), _Explode)
    model = _model()
    before = model.to_proto().SerializeToString()
    with pytest.raises(PassError) as caught:
        PassManager(["a", "add-identity", "explode"], registry=registry).run(model)
    error = caught.value
    assert error.pass_name == "explode" and error.plugin == "testplugin"
    assert error.ran_before == ("a", "add-identity")
    assert "pass 'explode' (plugin 'testplugin') failed: ZeroDivisionError: boom" in str(error)
    assert "passes run before it: a, add-identity" in str(error)
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert model.to_proto().SerializeToString() == before


class _Mutating(AnalysisPass):
    name = "sneaky-analysis"
    description = "an analysis pass that changes the model"

    def run(self, model: Model, context: PassContext) -> PassResult:
        model.graph.nodes[0].name = "renamed"
        model.graph.append(Node("Identity", ["y"], ["y2"]))
        return PassResult()


def test_an_analysis_pass_that_mutates_is_an_error_naming_pass_and_plugin() -> None:
    registry = _registry(_Mutating)
    with pytest.raises(PassError, match=r"'sneaky-analysis' \(plugin 'testplugin'\).*analysis"):
        PassManager(["sneaky-analysis"], registry=registry).run(_model())


class _Renames(Pass):
    name = "renames"
    description = "renames a node by setting its name (the IR's version does not move)"
    says_changed: ClassVar[bool] = False

    def run(self, model: Model, context: PassContext) -> PassResult:
        model.graph.nodes[0].name += "_x"
        return PassResult(changed=type(self).says_changed)


class _RenamesAndSaysSo(_Renames):
    name = "renames-and-says-so"
    says_changed = True


def test_changes_only_the_fingerprint_sees_are_credited_to_the_pass_that_made_them() -> None:
    registry = _registry(_Renames, _RenamesAndSaysSo, _recording("a"), _recording("b"))
    result = PassManager(["renames", "a", "renames-and-says-so", "b"], registry=registry,
                         verify_each=True).run(_model())
    assert [(r.name, r.changed) for r in result.records] == [
        ("renames", True), ("a", False), ("renames-and-says-so", True), ("b", False)]
    assert result.ok and result.model.graph.nodes[0].name == "relu_x_x"


class _Reports(AnalysisPass):
    name = "reports-error"
    description = "reports one error"

    def run(self, model: Model, context: PassContext) -> PassResult:
        return PassResult(findings=[Finding("GP999", Severity.ERROR, "bad", node="relu")])


def test_error_findings_stop_the_run_unless_told_otherwise() -> None:
    registry = _registry(_Reports, _AddIdentity)
    model = _model()
    result = PassManager(["reports-error", "add-identity"], registry=registry).run(model)
    assert result.stopped_after == "reports-error" and not result.ok
    assert [r.name for r in result.records] == ["reports-error"]
    assert result.findings[0].pass_name == "reports-error"
    assert not result.changed
    result = PassManager(["reports-error", "add-identity"], registry=registry,
                         stop_on_error=False).run(model)
    assert result.stopped_after is None and result.changed
    assert [r.name for r in result.records] == ["reports-error", "add-identity"]
    assert len(model.graph) == 2  # the caller's model is never changed


def test_a_run_without_copy_changes_the_model_it_was_given() -> None:
    registry = _registry(_AddIdentity)
    model = _model()
    copied = PassManager(["add-identity"], registry=registry).run(model)
    assert copied.model is not model and len(model.graph) == 2
    in_place = PassManager(["add-identity"], registry=registry).run(model, copy=False)
    assert in_place.model is model and in_place.changed
    assert len(model.graph) == len(copied.model.graph) == 3
    assert model.to_proto() == copied.model.to_proto()


def test_records_and_changed_and_semantics() -> None:
    ort = pytest.importorskip("onnxruntime")
    import numpy as np

    registry = _registry(_AddIdentity, _recording("a"))
    model = _model()
    result = PassManager(["a", "add-identity"], registry=registry).run(model)
    assert result.changed and result.ok
    assert [(r.name, r.changed, r.plugin) for r in result.records] == [
        ("a", False, "testplugin"), ("add-identity", True, "testplugin")]
    assert result.records[1].stats == {"identities": 1}
    assert all(r.seconds >= 0 for r in result.records)
    assert len(result.model.graph) == 3 and len(model.graph) == 2
    feeds = {"x": np.array([-1.0, 2.0], dtype=np.float32)}
    outputs = []
    for candidate in (model, result.model):
        session = ort.InferenceSession(candidate.to_proto().SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, feeds)[0])
    np.testing.assert_array_equal(outputs[0], outputs[1])


class _Shrink(Pass):
    """Removes one trailing Identity per run: reaches a fixed point."""

    name = "shrink"
    description = "remove one Identity"

    def run(self, model: Model, context: PassContext) -> PassResult:
        for node in reversed(model.graph):
            if node.op_type == "Identity":
                model.graph.replace_uses(node.outputs[0], node.inputs[0], include_outputs=True)
                model.graph.remove(node)
                return PassResult(changed=True)
        return PassResult()


def test_fixed_point_repeats_until_nothing_changes() -> None:
    registry = _registry(_Shrink, _AddIdentity)
    model = _model()
    for _ in range(3):
        model = PassManager(["add-identity"], registry=registry).run(model).model
    assert len(model.graph) == 5
    result = PassManager(["shrink"], registry=registry, fixed_point=True).run(model)
    assert len(result.model.graph) == 2
    assert result.iterations == 4
    assert [r.changed for r in result.records] == [True, True, True, False]
    assert result.ok and not any(f.code == "GP001" for f in result.findings)
    capped = PassManager(["shrink"], registry=registry, fixed_point=True,
                         max_iterations=2).run(model)
    assert len(capped.model.graph) == 3
    (warning,) = [f for f in capped.findings if f.code == "GP001"]
    assert warning.severity is Severity.WARNING and "shrink" in warning.message


class _Breaks(Pass):
    name = "breaks-model"
    description = "makes a node read an undefined value"

    def run(self, model: Model, context: PassContext) -> PassResult:
        model.graph.nodes[1].set_input(0, "nowhere")
        return PassResult(changed=True)


def test_verify_each_names_the_pass_that_broke_the_model() -> None:
    registry = _registry(_AddIdentity, _Breaks, _recording("a"))
    result = PassManager(["add-identity", "breaks-model", "a"], registry=registry,
                         verify_each=True).run(_model())
    assert result.stopped_after == "breaks-model"
    assert [f.code for f in result.errors] == ["GP003", "GP010"]
    finding = result.errors[1]
    assert finding.code == "GP010" and finding.pass_name == "breaks-model"
    assert "nowhere" in finding.message
    assert RAN == []
    # Without the instrument a name the pass left undefined is still named (a model that
    # reads it cannot be saved): the checker is not needed to see that.
    result = PassManager(["add-identity", "breaks-model"], registry=registry).run(_model())
    (finding,) = result.errors
    assert finding.code == "GP003" and finding.pass_name == "breaks-model"
    assert "'nowhere'" in finding.message and finding.node == "identity2"


def test_dump_after_writes_a_loadable_model(tmp_path: object) -> None:
    from pathlib import Path

    directory = Path(str(tmp_path))
    registry = _registry(_AddIdentity, _recording("a"))
    PassManager(["add-identity", "a"], registry=registry, dump_after=["add-identity"],
                dump_dir=directory).run(_model())
    (dumped,) = directory.glob("*.onnx")
    assert dumped.name == "model.after-add-identity.onnx"
    onnx.checker.check_model(str(dumped))
    assert len(graphpass.load(dumped).graph) == 3
    with pytest.raises(PipelineError, match="not planned"):
        PassManager(["a"], registry=registry, dump_after=["add-identity"])


def test_a_pass_returning_garbage_is_a_pass_error() -> None:
    class Garbage(Pass):
        name = "garbage"
        description = "returns None"

        def run(self, model: Model, context: PassContext) -> PassResult:
            return None  # type: ignore[return-value]

    with pytest.raises(PassError, match=r"returned NoneType, not a graphpass\.PassResult"):
        PassManager([Garbage], registry=Registry()).run(_model())


def test_context_has_plan_analyses_and_resolves_paths(tmp_path: object) -> None:
    from pathlib import Path

    seen: dict[str, object] = {}

    class Looks(AnalysisPass):
        name = "looks"
        description = "records its context"

        def run(self, model: Model, context: PassContext) -> PassResult:
            seen.update(plan=context.plan, analyses=len(context.analyses),
                        path=context.resolve_path("w.bin"), checkpoints=context.checkpoints)
            return PassResult()

    registry = _registry(_recording("a"), Looks)
    PassManager(["a", "looks"], registry=registry, base_dir=Path(str(tmp_path)),
                checkpoints=["ck.safetensors"]).run(_model())
    assert seen["plan"] == ("a", "looks")
    assert seen["analyses"] == 0  # no pass of the run provides one
    assert seen["path"] == Path(str(tmp_path)) / "w.bin"
    assert seen["checkpoints"] == (Path(str(tmp_path)) / "ck.safetensors",)


class _CodedError(PassError):
    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(f"{code} {message}")


def test_a_pass_error_subclass_keeps_its_type_and_gains_context() -> None:
    class Refuses(Pass):
        name = "refuses"
        description = "raises its own PassError subclass"

        def run(self, model: Model, context: PassContext) -> PassResult:
            raise _CodedError("GP777", "cannot do this model")

    registry = _registry(_recording("a"), Refuses)
    with pytest.raises(_CodedError) as caught:
        PassManager(["a", "refuses"], registry=registry).run(_model())
    error = caught.value
    assert error.code == "GP777" and error.pass_name == "refuses"
    assert error.ran_before == ("a",)
    assert "pass 'refuses' (plugin 'testplugin') failed: GP777 cannot do this model" in str(error)


def test_other_graphpass_errors_become_pass_errors_with_the_cause() -> None:
    class BadInput(Pass):
        name = "bad-input"
        description = "raises a CheckpointError"

        def run(self, model: Model, context: PassContext) -> PassResult:
            raise graphpass.CheckpointError("tensor 'w' has shape [3], the model wants [2]",
                                            where="ck.safetensors", hint="use the right file")

    with pytest.raises(PassError) as caught:
        PassManager([BadInput], registry=Registry()).run(_model())
    error = caught.value
    assert isinstance(error.__cause__, graphpass.CheckpointError)
    assert "the model wants [2] [ck.safetensors]" in str(error)
    assert error.hint == "use the right file"


# ------------------------------------------------- options for a pass left out
def test_options_for_a_pass_that_is_not_planned_are_a_warning() -> None:
    manager = PassManager(["check"], options={"inline-functions": {"max-depth": 3}})
    (warning,) = manager.warnings
    assert warning.severity is Severity.WARNING and warning.code == "GP004"
    assert "'inline-functions'" in warning.message and "not planned" in warning.message
    result = manager.run(_model())
    assert warning in result.findings


def test_options_of_a_preset_step_left_out_say_why() -> None:
    manager = PassManager(["train-ready"],
                          options={"reconcile-initializers": {"strict": True}})
    (warning,) = manager.warnings
    assert "reconcile-initializers" in warning.message and "checkpoint" in warning.message


def test_the_command_line_says_when_options_go_unused(cli, tmp_path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_model().to_proto(), model)
    code, stdout, stderr = cli("run", model, "-o", tmp_path / "o.onnx", "-p", "check", "-O",
                               "inline-functions.max-depth=3")
    assert code == 0, stderr
    assert "GP004" in stdout and "inline-functions" in stdout
    code, stdout, stderr = cli("plan", "-p", "check", "-O", "inline-functions.max-depth=3")
    assert code == 0 and "not planned" in stderr
    # What the training-graph preset carries (the lint's rules with --emit-training-graph)
    # is not options anybody gave.
    code, stdout, stderr = cli("run", model, "-o", tmp_path / "o.onnx", "-p", "inline-functions",
                               "--emit-training-graph", tmp_path / "train")
    assert "GP852" in stdout, stdout + stderr  # it ran (the model has nothing to train)
    assert "GP004" not in stdout
