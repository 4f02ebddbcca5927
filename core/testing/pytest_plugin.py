"""pytest fixtures for testing graphpass plugins.

pytest loads this module wherever graphpass is installed (the ``pytest11`` entry point
``graphpass``). It is harmless where nobody uses it: it adds fixtures whose names start
with ``graphpass_`` and one ini key, changes nothing about collection, running or
reporting, and imports nothing beyond graphpass itself until a fixture is used.
``pytest -p no:graphpass`` switches it off.

Name the plugin under test in the project's ``pyproject.toml``::

    [tool.pytest.ini_options]
    graphpass_plugin = "example"     # the entry point's name, in the "graphpass" group

Fixtures:

* ``graphpass_plugin_name``: that name (override this session-scoped fixture to set it in
  code instead);
* ``graphpass_registry``: a registry of graphpass's built-in plugin and the plugin under
  test only, loaded strictly (session scope);
* ``graphpass_models``: :mod:`graphpass.testing.models`, small model builders;
* ``graphpass_runner``: a :class:`graphpass.testing.PassRunner` on that registry, with
  ``run`` and ``assert_preserves_semantics``.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from graphpass.framework import Registry
    from graphpass.testing._runner import PassRunner

INI_KEY = "graphpass_plugin"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``graphpass_plugin`` ini key."""
    parser.addini(INI_KEY, "the graphpass plugin under test: its entry-point name in the "
                  "'graphpass' group (used by the graphpass_registry fixture)", default="")


@pytest.fixture(scope="session")
def graphpass_plugin_name(pytestconfig: pytest.Config) -> str:
    """The plugin under test, from the ``graphpass_plugin`` ini key."""
    name = str(pytestconfig.getini(INI_KEY) or "").strip()
    if not name:
        pytest.fail(f'name the graphpass plugin under test: {INI_KEY} = "NAME" under '
                    "[tool.pytest.ini_options] in pyproject.toml (NAME is your entry point "
                    "in the 'graphpass' group), or override the graphpass_plugin_name "
                    "fixture", pytrace=False)
    return name


@pytest.fixture(scope="session")
def graphpass_registry(graphpass_plugin_name: str) -> Registry:
    """A registry of graphpass's built-in plugin and the plugin under test only."""
    from graphpass.testing._runner import plugin_registry

    return plugin_registry(graphpass_plugin_name)


@pytest.fixture(scope="session")
def graphpass_models() -> ModuleType:
    """:mod:`graphpass.testing.models`: small models built in a line each."""
    from graphpass.testing import models

    return models


@pytest.fixture
def graphpass_runner(graphpass_registry: Registry) -> PassRunner:
    """A :class:`~graphpass.testing.PassRunner` over ``graphpass_registry``."""
    from graphpass.testing._runner import PassRunner

    return PassRunner(graphpass_registry)
