"""Deciding what to fill, from which key, and how (reconcile-initializers).

Nothing here changes the model: :func:`plan_fills` returns a :class:`Plan` of
fills and the problems that forbid writing anything. Besides plain fills (a
matched key fills its initializer), it undoes what torch's exporter optimizer did
to placeholder weights, because filling such a model by name alone runs and gives
wrong numbers:

* **folded transposes**: ``val_2 = Transpose(blocks.0.proj.0.weight)`` computed at
  export time. The fold is replayed from the named key (an initializer for the
  weight and a ``Transpose`` node computing ``val_2``), after checking that the
  shapes are transposed and that only ``MatMul`` reads it as its weight. Folds
  without a record (legacy exports, ``include_initializers=False``) are found
  through the consumer's FX node (``aten.linear``) or module scope.
* **merged initializers**: identical placeholder weights (LayerNorm weights of
  ones) shared by one initializer. A consumer whose FX node reads another,
  vanished placeholder gets its own initializer from that placeholder's key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from graphpass.ir import dtype_name
from graphpass.passes._reconcile_names import canonical_forms, ends_with_leaf, leaf
from graphpass.torch.export_record import (
    fx_arguments,
    fx_target,
    is_placeholder_name,
    module_scope,
)

if TYPE_CHECKING:
    from graphpass.checkpoint import Checkpoint, CheckpointEntry
    from graphpass.ir import Graph, Node
    from graphpass.passes._reconcile_match import Matching
    from graphpass.passes._reconcile_targets import Target

__all__ = ["Fill", "Plan", "plan_fills"]

REEXPORT_ADVICE = ("re-export without the optimizer's folding: torch.onnx.export(..., "
                   "dynamo=True, optimize=False), or dynamo=False with "
                   "do_constant_folding=False; or name the key with a rename")
_LINEAR = "aten.linear.default"


@dataclass
class Fill:
    """One initializer the pass writes.

    Attributes:
        name: The initializer to create or replace.
        key: The checkpoint key that fills it.
        rule: How the key was found: a matching level, ``tied-alias``,
            ``folded-transpose`` or ``merged-split``.
        target: The model name this fill serves (the folded value, the merged
            initializer, or ``name`` itself).
        replaces: For a replayed fold: the folded value a new ``Transpose`` of
            ``name`` computes.
        uses: For a split merge: the ``(node, input slot)`` uses that move to ``name``.
        removes: For a split merge of the legacy exporter's kind: the ``Identity`` node
            that computed ``name`` from the shared weight; it is removed.
        inferred: Whether the fill rests on the graph's structure rather than on a
            name or a record (worth a warning).
    """

    name: str
    key: str
    rule: str
    target: str
    replaces: str | None = None
    uses: tuple[tuple[Node, int], ...] = ()
    removes: Node | None = None
    inferred: bool = False

    @property
    def is_plain(self) -> bool:
        """Whether the key fills its own target by name (no replay, no split)."""
        return self.replaces is None and not self.uses and self.removes is None


@dataclass
class Plan:
    """What :func:`plan_fills` decided.

    Attributes:
        fills: The fills, plain ones first.
        problems: Reasons the model cannot be filled correctly (nothing is written).
        unmatched: Targets nothing fills.
    """

    fills: list[Fill] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unmatched: list[Target] = field(default_factory=list)

    def used_keys(self) -> set[str]:
        """Every key some fill reads."""
        return {fill.key for fill in self.fills}


def plan_fills(graph: Graph, targets: Sequence[Target], matching: Matching,
               checkpoint: Checkpoint, signature: Mapping[str, str]) -> Plan:
    """Decide every fill; see the module documentation.

    Args:
        graph: The main graph.
        targets: The names the checkpoint can fill.
        matching: Keys matched to target names and to the exporter's vanished names.
        checkpoint: The checkpoint.
        signature: The exporter's placeholder names and the names they stand for.
    """
    planner = _Planner(graph, targets, matching, checkpoint, signature)
    planner.plain()
    planner.tied_aliases()
    planner.recorded_folds()
    planner.merges()
    planner.identity_merges()
    planner.unrecorded_folds()
    planner.dropped_weights()
    planner.plan.unmatched = [t for t in targets if t.name not in planner.served]
    return planner.plan


class _Planner:
    def __init__(self, graph: Graph, targets: Sequence[Target], matching: Matching,
                 checkpoint: Checkpoint, signature: Mapping[str, str]):
        self.graph = graph
        self.targets = list(targets)
        self.matching = matching
        self.checkpoint = checkpoint
        self.signature = signature
        self.plan = Plan()
        self.served: set[str] = set()
        self.real_placeholders = {t.placeholder for t in targets if t.placeholder}
        self.by_name = {t.name: t for t in targets}
        self.placeholder_of = {name: placeholder for placeholder, name in signature.items()}
        self.weight_names = set(signature.values())
        self.served_placeholders: set[str] = set()
        self.plain_fills: dict[str, Fill] = {}
        self.by_scope: dict[str, list[tuple[str, str]]] = {}

    # ---------------------------------------------------------------- plain fills
    def plain(self) -> None:
        for target in self.targets:
            key = self.matching.key_of(target.name)
            if key is None:
                continue
            entry = self.checkpoint[key]
            problem = _mismatch(target, entry)
            if problem:
                self.plan.problems.append(problem)
                continue
            fill = Fill(target.name, key, self.matching.matches[target.name].rule, target.name)
            self.plan.fills.append(fill)
            self.plain_fills[target.name] = fill
            self.served.add(target.name)

    # -------------------------------------------------------------- tied aliases
    def tied_aliases(self) -> None:
        """Tied weights saved under another of their names.

        torch.export keeps one name for tied parameters (GPT-2's token embedding is
        ``lm_head.weight`` in the export), while checkpoints often keep the other
        (``save_pretrained`` writes ``transformer.wte.weight``). When no key fills a
        weight and a module that reads it owns, under the same attribute name, an
        unused key of the same shape and type, that key is the tied weight: it fills
        the one initializer all readers share, so the tie survives.
        """
        used = self.plan.used_keys()
        for target in self.targets:
            if target.name in self.served or target.folded_from:
                continue
            attribute = leaf(target.name)
            candidates: dict[str, str] = {}
            for node, slot in self.graph.uses(target.name):
                if node is None or slot < 0:
                    continue
                scope = module_scope(node)
                if not scope:
                    continue
                alias = f"{scope}.{attribute}"
                key = self.matching.key_of(alias)
                if alias == target.name or key is None or key in used:
                    continue
                if self.signature and alias not in self.weight_names:
                    continue  # the exporter never saw a weight of that name
                if _mismatch(target, self.checkpoint[key]) is None:
                    candidates[key] = alias
            if len(candidates) > 1:
                self.plan.problems.append(
                    f"no key fills {target.name!r}, and the modules reading it own several "
                    f"unused keys it could be tied to ({', '.join(map(repr, candidates))}); "
                    "say which with a rename (renames = {key = \"" + target.name + "\"})")
                continue
            if candidates:
                key, alias = next(iter(candidates.items()))
                self.plan.fills.append(Fill(target.name, key, "tied-alias", target.name,
                                            inferred=True))
                self.served.add(target.name)
                used.add(key)
                placeholder = self.placeholder_of.get(alias)
                if placeholder is not None:
                    self.served_placeholders.add(placeholder)

    # ------------------------------------------------------------ recorded folds
    def recorded_folds(self) -> None:
        for target in self.targets:
            if target.name in self.served or not target.folded_from:
                continue
            weights = [s for s in target.folded_from if self._is_weight(s)]
            if not weights:
                continue  # a constant folded from constants: right as it is
            if len(target.folded_from) != 1:
                self.plan.problems.append(
                    f"{target.name!r} was computed at export time from the weight"
                    f"{'s' * (len(weights) > 1)} {', '.join(map(repr, weights))} and other "
                    f"values ({', '.join(s for s in target.folded_from if s not in weights)}), "
                    "so it holds placeholder values; graphpass replays only transposes of one "
                    f"weight. Hint: {REEXPORT_ADVICE}")
                continue
            source = target.folded_from[0]
            key = self.matching.key_of(source)
            if key is None:
                continue  # reported as unmatched, with the source named
            entry = self.checkpoint[key]
            placeholder = self.placeholder_of.get(source)
            reason = _transpose_problem(self.graph, target, entry, placeholder)
            if reason:
                self.plan.problems.append(
                    f"{target.name!r} was folded by the exporter's optimizer from {source!r} "
                    f"(key {key!r}), and graphpass cannot replay that fold: {reason}. "
                    f"Hint: {REEXPORT_ADVICE}")
                continue
            self._replay(target, source, key, inferred=False)

    def _is_weight(self, name: str) -> bool:
        """Whether ``name`` is a weight: a state-dict name, or one a checkpoint key fills."""
        return name in self.weight_names or self.matching.key_of(name) is not None

    def _replay(self, target: Target, source: str, key: str, *, inferred: bool) -> None:
        self.served_placeholders.add(self.placeholder_of.get(source, source))
        existing = self.plain_fills.get(source)
        name = source if existing is not None or not self._taken(source) \
            else self._free_name(source)
        self.plan.fills.append(Fill(name, key, "folded-transpose", target.name,
                                    replaces=target.name, inferred=inferred))
        self.served.add(target.name)

    # -------------------------------------------------------------------- merges
    def merges(self) -> None:
        split: dict[str, Fill] = {}
        for fill in list(self.plan.fills):
            if not fill.is_plain:
                continue
            target = self.by_name[fill.name]
            if target.placeholder is None:
                continue
            entry = self.checkpoint[fill.key]
            for node, slot in self.graph.uses(fill.name):
                if node is None or slot < 0:
                    continue
                arguments = fx_arguments(node)
                if not arguments or target.placeholder in arguments:
                    continue
                found = self._merge_candidates(arguments, fill, entry, target.name)
                if not found:
                    continue
                if len(found) > 1:
                    self.plan.problems.append(
                        f"node {node.name!r} reads {fill.name!r}, which the exporter's "
                        "optimizer shared between weights that were identical at export "
                        f"time; it stands for one of {', '.join(repr(n) for n, _ in found)}, "
                        f"and graphpass cannot tell which. Hint: {REEXPORT_ADVICE}")
                    continue
                own_name, own_key = found[0]
                self.served_placeholders.add(self.placeholder_of.get(own_name, own_name))
                if own_name not in split:
                    name = own_name if not self._taken(own_name) \
                        else self._free_name(own_name)
                    split[own_name] = Fill(name, own_key, "merged-split", fill.name)
                    self.plan.fills.append(split[own_name])
                split[own_name].uses += ((node, slot),)

    def _merge_candidates(self, arguments: Sequence[str], fill: Fill, entry: CheckpointEntry,
                          name: str) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for argument in arguments:
            if not is_placeholder_name(argument) or argument in self.real_placeholders:
                continue
            vanished = self.signature.get(argument, argument)
            key = self.matching.key_of(vanished)
            if key is None or key == fill.key or vanished in self.by_name:
                continue
            other = self.checkpoint[key]
            if other.storage == entry.storage:
                continue  # tied weights: the same data, so sharing is right
            if other.shape == entry.shape and other.dtype == entry.dtype:
                found.append((vanished, key))
        if len(found) > 1:
            found = [(n, k) for n, k in found if ends_with_leaf(n, leaf(name))] or found
        return found

    def identity_merges(self) -> None:
        """``b = Identity(a)`` where ``b`` is a weight's own name: the legacy exporter's merge."""
        for node in self.graph:
            if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") \
                    or len(node.inputs) != 1 or len(node.outputs) != 1:
                continue
            shared = self.plain_fills.get(node.inputs[0])
            own = node.outputs[0]
            key = self.matching.key_of(own)
            if shared is None or key is None or own in self.by_name:
                continue
            entry, other = self.checkpoint[shared.key], self.checkpoint[key]
            if key == shared.key or other.storage == entry.storage:
                continue
            if other.shape != entry.shape or other.dtype != entry.dtype:
                self.plan.problems.append(
                    f"{own!r} is computed as Identity({shared.name!r}), but its own key "
                    f"{key!r} is {other.dtype_name}{list(other.shape)} and {shared.name!r} "
                    f"is {entry.dtype_name}{list(entry.shape)}")
                continue
            self.plan.fills.append(Fill(own, key, "merged-split", shared.name, removes=node))
            self.served_placeholders.add(self.placeholder_of.get(own, own))

    # ---------------------------------------------------------- unrecorded folds
    def unrecorded_folds(self) -> None:
        used = self.plan.used_keys()
        self._index_scopes(used)
        for target in self.targets:
            if target.name in self.served or target.folded_from:
                continue
            uses = [(n, s) for n, s in self.graph.uses(target.name) if n is not None]
            if not uses or not all(n.op_type == "MatMul" and n.domain in ("", "ai.onnx")
                                   and s == 1 for n, s in uses):
                continue
            linear = self._linear_weight(uses)
            found = linear or self._scoped_weight(target, uses, used)
            if found is None:
                continue
            source, key = found
            entry = self.checkpoint[key]
            reason = _transpose_problem(self.graph, target, entry, None,
                                        linear_checked=linear is not None)
            if reason:
                self.plan.problems.append(
                    f"{target.name!r} looks like the transpose of {source!r} (key {key!r}) "
                    f"folded at export time, but graphpass cannot check it: {reason}. "
                    f"Hint: {REEXPORT_ADVICE}")
                continue
            self._replay(target, source, key, inferred=True)
            used.add(key)

    def dropped_weights(self) -> None:
        """Weights a node's FX node reads that the exporter's optimizer removed.

        A placeholder value can let the optimizer drop a weight from the computation
        (a zero bias: ``addmm(bias, x, w)`` becomes a ``Gemm`` without bias). Filled
        by name, such a model ignores the trained weight, so it is an error.
        """
        filled = {t.placeholder for t in self.targets if t.placeholder and t.name in self.served}
        reported: set[str] = set()
        for node in self.graph:
            for argument in fx_arguments(node):
                if (not is_placeholder_name(argument) or argument in reported
                        or argument in filled or argument in self.served_placeholders):
                    continue
                name = self.signature.get(argument, argument)
                key = self.matching.key_of(name)
                if key is None or name in self.served:
                    continue
                reported.add(argument)
                self.plan.problems.append(
                    f"node {node.name!r} comes from {fx_target(node) or 'an FX node'} reading "
                    f"the weight {name!r} (key {key!r}), but the exporter's optimizer removed "
                    "that weight from the graph (its placeholder value, such as a zero bias, "
                    "made it look unneeded); filled by name, the model would ignore the "
                    f"trained weight. Hint: {REEXPORT_ADVICE}")

    def _linear_weight(self, uses: Sequence[tuple[Node, int]]) -> tuple[str, str] | None:
        """The weight placeholder of the ``aten.linear`` every use comes from."""
        weights = set()
        for node, _ in uses:
            arguments = fx_arguments(node)
            if fx_target(node) != _LINEAR or len(arguments) < 2:
                return None
            weights.add(arguments[1])
        if len(weights) != 1:
            return None
        placeholder = weights.pop()
        if not is_placeholder_name(placeholder):
            return None
        source = self.signature.get(placeholder, placeholder)
        key = self.matching.key_of(source)
        return (source, key) if key is not None else None

    def _index_scopes(self, used: set[str]) -> None:
        """Index the unused matrix keys by every module path their model names lie under."""
        for key, entry in self.checkpoint.items():
            if key in used or len(entry.shape) != 2:
                continue
            for name in self.matching.model_names(key):
                for form in canonical_forms(name):
                    parts = form.split("_")
                    for end in range(1, len(parts)):
                        self.by_scope.setdefault("_".join(parts[:end]), []).append((name, key))

    def _scoped_weight(self, target: Target, uses: Sequence[tuple[Node, int]],
                       used: set[str]) -> tuple[str, str] | None:
        """The one unused matrix key of the consumers' module whose shape is transposed."""
        scopes = {module_scope(node) for node, _ in uses}
        if len(scopes) != 1 or None in scopes or target.shape is None or len(target.shape) != 2:
            return None
        rows, columns = target.shape
        if not isinstance(rows, int) or not isinstance(columns, int):
            return None
        found: dict[str, str] = {}
        for scope_form in canonical_forms(scopes.pop() or ""):
            for name, key in self.by_scope.get(scope_form, ()):
                entry = self.checkpoint[key]
                if key not in used and entry.shape == (columns, rows) and (
                        target.dtype is None or entry.dtype == target.dtype):
                    found.setdefault(key, name)
        if len(found) != 1:
            return None
        key, name = found.popitem()
        return name, key

    def _taken(self, name: str) -> bool:
        """Whether the graph defines or uses ``name`` (a stale declaration does not count)."""
        return self.graph.is_defined(name) or self.graph.is_used(name)

    def _free_name(self, name: str) -> str:
        candidate, number = f"{name}__reconciled", 1
        while self._taken(candidate):
            number += 1
            candidate = f"{name}__reconciled{number}"
        return candidate


