"""The ``detect-missing-buffers`` pass: name every tensor the model needs and nothing provides.

A PyTorch module's non-persistent buffers (``register_buffer(..., persistent=False)``:
rotary ``inv_freq``, position ids, causal masks) and plain tensor attributes are not
in ``state_dict()``. Export a model without its weights, fill them from a
checkpoint, and those names stay empty: the model does not load ("Node input
'block.scale' is not a graph input, initializer, or output of a previous node"), or
they linger as graph inputs that every run (and every ONNX Runtime training step)
must feed. This pass finds them before anything is written and says, for each, what
it is and how to provide it.

It reports, one finding per name, sorted by module path:

* ``GP301`` (error): a name nodes use that nothing defines (in the main graph, a
  subgraph, where outer scopes are searched, or a function body, which has none);
* ``GP302`` (error; warning when unused): an initializer whose data is not all there;
* ``GP303`` (error): a graph input without an initializer that stands for model state.

Each finding's ``data`` holds ``kind``, ``module``, ``attribute``, ``problem``,
``consumers``, ``evidence``, ``checkpoint`` and ``fix``.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from graphpass.checkpoint import ReconcileResult, open_checkpoint
from graphpass.findings import Finding, Severity
from graphpass.framework import AnalysisPass, PassContext, PassResult
from graphpass.ir import Model
from graphpass.passes._missing_gaps import Gap, find_gaps
from graphpass.passes._missing_kinds import (
    STATE_KINDS,
    CheckpointNames,
    Classification,
    classify,
)
from graphpass.torch import INPUT_KIND, Producer, producer

__all__ = ["DetectMissingBuffers"]

_RECONCILE: Final = "reconcile-initializers"
_LEGACY_VALUE: Final = re.compile(r"onnx::\w+?_([0-9]+)")
_CODES: Final = {"undefined": "GP301", "no-data": "GP302", "input": "GP303"}
_DESCRIPTIONS: Final[Mapping[str, str]] = {
    "GP301": "A name nodes use that nothing defines.",
    "GP302": "An initializer whose data is not all there.",
    "GP303": "A graph input without an initializer that stands for model state.",
}
_STAT_LABELS: Final = {"undefined": "undefined", "no-data": "without data",
                       "input": "state inputs"}
_SHOWN_CONSUMERS: Final = 3
# The last part of a module path that names state in practice; a bare graph input so
# named is state even before any other input has shown itself to be.
_STATE_ATTRIBUTES: Final = frozenset({
    "weight", "bias", "running_mean", "running_var", "num_batches_tracked", "inv_freq",
    "original_inv_freq", "position_ids", "in_proj_weight", "in_proj_bias", "freqs_cis",
    "causal_mask", "masked_bias",
})


class DetectMissingBuffers(AnalysisPass):
    """Name every weight, buffer or constant the graph needs and nothing provides."""

    name = "detect-missing-buffers"
    codes = _DESCRIPTIONS
    description = "Name every weight, buffer or constant the graph needs and nothing provides."
    after = (_RECONCILE,)

    @dataclass
    class Options:
        """Options of ``detect-missing-buffers``.

        Attributes:
            checkpoints: Checkpoints whose key names help tell state from data and
                say where a missing tensor can be found (besides ``--checkpoint``).
            data_inputs: Graph inputs that are data even though they look like state
                (``fnmatch`` patterns, e.g. ``past_key_values.*``).
        """

        checkpoints: list[str] = field(default_factory=list)
        data_inputs: list[str] = field(default_factory=list)

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Find the missing tensors and report one finding per name.

        Args:
            model: The model (not changed).
            context: Checkpoints (``--checkpoint``) and earlier results.

        Returns:
            The findings (none for a complete model) and counts per problem and module.
        """
        checkpoints = CheckpointNames(self._checkpoint_keys(context))
        reconcile = context.analysis(ReconcileResult)
        reconciled = reconcile is not None
        unfilled = set(reconcile.unmatched) if reconcile is not None else set()
        reported: list[tuple[Gap, Classification]] = []
        inputs: list[tuple[Gap, Classification]] = []
        for gap in find_gaps(model):
            classification = classify(gap, model, checkpoints)
            if gap.name in unfilled:
                classification.evidence.append(
                    "reconcile-initializers found no checkpoint key for it")
            if gap.problem == "input":
                inputs.append((gap, classification))
            else:
                reported.append((gap, classification))
        reported.extend(self._state_inputs(model, inputs))
        reported.sort(key=lambda item: (item[1].module, item[0].name))
        exporter = producer(model.graph)
        findings = [_finding(gap, classification, reconciled, exporter)
                    for gap, classification in reported]
        return PassResult(changed=False, findings=findings, stats=_stats(reported))

    def _checkpoint_keys(self, context: PassContext) -> dict[str, list[str]]:
        """The keys of this pass's checkpoints and ``--checkpoint``'s (headers only)."""
        paths = [context.resolve_path(path) for path in self.options.checkpoints]
        paths.extend(path for path in context.checkpoints if path not in paths)
        if not paths:
            return {}
        loaders = context.registry.loaders()
        return {str(path): list(open_checkpoint(path, loaders)) for path in paths}

    def _state_inputs(self, model: Model, candidates: list[tuple[Gap, Classification]]
                      ) -> list[tuple[Gap, Classification]]:
        """Keep the bare graph inputs that stand for model state, not data.

        Certain: torch's metadata or a checkpoint says so; or the model is a dynamo
        export (torch marks every user input ``USER_INPUT``) and the input is not
        marked; or it is a constant the legacy exporter folded, ``onnx::<Op>_<N>``
        with ``N`` past its position (that exporter numbers the user's inputs from 0,
        in order, and every later value after them). Otherwise the order decides:
        exporters list the user's inputs first, then the state, so the state is a run
        of inputs named like module paths (with fixed shapes), which must hold at
        least one input known to be state: one with an initializer, one vouched for as
        above, or one whose name ends like state (``.weight``, ``.running_mean`` ...).
        An input of the run before the first known one must belong to the same
        top-level module as a known one (``block.running`` before ``block.linear.weight``).
        """
        graph = model.graph
        from_torch = model.producer_name == "pytorch"
        marked = any(INPUT_KIND in value.metadata for value in graph.inputs)
        by_index = {gap.input_index: (gap, classification)
                    for gap, classification in candidates
                    if not any(fnmatch.fnmatchcase(gap.name, pattern)
                               for pattern in self.options.data_inputs)}
        known = [value.name in graph.initializers for value in graph.inputs]
        state_like = list(known)
        for index, (gap, classification) in by_index.items():
            kind = classification.kind
            if classification.strong:
                known[index] = kind in STATE_KINDS
            elif marked and from_torch and kind != "data input":
                known[index] = True
            elif kind == "folded constant":
                known[index] = from_torch and _folded_by_legacy_export(gap)
            elif kind == "module state" and _static_shape(model, gap):
                state_like[index] = True
                known[index] = classification.attribute in _STATE_ATTRIBUTES
            state_like[index] = state_like[index] or known[index]
        kept: list[tuple[Gap, Classification]] = []
        start, count = 0, len(known)
        while start < count:
            end = start
            while end < count and state_like[end]:
                end += 1
            anchors = [i for i in range(start, end) if known[i]]
            if anchors:
                families = {_family(graph.inputs[i].name) for i in anchors}
                kept.extend(by_index[i] for i in range(start, end) if i in by_index and (
                    known[i] or i > anchors[0] or _family(by_index[i][0].name) in families))
            start = end + 1
        return kept


