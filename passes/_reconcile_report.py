"""The findings and stats of reconcile-initializers.

Finding codes (stable):

* ``GP200`` info: the summary: how many weights were filled, by which rule; its
  ``data`` holds the whole table.
* ``GP201`` warning: a weight no key fills; it keeps its placeholder value
  (an error instead, before anything is written, with ``strict``).
* ``GP202`` info: checkpoint keys nothing used.
* ``GP203`` warning: no base-prefix change was applied because several matched
  equally many keys.
* ``GP204`` info / warning: transposes the exporter folded were replayed from
  their keys (a warning when found from the graph's structure, not a record).
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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from graphpass.checkpoint import Checkpoint
from graphpass.findings import Finding, Severity
from graphpass.passes._reconcile_match import LEVELS, Matching
from graphpass.passes._reconcile_plan import REEXPORT_ADVICE, Fill, Plan
from graphpass.passes._reconcile_shapes import ShapeCheck
from graphpass.passes._reconcile_targets import Target

__all__ = ["MatchTable", "NameList", "build_report"]

PASS_NAME: Final = "reconcile-initializers"
RULES: Final = (*LEVELS, "tied-alias", "folded-transpose", "merged-split")
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
                 shapes: ShapeCheck | None = None) -> tuple[list[Finding], dict[str, Any]]:
    """The findings and stats for the plan (see the module documentation for codes).

    ``shapes``: what checking the shapes of undeclared weights found (``GP207``).
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
    unused = NameList(k for k in checkpoint if k not in used)
    tied = {k: next(a for a in checkpoint.aliases(k) if a in used) for k in unused
            if any(a in used for a in checkpoint.aliases(k))}
    unmatched = NameList(t.name for t in plan.unmatched if t.required)
    left_inputs = _probable_weight_inputs(plan, input_names)
    skipped = dict(checkpoint.skipped)

    summary = ", ".join(f"{rule}: {counts[rule]}" for rule in RULES if counts[rule])
    prefix_text = f"; base prefix: {matching.base_prefix}" if matching.base_prefix else ""
    findings.append(Finding(
        "GP200", Severity.INFO,
        f"filled {len(table)} initializers from {len(used)} checkpoint keys ({summary or 'none'})"
        f"{prefix_text}",
        PASS_NAME, data={"matched_by": dict(counts), "table": dict(table),
                         "base_prefix": str(matching.base_prefix or "") or None,
                         "checkpoints": [str(f) for f in checkpoint.files]}))
    for name in unmatched:
        target = by_name[name]
        source = f" (computed by the exporter from {', '.join(target.folded_from)})" \
            if target.folded_from else ""
        fate = {"initializer": "it keeps the value it was exported with",
                "input": "it stays a graph input that must be fed",
                "undefined": "it stays undefined"}.get(target.source, "it stays as it was")
        findings.append(Finding(
            "GP201", Severity.WARNING,
            f"no checkpoint key fills {target.source} {name!r}{source}; {fate}",
            PASS_NAME, value=name,
            hint="add a rename (checkpoint key = initializer) or a regex rule; strict = true "
                 "makes this an error"))
    if unused:
        findings.append(Finding(
            "GP202", Severity.INFO,
            f"{len(unused)} checkpoint keys were not used: {_listing(unused)}"
            + (f" ({len(tied)} of them share their data with a used key)" if tied else ""),
            PASS_NAME, data={"keys": list(unused), "same_data_as": tied}))
    if matching.base_prefix_ties:
        findings.append(Finding(
            "GP203", Severity.WARNING,
            "no base-prefix change applied: "
            + " and ".join(str(p) for p in matching.base_prefix_ties)
            + " match equally many keys", PASS_NAME,
            hint="say which with a regex rule, e.g. rules = {'^model\\\\.' = ''}"))
    findings.extend(_tied_findings(plan.fills))
    findings.extend(_fold_findings(plan.fills))
    findings.extend(_merge_findings(plan.fills))
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


def _fold_findings(fills: Sequence[Fill]) -> list[Finding]:
    findings = []
    for inferred in (False, True):
        folds = [f for f in fills if f.replaces is not None and f.inferred == inferred]
        if not folds:
            continue
        pairs = [f"{f.replaces} = Transpose({f.name})" for f in folds]
        how = ("found from the graph (the consumer's module or aten.linear), not a record"
               if inferred else "recorded as pkg.onnxscript.optimizer.folded_from")
        findings.append(Finding(
            "GP204", Severity.WARNING if inferred else Severity.INFO,
            f"replayed {len(folds)} transposes the exporter had folded into new initializers "
            f"({how}): {_listing(pairs)}", PASS_NAME,
            hint=REEXPORT_ADVICE if inferred else None,
            data={"folds": {f.replaces: {"source": f.name, "key": f.key} for f in folds}}))
    return findings


def _merge_findings(fills: Sequence[Fill]) -> list[Finding]:
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
            f"the exporter's optimizer had merged weights that were identical at export time "
            f"into {shared!r}; split it: {'; '.join(parts)}", PASS_NAME, value=shared,
            hint="export with optimize=False to keep every weight separate",
            data={"splits": {f.name: {"key": f.key, "nodes": [n.name for n, _ in f.uses]}
                             for f in splits}}))
    return findings


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(str(item) for item in items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")
