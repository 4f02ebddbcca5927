"""docs/passes/ecosystem.md runs as written, and its table of passes is the registry's.

Python blocks run in one namespace in a scratch folder; the ``toml`` block is saved as
``pipeline.toml`` first (the page says to), and the ``console`` block runs the command
line there (``tests/_docs_runner.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _docs_runner import block_after, run_page

import graphpass
from graphpass.framework import build_registry
from graphpass.reporting._listings import describe_options

PAGE = Path(__file__).resolve().parent.parent / "docs" / "passes" / "ecosystem.md"


def test_the_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pipeline.toml").write_text(block_after(PAGE.read_text(), "## A pipeline",
                                                        "toml"))
    ran = run_page(PAGE, timeout=300)
    assert {"python": ran.python, "console": ran.console} == {"python": 4, "console": 1}
    assert (tmp_path / "optimized.onnx").is_file()


def test_the_pipeline_block_plans_with_its_options() -> None:
    import tomllib

    toml = tomllib.loads(block_after(PAGE.read_text(), "## A pipeline", "toml"))
    manager = graphpass.PassManager(toml["pipeline"]["passes"], options=toml["passes"])
    assert manager.plan_names == ("inline-functions", "onnx-ir-common-subexpression-elimination",
                                  "onnxscript-optimize", "lint-gradients")


def test_every_pass_in_the_table_is_registered_with_the_options_it_shows() -> None:
    registry = build_registry()
    text = PAGE.read_text()
    table = text[text.index("| `onnx-ir-add-default-attributes`"):text.index("\nOptions are")]
    rows = re.findall(r"^\| `(onnx-ir-[a-z-]+)`[^|]*\|\s*([^|]*?)\s*\|$", table, re.MULTILINE)
    assert len(rows) >= 19
    for name, options in rows:
        shown = re.findall(r"`([a-z-]+)` \(([^)]*)\)", options)
        actual = [(o["name"], str(o["default"]).lower()) for o in
                  describe_options(registry.pass_class(name))]
        assert shown == actual, name
