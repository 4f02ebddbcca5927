"""Deciding what to fill, from which key, and how (reconcile-initializers).

Nothing here changes the model: :func:`plan_fills` returns a :class:`Plan` of
fills and the problems that forbid writing anything. Besides plain fills (a
matched key fills its initializer), it puts back what torch's exporter folded, because
filling such a model by name alone runs and gives wrong numbers, and trains copies:

* **folded constants** (:mod:`graphpass.torch.folding` knows them: any selection of the
  source's elements, scalings and offsets, weight norms): the source (and any further
  tensor the recipe reads, a weight norm's magnitude) is filled from its key and the
  constant computed from it again by nodes, so that the parameter trains. Whether the
  checkpoint made the constant stale is decided from the values and reported. A constant
  whose source the checkpoint does not fill (a non-persistent buffer, such as rotary
  frequencies) is right as the export made it and stays. A constant whose source the
  checkpoint fills but whose computation graphpass does not know is refused
  (:attr:`Plan.refusals`), naming the constant and its sources;
* **batch norms fused into convolutions**: separated again into ``Conv`` and
  ``BatchNormalization`` from the checkpoint's conv weight, scale, shift and running
  statistics, so that batch statistics train as in torch;
* **merged initializers**: identical placeholder weights (LayerNorm weights of
  ones) shared by one initializer. A consumer whose FX node reads another,
  vanished placeholder gets its own initializer from that placeholder's key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from graphpass.findings import Finding, Severity
from graphpass.ir import dtype_name
from graphpass.passes._reconcile_names import canonical_forms, ends_with_leaf, leaf
from graphpass.torch import (
    LEGACY_CONSTANT_NAME,
    fx_arguments,
    fx_target,
    is_placeholder_name,
    module_scope,
    unfolded_export_advice,
)
from graphpass.torch.folding import Fold, Folding, FusedBatchNorm, StateValues, Transpose, shape_ops

if TYPE_CHECKING:
    from graphpass.checkpoint import Checkpoint, CheckpointEntry
    from graphpass.ir import Graph, Node
    from graphpass.passes._reconcile_match import Matching
    from graphpass.passes._reconcile_targets import Target

__all__ = ["REFUSED_CODE", "Fill", "Plan", "Unfusion", "checkpoint_state", "plan_fills"]

REFUSED_CODE = "GP211"
"""A folded constant the checkpoint fills the source of, that graphpass cannot compute again."""
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
        fold: For a recomputed fold: what the exporter folded (``replaces`` names it).
        stale: For a recomputed fold or a separated batch norm: whether the checkpoint's
            values give something else than the file held (``None``: not known, the file
            did not hold it).
        read_keys: For a recomputed fold whose recipe reads further state (a weight
            norm's magnitude): their keys, in the recipe's order (each filled by a fill of
            its own).
    """

    name: str
    key: str
    rule: str
    target: str
    replaces: str | None = None
    uses: tuple[tuple[Node, int], ...] = ()
    removes: Node | None = None
    inferred: bool = False
    fold: Fold | None = None
    stale: bool | None = None
    read_keys: tuple[str, ...] = ()

    @property
    def is_plain(self) -> bool:
        """Whether the key fills its own target by name (no recompute, no split)."""
        return self.replaces is None and not self.uses and self.removes is None and \
            self.rule != "fused-batch-norm" and not self.rule.startswith("folded-")


@dataclass
class Plan:
    """What :func:`plan_fills` decided.

    Attributes:
        fills: The fills, plain ones first.
        problems: Reasons the model cannot be filled correctly (nothing is written).
        unmatched: Targets nothing fills.
        unfusions: Batch norms to separate from the convolutions they were fused into.
        kept: Folded constants left as the export made them: the checkpoint fills none of
            their sources (or fills them with the values the file holds).
        refusals: Error findings: folded constants the checkpoint's values would make
            stale, or may, that graphpass cannot compute again.
        folded_slots: Constants the legacy exporter folded whose sources no checkpoint
            tensor was found to give, by name, with why: they are no checkpoint tensor,
            so no rename can fill them.
        advice: How to export the model again without constant folding, in its tool's words.
    """

    fills: list[Fill] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unmatched: list[Target] = field(default_factory=list)
    unfusions: list[Unfusion] = field(default_factory=list)
    kept: list[Fold] = field(default_factory=list)
    refusals: list[Finding] = field(default_factory=list)
    folded_slots: dict[str, str] = field(default_factory=dict)
    advice: str = ""

    def used_keys(self) -> set[str]:
        """Every key some fill reads."""
        return {fill.key for fill in self.fills}


