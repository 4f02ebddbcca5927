"""The example of docs/guarantees.md runs as written and prints what the page says."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from _docs_runner import section_blocks

PAGE = Path(__file__).resolve().parent.parent / "docs" / "guarantees.md"


def test_the_rewrite_example_alternates_the_data_file(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # (the section runs to the next "## " heading: the atomic example below is the second)
    block, _ = section_blocks(PAGE.read_text(), "The model and its data files are replaced as one",
                              "python")
    _prints_what_it_says(block, tmp_path, monkeypatch)


def test_the_atomic_example_replaces_a_folder_whole(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = section_blocks(PAGE.read_text(), "Every other output is replaced whole",
                              "python")
    _prints_what_it_says(block, tmp_path, monkeypatch)


def _prints_what_it_says(block: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "guarantees.md", "exec"), {})
    expected = [line.removeprefix("# ") for line in block.splitlines() if line.startswith("# [")]
    assert printed.getvalue().splitlines() == expected
