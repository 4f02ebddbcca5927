"""What a missing tensor is, from what the model says about itself (private).

The evidence, strongest first:

1. torch's own record: ``torch.onnx.export(..., dynamo=True)`` writes
   ``pkg.torch.export.graph_signature.InputSpec.kind`` (``PARAMETER``, ``BUFFER``,
   ``CONSTANT_TENSOR``, ``USER_INPUT``) and ``...InputSpec.persistent`` into the
   ``metadata_props`` of each state tensor's ``value_info`` (or graph input); the
   onnxscript optimizer marks folded constants with ``pkg.onnxscript.optimizer.folded_from``.
2. The traced FX node torch records on each consuming node
   (``pkg.torch.onnx.fx_node``): torch.export names the placeholder of parameter
   ``a.b`` ``%p_a_b``, of a buffer ``%b_a_b``, of a tensor constant ``%c_a_b``. This
   survives ``save(include_initializers=False)``, which drops the ``value_info``.
3. A checkpoint holding the name, exactly or nearly (wrapper prefixes such as
   ``module.`` or ``_orig_mod.``, a base-model prefix such as ``model.``).
4. The name itself: a module path (``block.linear.weight``), a name torch's
   exporters make up for folded constants (``onnx::MatMul_4``, ``val_12``) or for
   tensors created inside ``forward`` (``lifted_tensor_0``, ``block.lifted_tensor_0``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from graphpass.ir import Model
from graphpass.passes._missing_gaps import Gap
from graphpass.torch import (
    FOLDED_FROM,
    INPUT_KIND,
    INPUT_PERSISTENT,
    StateKind,
    fx_placeholders,
    input_spec_kind,
    placeholder_stem,
)

__all__ = [
    "STATE_KINDS",
    "CheckpointMatch",
    "CheckpointNames",
    "Classification",
    "Kind",
    "classify",
    "looks_like_module_path",
]

Kind = Literal[
    "parameter",
    "persistent buffer",
    "non-persistent buffer",
    "buffer",
    "tensor constant",
    "lifted constant",
    "folded constant",
    "checkpoint tensor",
    "module state",
    "data input",
    "unknown",
]
"""What a missing tensor stands for.

