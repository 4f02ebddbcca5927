"""The recipes on docs/passes/detect-missing-buffers.md run as written, in order.

Python blocks run in one namespace in a scratch folder; ``console`` blocks run the
command line there, and the ``<!-- test: exit N -->`` comment before a block says
which exit code the command must end with (``tests/_docs_runner.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _docs_runner import Command, blocks, run_page

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

PAGE = Path(__file__).resolve().parent.parent / "docs" / "passes" / "detect-missing-buffers.md"


def test_the_page_has_recipes_to_run():
    kinds = [block.lang for block in blocks(PAGE.read_text())]
    assert kinds.count("python") >= 4
    assert kinds.count("console") >= 2


def test_the_recipes_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)

    def check(command: Command) -> None:
        if command.returncode == 1:
            assert "block.scale" in command.stdout
            assert not (tmp_path / "filled.onnx").exists()

    ran = run_page(PAGE, on_command=check, timeout=300)
    assert ran.python + ran.commands >= 7
