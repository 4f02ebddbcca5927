"""The recipe on docs/passes/reconcile-initializers.md runs as written, in order.

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

PAGE = Path(__file__).resolve().parent.parent / "docs" / "passes" / "reconcile-initializers.md"
_BLOCK = re.compile(r"(?:<!-- test: exit (?P<exit>\d+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```",
                    re.DOTALL)


def _blocks() -> list[tuple[str, str, int | None]]:
    return [(m["lang"], m["body"], int(m["exit"]) if m["exit"] is not None else None)
            for m in _BLOCK.finditer(PAGE.read_text())]


def test_the_recipe_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_recipe"}
    ran = {"python": 0, "console": 0}
    for lang, body, exit_code in _blocks():
        if lang == "python":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(body, f"{PAGE.name} block", "exec"), namespace)
        elif lang == "console":
            assert exit_code is not None, f"say the exit code of: {body}"
            for line in body.splitlines():
                if line.startswith("$ "):
                    command = shlex.split(line[2:])
                    assert command[0] == "graphpass"
                    done = subprocess.run([sys.executable, "-m", "graphpass", *command[1:]],
                                          capture_output=True, text=True, timeout=300,
                                          check=False)
                    assert done.returncode == exit_code, done.stdout + done.stderr
        else:
            continue
        ran[lang] += 1
    assert ran == {"python": 6, "console": 1}
    assert (tmp_path / "filled.onnx.data").is_file()


def test_the_pipeline_example_is_valid_toml_with_real_options():
    import tomllib

    from graphpass.passes.reconcile_initializers import ReconcileInitializers

    toml = next(body for lang, body, _ in _blocks() if lang == "toml")
    options = tomllib.loads(toml)["passes"]["reconcile-initializers"]
    checked = ReconcileInitializers(options).options
    assert checked.renames == {"module.embed.weight": "embed.weight"}
    pattern, replacement = next(iter(checked.rules.items()))
    assert re.sub(pattern, replacement, "module.blocks_3.mlp.0.weight") == "blocks.3.mlp.0.weight"
