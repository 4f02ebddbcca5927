"""The error of training runs (its own module: the trainer and its helpers raise it)."""

from __future__ import annotations

from graphpass.errors import GraphpassError

__all__ = ["TrainingError"]


class TrainingError(GraphpassError):
    """A training-graph directory cannot be trained: a bad directory, a bad batch, no runtime."""
