"""Built-in pipeline presets (placeholder: being written)."""

from __future__ import annotations

from typing import Any

__all__ = ["builtin_pipelines"]


def builtin_pipelines() -> list[Any]:
    """The built-in pipeline presets."""
    return []
