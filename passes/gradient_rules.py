"""Built-in gradient rule sets (placeholder: being written)."""

from __future__ import annotations

from typing import Any

__all__ = ["builtin_rule_sets"]


def builtin_rule_sets() -> list[Any]:
    """The built-in rule sets."""
    return []