@dataclass
class Unfusion:
    """A batch norm to separate again from the convolution it was fused into.

    Attributes:
        fused: What the exporter fused.
        names: The initializer each source is written to.
        keys: The checkpoint key of each source.
        stale: Whether fusing the checkpoint's values gives other weights than the file's.
    """

    fused: FusedBatchNorm
    names: dict[str, str]
    keys: dict[str, str]
    stale: bool


def checkpoint_state(checkpoint: Checkpoint, matching: Matching) -> tuple[StateValues,
                                                                         dict[str, str]]:
    """The checkpoint's tensors by the names the model gives them, and each name's key.

    A key matched to a model name is known by it; every other key by the name it would
    have in the model (:meth:`Matching.model_names`).
    """
    keys = {name: match.key for name, match in matching.matches.items()}
    for key in checkpoint:
        keys.setdefault(matching.model_names(key)[0], key)
    shapes = {name: (checkpoint[key].shape, checkpoint[key].dtype) for name, key in keys.items()}
    return StateValues(shapes, lambda name: checkpoint[keys[name]].numpy()), keys


def plan_fills(graph: Graph, targets: Sequence[Target], matching: Matching,
               checkpoint: Checkpoint, signature: Mapping[str, str],
               folding: Folding, keys: Mapping[str, str]) -> Plan:
    """Decide every fill; see the module documentation.

    Args:
        graph: The main graph.
        targets: The names the checkpoint can fill.
        matching: Keys matched to target names and to the exporter's vanished names.
        checkpoint: The checkpoint.
        signature: The exporter's placeholder names and the names they stand for.
        folding: What the exporter folded (found with the checkpoint's values).
        keys: The key of every model name the checkpoint has (:func:`checkpoint_state`).
    """
    planner = _Planner(graph, targets, matching, checkpoint, signature, folding, keys)
    planner.plain()
    planner.tied_aliases()
    planner.fused_batch_norms()
    planner.folds()
    planner.merges()
    planner.identity_merges()
    planner.dropped_weights()
    planner.plan.unmatched = [t for t in targets if t.name not in planner.served]
    return planner.plan


