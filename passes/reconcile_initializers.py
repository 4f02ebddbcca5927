"""The ``reconcile-initializers`` pass: fill a model's weights from a checkpoint.

A model exported with placeholder weights (``torch.onnx.export`` under
``FakeTensorMode``, ``ONNXProgram.save(include_initializers=False)``,
``export_params=False``, ``keep_initializers_as_inputs=True``, or simply a freshly
initialised copy) is filled from a checkpoint whose keys rarely match the
initializer names exactly. Keys are matched level by level (renames, regex rules,
exact, wrapper prefixes, separators, one base-prefix change for the whole
checkpoint), ambiguity is an error, shapes and element types must agree, and what
torch's exporter optimizer did to placeholder weights (folded transposes, merged
identical initializers) is undone rather than silently filled wrong.

Filled initializers reference the checkpoint file (no copies); ``graphpass.save``
streams them into the output's external data file.

What later passes need, they ask for as an analysis,
``context.analysis(graphpass.checkpoint.ReconcileResult)``: the opened checkpoint, the
key that filled each initializer, the weights no key filled. The pass's
:attr:`~graphpass.PassResult.stats`, for reports only::

    {
        "filled": 14,                       # initializers written
        "unmatched": 0,                     # weights no key fills
        "unused keys": 1,
        "matched by": {"exact": 12, "folded-transpose": 2},
        "base prefix": "add 'transformer.'" or None,
        "table": {initializer: {"key": str, "rule": str, "file": str,
                                "computes": [folded values],      # replayed transposes
                                "split_from": str, "nodes": [...]}},  # split merges
        "unmatched initializers": [names],
        "unused checkpoint keys": [keys],
        "tied checkpoint keys": {key: the used key with the same data},
        "checkpoints": [files],
    }
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import onnx

from graphpass.checkpoint import Checkpoint, ReconcileResult, open_checkpoint
from graphpass.errors import CheckpointError, PipelineError
from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import Graph, Model, Node
from graphpass.passes._reconcile_match import Matching, match_names
from graphpass.passes._reconcile_plan import Fill, Plan, checkpoint_state, plan_fills
from graphpass.passes._reconcile_report import CODES, build_report
from graphpass.passes._reconcile_shapes import ShapeCheck, check_undeclared
from graphpass.passes._reconcile_targets import Target, collect_targets
from graphpass.passes._reconcile_verify import BatchNormCheck, FoldCheck, verify
from graphpass.torch import (
    fx_arguments,
    graph_signature,
    is_placeholder_name,
    producer,
    signature_kinds,
)
from graphpass.torch.folding import (
    find_folds,
    find_merged_constants,
    mark_state,
    mark_ties,
    recompute,
    split_merged_constants,
    unfuse,
)

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ReconcileInitializers"]

_SHOWN = 12
_REPLAY_TAG = "graphpass.reconcile-initializers"


class ReconcileInitializers(Pass):
    """Fill the model's weights from a checkpoint, matching names across prefixes and separators.

    Options:
        checkpoints: Checkpoint files or folders (relative to the pipeline file); when
            empty, the run's ``--checkpoint`` paths.
        checkpoint: The same, for one path (the spelling pipeline files often use).
        renames: Explicit choices, checkpoint key -> initializer name (or a list of
            names, for tied weights). Tried first.
        rules: Regex rewrites of checkpoint keys, pattern -> replacement (``re.sub``
            syntax), tried in order; the first whose pattern is found rewrites a key.
        strict: Make a weight no key fills an error (nothing is written).
        keep_inputs: Keep weights that were graph inputs as inputs, with the
            checkpoint's values as defaults.
    """

    name = "reconcile-initializers"
    description = ("Fill the model's weights from a checkpoint, matching names across "
                   "prefixes and separators.")
    preserves_semantics = False
    codes = CODES
    provides = (ReconcileResult,)

    @dataclass
    class Options:
        """Options of ``reconcile-initializers``."""

        checkpoints: list[str] = field(default_factory=list)
        checkpoint: str | None = None
        renames: dict[str, str | list[str]] = field(default_factory=dict)
        rules: dict[str, str] = field(default_factory=dict)
        strict: bool = False
        keep_inputs: bool = False

    def __init__(self, options: Any = None, **option_values: Any):
        """Validate the options and compile the regex rules.

        Args:
            options: The options (an ``Options``, a mapping, or ``None``).
            **option_values: Options as keywords (``strict=True``).

        Raises:
            PipelineError: An option has a wrong type, or a rule is not a valid regex.
        """
        super().__init__(options, **option_values)
        self._rules: list[tuple[re.Pattern[str], str]] = []
        for pattern, replacement in self.options.rules.items():
            try:
                self._rules.append((re.compile(pattern), replacement))
            except re.error as error:
                raise PipelineError(
                    f"rule {pattern!r} of pass {self.name!r} is not a valid regex: {error}",
                    hint="rules are Python regular expressions mapped to re.sub replacements"
                ) from None

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Match, check everything, then fill; raise before changing anything.

        Every check runs before the model changes, except one: weights the model
        never declared (``include_initializers=False``) are checked by shape inference
        after filling (the pass manager runs passes on a copy, so a failed pass never
        changes the caller's model).

        Raises:
            CheckpointError: No checkpoint, an unreadable one, an ambiguous match, a
                shape or element-type mismatch, an exporter fold that cannot be
                replayed, or (with ``strict``) a weight no key fills.
        """
        checkpoint = self._open(context)
        graph = model.graph
        # Constants the optimizer merged by value go back to their readers first (the
        # forward computes the same), so that each is filled from its own parameter.
        split_merged_constants(graph, find_merged_constants(graph))
        signature = graph_signature(graph)
        targets = collect_targets(graph, signature)
        names = [t.name for t in targets] + _vanished_names(graph, targets, signature)
        renames = {key: [value] if isinstance(value, str) else list(value)
                   for key, value in self.options.renames.items()}
        matching = match_names(names, list(checkpoint), renames=renames, rules=self._rules,
                               same_data=lambda a, b: checkpoint[a].storage
                               == checkpoint[b].storage)
        fused = _fused_names(graph, checkpoint, matching, names) if matching.problems and \
            not signature else []
        if fused:  # a rename may name a tensor of a batch norm the legacy exporter fused
            names += fused
            matching = match_names(names, list(checkpoint), renames=renames, rules=self._rules,
                                   same_data=lambda a, b: checkpoint[a].storage
                                   == checkpoint[b].storage)
        _raise_problems("checkpoint keys do not match the model unambiguously",
                        matching.problems, checkpoint,
                        "add renames (checkpoint key = initializer) or regex rules to say "
                        "which key is meant")
        state, keys = checkpoint_state(checkpoint, matching)
        folding = find_folds(graph, checkpoint=state)
        plan = plan_fills(graph, targets, matching, checkpoint, signature, folding, keys)
        undeclared_names = {t.name for t in targets if t.source == "undefined" and t.shape is None}
        _raise_problems("the checkpoint cannot fill this model correctly", plan.problems,
                        checkpoint, None)
        if self.options.strict:
            missing = [t.name for t in plan.unmatched if t.required]
            _raise_problems("strict: some weights have no checkpoint key",
                            [f"no key fills {name!r}" for name in missing], checkpoint,
                            "add renames or rules, or run without strict")
        input_names = graph.input_names
        checks = _apply(graph, plan, targets, checkpoint, keep_inputs=self.options.keep_inputs)
        mark_ties(graph, folding.ties)
        verification = verify(graph, *checks)
        verification.raise_problems(self.name)
        undeclared = {f.name: f.key for f in plan.fills
                      if f.is_plain and f.name in undeclared_names}
        shapes = ShapeCheck()
        if undeclared:  # nothing to compare shapes with: ask every other source of truth
            shapes = check_undeclared(model, undeclared)
            _raise_problems("the checkpoint's shapes do not fit the model where it never "
                            "declared them", shapes.problems,
                            checkpoint, "the checkpoint belongs to another model, or keys "
                                        "matched the wrong weights: add renames")
        findings, stats = build_report(plan, matching, targets, checkpoint, input_names,
                                       keep_inputs=self.options.keep_inputs,
                                       shapes=shapes, verification=verification,
                                       ties=folding.ties, keys=keys,
                                       producer=producer(model.graph))
        reconciled = ReconcileResult.of(
            checkpoint, {name: str(entry["key"]) for name, entry in stats["table"].items()
                         if isinstance(entry, dict) and "key" in entry},
            tuple(stats["unmatched initializers"]))
        return PassResult(changed=bool(plan.fills), findings=findings, stats=stats,
                          analyses=[reconciled])

    def _open(self, context: PassContext) -> Checkpoint:
        paths: list[Path] = [context.resolve_path(p) for p in self.options.checkpoints]
        if self.options.checkpoint:
            paths.append(context.resolve_path(self.options.checkpoint))
        if not paths:
            paths = list(context.checkpoints)
        if not paths:
            raise CheckpointError(
                "no checkpoint given", where=f"pass {self.name}",
                hint="pass --checkpoint PATH on the command line, or set checkpoint = "
                     "\"PATH\" in [passes.reconcile-initializers]")
        registry_loaders = context.registry.loaders()
        parts = [open_checkpoint(path, registry_loaders) for path in paths]
        if len(parts) == 1:
            return parts[0]
        return Checkpoint.combine(parts, path=paths[0], overlap=True)