def _mismatch(target: Target, entry: CheckpointEntry) -> str | None:
    shape_ok = target.shape is None or (
        len(target.shape) == len(entry.shape)
        and all(not isinstance(d, int) or d == e for d, e in zip(target.shape, entry.shape,
                                                                 strict=True)))
    dtype_ok = target.dtype is None or target.dtype == entry.dtype
    if shape_ok and dtype_ok:
        return None
    declared = "?" if target.shape is None else list(target.shape)
    model_type = "?" if target.dtype is None else dtype_name(target.dtype)
    return (f"{target.name!r} is {model_type}{declared} in the model, but key {entry.key!r} is "
            f"{entry.dtype_name}{list(entry.shape)} in {str(entry.file)!r} "
            f"({'shape' if not shape_ok else 'element type'} mismatch; graphpass never "
            "reshapes or casts weights)")


def _transpose_problem(graph: Graph, target: Target, entry: CheckpointEntry,
                       placeholder: str | None, *, linear_checked: bool = False) -> str | None:
    """Why ``target`` cannot be filled with the transpose of ``entry`` (``None``: it can)."""
    if len(entry.shape) != 2:
        return f"the key is {entry.dtype_name}{list(entry.shape)}, not a matrix"
    transposed = entry.shape[::-1]
    if target.shape is not None and tuple(target.shape) != transposed:
        return (f"{target.name!r} is {list(target.shape)}, not the transpose of "
                f"{list(entry.shape)}")
    if target.dtype is not None and target.dtype != entry.dtype:
        return f"{target.name!r} is {dtype_name(target.dtype)}, the key {entry.dtype_name}"
    uses = [(node, slot) for node, slot in graph.uses(target.name) if node is not None]
    if not uses:
        return "no node reads it"
    for node, slot in uses:
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or slot != 1:
            return (f"node {node.name!r} ({node.op_type}) reads it at input {slot}, and only a "
                    "MatMul's weight (input 1) is checked")
    if transposed == entry.shape and not linear_checked:
        for node, _ in uses:
            arguments = fx_arguments(node)
            if fx_target(node) != _LINEAR or len(arguments) < 2 or (
                    placeholder is not None and arguments[1] != placeholder):
                return ("the weight is square, so its shape cannot tell a transpose apart, and "
                        f"node {node.name!r} does not record an aten.linear reading it")
    return None