class _Planner:
    def __init__(self, graph: Graph, targets: Sequence[Target], matching: Matching,
                 checkpoint: Checkpoint, signature: Mapping[str, str], folding: Folding,
                 keys: Mapping[str, str]):
        self.graph = graph
        self.folding = folding
        self.keys = keys
        self.advice = unfolded_export_advice(graph)
        self.targets = list(targets)
        self.matching = matching
        self.checkpoint = checkpoint
        self.signature = signature
        self.plan = Plan(advice=self.advice)
        self.served: set[str] = set()
        self.real_placeholders = {t.placeholder for t in targets if t.placeholder}
        self.by_name = {t.name: t for t in targets}
        self.placeholder_of = {name: placeholder for placeholder, name in signature.items()}
        self.weight_names = set(signature.values())
        self.served_placeholders: set[str] = set()
        self.plain_fills: dict[str, Fill] = {}
        self.by_scope: dict[str, list[tuple[str, str]]] = {}
        self._scope_counts: dict[str, int] | None = None

    # ---------------------------------------------------------------- plain fills
    def plain(self) -> None:
        for target in self.targets:
            key = self.matching.key_of(target.name)
            if key is None:
                continue
            entry = self.checkpoint[key]
            rule = self.matching.matches[target.name].rule
            problem = _mismatch(target, entry) or self._folded_slot(target, entry, rule)
            if problem:
                self.plan.problems.append(problem)
                continue
            fill = Fill(target.name, key, rule, target.name)
            self.plan.fills.append(fill)
            self.plain_fills[target.name] = fill
            self.served.add(target.name)

    def _folded_slot(self, target: Target, entry: CheckpointEntry, rule: str) -> str | None:
        """Why a rename or rule may not fill a constant the legacy exporter computed.

        Its constant folding names what it computed from parameters (a transposed weight, a
        convolution with a batch norm fused in) ``onnx::<Op>_<N>``: no checkpoint tensor,
        so a key renamed onto it fills the slot with raw values the model does not compute
        with (the fused convolution then silently stops computing the batch norm). A key
        of the file's own values is harmless; an exact name (a checkpoint made from the
        ONNX file) is the file's.
        """
        if rule not in ("rename", "rule") or self.signature or \
                not LEGACY_CONSTANT_NAME.fullmatch(target.name):
            return None
        held = self.graph.initializers.get(target.name)
        if held is not None and tuple(held.shape) == tuple(entry.shape) and \
                np.array_equal(held.numpy(), entry.numpy()):
            return None
        return (f"a {rule} fills {target.name!r} from key {entry.key!r}, but {target.name!r} is "
                "a constant the legacy exporter's constant folding computed from parameters "
                "(a transposed weight, a convolution with the batch norm after it fused in), "
                "not a checkpoint tensor: filled with the key's values the model would compute "
                "something else. Drop the rename; reconcile-initializers computes it again from "
                "the tensors it was computed from when the checkpoint holds them all. Hint: "
                f"{self.advice}")

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

    # ------------------------------------------------------------- folded constants
    def folds(self) -> None:
        """Fill each folded constant's source and compute the constant from it again."""
        used = self.plan.used_keys()
        for fold in self.folding.folds.values():
            if fold.name in self.served:
                continue
            key = self.keys.get(fold.source) if fold.source != fold.name else None
            if key is None and fold.kind is None:
                found = self._scoped_fold(fold, used)
                if found is not None:
                    used.add(found)
                    continue
            if key is None and fold.source == fold.name:
                # A legacy constant of nothing known: unmatched, and no rename can fill it.
                self.plan.folded_slots[fold.name] = fold.problem or "its source is not known"
                continue
            if key is None:
                self.plan.kept.append(fold)
                self.served.add(fold.name)
                continue
            self.served_placeholders.add(self.placeholder_of.get(fold.source, fold.source))
            entry = self.checkpoint[key]
            if fold.recipe is None:
                self._fold_without_recipe(fold, key, entry)
                continue
            constant = self._constant(fold.name)
            source = entry.numpy()
            reads = {name: self.keys.get(name) for name in fold.recipe.reads}
            unfilled = [name for name, read in reads.items() if read is None]
            taken = [name for name in reads if self._taken(name)]
            if unfilled or taken:
                self.plan.problems.append(
                    f"{fold.name!r} was computed at export time as "
                    f"{fold.recipe.describe(fold.source)}, and "
                    + (f"no checkpoint key fills {unfilled[0]!r}" if unfilled else
                       f"the name {taken[0]!r} is taken by another value of the model"))
                continue
            read_keys = tuple(key for key in reads.values() if key is not None)
            try:
                computed = fold.recipe.compute(
                    source, *(self.checkpoint[read].numpy() for read in read_keys))
            except (ValueError, IndexError):
                computed = None
            if computed is None or (constant is not None and computed.shape != constant.shape):
                self.plan.problems.append(
                    f"{fold.name!r} was computed at export time as "
                    f"{fold.recipe.describe(fold.source)}, and key {key!r} "
                    f"({entry.dtype_name}{list(entry.shape)}) does not give its shape"
                    + (f" {list(constant.shape)}" if constant is not None else ""))
                continue
            stale = None if constant is None else not fold.recipe.same_values(computed, constant)
            for name, read in zip(reads, read_keys, strict=True):  # the other tensors it reads
                self.plan.fills.append(Fill(name, read, f"folded-{fold.recipe.kind}", name))
                self.served_placeholders.add(self.placeholder_of.get(name, name))
                used.add(read)
            self._recompute(fold, fold.source, key, stale=stale, inferred=fold.inferred,
                            read_keys=read_keys)
            used.add(key)

    def _constant(self, name: str) -> np.ndarray | None:
        tensor = self.graph.initializers.get(name)
        return tensor.numpy() if tensor is not None else None

    def _fold_without_recipe(self, fold: Fold, key: str, entry: CheckpointEntry) -> None:
        """Keep ``fold`` if the checkpoint gives its source the export's own values; else refuse.

        It does where the file holds the source and the key equals it, and for state torch
        does not train (a buffer: RoPE's ``inv_freq`` folded into its cos and sin tables)
        where the checkpoint is the export's own (:attr:`Folding.checkpoint_is_exported`).
        """
        held = self.graph.initializers.get(fold.source)
        equal = held is not None and fold.source not in self.folding.fused and \
            held.shape == entry.shape and np.array_equal(held.numpy(), entry.numpy())
        untrained = held is None and not fold.is_parameter and \
            self.folding.checkpoint_is_exported
        if equal or untrained:
            self.plan.kept.append(fold)
            self.served.add(fold.name)
            return
        recorded = [name for name in fold.recorded if name != fold.source]
        shown = ", ".join(recorded[:8]) + (f" and {len(recorded) - 8} more"
                                           if len(recorded) > 8 else "")
        self.plan.refusals.append(Finding(
            REFUSED_CODE, Severity.ERROR,
            f"{fold.name!r} was computed at export time from {fold.source!r}"
            + (f" (recorded with {shown})" if recorded else "")
            + f"; the checkpoint fills {fold.source!r} from key {key!r}, and graphpass cannot "
            f"compute {fold.name!r} again from it: {fold.problem}. Filled by name, the model "
            f"would keep the export's values and train a copy",
            value=fold.name, hint=self.advice,
            data={"constant": fold.name, "source": fold.source, "key": key,
                  "recorded": list(fold.recorded)}))
        self.served.add(fold.name)

    def _recompute(self, fold: Fold, source: str, key: str, *, stale: bool | None,
                   inferred: bool, read_keys: tuple[str, ...] = ()) -> None:
        existing = self.plain_fills.get(source)
        if existing is None and fold.kind is None:
            source = self._module_weight(fold, source, key)
        name = source if existing is not None or not self._taken(source) \
            else self._free_name(source)
        kind = fold.recipe.kind if fold.recipe is not None else "transpose"
        self.plan.fills.append(Fill(name, key, f"folded-{kind}", fold.name,
                                    replaces=fold.name, inferred=inferred, fold=fold,
                                    stale=stale, read_keys=read_keys))
        self.served.add(fold.name)

    def _module_weight(self, fold: Fold, source: str, key: str) -> str:
        """The name the export's own module gives a legacy copy's source, else ``source``.

        A legacy export names nodes by module path (``/embed_out/MatMul``): the weight a
        linear layer's ``MatMul`` reads is that module's ``weight`` (``embed_out.weight``),
        whatever the checkpoint calls it (a transformers release that renamed it
        ``lm_head``). The initializer takes the model's name; the key stays the fill's.
        """
        uses = [(node, slot) for node, slot in self.graph.uses(fold.name) if node is not None]
        if not uses or any(node.op_type not in ("MatMul", "Gemm") or slot != 1
                           for node, slot in uses):
            return source
        scopes = {module_scope(node) for node, _ in uses}
        scope = scopes.pop() if len(scopes) == 1 else None
        if scope is None or self._weights_in_scope(scope) != 1:
            # Several weights in one scope: it names no module of the model (the nodes
            # of an inlined function all carry the call's scope, BertLayer's say).
            return source
        named = f"{scope}.weight"
        if named == source or self.keys.get(named, key) != key or self._taken(named):
            return source
        return named

    def _weights_in_scope(self, scope: str) -> int:
        """How many initializers ``MatMul``/``Gemm`` nodes of ``scope`` read as weights."""
        if self._scope_counts is None:
            counts: dict[str, set[str]] = {}
            for node in self.graph:
                if node.op_type in ("MatMul", "Gemm") and len(node.inputs) > 1 \
                        and node.inputs[1] in self.graph.initializers:
                    counts.setdefault(module_scope(node), set()).add(node.inputs[1])
            self._scope_counts = {name: len(found) for name, found in counts.items()}
        return self._scope_counts.get(scope, 0)

    def _scoped_fold(self, fold: Fold, used: set[str]) -> str | None:
        """A legacy copy no value matched: the transpose of its module's one unused key."""
        target = self.by_name.get(fold.name)
        if target is None:
            return None
        uses = [(n, s) for n, s in self.graph.uses(fold.name) if n is not None]
        if not uses or not all(n.op_type == "MatMul" and n.domain in ("", "ai.onnx")
                               and s == 1 for n, s in uses):
            return None
        self._index_scopes(used)
        found = self._scoped_weight(target, uses, used)
        if found is None:
            return None
        source, key = found
        entry = self.checkpoint[key]
        reason = _transpose_problem(self.graph, target, entry, None)
        if reason:
            self.plan.problems.append(
                f"{target.name!r} looks like the transpose of {source!r} (key {key!r}) "
                f"folded at export time, but graphpass cannot check it: {reason}. "
                f"Hint: {self.advice}")
            return key
        guessed = Fold(fold.name, source, None, recipe=Transpose((1, 0)),
                       evidence="the module of its readers owns one unused key of the "
                                "transposed shape")
        self._recompute(guessed, source, key, stale=None, inferred=True)
        return key

    # --------------------------------------------------------- fused batch norms
    def fused_batch_norms(self) -> None:
        """Separate each batch norm the checkpoint fills from the conv it was fused into."""
        for fused in self.folding.fused.values():
            keys = {source: self.keys.get(source) for source in fused.sources}
            missing = [source for source, key in keys.items() if key is None]
            served = [fused.weight, *([fused.bias] if fused.bias else [])]
            if len(missing) == len(keys):
                continue  # nothing of it comes from the checkpoint: restore-parameters says
            for source in fused.sources:
                self.served_placeholders.add(self.placeholder_of.get(source, source))
            self.served.update(served)
            if missing:
                self.plan.refusals.append(Finding(
                    REFUSED_CODE, Severity.ERROR,
                    f"node {fused.node.name!r} is a convolution with the batch norm after it "
                    f"fused in ({fused.weight!r} holds the fused weights); the checkpoint "
                    f"fills {', '.join(repr(s) for s in keys if keys[s])} but has no key for "
                    f"{', '.join(map(repr, missing))}, so the two cannot be separated again "
                    f"(filled with {fused.conv_weight!r} alone, the model would stop computing "
                    "the batch norm)",
                    node=fused.node.name or "Conv", value=fused.weight,
                    hint=f"give a checkpoint that holds {_quoted(missing)} too (a checkpoint "
                         "that holds it under another key: add a rename, checkpoint key = "
                         f"{missing[0]!r}); or {self.advice}",
                    data={"missing": missing, "fused": fused.weight,
                          "bias": fused.bias, "conv_weight": fused.conv_weight}))
                continue
            values = {source: self.checkpoint[key].numpy() for source, key in keys.items()
                      if key is not None}
            stale = not fused.matches(values, self.graph)
            names: dict[str, str] = {}
            for source, key in keys.items():
                assert key is not None
                existing = self.plain_fills.get(source)
                own = source == fused.weight or existing is not None or not self._taken(source)
                names[source] = source if own else self._free_name(source)
                if existing is None:
                    self.plan.fills.append(Fill(names[source], key, "fused-batch-norm",
                                                fused.weight, stale=stale))
                self.served.add(source)
            self.plan.unfusions.append(Unfusion(fused, names, {
                source: key for source, key in keys.items() if key is not None}, stale))

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
                        f"and graphpass cannot tell which. Hint: {self.advice}")
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
                    f"trained weight. Hint: {self.advice}")

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


