"""The recipes on docs/passes/detect-missing-buffers.md run as written, in order.

Python blocks run in one namespace in a scratch folder; ``console`` blocks run the
command line there, and the ``<!-- test: exit N -->`` comment before a block says
which exit code the command must end with.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

PAGE = Path(__file__).resolve().parent.parent / "docs" / "passes" / "detect-missing-buffers.md"
_BLOCK = re.compile(r"(?:<!-- test: exit (?P<exit>\d+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```",
                    re.DOTALL)


def blocks() -> list[tuple[str, str, int | None]]:
    found = []
    for match in _BLOCK.finditer(PAGE.read_text()):
        exit_code = int(match["exit"]) if match["exit"] is not None else None
        found.append((match["lang"], match["body"], exit_code))
    return found


def test_the_page_has_recipes_to_run():
    kinds = [lang for lang, _, _ in blocks()]
    assert kinds.count("python") >= 4
    assert kinds.count("console") >= 2


def test_the_recipes_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_recipe"}
    ran = 0
    for lang, body, exit_code in blocks():
        if lang == "python":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(body, f"{PAGE.name} block", "exec"), namespace)
            ran += 1
        elif lang == "console":
            assert exit_code is not None, f"say the exit code of: {body}"
            for line in body.splitlines():
                if not line.startswith("$ "):
                    continue
                command = shlex.split(line[2:])
                assert command[0] == "graphpass"
                done = subprocess.run([sys.executable, "-m", "graphpass", *command[1:]],
                                      capture_output=True, text=True, timeout=300, check=False)
                assert done.returncode == exit_code, done.stdout + done.stderr
                if exit_code == 1:
                    assert "block.scale" in done.stdout
                    assert not (tmp_path / "filled.onnx").exists()
                ran += 1
    assert ran >= 7
