"""What ``reconcile-initializers`` filled from a checkpoint: a typed analysis.

Later passes and :func:`graphpass.training._graphs.build_training_graphs` ask for it
instead of reading the pass's ``stats`` or opening the checkpoint again::

    result = graphpass.PassManager(["reconcile-initializers"],
                                   checkpoints=["model.safetensors"]).run(model)
    reconciled = result.analysis(ReconcileResult)
    reconciled.keys["lin.weight"]          # the checkpoint key that filled it
    reconciled.frozen                      # initializers torch does not train (the record)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphpass.checkpoint._checkpoint import Checkpoint
from graphpass.torch import recorded_frozen

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
        frozen: The initializers filled from keys that the checkpoint records as
            parameters torch does not train (``requires_grad=False``; the record
            ``graphpass.torch.save_state`` writes, read by
            :func:`graphpass.torch.recorded_frozen`), in model order; empty when the
            checkpoint has no record. The trainable selection
            (:func:`graphpass.training.rules.trainable_weights`) keeps them fixed
            unless ``trainable`` names weights.
    """

    checkpoint: Checkpoint
    keys: Mapping[str, str]
    unmatched: tuple[str, ...] = ()
    frozen: tuple[str, ...] = ()

    @classmethod
    def of(cls, checkpoint: Checkpoint, keys: Mapping[str, str],
           unmatched: tuple[str, ...] = ()) -> ReconcileResult:
        """The result for ``keys``, with ``frozen`` read from the checkpoint's record.

        Raises:
            CheckpointError: The checkpoint's record is malformed.
        """
        recorded = recorded_frozen(checkpoint.metadata, where=str(checkpoint.path))
        frozen = () if recorded is None else tuple(
            name for name, key in keys.items() if key in recorded)
        return cls(checkpoint, keys, unmatched, frozen)