def _quoted(names: Sequence[str]) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b' and 'c'``."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


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
                return _square_problem(graph, target, entry, node)
    return None


def _square_problem(graph: Graph, target: Target, entry: CheckpointEntry,
                    node: Node) -> str | None:
    """Whether a square constant is the key's transpose (``None``: it is).

    A square ``W.T`` has ``W``'s shape, so the shape ops the folding search knows
    (:func:`~graphpass.torch.folding._search.shape_ops`) give a copy and a transpose. A
    constant the legacy exporter named (``onnx::MatMul_N``) is no copy: the exporter gives a
    tensor it did not change the tensor's own name, so the transpose is the one shape op
    left, whatever the checkpoint's values (a fine-tuned or freshly initialised model).
    Unless its values say otherwise: a constant decisively nearer the key itself than its
    transpose is refused. Without the legacy name, its values must tell: when the
    checkpoint holds weights changed a little since the export (fine-tuning), the constant
    is still far nearer their transpose than the weights themselves. Decisive means four
    times nearer.
    """
    tensor = graph.initializers.get(target.name)
    transposed = plain = None
    if tensor is not None:
        constant = tensor.numpy().astype(np.float64)
        weight = entry.numpy().astype(np.float64)
        transposed = float(np.linalg.norm(constant - weight.T))
        plain = float(np.linalg.norm(constant - weight))
        if transposed <= 0.25 * plain:
            return None
    computed = [op for op in shape_ops(tuple(entry.shape), tuple(entry.shape[::-1]))
                if op.kind != "copy"]
    if LEGACY_CONSTANT_NAME.fullmatch(target.name) and \
            [op.kind for op in computed] == ["transpose"]:
        if plain is None or transposed is None or plain > 0.25 * transposed:
            return None
        return (f"the weight is square and {target.name!r}, a constant the legacy exporter "
                "computed, is decisively nearer the key itself than its transpose")
    return ("the weight is square, so its shape cannot tell a transpose apart, its values are "
            "not decisively nearer the key's transpose than the key, and "
            f"node {node.name!r} does not record an aten.linear reading it")
