"""The recipe on docs/passes/reconcile-initializers.md runs as written, in order.

Python blocks run in one namespace in a scratch folder; ``console`` blocks run the
command line there, and the ``<!-- test: exit N -->`` comment before a block says
which exit code the command must end with (``tests/_docs_runner.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _docs_runner import blocks, run_page

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

PAGE = Path(__file__).resolve().parent.parent / "docs" / "passes" / "reconcile-initializers.md"


def test_the_recipe_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    ran = run_page(PAGE, timeout=300)
    assert {"python": ran.python, "console": ran.console} == {"python": 6, "console": 1}
    assert (tmp_path / "filled.onnx.data").is_file()


def test_the_pipeline_example_is_valid_toml_with_real_options():
    import tomllib

    from graphpass.passes.reconcile_initializers import ReconcileInitializers

    toml = next(block.body for block in blocks(PAGE.read_text()) if block.lang == "toml")
    options = tomllib.loads(toml)["passes"]["reconcile-initializers"]
    checked = ReconcileInitializers(options).options
    assert checked.renames == {"module.embed.weight": "embed.weight"}
    pattern, replacement = next(iter(checked.rules.items()))
    assert re.sub(pattern, replacement, "module.blocks_3.mlp.0.weight") == "blocks.3.mlp.0.weight"
