"""docs/ci.md runs as written: many models, -j, Dask, the Python API; its CI files are sound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _docs_runner import blocks, run_page

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "ci.md"


def test_the_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    monkeypatch.chdir(tmp_path)
    ran = run_page(PAGE, timeout=300)
    assert ran.commands == 4 and ran.python == 2
    report = json.loads((tmp_path / "lint.json").read_text())
    assert report["schema"] == "graphpass-batch/1" and report["summary"]["models"] == 4
    sarif = json.loads((tmp_path / "lint.sarif").read_text())
    assert len(sarif["runs"][0]["artifacts"]) == 4  # mlp.onnx named twice, counted once
    assert sorted(p.relative_to(tmp_path / "clean").as_posix()
                  for p in (tmp_path / "clean").rglob("*.onnx")) == [
        "calls.onnx", "chain.onnx", "mlp.onnx"]


def _yaml_blocks() -> list[object]:
    yaml = pytest.importorskip("yaml")
    return [yaml.safe_load(b.body) for b in blocks(PAGE.read_text()) if b.lang == "yaml"]


def test_the_workflow_uploads_the_sarif_the_lint_step_writes() -> None:
    workflow = next(b for b in _yaml_blocks() if isinstance(b, dict) and "jobs" in b)
    assert workflow["permissions"]["security-events"] == "write"
    steps = workflow["jobs"]["lint-models"]["steps"]
    lint = next(step for step in steps if "graphpass lint" in step.get("run", ""))
    upload = next(step for step in steps
                  if step.get("uses", "").startswith("github/codeql-action/upload-sarif"))
    words = lint["run"].split()
    assert words[words.index("--format") + 1] == "sarif"
    assert upload["with"]["sarif_file"] == words[words.index("--report") + 1]
    assert "always()" in upload["if"]
    assert steps.index(lint) < steps.index(upload)


def test_the_pre_commit_example_names_the_shipped_hook() -> None:
    yaml = pytest.importorskip("yaml")
    config = next(b for b in _yaml_blocks() if isinstance(b, dict) and "repos" in b)
    (shipped,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert config["repos"][0]["hooks"][0]["id"] == shipped["id"]


def test_the_page_is_in_the_site() -> None:
    assert "ci.md" in (REPO / "mkdocs.yml").read_text()