def _family(name: str) -> str:
    """The top-level module of a module path (``block`` for ``block.linear.weight``)."""
    return name.split(".", 1)[0]


def _folded_by_legacy_export(gap: Gap) -> bool:
    """Whether ``onnx::<Op>_<N>`` is numbered past its position (not a user input)."""
    found = _LEGACY_VALUE.fullmatch(gap.name)
    return found is not None and int(found.group(1)) > gap.input_index


def _static_shape(model: Model, gap: Gap) -> bool:
    value = model.graph.values.get(gap.name)
    shape = value.shape if value is not None else None
    return shape is None or all(isinstance(dim, int) for dim in shape)


# ================================================================ the findings
_PROBLEM_TEXT: Final = {
    "undefined": "is used but nothing provides it (not a graph input, initializer or node "
                 "output)",
    "no-data": "is an initializer without its data",
    "input": "is a graph input with no initializer: every run must feed it (ONNX Runtime "
             "training asks for it at every step)",
}


def _finding(gap: Gap, classification: Classification, reconciled: bool,
             exporter: Producer) -> Finding:
    kind = classification.kind
    subject = f"{kind} {gap.name!r}" if kind != "unknown" else repr(gap.name)
    text = f"{subject} {_PROBLEM_TEXT[gap.problem]}"
    if gap.problem == "no-data" and gap.detail:
        text += f" ({gap.detail})"
    if gap.function is not None and gap.problem == "undefined":
        text += "; a function body sees only its own inputs"
    if classification.module:
        text = f"module {classification.module!r}: {text}"
    text += f"; used by {_describe_consumers(gap)}" if gap.consumers else "; not used"
    fix, hint = _fix(gap, classification, reconciled, exporter)
    severity = Severity.ERROR
    if gap.problem == "no-data" and not gap.consumers:
        severity = Severity.WARNING
    first = next((c for c in gap.consumers if c.node is not None), None)
    checkpoint = classification.checkpoint
    data: dict[str, Any] = {
        "kind": kind,
        "module": classification.module,
        "attribute": classification.attribute,
        "problem": gap.problem,
        "consumers": [consumer.to_dict() for consumer in gap.consumers],
        "evidence": list(classification.evidence),
        "checkpoint": None if checkpoint is None else {
            "path": checkpoint.checkpoint, "key": checkpoint.key, "exact": checkpoint.exact},
        "fix": fix,
    }
    if gap.detail:
        data["detail"] = gap.detail
    return Finding(
        code=_CODES[gap.problem],
        severity=severity,
        message=text,
        pass_name=DetectMissingBuffers.name,
        node=first.node_name if first is not None else None,
        function=gap.function.qualified_name if gap.function is not None else None,
        value=gap.name,
        hint=hint,
        graph=first.graph if first is not None else None,
        data=data,
    )


