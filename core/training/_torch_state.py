"""Which torch ``state_dict`` keys a trained checkpoint needs, and where each one's value is.

:func:`~graphpass.training._graphs.build_training_graphs` (and so ``build-training-graph``)
records this in the manifest (``torch_state``) so that
:meth:`graphpass.training.Trainer.checkpoint` can write every key that
``model.load_state_dict(..., strict=True)`` asks for:

* every initializer that is torch state (a parameter or a persistent buffer, by the
  export record, or one ``reconcile-initializers`` filled from the checkpoint; without
  a record, as from the legacy exporter, every weight it would train by default and
  every running statistic, trained or frozen), under
  its checkpoint key, and under every other name of the same tensor (``aliases``:
  tied weights);
* with a checkpoint: every other key it has (``num_batches_tracked``, buffers the
  export dropped), passed through as it was, keys spelled as it spells them;
  without one: the ``num_batches_tracked`` of each BatchNorm the export record lists
  (from 0), since the export drops them (without a record: of each ``running_mean``);
* never a non-persistent buffer or a tensor constant (``state_dict()`` has neither).

``num_batches_tracked`` keys of batch normalizations that train with batch statistics
are ``counters``: the trainer adds the steps taken, as torch's ``train()`` mode does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from graphpass.checkpoint import Checkpoint
from graphpass.ir import Graph, Model
from graphpass.torch import (
    INPUT_PERSISTENT,
    LEGACY_CONSTANT_NAME,
    SIGNATURE,
    default_trainable,
    records_state,
    state_kinds,
)
from graphpass.torch.folding import find_ties

__all__ = ["TORCH_EXTRA", "Spelling", "TorchState", "record_torch_state", "torch_aliases",
           "torch_state"]

TORCH_EXTRA: Final = "torch_extra.safetensors"
"""The file of the checkpoint keys no initializer holds (``num_batches_tracked`` ...)."""

COUNTER: Final = "num_batches_tracked"
_SIGNATURE_LINE: Final = re.compile(
    r"^\s*(\w+): (PARAMETER|BUFFER|CONSTANT_TENSOR) target='([^']+)'(.*)$", re.MULTILINE)


@dataclass
class TorchState:
    """The keys of the checkpoint to write (see the module docstring).

    Attributes:
        keys: Every key, in order -> the initializer holding its value, or ``None``
            for a value in ``extra``.
        extra: Values no initializer holds, by key.
        counters: ``num_batches_tracked`` keys the steps advance.
        missing: Keys the export record lists but nothing holds (left out).
    """

    keys: dict[str, str | None] = field(default_factory=dict)
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    counters: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def manifest(self, file: str) -> dict[str, Any]:
        """The manifest entry (``file`` holds :attr:`extra`)."""
        return {"keys": self.keys, "file": file if self.extra else None,
                "counters": self.counters, "missing": self.missing}


class Spelling:
    """Export names as the checkpoint spells them (the prefix reconcile stripped or added)."""

    def __init__(self, torch_names: Mapping[str, str]):
        stripped: Counter[str] = Counter()
        added: Counter[str] = Counter()
        for name, key in torch_names.items():
            if name != key and name.endswith(key) and name[-len(key) - 1:-len(key)] == ".":
                stripped[name[:-len(key)]] += 1
            elif name != key and key.endswith(name):
                added[key[:-len(name)]] += 1
            elif name == key:
                stripped[""] += 1
        self.strip = stripped.most_common(1)[0][0] if stripped else ""
        self.add = added.most_common(1)[0][0] if added and not self.strip else ""

    def __call__(self, name: str) -> str:
        """``name`` as a checkpoint key."""
        if self.strip and name.startswith(self.strip):
            return name[len(self.strip):]
        return self.add + name


def _signature(graph: Graph) -> list[tuple[str, str, str, bool]]:
    """``(placeholder, kind, target, persistent)`` per line of torch.export's signature."""
    text = graph.metadata.get(SIGNATURE, "")
    return [(placeholder, kind, target, "persistent=False" not in rest)
            for placeholder, kind, target, rest in _SIGNATURE_LINE.findall(text)]


