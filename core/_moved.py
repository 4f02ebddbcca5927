"""Old import paths: modules that moved in 0.2 keep working until 0.3, with a warning.

``import graphpass.pass_base`` (or any old path in :data:`MOVED`) gives a module that
forwards every name to the new module(s), so ``from graphpass.pass_base import Pass``
is the same class as ``graphpass.framework.pass_base.Pass``; the first name taken
from it raises a :class:`DeprecationWarning` that names the new path.

The finder is registered by ``graphpass/__init__.py``. ``graphpass.validate`` is
also the name of a public function of ``graphpass``; an old module loaded on demand
would replace that function (the import system sets a module on its parent package),
so that one is put in ``sys.modules`` up front instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["MOVED", "REMOVED_IN", "install"]

REMOVED_IN = "0.3"
"""The release in which the old paths go away."""

MOVED: dict[str, tuple[str, ...]] = {
    "graphpass.checking": ("graphpass.files.checking",),
    "graphpass.config": ("graphpass.framework.config",),
    "graphpass.gradients": ("graphpass.training.gradient_rules",),
    "graphpass.instruments": ("graphpass.framework.instruments",),
    "graphpass.listings": ("graphpass.reporting.listings",),
    "graphpass.manager": ("graphpass.framework.manager",),
    "graphpass.pass_base": ("graphpass.framework.pass_base",),
    "graphpass.pipeline": ("graphpass.framework.pipeline",),
    "graphpass.planning": ("graphpass.framework.planning",),
    "graphpass.plugins.hookspecs": ("graphpass.framework.hookspecs",),
    "graphpass.plugins.manager": ("graphpass.framework.plugin_loading",),
    "graphpass.progress": ("graphpass.reporting.progress",),
    "graphpass.proto": ("graphpass.ir.proto",),
    # default_registry and reset_default_registry moved to plugin loading.
    "graphpass.registry": ("graphpass.framework.registry", "graphpass.framework.plugin_loading"),
    "graphpass.render": ("graphpass.reporting.render",),
    "graphpass.results": ("graphpass.framework.results",),
    "graphpass.summary": ("graphpass.reporting.summary",),
    "graphpass.torch_export": ("graphpass.torch.export_record",),
    "graphpass.validate": ("graphpass.files.validate",),
    "graphpass.value_types": ("graphpass.training.value_types",),
    "graphpass.verify": ("graphpass.framework.verify",),
}
"""Old module path -> the new module(s) its names are in (looked up in order)."""

_UP_FRONT = ("graphpass.validate",)


class _MovedModule(types.ModuleType):
    """An old import path: every name is looked up in the new modules."""

    def __init__(self, name: str, targets: Sequence[str]):
        super().__init__(name, f"Moved to {' and '.join(targets)}; removed in {REMOVED_IN}.")
        self._graphpass_targets = tuple(targets)
        self._graphpass_warned = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__all__":
            raise AttributeError(name)
        if not self._graphpass_warned:
            self._graphpass_warned = True
            warnings.warn(
                f"{self.__name__} is deprecated and goes away in graphpass {REMOVED_IN}: "
                f"import from {' or '.join(self._graphpass_targets)}",
                DeprecationWarning, stacklevel=2)
        modules = [importlib.import_module(target) for target in self._graphpass_targets]
        if name == "__all__":
            return [n for module in modules for n in getattr(module, "__all__", ())]
        for module in modules:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} "
                             f"(it moved to {' or '.join(self._graphpass_targets)})")

    def __dir__(self) -> list[str]:
        return sorted({n for target in self._graphpass_targets
                       for n in dir(importlib.import_module(target))})


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths in :data:`MOVED` and loads each as a :class:`_MovedModule`."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _MovedModule(spec.name, MOVED[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module forwards what is asked of it."""


def install() -> None:
    """Make the old paths importable (once, however often graphpass is imported)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
    for name in _UP_FRONT:
        sys.modules.setdefault(name, _MovedModule(name, MOVED[name]))
