"""The findings and stats of reconcile-initializers.

Finding codes (stable):

* ``GP200`` info: the summary: how many weights were filled, by which rule; its
  ``data`` holds the whole table.
* ``GP201`` warning: a weight no key fills; it keeps its placeholder value
  (an error instead, before anything is written, with ``strict``).
* ``GP202`` info: checkpoint keys nothing used.
* ``GP203`` warning: no base-prefix change was applied because several matched
  equally many keys.
* ``GP204`` info / warning: constants the exporter folded from weights (transposes,
  row gathers, broadcasts, scalings, copies) are computed again by nodes from their
  sources' keys, so that the parameters train; says which were stale (the checkpoint
  changes their values) and which equal the file's (a warning when the fold was found
  from the graph's structure, not from a record or the values).
* ``GP205`` warning: an initializer the exporter shared between weights that were
  identical at export time was split, each consumer reading its own key.
* ``GP206`` info: graph inputs that stood for weights became initializers (or,
  with ``keep-inputs``, inputs with defaults).
* ``GP207`` info: names the model used without declaring them (an export saved with
  ``include_initializers=False``) were filled; their shapes come from the checkpoint
  and were checked by shape inference, their consumers' requirements and a run of the
  filled model in onnxruntime. When the run could not happen because the filled model
  still uses a value nothing defines (a buffer no key filled, an error of its own),
  it says so and stays information; a warning when some shape could not be confirmed
  for another reason (no onnxruntime, inputs it cannot make, onnxruntime failing
  elsewhere; and no rule for the consumer), saying which.
* ``GP208`` warning: graph inputs that follow filled weight inputs (so probably
  weights too, as the legacy exporter lists them after the data inputs) matched no
  key and stay inputs.
* ``GP209`` info: checkpoint entries the loader could not represent.
* ``GP210`` info: tied weights filled from the key of another of their names.
* ``GP211`` error: a folded constant whose source the checkpoint fills, that graphpass
  cannot compute again (it would keep the export's values and train a copy); or a fused
  batch norm the checkpoint fills only in part.
* ``GP212`` info: batch norms the exporter fused into convolutions were separated
  again (``Conv`` + ``BatchNormalization``) from the checkpoint's tensors.
* ``GP215`` warning: tied weights the checkpoint gives different values under their names
  (the model keeps them one tensor).
* ``GP213`` info: folded constants kept as the export made them: the checkpoint fills
  none of their sources (rotary frequencies and other non-persistent buffers), or fills
  them with the values the file holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from graphpass.checkpoint import Checkpoint
from graphpass.findings import Finding, Severity
from graphpass.passes._reconcile_match import LEVELS, Matching
from graphpass.passes._reconcile_plan import Fill, Plan, Unfusion
from graphpass.passes._reconcile_shapes import ShapeCheck
from graphpass.passes._reconcile_targets import Target
from graphpass.passes._reconcile_verify import Verification
from graphpass.torch import Producer, separate_weights_advice
from graphpass.torch.folding import Fold

__all__ = ["CODES", "MatchTable", "NameList", "build_report"]

PASS_NAME: Final = "reconcile-initializers"
CODES: Final[Mapping[str, str]] = {
    "GP200": "The summary: how many weights were filled, by which rule.",
    "GP201": "A weight no checkpoint key fills; it keeps its placeholder value.",
    "GP202": "Checkpoint keys nothing used.",
    "GP203": "No base-prefix change was applied: several matched equally many keys.",
    "GP204": "Constants the exporter folded from weights are computed again from their "
             "sources' keys, so that the parameters train.",
    "GP205": "An initializer the exporter shared between weights was split, each consumer "
             "reading its own key.",
    "GP206": "Graph inputs that stood for weights became initializers.",
    "GP207": "Names the model used without declaring them were filled from the checkpoint.",
    "GP208": "Graph inputs that follow filled weight inputs matched no key and stay inputs.",
    "GP209": "Checkpoint entries the loader could not represent.",
    "GP210": "Tied weights filled from the key of another of their names.",
    "GP211": "A folded constant whose source the checkpoint fills cannot be computed again, "
             "or a fused batch norm is filled only in part.",
    "GP212": "Batch norms the exporter fused into convolutions were separated again.",
    "GP213": "Folded constants kept as the export made them.",
    "GP215": "Tied weights the checkpoint gives different values under their names.",
}
"""Every code of ``reconcile-initializers``, with its description (the module
documentation says more)."""
RULES: Final = (*LEVELS, "tied-alias", "folded-transpose", "folded-rows", "folded-broadcast",
                "folded-reshape", "folded-selection", "folded-affine", "folded-copy",
                "folded-weight-norm", "fused-batch-norm", "merged-split")
_SHOWN: Final = 5


class MatchTable(dict[str, dict[str, Any]]):
    """The matching table: initializer written -> ``{"key", "rule", "file", ...}``.

    A plain ``dict`` (JSON reports hold it whole) that prints as a one-line summary
    in text reports.
    """

    def __str__(self) -> str:
        return f"{len(self)} entries (in JSON reports)"


class NameList(list[str]):
    """A list of names that prints as its first few names and a count."""

    def __str__(self) -> str:
        return _listing(self) if self else "none"


def build_report(plan: Plan, matching: Matching, targets: Sequence[Target],
                 checkpoint: Checkpoint, input_names: Sequence[str], *, keep_inputs: bool,
                 shapes: ShapeCheck | None = None,
                 verification: Verification | None = None,
                 ties: Mapping[str, Sequence[str]] | None = None,
                 keys: Mapping[str, str] | None = None,
                 producer: Producer = "unknown",
                 ) -> tuple[list[Finding], dict[str, Any]]:
    """The findings and stats for the plan (see the module documentation for codes).

    ``shapes``: what checking the shapes of undeclared weights found (``GP207``).
    ``producer``: the tool that exported the model, whose words the advice uses.
    """
    by_name = {t.name: t for t in targets}
    findings: list[Finding] = []
    table = MatchTable()
    for fill in plan.fills:
        entry = table.setdefault(fill.name, {"key": fill.key, "rule": fill.rule,
                                             "file": str(checkpoint[fill.key].file)})
        if fill.replaces is not None:
            entry.setdefault("computes", []).append(fill.replaces)
        if fill.uses or fill.removes is not None:
            entry["split_from"] = fill.target
            entry["nodes"] = [node.name for node, _ in fill.uses]
    counts = Counter(fill.rule for fill in plan.fills)
    used = plan.used_keys()
    tied = {k: next(a for a in checkpoint.aliases(k) if a in used) for k in checkpoint
            if k not in used and any(a in used for a in checkpoint.aliases(k))}
    tied.update(_tied_keys(plan, checkpoint, ties or {}, keys or {}, used, tied))
    unused = NameList(k for k in checkpoint if k not in used and k not in tied)
    unmatched = NameList(t.name for t in plan.unmatched if t.required)
    left_inputs = _probable_weight_inputs(plan, input_names)
    skipped = dict(checkpoint.skipped)

    summary = ", ".join(f"{rule}: {counts[rule]}" for rule in RULES if counts[rule])
    prefix_text = f"; base prefix: {matching.base_prefix}" if matching.base_prefix else ""
    tied_text = (f"; {_listing([f'{k} is {v}' for k, v in tied.items()])} (tied: one tensor "
                 f"saved under several names)" if tied else "")
    findings.append(Finding(
        "GP200", Severity.INFO,
        f"filled {_count(len(table), 'initializer', 'initializers')} from "
        f"{_count(len(used), 'checkpoint key', 'checkpoint keys')} ({summary or 'none'})"
        f"{prefix_text}{tied_text}",
        PASS_NAME, data={"matched_by": dict(counts), "table": dict(table),
                         "same_data_as": dict(tied),
                         "base_prefix": str(matching.base_prefix or "") or None,
                         "checkpoints": [str(f) for f in checkpoint.files]}))
    for name in unmatched:
        target = by_name[name]
        source = f" (computed by the exporter from {', '.join(target.folded_from)})" \
            if target.folded_from else ""
        fate = {"initializer": "it keeps the value it was exported with",
                "input": "it stays a graph input that must be fed",
                "undefined": "it stays undefined"}.get(target.source, "it stays as it was")
        kind = target.outside_state_dict
        if kind == "buffer":  # persistent (under another key) or not (in no state_dict())
            findings.append(Finding(
                "GP201", Severity.WARNING,
                f"no checkpoint key fills {target.source} {name!r} (torch's export marks it a "
                f"buffer; state_dict() holds a buffer only if it is persistent); {fate}",
                PASS_NAME, value=name,
                hint="a non-persistent buffer is in no state_dict(): write the checkpoint with "
                     "graphpass.torch.save_state(model, path), which holds it; a persistent one "
                     "is under another key: add a rename (checkpoint key = name) or a regex "
                     "rule"))
            continue
        if kind is not None:  # no key of a state_dict() can hold it: a rename cannot help
            findings.append(Finding(
                "GP201", Severity.WARNING,
                f"no checkpoint key fills {target.source} {name!r} (torch's export marks it "
                f"a {kind}, which state_dict() does not hold); {fate}", PASS_NAME,
                value=name,
                hint="nothing to do if the model computes it the same way whatever the "
                     "weights (it keeps the export's value); if the checkpoint must change "
                     "it, write the checkpoint with graphpass.torch.save_state(model, path), "
                     "which holds non-persistent buffers and tensor constants too"))
            continue
        if name in plan.folded_slots:  # computed at export time: no checkpoint tensor
            findings.append(Finding(
                "GP201", Severity.WARNING,
                f"no checkpoint key fills {target.source} {name!r}, a constant the exporter's "
                f"constant folding computed from parameters ({plan.folded_slots[name]}); "
                f"{fate}", PASS_NAME, value=name,
                hint="it is no checkpoint tensor, so no rename can fill it: give a checkpoint "
                     "that holds every tensor it was computed from (reconcile-initializers "
                     f"then computes it again), or {plan.advice}"))
            continue
        findings.append(Finding(
            "GP201", Severity.WARNING,
            f"no checkpoint key fills {target.source} {name!r}{source}; {fate}",
            PASS_NAME, value=name,
            hint="add a rename (checkpoint key = initializer) or a regex rule; strict = true "
                 "makes this an error"))
    if unused:
        findings.append(Finding(
            "GP202", Severity.INFO,
            f"{_count(len(unused), 'checkpoint key was', 'checkpoint keys were')} not used: "
            f"{_listing(unused)}",
            PASS_NAME, data={"keys": list(unused)}))

    if matching.base_prefix_ties:
        findings.append(Finding(
            "GP203", Severity.WARNING,
            "no base-prefix change applied: "
            + " and ".join(str(p) for p in matching.base_prefix_ties)
            + " match equally many keys", PASS_NAME,
            hint="say which with a regex rule, e.g. rules = {'^model\\\\.' = ''}"))
    findings.extend(_tied_findings(plan.fills))
    findings.extend(_untied_findings(plan, checkpoint, ties or {}, keys or {}))
    findings.extend(_fold_findings(plan.fills, verification))
    findings.extend(_unfusion_findings(plan.unfusions, verification))
    findings.extend(_kept_findings(plan.kept))
    findings.extend(finding.with_pass(PASS_NAME) for finding in plan.refusals)
    findings.extend(_merge_findings(plan.fills, producer))
    inputs = [f.name for f in plan.fills if f.is_plain and by_name[f.name].is_input]
    if inputs:
        what = "stay inputs, with the checkpoint's values as defaults" if keep_inputs \
            else "became initializers and left the input list"
        findings.append(Finding("GP206", Severity.INFO,
                                f"{len(inputs)} graph inputs that stood for weights {what}: "
                                f"{_listing(inputs)}", PASS_NAME, data={"inputs": inputs}))
    undeclared = [f.name for f in plan.fills if f.is_plain
                  and by_name[f.name].source == "undefined" and by_name[f.name].shape is None]
    if undeclared:
        findings.append(_undeclared_finding(undeclared, shapes or ShapeCheck()))
    if left_inputs:
        findings.append(Finding(
            "GP208", Severity.WARNING,
            f"{len(left_inputs)} graph inputs listed after filled weight inputs matched no key "
            f"and stay inputs: {_listing(left_inputs)}", PASS_NAME,
            hint="if they are weights, add renames or rules for them",
            data={"inputs": list(left_inputs)}))
    if skipped:
        findings.append(Finding("GP209", Severity.INFO,
                                f"{len(skipped)} checkpoint entries were skipped: "
                                + _listing([f"{k} ({why})" for k, why in skipped.items()]),
                                PASS_NAME, data={"skipped": dict(skipped)}))
    stats: dict[str, Any] = {
        "filled": len(table),
        "unmatched": len(unmatched),
        "unused keys": len(unused),
        "matched by": dict(counts),
        "base prefix": str(matching.base_prefix) if matching.base_prefix else None,
        "table": table,
        "unmatched initializers": unmatched,
        "unused checkpoint keys": unused,
        "tied checkpoint keys": dict(tied),
        "checkpoints": NameList(str(f) for f in checkpoint.files),
    }
    return findings, stats


def _probable_weight_inputs(plan: Plan, input_names: Sequence[str]) -> NameList:
    """Unfilled inputs without a record that come after the first filled weight input."""
    filled = {f.name for f in plan.fills} | {f.replaces for f in plan.fills if f.replaces}
    first = next((i for i, name in enumerate(input_names) if name in filled), None)
    if first is None:
        return NameList()
    unmatched = {t.name for t in plan.unmatched if not t.required}
    return NameList(name for name in input_names[first:] if name in unmatched)


def _undeclared_finding(undeclared: list[str], shapes: ShapeCheck) -> Finding:
    """``GP207``: how the shapes of weights the model never declared were checked."""
    filled = (f"{len(undeclared)} names the model used without defining or declaring them "
              "were filled")
    data: dict[str, Any] = {"names": undeclared}
    if shapes.not_run:
        data["not_run"] = {"reason": shapes.not_run, "undefined": list(shapes.undefined)}
    unconfirmed = shapes.unconfirmed
    if shapes.ran or not unconfirmed:
        how = "and onnxruntime runs the filled model" if shapes.ran else \
            "and their consumers' requirements"
        return Finding("GP207", Severity.INFO,
                       f"{filled}; their shapes, taken from the checkpoint, pass shape "
                       f"inference {how}: {_listing(undeclared)}", PASS_NAME, data=data)
    data["unconfirmed"] = list(unconfirmed)
    if shapes.undefined:  # the value that stops the run has a finding of its own
        return Finding(
            "GP207", Severity.INFO,
            f"{filled}; their shapes, taken from the checkpoint, pass shape inference; "
            f"onnxruntime did not run the filled model to check them further: "
            f"{shapes.not_run}", PASS_NAME, value=shapes.undefined[0],
            hint="once that value is filled too, the filled model is run to check these "
                 "shapes", data=data)
    hint = ("install onnxruntime (pip install 'graphpass[runtime]') so that the filled "
            "model is run once, or run with --verify"
            if shapes.not_run == "onnxruntime is not installed" else
            "run with --verify (and --verify-inputs) to run the filled model on inputs "
            "of your own")
    return Finding(
        "GP207", Severity.WARNING,
        f"{filled} with the checkpoint's shapes, and nothing could confirm "
        f"{len(unconfirmed)} of them (shape inference does not check them, no rule covers "
        f"their consumers, and {shapes.not_run or 'onnxruntime did not run the model'}): "
        f"{_listing(unconfirmed)}", PASS_NAME, value=unconfirmed[0], hint=hint, data=data)


def _tied_findings(fills: Sequence[Fill]) -> list[Finding]:
    tied = [f for f in fills if f.rule == "tied-alias"]
    if not tied:
        return []
    pairs = [f"{f.name} <- {f.key}" for f in tied]
    return [Finding(
        "GP210", Severity.INFO,
        f"filled {len(tied)} tied weight{'s' * (len(tied) != 1)} from the key of another of "
        f"its names (the export kept one name for tied weights, the checkpoint another; a "
        f"module that reads the weight owns that key): {_listing(pairs)}", PASS_NAME,
        data={"tied": {f.name: f.key for f in tied}})]


def _run_note(verification: Verification | None) -> str:
    if verification is None or (not verification.checked and verification.ran):
        return ""
    if not verification.ran:
        return ("; the recomputations (plain transposes) need no run in onnxruntime"
                if verification.transposes_only else
                "; the recomputations were not run in onnxruntime (it is not installed)")
    return (f"; onnxruntime ran {verification.checked} of the recomputations (all but plain "
            "transposes) and each gave what it must")


def _tied_keys(plan: Plan, checkpoint: Checkpoint, ties: Mapping[str, Sequence[str]],
               keys: Mapping[str, str], used: Iterable[str], known: Mapping[str, str]
               ) -> dict[str, str]:
    """Keys of a tied weight's other names that give the filled key's values: used, as the tie.

    GPT-2's ``transformer.wte.weight`` is ``lm_head.weight`` (:func:`find_ties`): a
    checkpoint saved without shared storage gives both names, equal. The values are the
    tensor the model trains; a key of different values is ``GP215``'s, and not used.
    """
    filled = {fill.name: fill.key for fill in plan.fills}
    used = set(used)
    found: dict[str, str] = {}
    for name, aliases in ties.items():
        key = filled.get(name)
        for alias in aliases:
            other = keys.get(alias)
            if key is None or other is None or other == key or other in used or \
                    other in known or other not in checkpoint:
                continue
            if checkpoint[other].storage == checkpoint[key].storage or (
                    checkpoint[other].shape == checkpoint[key].shape and np.array_equal(
                        checkpoint[other].numpy(), checkpoint[key].numpy())):
                found[other] = key
    return found


def _untied_findings(plan: Plan, checkpoint: Checkpoint, ties: Mapping[str, Sequence[str]],
                     keys: Mapping[str, str]) -> list[Finding]:
    """GP215: tied weights the checkpoint gives different values under their two names."""
    filled = {fill.name: fill.key for fill in plan.fills}
    differing = []
    for name, aliases in ties.items():
        key = filled.get(name)
        for alias in aliases:
            other = keys.get(alias)
            if key is None or other is None or other == key or \
                    checkpoint[other].storage == checkpoint[key].storage:
                continue
            if checkpoint[other].shape != checkpoint[key].shape or not np.array_equal(
                    checkpoint[other].numpy(), checkpoint[key].numpy()):
                differing.append((name, key, alias, other))
    if not differing:
        return []
    pairs = [f"{alias!r} (key {other!r}) is {name!r} (key {key!r})"
             for name, key, alias, other in differing]
    return [Finding(
        "GP215", Severity.WARNING,
        f"the checkpoint gives tied weights different values: {_listing(pairs)}; the model "
        "keeps them one tensor (as torch ties them), filled from the first key, and the "
        "other key's values are not used", PASS_NAME, value=differing[0][0],
        hint="if the checkpoint's model untied them, export that model (its export then has "
             "an initializer for each); graphpass never breaks a tie on its own",
        data={"differing": {alias: {"key": other, "tied_to": name, "tied_key": key}
                            for name, key, alias, other in differing}})]


def _fold_findings(fills: Sequence[Fill], verification: Verification | None) -> list[Finding]:
    findings = []
    for inferred in (False, True):
        folds = [f for f in fills if f.fold is not None and f.inferred == inferred]
        if not folds:
            continue
        recipes = Counter(f.rule.removeprefix("folded-") for f in folds)
        kinds = ", ".join(f"{count} {_plural(kind, count)}" for kind, count in recipes.items())
        stale = [f.fold.name for f in folds if f.stale and f.fold is not None]
        equal = [f for f in folds if f.stale is False]
        unknown = len(folds) - len(stale) - len(equal)
        checked = []
        if equal:
            checked.append(f"{_count(len(equal), 'equals', 'equal')} the file's values (the "
                           "checkpoint holds the values the export was made from)")
        if stale:
            checked.append(f"{_count(len(stale), 'was', 'were')} stale (the checkpoint changes "
                           f"{'its source' if len(stale) == 1 else 'their sources'}): "
                           + _listing(stale))
        if unknown:
            checked.append(f"{_count(unknown, 'was', 'were')} not compared (the file does not "
                           "hold it)")
        pairs = [f.fold.describe() if f.fold.source == f.name else
                 f"{f.fold.name} = {f.fold.recipe.describe(f.name)}"
                 for f in folds if f.fold is not None and f.fold.recipe is not None]
        how = ("resting on the graph's structure, the nearest values or an assumption the "
               "values cannot check, not on a record or equal values alone: "
               + "; ".join(sorted({f.fold.evidence for f in folds if f.fold is not None}))
               if inferred else "found from torch's records and the values")
        findings.append(Finding(
            "GP204", Severity.WARNING if inferred else Severity.INFO,
            f"computed {_count(len(folds), 'constant', 'constants')} the exporter had folded "
            f"from weights ({kinds}) again by nodes from their sources, so that training "
            f"updates the sources "
            f"({how}); checked: {'; '.join(checked)}{_run_note(verification)}: "
            f"{_listing(pairs)}", PASS_NAME,
            hint=("if a source is wrong, name its key with a rename; or export without "
                  "constant folding") if inferred else None,
            data={"folds": {f.fold.name: {"source": f.name, "key": f.key,
                                          "recipe": f.rule.removeprefix("folded-"),
                                          "stale": f.stale, "evidence": f.fold.evidence}
                            for f in folds if f.fold is not None}}))
    return findings


def _unfusion_findings(unfusions: Sequence[Unfusion],
                       verification: Verification | None) -> list[Finding]:
    if not unfusions:
        return []
    stale = [u.fused.node.name or "Conv" for u in unfusions if u.stale]
    checked = (f"{_count(len(stale), 'was', 'were')} stale (the checkpoint's tensors fuse into "
               f"other weights than the file's): {_listing(stale)}" if stale else
               "all equal the file's fused weights (the checkpoint holds the values the "
               "export was made from)")
    names = [u.fused.node.name or "Conv" for u in unfusions]
    inferred = [u.fused.node.name or "Conv" for u in unfusions if u.fused.inferred]
    if inferred:
        checked += (f"; {len(inferred)} were found by nearness, not equal values (the "
                    f"checkpoint changed them since the export): {_listing(inferred)}")
    return [Finding(
        "GP212", Severity.WARNING if inferred else Severity.INFO,
        f"separated {_count(len(unfusions), 'batch norm', 'batch norms')} the exporter had "
        f"fused into convolutions "
        f"into Conv and BatchNormalization again, from the checkpoint's conv weights, scales, "
        f"shifts and running statistics, so that they train as in torch; checked: {checked}"
        f"{_run_note(verification)}: {_listing(names)}", PASS_NAME,
        data={"separated": {u.fused.node.name: {"weight": u.names[u.fused.conv_weight],
                                                 "batch_norm": u.names[u.fused.scale],
                                                 "stale": u.stale,
                                                 "evidence": u.fused.evidence}
                            for u in unfusions}})]


def _kept_findings(kept: Sequence[Fold]) -> list[Finding]:
    if not kept:
        return []
    sources = sorted({fold.source for fold in kept})
    return [Finding(
        "GP213", Severity.INFO,
        f"kept {_count(len(kept), 'constant', 'constants')} the exporter had folded as it "
        f"made {'it' if len(kept) == 1 else 'them'}: the checkpoint "
        f"fills none of their sources with other values ({_listing(sources)}), so they are "
        f"not stale: {_listing([fold.name for fold in kept])}", PASS_NAME,
        data={"kept": {fold.name: fold.source for fold in kept}})]


def _count(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _plural(kind: str, count: int) -> str:
    words = {"transpose": "transposes", "rows": "row gathers", "broadcast": "broadcasts",
             "reshape": "reshapes", "selection": "element selections",
             "affine": "scalings or offsets", "copy": "copies",
             "weight-norm": "weight norms"}
    return words.get(kind, kind) if count != 1 else \
        {"rows": "row gather", "selection": "element selection",
         "affine": "scaling or offset", "weight-norm": "weight norm"}.get(kind, kind)


def _merge_findings(fills: Sequence[Fill], producer: Producer) -> list[Finding]:
    by_shared: dict[str, list[Fill]] = {}
    for fill in fills:
        if fill.uses or fill.removes is not None:
            by_shared.setdefault(fill.target, []).append(fill)
    findings = []
    for shared, splits in by_shared.items():
        parts = [f"{', '.join(repr(n.name) for n, _ in f.uses)} now read {f.name!r} (key "
                 f"{f.key!r})" if f.uses else f"{f.name!r} = Identity({shared!r}) replaced by "
                 f"key {f.key!r}" for f in splits]
        findings.append(Finding(
            "GP205", Severity.WARNING,
            f"the exporter had merged weights that were identical at export time "
            f"into {shared!r}; split it: {'; '.join(parts)}", PASS_NAME, value=shared,
            hint=separate_weights_advice(producer),
            data={"splits": {f.name: {"key": f.key, "nodes": [n.name for n, _ in f.uses]}
                             for f in splits}}))
    return findings


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(str(item) for item in items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")