def torch_state(graph: Graph, *, torch_names: Mapping[str, str],
                aliases: Mapping[str, Sequence[str]], trainable: Sequence[str],
                carried_statistics: Sequence[str], checkpoints: Sequence[Checkpoint]
                ) -> TorchState:
    """Work out the checkpoint's keys (see the module docstring)."""
    spell = Spelling(torch_names)
    signature = _signature(graph)
    not_state = {target for _, kind, target, persistent in signature
                 if kind == "CONSTANT_TENSOR" or (kind == "BUFFER" and not persistent)}
    not_state_keys = {spell(t) for t in not_state} | not_state
    recorded = records_state(graph)
    kinds = state_kinds(graph)
    chosen = set(trainable) | set(carried_statistics)
    if not recorded:  # frozen weights and running statistics are state_dict() keys too
        weights, left_out = default_trainable(graph)
        chosen.update(weights)
        chosen.update(name for name, kind in left_out.items() if kind == "buffer")
    state = TorchState()
    for name in graph.initializers:
        value = graph.values.get(name)
        if name in not_state or (value is not None
                                 and value.metadata.get(INPUT_PERSISTENT) == "False"):
            continue
        kind = kinds.get(name)
        if name in torch_names:
            if kind == "constant":
                continue
            key = torch_names[name]
        elif recorded:
            if kind not in ("parameter", "buffer"):
                continue
            key = spell(name)
        elif name in chosen and not LEGACY_CONSTANT_NAME.fullmatch(name):
            key = name
        else:
            continue
        if key in not_state_keys:
            continue
        state.keys.setdefault(key, name)
        for alias in aliases.get(name, ()):
            state.keys.setdefault(alias, name)
    if checkpoints:
        for checkpoint in checkpoints:
            for key, entry in checkpoint.items():
                if key in state.keys or key in not_state_keys:
                    continue
                state.keys[key] = None
                state.extra[key] = np.array(entry.numpy())
    else:
        for _, recorded_kind, target, persistent in signature:
            key = spell(target)
            if key in state.keys or not persistent or recorded_kind == "CONSTANT_TENSOR":
                continue
            if recorded_kind == "BUFFER" and target.rsplit(".", 1)[-1] == COUNTER:
                state.keys[key] = None
                state.extra[key] = np.array(0, dtype=np.int64)
            else:
                state.missing.append(key)
        if not recorded:  # the legacy exporter drops the counters too: from 0, as above
            for key in [k for k in state.keys if k.endswith(".running_mean")]:
                counter = key[:-len("running_mean")] + COUNTER
                if counter not in state.keys:
                    state.keys[counter] = None
                    state.extra[counter] = np.array(0, dtype=np.int64)
    by_key = {key: name for key, name in state.keys.items() if name is not None}
    carried = set(carried_statistics)
    for key in state.keys:
        if key.rsplit(".", 1)[-1] != COUNTER or key not in state.extra:
            continue
        module = key[:-len(COUNTER)]
        if by_key.get(f"{module}running_mean") in carried:
            state.counters.append(key)
    return state


def record_torch_state(manifest: dict[str, Any], model: Model,
                       checkpoint: Checkpoint | None) -> dict[str, np.ndarray]:
    """Add ``torch_aliases`` and ``torch_state`` to a training manifest.

    Args:
        manifest: The manifest (``torch_names``, ``trainable``, ``buffers`` set); changed.
        model: The model the training graphs were built from.
        checkpoint: The checkpoint the model was filled from, if any.

    Returns:
        The values of the keys no initializer holds (for :data:`TORCH_EXTRA`; the
        manifest's ``files`` names it when there are any).
    """
    checkpoints = [checkpoint] if checkpoint is not None else []
    aliases = torch_aliases(model, manifest["torch_names"], checkpoints)
    state = torch_state(model.graph, torch_names=manifest["torch_names"], aliases=aliases,
                        trainable=manifest["trainable"],
                        carried_statistics=manifest["buffers"], checkpoints=checkpoints)
    manifest["torch_aliases"] = aliases
    manifest["torch_state"] = state.manifest(TORCH_EXTRA)
    if state.extra:
        manifest["files"]["torch_extra"] = TORCH_EXTRA
    return state.extra


def torch_aliases(model: Model, torch_names: Mapping[str, str],
                  checkpoints: Sequence[Checkpoint]) -> dict[str, list[str]]:
    """Initializer -> every other ``state_dict`` name of the same tensor (tied weights).

    From the checkpoint, keys that share the matched key's storage; from the model, the
    ties :func:`graphpass.torch.folding.find_ties` knows (what ``restore-parameters`` and
    ``reconcile-initializers`` recorded, and torch's export record: GPT-2's
    ``transformer.wte`` reads ``lm_head.weight``).
    """
    graph = model.graph
    spell = Spelling(torch_names)
    ties = find_ties(graph)
    found: dict[str, list[str]] = {}
    for name in graph.initializers:
        names: list[str] = []
        key = torch_names.get(name)
        for checkpoint in checkpoints:
            if key is not None and key in checkpoint:
                names.extend(checkpoint.aliases(key))
        names.extend(spell(alias) for alias in ties.get(name, ()))
        own = key if key is not None else spell(name)
        unique = [n for n in dict.fromkeys(names) if n != own]
        if unique:
            found[name] = unique
    return found
