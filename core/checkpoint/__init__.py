"""Checkpoint loading (placeholder: being written)."""

from __future__ import annotations

from typing import Any

__all__ = ["builtin_loaders"]


def builtin_loaders() -> list[Any]:
    """The built-in checkpoint loaders."""
    return []
