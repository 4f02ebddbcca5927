"""Pipeline files: shape checks, semantic checks, and that every error names file:line and key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from graphpass import ConfigError, Pass, PassContext, PassManager, PassResult, Pipeline, RunSpec
from graphpass.framework import Registry, load_pipeline_file, parse_value
from graphpass.ir import Model


class _Tunable(Pass):
    name = "tunable"
    description = "a pass with options"

    @dataclass
    class Options:
        mode: Literal["fast", "exact"] = "fast"
        limit: int = 3
        paths: list[str] = field(default_factory=list)

    def run(self, model: Model, context: PassContext) -> PassResult:
        return PassResult()


class _Other(Pass):
    name = "other"
    description = "another pass"

    def run(self, model: Model, context: PassContext) -> PassResult:
        return PassResult()


def _registry() -> Registry:
    registry = Registry()
    registry.add("passes", "tunable", _Tunable, "builtin")
    registry.add("passes", "other", _Other, "builtin")
    registry.add("pipelines", "both", Pipeline("both", "", ["other", "tunable"]), "builtin")
    return registry


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str, *, check: bool = True) -> ConfigError:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        config = load_pipeline_file(path)
        if check:
            config.check(_registry())
    return caught.value


FULL = """\
# A complete pipeline file.
[pipeline]
description = "everything"
passes = [
    "other",
    "tunable",
]
checkpoints = ["weights/model.safetensors"]

[passes.tunable]
mode = "exact"
limit = 7
paths = ["data/a.bin"]

[plugins]
disable = ["noisy"]
strict = true

[instrument]
verify-each = true
time = true
dump-after = "tunable"
dump-dir = "dumps"
fixed-point = true
max-iterations = 4
disable = ["other"]

[presets.mine]
description = "a preset defined in the file"
passes = ["other", { pass = "tunable", when = "checkpoint", options = { limit = 1 } }]

