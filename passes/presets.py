"""Built-in pipeline presets.

``train-ready`` takes a model exported from PyTorch (and optionally the
checkpoint holding its weights) to a model ONNX Runtime training can
differentiate::

    graphpass run model.onnx --checkpoint model.safetensors -p train-ready -o ready.onnx
"""

from __future__ import annotations

from graphpass.pipeline import Pipeline, PipelineStep

__all__ = ["TRAIN_READY", "builtin_pipelines"]

TRAIN_READY = Pipeline(
    name="train-ready",
    description=(
        "Make an exported model trainable: inline local functions, fill weights from the "
        "checkpoint (when one is given), find missing buffers, lint gradients, tidy, check."
    ),
    passes=[
        "inline-functions",
        PipelineStep("reconcile-initializers", when="checkpoint"),
        "detect-missing-buffers",
        "lint-gradients",
        "remove-unused",
        "check",
    ],
)
"""From an exported model (and its checkpoint) to a model ORT training accepts."""


def builtin_pipelines() -> list[Pipeline]:
    """The built-in pipeline presets."""
    return [TRAIN_READY]
