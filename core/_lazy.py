"""Lazy re-exports (PEP 562): a package's public names, imported on first use.

A package's ``__init__`` names what it re-exports from its private modules and where
each name lives; the module that holds a name is imported when a user first asks the
package for it. So a facade costs nothing at import time that its users do not use:
``import graphpass.torch`` does not import torch, and ``import graphpass.files`` does
not import onnx_ir.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any], exports: Mapping[str, str],
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package that re-exports names lazily.

    Args:
        package: The package's ``__name__`` (for the error message).
        namespace: The package's ``globals()``: a name, once imported, is kept there.
        exports: Each lazy name and the module that defines it.

    Returns:
        The package's ``__getattr__`` and ``__dir__`` (assign both at module level).
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ()), *exports})

    return __getattr__, __dir__