[presets.mine.options.tunable]
mode = "exact"
"""


def test_a_complete_file_is_read_with_paths_relative_to_it(tmp_path: Path) -> None:
    config = load_pipeline_file(_write(tmp_path, FULL))
    with pytest.raises(ConfigError) as caught:
        RunSpec.from_pipeline(config).check(_registry())  # the run's inputs: checked there
    assert caught.value.where == f"{tmp_path / 'pipeline.toml'}:8"
    assert "no such checkpoint" in str(caught.value)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"")
    RunSpec.from_pipeline(config).check(_registry())
    assert config.passes == ["other", "tunable"]
    assert config.options == {"tunable": {"mode": "exact", "limit": 7, "paths": ["data/a.bin"]}}
    assert config.checkpoints == (tmp_path / "weights/model.safetensors",)
    assert config.disable_plugins == ("noisy",) and config.strict_plugins
    settings = config.instruments
    assert (settings.verify_each, settings.time, settings.fixed_point) == (True, True, True)
    assert settings.dump_after == ("tunable",) and settings.dump_dir == tmp_path / "dumps"
    assert settings.max_iterations == 4 and settings.disable == ("other",)
    preset = config.presets["mine"]
    assert preset.description == "a preset defined in the file"
    assert preset.steps(has_checkpoint=False) == [("other", {})]
    assert preset.steps(has_checkpoint=True) == [("other", {}),
                                                 ("tunable", {"mode": "exact", "limit": 1})]


def test_a_file_drives_the_manager_and_options_resolve_against_its_folder(
        tmp_path: Path) -> None:
    config = load_pipeline_file(_write(tmp_path, FULL))
    seen: list[Path] = []

    class Resolves(_Tunable):
        def run(self, model: Model, context: PassContext) -> PassResult:
            seen.extend(context.resolve_path(p) for p in self.options.paths)
            return PassResult()

    registry = Registry()
    registry.add("passes", "tunable", Resolves, "builtin")
    registry.add("passes", "other", _Other, "builtin")
    manager = PassManager([config.presets["mine"]], config.options,
                          registry=registry, checkpoints=config.checkpoints,
                          base_dir=config.base_dir)
    assert manager.plan_names == ("other", "tunable")
    assert manager.plan[1].instance.options.limit == 7  # the file's [passes.tunable] wins
    from onnx import helper

    graph = helper.make_graph([], "g", [], [])
    manager.run(Model.from_proto(helper.make_model(graph)))
    assert seen == [tmp_path / "data/a.bin"]


@pytest.mark.parametrize(("text", "line", "key", "message"), [
    ('[pipeline]\npasses = ["other", "tunabel"]\n', 2, "pipeline.passes",
     "unknown pass or pipeline 'tunabel'"),
    ('[pipeline]\npasses = [\n  "other",\n  "tunabel",\n]\n', 4, "pipeline.passes",
     "unknown pass or pipeline 'tunabel'"),
    ('[pipeline]\npreset = "bothh"\n', 2, "pipeline.preset", "unknown pass or pipeline"),
    ('[pipeline]\npasses = ["other"]\n\n[passes.tunable]\nlimti = 3\n', 5,
     "passes.tunable.limti", "has no option 'limti'"),
    ('[pipeline]\npasses = ["other"]\n\n[passes.tunable]\nmode = "slow"\n', 5,
     "passes.tunable.mode", 'one of "fast", "exact", got "slow"'),
    ('[pipeline]\npasses = ["other"]\n\n[passes.tunable]\nlimit = "many"\n', 5,
     "passes.tunable.limit", 'must be an integer, got "many"'),
    ('[pipeline]\npasses = ["other"]\n\n[passes.tunabel]\nlimit = 1\n', 4,
     "passes.tunabel", "unknown pass 'tunabel'"),
    ('[instrument]\ndisable = ["othr"]\n', 2, "instrument.disable", "unknown pass 'othr'"),
    ('[presets.x]\npasses = ["other", "nope"]\n', 2, "presets.x.passes",
     "unknown pass 'nope'"),
])
def test_semantic_errors_name_file_line_and_key(tmp_path: Path, text: str, line: int, key: str,
                                                message: str) -> None:
    error = _error(tmp_path, text)
    assert error.where == f"{tmp_path / 'pipeline.toml'}:{line}"
    assert f"key {key}:" in str(error) and message in str(error)
    if "tunabel" in text or "bothh" in text or "othr" in text:
        assert "did you mean" in str(error)


@pytest.mark.parametrize(("text", "line", "key", "message"), [
    ("[pipelin]\npasses = []\n", 1, "pipelin", "unknown table 'pipelin'"),
    ('[pipeline]\npases = ["other"]\n', 2, "pipeline.pases", "unknown key 'pases'"),
    ('[pipeline]\npasses = "other"\n', 2, "pipeline.passes", "must be a list of strings"),
    ('[plugins]\nstrict = "yes"\n', 2, "plugins.strict", "must be true or false"),
    ('[instrument]\nmax-iterations = 0\n', 2, "instrument.max-iterations", "at least 1"),
    ('[instrument]\nverify_each = true\n', 2, "instrument.verify_each", "did you mean"),
    ('[presets.x]\npasses = ["other", { pass = "tunable", when = "sometimes" }]\n', 2,
     "presets.x.passes", "'when' must be"),
    ("passes = 3\n", 1, "passes", "must be a table"),
])
def test_shape_errors_name_file_line_and_key(tmp_path: Path, text: str, line: int, key: str,
                                             message: str) -> None:
    error = _error(tmp_path, text, check=False)
    assert error.where == f"{tmp_path / 'pipeline.toml'}:{line}"
    assert f"key {key}:" in str(error) and message in str(error)


@pytest.mark.parametrize(("text", "where", "message"), [
    ('[pipeline]\npasses = ["a",\n', ":2", "invalid TOML"),
    ('[pipeline]\npasses = ["a"]\n\n[passes.x]\nlimit = = 3\n', ":5:9",
     "invalid TOML in key passes.x.limit"),
    ('[pipeline]\npasses = ["a"]\npasses = ["b"]\n', ":3",
     "key pipeline.passes is defined twice"),
])
def test_syntax_errors_name_file_line_and_column(tmp_path: Path, text: str, where: str,
                                                 message: str) -> None:
    error = _error(tmp_path, text, check=False)
    assert error.where == f"{tmp_path / 'pipeline.toml'}{where}"
    assert message in str(error)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such pipeline file"):
        load_pipeline_file(tmp_path / "absent.toml")
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_pipeline_file(tmp_path / "binary.toml")


def test_parse_value_reads_toml_and_falls_back_to_text() -> None:
    assert parse_value("3") == 3
    assert parse_value("true") is True
    assert parse_value('["a", "b"]') == ["a", "b"]
    assert parse_value("fast") == "fast"
    assert parse_value('"quoted"') == "quoted"