def _vanished_names(graph: Graph, targets: list[Target], signature: dict[str, str]) -> list[str]:
    """Names the exporter dropped that its records still mention (folds, merges)."""
    real = {t.name for t in targets}
    real_placeholders = {t.placeholder for t in targets if t.placeholder}
    names: dict[str, None] = {}
    for target in targets:
        for source in target.folded_from:
            if source not in real:
                names[source] = None
    for placeholder, name in signature.items():
        if name not in real and placeholder not in real_placeholders:
            names[name] = None
    for node in graph:  # the legacy exporter's merge: own_name = Identity(shared weight)
        if node.op_type == "Identity" and len(node.outputs) == 1 and \
                any(name in real for name in node.inputs):
            names.setdefault(node.outputs[0], None)
    if not signature:  # no record of names: use placeholders met in FX metadata
        for node in graph:
            for argument in fx_arguments(node):
                if is_placeholder_name(argument) and argument not in real_placeholders \
                        and argument not in real:
                    names[argument] = None
    return list(names)


def _fused_names(graph: Graph, checkpoint: Checkpoint, matching: Matching,
                 names: list[str]) -> list[str]:
    """The tensors of the batch norms a legacy export fused in, that ``names`` lacks.

    A legacy export records no name of what its constant folding consumed: the batch norm
    fused into a convolution is found only by the fold search, from the checkpoint's values
    (in part, when the checkpoint lacks some of its tensors). Its tensors are then names a
    rename may fill.
    """
    state, _ = checkpoint_state(checkpoint, matching)
    known = set(names)
    return list(dict.fromkeys(source for fused in find_folds(graph, checkpoint=state).fused
                              .values() for source in fused.sources if source not in known))


