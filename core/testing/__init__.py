"""graphpass.testing: what a plugin author tests passes with.

* :func:`plugin_registry`: a registry of graphpass's built-in passes and the plugin under
  test, and nothing else that is installed;
* :mod:`graphpass.testing.models`: small models built in a line each;
* :class:`PassRunner`: runs passes as the pass manager does, and
  :meth:`~PassRunner.assert_preserves_semantics` checks (with onnxruntime, before and
  after every pass) that they do not change what a model computes.

The same comes as pytest fixtures (``graphpass_registry``, ``graphpass_models``,
``graphpass_runner``), from the pytest plugin :mod:`graphpass.testing.pytest_plugin`
that pytest loads wherever graphpass is installed; see ``docs/plugins.md``.
"""

from graphpass.testing import models
from graphpass.testing._runner import PassRunner, plugin_registry

__all__ = ["PassRunner", "models", "plugin_registry"]
