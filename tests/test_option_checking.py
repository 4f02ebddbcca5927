"""Pass options are checked strictly, shown as TOML writes them, and take keywords.

A pipeline file promises values "checked against the option's type": a boolean option
takes ``true`` or ``false`` and nothing that merely looks like one (``"no"``, ``"off"``,
``0``, ``1.0``); an integer option takes no ``3.0`` and no ``"3"``. The message shows
the value as it is written in TOML and the hint is graphpass's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnx
import pytest
from onnx import TensorProto, helper

import graphpass
from graphpass import ConfigError, PipelineError
from graphpass.framework import Registry
from graphpass.passes.inline_functions import InlineFunctions
from graphpass.passes.reconcile_initializers import ReconcileInitializers
from graphpass.passes.remove_unused import RemoveUnused


class Tunable(graphpass.AnalysisPass):
    name = "tunable"
    description = "has one option of each kind"

    @dataclass
    class Options:
        enabled: bool = True
        limit: int = 3
        ratio: float = 0.5
        label: str = "x"
        mode: Literal["fast", "slow"] = "fast"
        names: list[str] = field(default_factory=list)
        cap: int | None = None
        folder: Path | None = None
        table: dict[str, int] = field(default_factory=dict)

    def run(self, model: graphpass.Model, context: graphpass.PassContext) -> graphpass.PassResult:
        return graphpass.PassResult()


@pytest.mark.parametrize(("option", "value", "shown", "hint"), [
    ("enabled", "no", '"no"', "write true or false"),
    ("enabled", "off", '"off"', "write true or false"),
    ("enabled", "true", '"true"', "write true or false without quotes"),
    ("enabled", 0, "0", "write true or false"),
    ("enabled", 1.0, "1.0", "write true or false"),
    ("limit", 3.0, "3.0", "write 3"),
    ("limit", "3", '"3"', "without quotes"),
    ("limit", True, "true", "a whole number"),
    ("ratio", "0.5", '"0.5"', "without quotes"),
    ("ratio", False, "false", "a number"),
    ("label", 7, "7", "in quotes"),
    ("mode", "quick", '"quick"', 'one of "fast", "slow"'),
    ("names", "a", '"a"', 'a list in brackets, e.g. ["a"]'),
    ("names", ["a", 2], '["a", 2]', "item 2"),
    ("cap", "none", '"none"', "leave the option out"),
    ("table", {"a": "1"}, '{ a = "1" }', "without quotes"),
])
def test_values_that_only_look_right_are_refused(option: str, value: Any, shown: str,
                                                 hint: str) -> None:
    with pytest.raises(PipelineError) as caught:
        Tunable({option: value})
    error = caught.value
    assert f"option {option!r} of pass 'tunable'" in error.message
    assert f"got {shown}" in error.message
    assert error.hint is not None and hint in error.hint
    assert "Input should" not in str(error)  # pydantic's wording is not ours


@pytest.mark.parametrize(("option", "value", "kept"), [
    ("enabled", False, False),
    ("limit", 8, 8),
    ("ratio", 2, 2.0),  # TOML's 2 is a fine number
    ("names", ["a", "b"], ["a", "b"]),
    ("names", ("a",), ["a"]),  # a tuple from Python is a list
    ("cap", None, None),
    ("cap", 4, 4),
    ("folder", "data", Path("data")),
    ("mode", "slow", "slow"),
    ("table", {"a": 1}, {"a": 1}),
])
def test_values_of_the_right_type_are_taken(option: str, value: Any, kept: Any) -> None:
    options = Tunable({option: value}).options
    assert getattr(options, option) == kept
    assert type(getattr(options, option)) is type(kept)


def test_the_pipeline_file_error_shows_the_toml_value_at_its_line(tmp_path: Path) -> None:
    from graphpass.framework import load_pipeline_file

    registry = Registry()
    registry.add("passes", "tunable", Tunable, "tests")
    path = tmp_path / "p.toml"
    path.write_text('[pipeline]\npasses = ["tunable"]\n\n[passes.tunable]\nenabled = "no"\n')
    with pytest.raises(ConfigError) as caught:
        load_pipeline_file(path).check(registry)
    text = str(caught.value)
    assert "p.toml:5" in text and "passes.tunable.enabled" in text
    assert 'must be true or false, got "no"' in text


def test_builtin_bool_options_refuse_off_from_the_command_line(cli, tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    code, _, stderr = cli("run", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-p",
                          "remove-unused", "-O", "remove-unused.functions=off")
    assert code == 2
    assert "option 'functions' of pass 'remove-unused' must be true or false, got \"off\"" in (
        stderr)
    assert not (tmp_path / "o.onnx").exists()


# ======================================================== keyword arguments
def test_a_pass_takes_its_options_as_keywords() -> None:
    assert RemoveUnused(functions=False).options.functions is False
    assert InlineFunctions(max_depth=3, exclude=["lib::F"]).options.max_depth == 3
    assert ReconcileInitializers(strict=True).options.strict is True
    tunable = Tunable({"limit": 4}, ratio=0.25)  # a mapping and keywords together
    assert (tunable.options.limit, tunable.options.ratio) == (4, 0.25)
    with pytest.raises(PipelineError, match="has no option 'limt'") as caught:
        Tunable(limt=4)
    assert caught.value.hint == "did you mean 'limit'?"
    with pytest.raises(PipelineError, match="must be true or false"):
        RemoveUnused(functions="no")


def test_keyword_options_plan_and_run() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]),
                               helper.make_node("Neg", ["x"], ["dead"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = graphpass.Model.from_proto(helper.make_model(graph))
    kept = graphpass.PassManager([RemoveUnused(nodes=False)]).run(model)
    assert len(kept.model.graph) == 2
    removed = graphpass.PassManager([RemoveUnused(nodes=True)]).run(model)
    assert len(removed.model.graph) == 1


@pytest.mark.parametrize("value", ["yes", "no", "off", 1, 0, 1.0])
def test_the_bool_hint_speaks_of_quotes_only_for_a_quoted_true_or_false(value: Any) -> None:
    """``-O pass.flag=yes`` and ``flag = 1`` have no quotes to take away."""
    with pytest.raises(PipelineError) as caught:
        Tunable({"enabled": value})
    hint = caught.value.hint or ""
    assert "true or false" in hint
    assert "quotes" not in hint


def test_python_callers_are_told_python_names() -> None:
    with pytest.raises(PipelineError) as caught:
        InlineFunctions(max_dept=3)
    assert caught.value.hint == "did you mean 'max_depth'?"
    with pytest.raises(PipelineError) as caught:
        InlineFunctions(max_depth="3")
    assert "option 'max_depth' of pass 'inline-functions'" in caught.value.message
    with pytest.raises(PipelineError) as caught:
        InlineFunctions(only=[], bogus=1)
    assert "max_depth" in (caught.value.hint or "")
    # Written the way a pipeline file writes them, they are answered the same way.
    with pytest.raises(PipelineError) as caught:
        InlineFunctions({"max-dept": 3})
    assert caught.value.hint == "did you mean 'max-depth'?"
    with pytest.raises(PipelineError) as caught:
        InlineFunctions({"max-depth": "3"})
    assert "option 'max-depth' of pass 'inline-functions'" in caught.value.message