def _raise_problems(summary: str, problems: list[str], checkpoint: Checkpoint,
                    hint: str | None) -> None:
    if not problems:
        return
    lines = "\n".join(f"  - {p}" for p in problems[:_SHOWN])
    more = f"\n  ... and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""
    raise CheckpointError(f"{summary}:\n{lines}{more}", where=str(checkpoint.path), hint=hint)


def _apply(graph: Graph, plan: Plan, targets: list[Target], checkpoint: Checkpoint, *,
           keep_inputs: bool) -> tuple[list[FoldCheck], list[BatchNormCheck]]:
    """Write the plan into ``graph``; return the recomputations to check in onnxruntime.

    A recomputed transpose is not run again: the planner compared the checkpoint's
    transposed values with the file's already, and a ``Transpose`` node cannot differ.
    """
    by_name = {t.name: t for t in targets}
    drop = {f.name for f in plan.fills if f.is_plain and by_name[f.name].is_input
            and not keep_inputs}
    drop.update(f.replaces for f in plan.fills if f.replaces and f.replaces in by_name
                and by_name[f.replaces].is_input)
    for name in graph.input_names:  # in order, so that each removal finds its input first
        if name in drop:
            _drop_input(graph, name)
    kinds = signature_kinds(graph)
    placeholders = {name: placeholder for placeholder, name in graph_signature(graph).items()}
    folds: list[FoldCheck] = []
    written: dict[str, str] = {}
    for fill in plan.fills:
        if fill.removes is not None:
            graph.remove(fill.removes, safe=False)
        if written.get(fill.name) != fill.key:
            graph.set_initializer(checkpoint[fill.key].tensor(fill.name))
            written[fill.name] = fill.key
        if fill.fold is not None:
            expected = _expected(graph, fill, checkpoint)
            nodes = _recompute(graph, fill, by_name[fill.fold.name], keep_inputs)
            if expected is not None and fill.fold.recipe is not None:
                folds.append(FoldCheck(fill.fold.name, nodes, expected, fill.fold.recipe.exact))
            if fill.fold.kind is not None:  # torch's record of the source, on the initializer
                mark_state(graph, fill.name, fill.fold.kind, placeholders.get(fill.fold.source))
            for read in fill.fold.recipe.reads if fill.fold.recipe is not None else ():
                if read in kinds:
                    mark_state(graph, read, kinds[read], placeholders.get(read))
        elif fill.uses:
            for node, slot in fill.uses:
                node.set_input(slot, fill.name)
    batch_norms: list[BatchNormCheck] = []
    for unfusion in plan.unfusions:
        fused = unfusion.fused
        # What the separated layers must compute: the fusion of the checkpoint's tensors (the
        # planner compared it with the file's fused weights to decide staleness).
        weight, bias = fused.compute({source: checkpoint[key].numpy()
                                      for source, key in unfusion.keys.items()})
        batch_norm = unfuse(graph, fused, unfusion.names)
        batch_norms.append(BatchNormCheck(fused.node, batch_norm, weight, bias))
        for source, name in unfusion.names.items():
            if source in kinds:  # a dynamo export: torch's record, as the exporter writes it
                mark_state(graph, name, kinds[source], placeholders.get(source))
    return folds, batch_norms


