"""How messages name IR objects."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphpass.ir._node import Node

__all__ = ["describe_node"]


def describe_node(node: Node) -> str:
    """Name a node in a message: ``'name' (domain::Op)``, or ``<unnamed domain::Op>``."""
    op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
    return f"{node.name!r} ({op})" if node.name else f"<unnamed {op}>"
