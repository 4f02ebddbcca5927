"""Built-in pipeline presets.

``train-ready`` takes a model exported from PyTorch (and optionally the
checkpoint holding its weights) to a model ONNX Runtime training can
differentiate::

    graphpass run model.onnx --checkpoint model.safetensors -p train-ready -o ready.onnx

``training-graph`` adds graphpass's own training graphs to whatever else is planned
(``--emit-training-graph DIR`` asks for it), and carries what the lint and the builder
share: the lint judges by graphpass's rules, and the builder trains the weights the lint
was told are trainable or frozen.
"""

from __future__ import annotations

from graphpass.framework import Pipeline, PipelineStep

__all__ = ["TRAINING_GRAPH", "TRAIN_READY", "builtin_pipelines"]

TRAIN_READY = Pipeline(
    name="train-ready",
    description=(
        "Make an exported model trainable: inline local functions, fill weights from the "
        "checkpoint (when one is given), find missing buffers, restore the parameters the "
        "exporter folded into copies, rewrite exported operators ORT training cannot "
        "differentiate, lint gradients, tidy, check."
    ),
    passes=[
        "inline-functions",
        PipelineStep("reconcile-initializers", when="checkpoint"),
        "detect-missing-buffers",
        "restore-parameters",
        "fix-training-ops",
        "lint-gradients",
        "remove-unused",
        "check",
    ],
    share=[("lint-gradients.frozen", "restore-parameters.frozen")],
)
"""From an exported model (and its checkpoint) to a model ORT training accepts.

``fix-training-ops`` goes beyond the passes that find problems: ``nn.LayerNorm``
exports as a one-output ``LayerNormalization`` that onnxruntime-training 1.19.2
cannot differentiate, in nearly every transformer; the rewrite computes the same
values (``--verify`` checks it) and lets the model train.

The parameters ``lint-gradients`` is told are frozen (``frozen``) are frozen for
``restore-parameters`` too: one that survives only as an exporter's fold needs no training,
so it is not refused.
"""


TRAINING_GRAPH = Pipeline(
    name="training-graph",
    description=(
        "Write graphpass's own training graphs (build-training-graph; give its directory "
        "option), linting gradients by graphpass's rules and training the weights the lint "
        "was told are trainable or frozen."
    ),
    passes=["build-training-graph"],
    options={"lint-gradients": {"rules": "graphpass"}},
    share=[("lint-gradients.trainable", "build-training-graph.trainable"),
           ("lint-gradients.frozen", "build-training-graph.frozen")],
)
"""Added to a plan for graphpass's training graphs (``--emit-training-graph``).

With it, ``lint-gradients`` (when planned) reports every node ``build-training-graph``
cannot differentiate, and both passes pick the same weights, unless the options say
otherwise.
"""


def builtin_pipelines() -> list[Pipeline]:
    """The built-in pipeline presets."""
    return [TRAIN_READY, TRAINING_GRAPH]