def _expected(graph: Graph, fill: Fill, checkpoint: Checkpoint) -> Any:
    """What the recomputation of ``fill``'s fold must give (``None``: not checked here)."""
    fold = fill.fold
    if fold is None or fold.recipe is None or fold.recipe.kind == "transpose":
        return None
    if fill.stale is False:
        return graph.initializers[fold.name].numpy()
    return fold.recipe.compute(checkpoint[fill.key].numpy(),
                               *(checkpoint[key].numpy() for key in fill.read_keys))


def _recompute(graph: Graph, fill: Fill, folded: Target, keep_inputs: bool) -> list[Node]:
    assert fill.fold is not None
    if folded.is_input and keep_inputs and fill.name not in graph.input_names:
        tensor = graph.initializers[fill.name]
        graph.add_input(onnx.helper.make_tensor_value_info(fill.name, tensor.dtype,
                                                           tensor.shape))
    nodes = recompute(graph, fill.fold, fill.name)
    for node in nodes:
        node.set_metadata(_REPLAY_TAG, f"computes the exporter's folded {fill.fold.name!r} "
                                       f"from {fill.name} (key {fill.key})")
    return nodes


def _drop_input(graph: Graph, name: str) -> None:
    value = graph.value(name)
    keep_declaration = bool(value.metadata or value.doc_string)
    graph.remove_input(name)
    if keep_declaration:  # keep what the exporter recorded about the weight
        graph.add_value_info(value.declaration())
