"""The first hour: the README's and the quickstart's commands, typed as a user types them.

Each command runs as a new user runs it: the installed ``graphpass`` program, in a
folder holding a copy of ``examples/`` (so that the quickstart's ``examples/...`` paths
work and whatever a command writes stays in the folder), with the README's placeholders
(``MODEL``, ``OUT``, ``models/``) replaced by the bundled examples. The tests check what
each prints, its exit code and what it writes. The commands are read from the README and
from docs/quickstart.md: a command added there and not here fails
``test_every_command_of_the_readme_and_the_quickstart_is_tried``.

Also here, the small things a newcomer saw: the command table of docs/cli.md, and that
``--version`` and ``--help`` start without importing onnx, numpy or onnxruntime
(benchmarks/startup.py measures the times).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GRAPHPASS = Path(sys.executable).parent / "graphpass"

# The README's commands, with the bundled example each placeholder stands for.
README_COMMANDS: dict[str, str] = {
    "graphpass run MODEL -o OUT -p train-ready --checkpoint model.safetensors":
        "graphpass run examples/stories/checkpoint/model.onnx -o ready.onnx -p train-ready "
        "--checkpoint examples/stories/checkpoint/full_state.safetensors",
    "graphpass lint MODEL -p lint-gradients":
        "graphpass lint examples/tiny_classifier.onnx -p lint-gradients",
    "graphpass train MODEL --data batch.npz --steps 10 --save trained.onnx":
        "graphpass train examples/stories/functions/model.onnx --data "
        "examples/stories/functions/batch.npz --steps 10 --save trained.onnx",
    "graphpass lint models/ -j 2 --format sarif --report lint.sarif":
        "graphpass lint examples/ -j 2 --format sarif --report lint.sarif",
}


def _commands(markdown: Path, heading: str | None = None) -> list[str]:
    """The ``graphpass`` command lines of the bash blocks (below ``heading``, if given)."""
    text = markdown.read_text()
    if heading is not None:
        text = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command.startswith("graphpass "):
                lines.append(command)
    return lines


def _quickstart() -> list[str]:
    return _commands(REPO / "docs" / "quickstart.md", "## First commands")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder: a copy of the bundled examples."""
    here = tmp_path_factory.mktemp("first-hour")
    shutil.copytree(REPO / "examples", here / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return here


def _type(folder: Path, line: str) -> tuple[int, str]:
    """Run a command line as typed in ``folder``; the exit code and what it printed."""
    argv = shlex.split(line)
    assert argv[0] == "graphpass"
    done = subprocess.run([str(GRAPHPASS), *argv[1:]], cwd=folder, capture_output=True,
                          text=True, check=False, timeout=300, env={
                              "PATH": "/usr/bin:/bin", "COLUMNS": "120", "HOME": str(folder)})
    return done.returncode, done.stdout + done.stderr


def _words(text: str) -> str:
    return " ".join(text.split())


def _written(folder: Path) -> set[str]:
    # HOME is the folder: onnxruntime keeps its device id in $HOME/.cache on first use,
    # whichever test runs first there.
    return {p.name for p in folder.iterdir() if p.name not in ("examples", ".cache")}


def test_every_command_of_the_readme_and_the_quickstart_is_tried() -> None:
    assert sorted(_commands(REPO / "README.md")) == sorted(README_COMMANDS)
    assert _quickstart() == [
        "graphpass inspect examples/tiny_classifier.onnx",
        "graphpass passes",
        "graphpass lint examples/tiny_classifier.onnx -p lint-gradients",
        "graphpass run examples/tiny_classifier.onnx -o /tmp/inlined.onnx -p inline-functions",
        "graphpass plan -p train-ready",
    ]


# ============================================================ the quickstart
def test_quickstart_inspect(folder: Path) -> None:
    code, out = _type(folder, _quickstart()[0])
    assert code == 0, out
    assert out.startswith("examples/tiny_classifier.onnx\n")
    assert "11 nodes: 6 in the main graph, 2 in subgraphs, 3 in functions" in out
    assert "features  FLOAT  [batch, 8]" in out


def test_quickstart_passes_lists_every_pass_and_the_presets(folder: Path) -> None:
    code, out = _type(folder, _quickstart()[1])
    assert code == 0, out
    for name in ("inline-functions", "reconcile-initializers", "detect-missing-buffers",
                 "lint-gradients", "fix-training-ops", "check", "train-ready"):
        assert re.search(rf"^{re.escape(name)}\s", out, re.M), name


def test_quickstart_lint_names_the_functions_and_how_to_inline_them(folder: Path) -> None:
    code, out = _type(folder, _quickstart()[2])
    assert code == 1, out  # error findings, as the quickstart says
    assert out.count("GP410") == 2 and "GP401" in out
    assert "run `inline-functions` before `lint-gradients`" in _words(out)
    assert out.rstrip().endswith("3 errors, 0 warnings, 0 info from 1 pass in "
                                 + out.rstrip().rsplit(" in ", 1)[1])
    assert _written(folder) <= {"ready.onnx", "trained.onnx", "lint.sarif"}  # lint writes nothing


def test_quickstart_run_inlines_and_writes(folder: Path, tmp_path: Path) -> None:
    line = _quickstart()[3].replace("/tmp/inlined.onnx", str(tmp_path / "inlined.onnx"))
    code, out = _type(folder, line)
    assert code == 0, out
    assert out.rstrip().endswith(f"; wrote {tmp_path / 'inlined.onnx'}")
    import graphpass

    inlined = graphpass.load(tmp_path / "inlined.onnx")
    assert not inlined.functions
    # The advice of the lint above, followed: no more GP410.
    code, out = _type(folder, f"graphpass lint {tmp_path / 'inlined.onnx'} -p lint-gradients")
    assert "GP410" not in out


def test_quickstart_plan_shows_train_ready_in_order(folder: Path) -> None:
    code, out = _type(folder, _quickstart()[4])
    assert code == 0, out
    order = re.findall(r"^\d+\s+(\S+)", out, re.M)
    assert order[0] == "inline-functions" and "lint-gradients" in order
    assert order.index("fix-training-ops") < order.index("lint-gradients")
    assert "reconcile-initializers" not in order  # only with a checkpoint


# ================================================================= the README
def test_readme_run_train_ready_with_a_checkpoint(folder: Path) -> None:
    code, out = _type(folder, README_COMMANDS[
        "graphpass run MODEL -o OUT -p train-ready --checkpoint model.safetensors"])
    assert code == 0, out
    assert out.rstrip().endswith("; wrote ready.onnx")
    assert "0 errors" in out.splitlines()[-1]
    assert (folder / "ready.onnx").exists()


def test_readme_lint_gradients(folder: Path) -> None:
    code, out = _type(folder, README_COMMANDS["graphpass lint MODEL -p lint-gradients"])
    assert code == 1 and "GP410" in out


def test_readme_train_prints_the_loss_and_saves_one_file(folder: Path) -> None:
    before = _written(folder)
    code, out = _type(folder, README_COMMANDS[
        "graphpass train MODEL --data batch.npz --steps 10 --save trained.onnx"])
    assert code == 0, out
    losses = [float(line.rsplit(" ", 1)[1]) for line in out.splitlines()
              if line.startswith("step ")]
    assert len(losses) == 10 and losses[-1] < losses[0]
    assert "wrote the model with the trained weights: trained.onnx" in out
    assert _written(folder) - before == {"trained.onnx"}  # and no side file


def test_readme_lint_many_models_to_a_sarif_report(folder: Path) -> None:
    code, out = _type(folder, README_COMMANDS[
        "graphpass lint models/ -j 2 --format sarif --report lint.sarif"])
    # The console gets the totals and where the report went (it printed nothing before).
    assert code == 1
    assert out == ("3 models: 2 ok, 1 with errors; 1 error, 0 warnings, 0 info in all; "
                   "report written to lint.sarif\n")
    sarif = json.loads((folder / "lint.sarif").read_text())
    (result,) = sarif["runs"][0]["results"]
    # The checkpoint story's model was exported without its weights: said in our words.
    assert result["ruleId"] == "GP501"
    assert "'embed.weight'" in result["message"]["text"]
    assert "nothing defines" in result["message"]["text"]
    assert "topologically sorted" not in result["message"]["text"]


# ======================================================= small things
def test_the_cli_page_lists_every_command() -> None:
    code, out = _type(REPO, "graphpass --help")
    assert code == 0
    names = re.findall(r"^    (\w+)\s{2,}\S", out.split("\ncommands:\n", 1)[1], re.M)
    assert len(names) >= 6, out
    page = (REPO / "docs" / "cli.md").read_text()
    table = page.split("\n## ", 1)[0]
    listed = re.findall(r"^\| `graphpass (\w+)", table, re.M)
    assert sorted(listed) == sorted(names)
    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
    assert f"`graphpass` has {words[len(names)]} commands" in table


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_neither_onnx_nor_numpy(flag: str) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "graphpass", flag],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("graphpass " if flag == "--version" else "usage: graphpass")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "graphpass" in imported  # the measurement works
    assert not imported & {"onnx", "numpy", "onnxruntime", "torch"}


@pytest.mark.parametrize("command", [["passes"], ["plan", "-p", "train-ready"]])
def test_passes_and_plan_load_no_trainer_autodiff_or_directory_writer(command: list[str]) -> None:
    """Listing and planning passes needs none of training's machinery (nor onnxruntime):
    ``graphpass.training`` gives its names on first use, ``build-training-graph`` imports
    them when it runs."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "graphpass", *command],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "graphpass.passes.build_training_graph" in imported  # the measurement works
    assert not imported & {"graphpass.training._trainer", "graphpass.training._graphs",
                           "graphpass.training._directory", "onnxruntime", "torch"}


def test_import_graphpass_loads_the_api_on_first_use() -> None:
    code = ("import sys, graphpass; before = 'onnx' in sys.modules; "
            "model = graphpass.load('examples/tiny_classifier.onnx'); "
            "print(before, 'onnx' in sys.modules, type(model).__name__, "
            "'load' in dir(graphpass))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=60)
    assert done.stdout.split() == ["False", "True", "Model", "True"]
