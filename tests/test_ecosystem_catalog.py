"""The ecosystem passes' snapshot: what live discovery finds, and no import at start."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing

from graphpass.plugins.ecosystem import _catalog, _onnx_ir, _onnxscript, _snapshot


def test_the_snapshot_is_what_discovery_finds_for_the_installed_versions() -> None:
    assert _catalog.installed_versions() == _snapshot.VERSIONS, (
        "onnx_ir or onnxscript was upgraded: write a new snapshot with "
        "`python -m graphpass.plugins.ecosystem`")
    live = [*_onnx_ir.live_entries(), *_onnxscript.live_entries()]
    assert json.dumps(_snapshot.PASSES, sort_keys=True) == json.dumps(live, sort_keys=True)


def test_classes_built_from_the_snapshot_equal_the_discovered_ones() -> None:
    from_snapshot = _onnx_ir.onnx_ir_passes(_snapshot.PASSES)
    discovered = _onnx_ir.onnx_ir_passes()
    assert [p.name for p in from_snapshot] == [p.name for p in discovered]
    for built, found in zip(from_snapshot, discovered, strict=True):
        assert (built.description, built.analysis, built.__doc__, built.ir_pass_name) == (
            found.description, found.analysis, found.__doc__, found.ir_pass_name)
        assert [(f.name, f.type, f.default) for f in dataclasses.fields(built.Options)] == [
            (f.name, f.type, f.default) for f in dataclasses.fields(found.Options)]
        assert built.Options.__doc__ == found.Options.__doc__
    optimize = _onnxscript.onnxscript_passes(_snapshot.PASSES)[0]
    assert {f.name: f.default for f in dataclasses.fields(optimize.Options)} == {
        f.name: f.default for f in dataclasses.fields(_onnxscript.onnxscript_passes()[0].Options)}


def test_options_of_every_pipeline_type_survive_the_snapshot() -> None:
    options = dataclasses.make_dataclass("Options", [
        ("flag", bool, dataclasses.field(default=True)),
        ("count", int | None, dataclasses.field(default=None)),
        ("names", list[str], dataclasses.field(default_factory=lambda: ["a", "b"])),
        ("mode", typing.Literal["x", "y"], dataclasses.field(default="x")),
    ])
    rebuilt = _catalog.build_options(_catalog.describe_options(options), __name__)
    assert [(f.name, f.type) for f in dataclasses.fields(rebuilt)] == [
        ("flag", bool), ("count", int | None), ("names", list[str]),
        ("mode", typing.Literal["x", "y"])]
    first, second = rebuilt(), rebuilt()
    assert first.names == ["a", "b"] and first.names is not second.names


def test_a_command_starts_without_importing_the_libraries_it_does_not_run() -> None:
    script = (
        "import sys\n"
        "from graphpass.framework._plugin_loading import default_registry\n"
        "registry = default_registry()\n"
        "assert 'onnx-ir-common-subexpression-elimination' in registry.passes\n"
        "assert 'onnxscript-optimize' in registry.passes\n"
        "print(sorted(m for m in ('onnx_ir', 'onnxscript', 'sympy', 'onnxruntime', 'networkx')"
        " if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_other_installed_versions_are_discovered_live(monkeypatch) -> None:
    monkeypatch.setattr(_snapshot, "VERSIONS", {"onnx_ir": "0.0.1", "onnxscript": "0.0.1"})
    assert _catalog.snapshot_entries() is None
    monkeypatch.setattr(_snapshot, "VERSIONS", _catalog.installed_versions())
    assert _catalog.snapshot_entries() == _snapshot.PASSES
