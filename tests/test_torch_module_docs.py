"""The page docs/torch-module.md runs as written."""

from __future__ import annotations

from pathlib import Path

import pytest
from _docs_runner import run_page

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "torch-module.md"


def test_the_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ran = run_page(PAGE, timeout=300)
    assert ran.python == 4
