"""Shared fixtures for the graphpass test suite."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLUGIN_PACKAGES = REPO / "tests" / "plugins"

# The test plugins' own tests run in their own pytest (tests/test_testing_plugin.py), with
# the plugin installed; they are not part of this suite.
collect_ignore = ["plugins"]


@pytest.fixture(scope="session")
def ort_training_python() -> str:
    """The Python of the onnxruntime-training venv (built by `make ort-venv`), or skip."""
    candidate = os.environ.get("GRAPHPASS_ORT_TRAINING_PYTHON") or str(
        REPO / ".venv-ort-training" / "bin" / "python")
    if not candidate or not Path(candidate).exists():
        pytest.skip("onnxruntime-training venv not available (make ort-venv could not build it)")
    probe = subprocess.run([candidate, "-c", "import onnxruntime.training.artifacts"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"onnxruntime-training does not import: {probe.stderr.strip()[-300:]}")
    return candidate


@pytest.fixture(scope="session")
def python_exe() -> str:
    """The Python running the tests."""
    return sys.executable


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """Run ``graphpass ARGS`` (``graphpass.cli.main``) in this process, plugins enabled.

    Returns a function of the arguments (anything ``str()`` turns into one) that gives
    the exit code, stdout and stderr.
    """
    from graphpass.cli import main

    monkeypatch.delenv("GRAPHPASS_DISABLE_PLUGINS", raising=False)

    def call(*args: object) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture(scope="session")
def install_plugin(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Install ``tests/plugins/graphpass-NAME-plugin`` with pip, once; return its folder.

    Each package goes into a folder of its own (never into the shared venv: the broken
    ones would break every other test); put that folder on ``sys.path`` (in process) or
    ``PYTHONPATH`` (a subprocess) to use the plugin.
    """
    root = tmp_path_factory.mktemp("plugin-sites")
    # Build with the setuptools of this environment when it has one (offline and fast);
    # otherwise let pip fetch a build backend.
    offline = (["--no-build-isolation", "--no-index"]
               if importlib.util.find_spec("setuptools") is not None else [])
    sites: dict[str, Path] = {}

    def install(name: str) -> Path:
        if name not in sites:
            # Build from a copy: pip builds in the source tree, and test workers run at once.
            source = root / f"src-{name}"
            shutil.copytree(PLUGIN_PACKAGES / f"graphpass-{name}-plugin", source)
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                 "--disable-pip-version-check", *offline, "--target", str(root / name),
                 str(source)], check=True, capture_output=True, text=True)
            sites[name] = root / name
        return sites[name]

    return install


@pytest.fixture
def graphpass_process() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m graphpass ARGS`` in a fresh process, plugins enabled.

    Returns a function of the arguments (anything ``str()`` turns into one) and the
    keywords ``cwd``, ``sites`` (folders put on ``PYTHONPATH``, such as those of
    :func:`install_plugin`), ``python`` (another interpreter) and ``timeout``; it gives
    the finished process (text output, never raising on an exit code).
    """

    def run(*args: object, cwd: Path | None = None, sites: Sequence[Path] = (),
            python: str = sys.executable,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "GRAPHPASS_DISABLE_PLUGINS"}
        if sites:
            env["PYTHONPATH"] = os.pathsep.join(str(site) for site in sites)
        return subprocess.run([python, "-m", "graphpass", *(str(a) for a in args)], cwd=cwd,
                              env=env, capture_output=True, text=True, check=False,
                              timeout=timeout)

    return run


@pytest.fixture
def plugins_on_path(install_plugin: Callable[[str], Path],
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Put packages of ``tests/plugins/`` on ``sys.path`` for this test (in process).

    Gives a function of the package names (``"example"`` for
    ``graphpass-example-plugin``) that installs each (once, see :func:`install_plugin`)
    and puts its folder first on ``sys.path``; the default registry is built anew before
    and after the test, so that it sees exactly these plugins.
    """
    from graphpass.framework import reset_default_registry

    monkeypatch.delenv("GRAPHPASS_DISABLE_PLUGINS", raising=False)
    reset_default_registry()

    def put(*names: str) -> None:
        for name in names:
            monkeypatch.syspath_prepend(str(install_plugin(name)))

    yield put
    reset_default_registry()
