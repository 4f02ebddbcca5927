"""What ``reconcile-initializers`` filled from a checkpoint: a typed analysis.

Later passes and :func:`graphpass.training._graphs.build_training_graphs` ask for it
instead of reading the pass's ``stats`` or opening the checkpoint again::

    result = graphpass.PassManager(["reconcile-initializers"],
                                   checkpoints=["model.safetensors"]).run(model)
    reconciled = result.analysis(ReconcileResult)
    reconciled.keys["lin.weight"]          # the checkpoint key that filled it
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphpass.checkpoint._checkpoint import Checkpoint

__all__ = ["ReconcileResult"]


@dataclass(frozen=True)
class ReconcileResult:
    """The checkpoint a model was filled from, and which key filled which initializer.

    It stays true while passes do not rename or refill initializers (passes that only
    add or rewire nodes, or remove initializers nothing reads, list it in their
    ``preserves``); an entry for an initializer a later pass removed is simply unused.

    Attributes:
        checkpoint: The checkpoint, opened (several ``--checkpoint`` files: combined).
        keys: Initializer name -> the checkpoint key its value came from.
        unmatched: The model's weights no key filled.
    """

    checkpoint: Checkpoint
    keys: Mapping[str, str]
    unmatched: tuple[str, ...] = ()
