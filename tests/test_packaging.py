"""The wheel built from the repository installs into a fresh venv and works there.

``pip wheel --no-deps`` builds it from a copy of the sources (the build leaves nothing
in the work tree); a new venv without the system's or this environment's site-packages
installs it with its dependencies (pip's cache makes that fast); ``graphpass``,
``graphpass.passes`` and ``graphpass.plugins`` import from that venv, and ``graphpass
passes`` lists the built-in plugins' passes, which proves the entry points.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("core", "passes", "plugins", "pyproject.toml", "README.md")

pytestmark = pytest.mark.slow


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GRAPHPASS_DISABLE_PLUGINS")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, text=True, cwd=root)
    (wheel,) = wheels.glob("graphpass-*.whl")
    environment = root / "venv"
    venv.create(environment, with_pip=True, system_site_packages=False)
    python = environment / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                           "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, cwd=root, env=_clean_env(), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return environment


def _run(environment: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(environment / "bin" / arguments[0]), *arguments[1:]],
                          capture_output=True, text=True, cwd=environment, env=_clean_env(),
                          check=False)


def test_the_packages_import_from_the_installed_wheel(installed: Path) -> None:
    done = _run(installed, "python", "-c", (
        "import json, importlib.metadata as m, graphpass, graphpass.passes, graphpass.plugins, "
        "graphpass.plugins.ecosystem\n"
        "print(json.dumps({'files': [graphpass.__file__, graphpass.passes.__file__, "
        "graphpass.plugins.__file__], 'license': m.metadata('graphpass')['License-Expression'],"
        " 'typed': (m.files('graphpass') and any(str(f).endswith('py.typed') "
        "for f in m.files('graphpass')))}))"))
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    site = str(installed / "lib")
    assert all(path.startswith(site) for path in found["files"]), found["files"]
    assert found["license"] == "Apache-2.0"
    assert found["typed"]


def test_graphpass_passes_lists_the_built_in_plugins_passes(installed: Path) -> None:
    done = _run(installed, "graphpass", "passes", "--format", "json")
    assert done.returncode == 0, done.stderr[-3000:]
    by_plugin: dict[str, set[str]] = {}
    for entry in json.loads(done.stdout)["passes"]:
        by_plugin.setdefault(entry["plugin"], set()).add(entry["name"])
    assert {"inline-functions", "reconcile-initializers", "detect-missing-buffers",
            "lint-gradients"} <= by_plugin["builtin"]
    assert {"onnx-ir-common-subexpression-elimination", "onnxscript-optimize",
            "onnxscript-rewrite"} <= by_plugin["ecosystem"]