``checkpoint tensor``: a checkpoint has it (so it is a ``state_dict`` entry: a
parameter or a persistent buffer); ``module state``: named like module state, kind
unknown; ``data input``: torch says it is a user input.
"""

STATE_KINDS: Final[frozenset[str]] = frozenset({
    "parameter", "persistent buffer", "non-persistent buffer", "buffer", "tensor constant",
    "lifted constant", "checkpoint tensor",
})
"""Kinds that, on a graph input, certainly mean model state."""

_IDENTIFIER: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE_PATH: Final = re.compile(rf"{_IDENTIFIER}(?:\.(?:{_IDENTIFIER}|[0-9]+))*\.{_IDENTIFIER}")
_LIFTED: Final = re.compile(r"(?:lifted_tensor_|_tensor_constant)[0-9]+")
"""The name torch.export gives a tensor made in ``forward`` (the name's last part: one
made in submodule ``block`` is ``block.lifted_tensor_0``)."""
_FOLDED: Final = re.compile(r"onnx::\w+|val_[0-9]+")
_KINDS: Final[Mapping[StateKind, Kind]] = {
    "parameter": "parameter", "buffer": "buffer", "constant": "tensor constant",
    "input": "data input"}
_BUFFERS: Final[Mapping[str, Kind]] = {
    "True": "persistent buffer", "False": "non-persistent buffer"}
_WRAPPERS: Final = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module"})
_LEADING_WRAPPERS: Final = frozenset({"module", "_orig_mod"})


def _is_lifted(name: str) -> bool:
    """Whether ``name`` (its last dotted part) is one torch.export gives lifted tensors."""
    return _LIFTED.fullmatch(name.rpartition(".")[2]) is not None


def looks_like_module_path(name: str) -> bool:
    """Whether ``name`` reads like ``block.linear.weight`` or ``layers.0.bias``."""
    return _MODULE_PATH.fullmatch(name) is not None


@dataclass(frozen=True)
class CheckpointMatch:
    """A checkpoint entry that a missing name matches.

    Attributes:
        checkpoint: The checkpoint (its path as given).
        key: The entry's key there.
        exact: Whether the key is the name itself.
    """

    checkpoint: str
    key: str
    exact: bool


class CheckpointNames:
    """The keys of some checkpoints, indexed for exact and near matches."""

    def __init__(self, checkpoints: Mapping[str, Iterable[str]] | None = None):
        """Index the keys of each checkpoint (by its path or label)."""
        self._exact: dict[str, tuple[str, str]] = {}
        self._near: dict[str, tuple[str, str] | None] = {}
        for checkpoint, keys in (checkpoints or {}).items():
            for key in keys:
                self._exact.setdefault(key, (checkpoint, key))
                parts = _normalized_parts(key)
                for start in range(len(parts) - 1):
                    suffix = ".".join(parts[start:])
                    known = self._near.get(suffix, (checkpoint, key))
                    # A suffix shared by two keys (``linear.weight``) says nothing.
                    self._near[suffix] = known if known == (checkpoint, key) else None

    def __bool__(self) -> bool:
        return bool(self._exact)

    def match(self, name: str) -> CheckpointMatch | None:
        """The checkpoint entry that ``name`` is, or nearly is, or ``None``."""
        if not self._exact:
            return None
        if name in self._exact:
            checkpoint, key = self._exact[name]
            return CheckpointMatch(checkpoint, key, True)
        parts = _normalized_parts(name)
        for start in range(len(parts) - 1):
            found = self._near.get(".".join(parts[start:]))
            if found is not None:
                return CheckpointMatch(found[0], found[1], False)
        return None


def _normalized_parts(name: str) -> list[str]:
    parts = [part for part in name.replace("/", ".").split(".") if part not in _WRAPPERS]
    while len(parts) > 1 and parts[0] in _LEADING_WRAPPERS:
        parts = parts[1:]
    return parts


@dataclass
class Classification:
    """What a missing tensor is, and why we think so.

    Attributes:
        kind: The kind (see :data:`Kind`).
        module: The module path that owns it (``block.linear``); ``""`` when the
            name is not a module path or the tensor belongs to the root module.
        attribute: The attribute name in that module (the whole name otherwise).
        evidence: What the kind was read from, in words.
        checkpoint: A checkpoint entry the name matches, if any.
        strong: Whether the kind comes from the model's own record or a checkpoint
            (rather than from the shape of the name alone).
    """

    kind: Kind
    module: str
    attribute: str
    evidence: list[str] = field(default_factory=list)
    checkpoint: CheckpointMatch | None = None
    strong: bool = False


def classify(gap: Gap, model: Model, checkpoints: CheckpointNames) -> Classification:
    """Decide what the missing tensor ``gap.name`` stands for."""
    name = gap.name
    if looks_like_module_path(name):
        module, _, attribute = name.rpartition(".")
    else:
        module, attribute = "", name
    result = Classification("unknown", module, attribute)
    match = checkpoints.match(name)
    result.checkpoint = match
    if _from_metadata(gap, model, result) or _from_fx_nodes(gap, result):
        result.strong = True
    elif match is not None:
        result.kind = "checkpoint tensor"
        result.strong = True
    elif _is_lifted(name):
        result.kind = "lifted constant"
        result.evidence.append("the name is one torch.export gives tensors made in forward()")
    elif _FOLDED.fullmatch(name):
        result.kind = "folded constant"
        result.evidence.append("the name is one torch's exporters give constants they fold")
    elif module:
        result.kind = "module state"
        result.evidence.append("the name is a module path")
    elif gap.problem == "undefined" and model.producer_name == "pytorch":
        result.kind = "folded constant"
        result.evidence.append("torch wrote the model, and torch names module state by module "
                               "path: this name comes from a traced operation")
    if result.kind == "buffer" and checkpoints and match is None:
        result.kind = "non-persistent buffer"
        result.evidence.append("no checkpoint has it, so it is not in state_dict()")
    if match is not None:
        where = "has it" if match.exact else f"has {match.key!r}"
        result.evidence.append(f"checkpoint {match.checkpoint} {where}")
    return result


def _declared_metadata(gap: Gap, model: Model) -> dict[str, str]:
    scope = gap.function.graph if gap.function is not None else model.graph
    graph = gap.graph if gap.graph is not None else scope
    value = graph.values.get(gap.name) or scope.values.get(gap.name)
    return value.metadata if value is not None else {}


def _from_metadata(gap: Gap, model: Model, result: Classification) -> bool:
    metadata = _declared_metadata(gap, model)
    if FOLDED_FROM in metadata:
        result.kind = "folded constant"
        result.evidence.append("the onnxscript optimizer folded it (pkg.onnxscript.optimizer."
                               "folded_from)")
        return True
    kind = input_spec_kind(metadata)
    if kind is None:
        return False
    persistent = metadata.get(INPUT_PERSISTENT)
    if kind == "buffer":
        result.kind = _BUFFERS.get(persistent or "", "buffer")
    else:
        result.kind = _KINDS[kind]
    if result.kind == "tensor constant" and _is_lifted(gap.name):
        result.kind = "lifted constant"
    detail = f"InputSpec.kind={metadata[INPUT_KIND]}"
    if kind == "buffer":
        detail += f", persistent={persistent}"
    result.evidence.append(f"the model's torch export metadata says {detail}")
    return True


def _from_fx_nodes(gap: Gap, result: Classification) -> bool:
    stem = placeholder_stem(gap.name)
    for consumer in gap.consumers:
        node = consumer.node
        if node is None:
            continue
        placeholder = next((p for p in fx_placeholders(node) if p.stem == stem), None)
        if placeholder is None:
            continue
        result.kind = _KINDS[placeholder.kind]
        if result.kind == "tensor constant" and _is_lifted(gap.name):
            result.kind = "lifted constant"
        result.evidence.append(
            f"node {consumer.node_name!r} was traced from torch.export placeholder "
            f"%{placeholder.name} ({result.kind})")
        return True
    return False