def _describe_consumers(gap: Gap) -> str:
    described = list(dict.fromkeys(consumer.describe() for consumer in gap.consumers))
    shown = ", ".join(described[:_SHOWN_CONSUMERS])
    if len(described) > _SHOWN_CONSUMERS:
        shown += f" and {len(described) - _SHOWN_CONSUMERS} more"
    return shown


_SAVE_STATE: Final = ("save the module's full state with graphpass.torch.save_state(model, "
                      "'state.safetensors') and fill from that (--checkpoint state.safetensors)")
_EXPORT_STATE: Final = ("it is not in state_dict() (non-persistent buffers and tensor attributes "
                        f"never are), so no checkpoint saved from it has it: {_SAVE_STATE}")


def _fix(gap: Gap, classification: Classification, reconciled: bool,
         exporter: Producer) -> tuple[str, str]:
    """The fix, as a stable keyword (for tools) and in words (for people).

    ``exporter``: the tool that wrote the model; a constant torch's dynamo exporter folded
    is among the tensors of the ``ONNXProgram`` it returned, which ``save_state`` writes.
    """
    kind = classification.kind
    match = classification.checkpoint
    if match is not None:
        how = "" if match.exact else f" as {match.key!r}"
        hint = (f"checkpoint {match.checkpoint} has it{how}: fill the model from it with "
                f"reconcile-initializers (graphpass run MODEL -o OUT -p "
                f"reconcile-initializers --checkpoint {shlex.quote(str(match.checkpoint))})")
        if reconciled:
            hint += "; reconcile-initializers ran but did not fill it: see its findings"
        return "reconcile", hint
    if kind in ("parameter", "persistent buffer"):
        return "reconcile", ("it is in state_dict(): fill the model from the checkpoint with "
                             "reconcile-initializers (--checkpoint model.safetensors)")
    if kind in ("non-persistent buffer", "tensor constant"):
        return "export-state", _EXPORT_STATE
    if kind in ("buffer", "module state"):
        return "export-state", (
            "a parameter or persistent buffer is in state_dict(): fill it from the checkpoint "
            f"with reconcile-initializers; a non-persistent buffer or tensor attribute is not: "
            f"{_SAVE_STATE}")
    if kind == "lifted constant":
        return "export-state", (
            "torch.export made it from a tensor created inside forward(), which no module "
            "attribute holds: save the export's own tensors with graphpass.torch.save_state("
            "onnx_program, 'export.safetensors') and fill from that, or save the export with "
            "its initializers (include_initializers=True)")
    if kind == "folded constant" and exporter == "torch-dynamo":
        return "export-state", (
            "the exporter's optimizer computed it by constant folding, and the file was saved "
            "without it: no state_dict() checkpoint has it, but the export's own tensors do: "
            "save them with graphpass.torch.save_state(onnx_program, 'export.safetensors') "
            "and fill from that (--checkpoint export.safetensors), save the export with its "
            "initializers, or re-export without folding (dynamo=True, optimize=False)")
    if kind == "folded constant":
        return "re-export", (
            "the exporter computed it by constant folding and did not save it, so no "
            "checkpoint has it: re-export with folding off (dynamo=True: optimize=False; "
            "dynamo=False: do_constant_folding=False), or save the export with its initializers")
    if gap.problem == "input":
        return "provide", "give it an initializer, or feed it at every run"
    return "provide", ("give it an initializer (or a node that computes it); if it is model "
                       "state, add it to the checkpoint")


def _stats(reported: list[tuple[Gap, Classification]]) -> dict[str, Any]:
    """Counts for the report: missing names, modules they belong to, and per problem."""
    stats: dict[str, Any] = {
        "missing": len(reported),
        "modules": len({classification.module for _, classification in reported}),
    }
    for gap, _ in reported:
        label = _STAT_LABELS[gap.problem]
        stats[label] = stats.get(label, 0) + 1
    return stats
