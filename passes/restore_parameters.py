"""The ``restore-parameters`` pass: train torch's parameters, not the exporter's copies.

``torch.onnx.export(..., dynamo=True)``'s default optimizer computes at export time
whatever depends on weights alone. The parameter then feeds nothing, and a trainer
trains an anonymous constant in its place, while the weights a user saves back are
the untrained ones:

* ``Transpose(query.weight)`` becomes a new initializer ``val_37`` (every
  ``nn.Linear`` applied to a 3-D input); recorded as
  ``pkg.onnxscript.optimizer.folded_from = "['...query.weight']"``;
* a slice or gather of a parameter (``position_embeddings`` at positions ``0..7``)
  becomes a constant holding only those rows, recorded the same way;
* a ``BatchNormalization`` after a ``Conv`` is fused into the convolution: the
  conv's weight keeps the parameter's name but holds ``W * gamma / sigma`` (and loses
  its ``InputSpec`` record), a ``weight_bias`` appears, and the BatchNorm's
  parameters are gone; the fused ``Conv`` keeps the batch norm's FX record.

The pass restores what it can exactly and names what it cannot:

* a folded transpose of one parameter read as a ``MatMul`` weight whose FX node is
  ``aten.linear`` (so the value is ``W^T``) gets the parameter back as an initializer
  (``W = val^T``, exact) and a ``Transpose`` node in place of the copy (``GP250``,
  info); when the parameter is still there (a tied weight), its transpose is checked
  to equal the copy and used instead;
* any other fold :mod:`graphpass.torch.folding` knows a recipe for (found from torch's
  records, or from the values where the file still holds the parameter) whose constant
  holds every value of the parameter is restored the same way; each recomputation other
  than a plain transpose is run in onnxruntime and must give the file's constant;
* every other parameter the graph signature lists that is folded, fused or rewritten
  is an error naming the value or node it went into (``GP251``), with the advice to
  re-export with ``optimize=False``;
* the legacy exporter (``dynamo=False``) records nothing, but its constant folding
  names the copies it makes ``onnx::MatMul_N``, ``onnx::Conv_N``: a copy whose
  transpose equals an initializer is replaced by ``Transpose`` of it (tied weights);
  any other float ``onnx::`` initializer read as a layer's weight (``MatMul``,
  ``Gemm``, ``Conv``) is an error (``GP252``, one per node) with the advice to
  re-export with ``do_constant_folding=False``;
* exporting in eval mode, the legacy exporter merges distinct tensors of equal values
  (fresh LayerNorm weights: all ones) into one initializer, writing the others as
  ``block2.ln.weight = Identity(block1.ln.weight)``; a tie (one ``Parameter``) is
  exported once and never looks so. Each merged parameter gets its own initializer
  again, a copy of the values (``GP256``, info), and trains apart, as in torch; with
  ``merges = false`` they are reported instead (``GP254``, warning).

A parameter torch does not train (``requires_grad=False``: named in the ``frozen`` option,
which ``train-ready`` shares from ``lint-gradients.frozen``, or recorded as frozen by the
checkpoint, ``ReconcileResult.frozen``) that survives only as such a fold needs no
training: it is no error. The fold stays a constant, and an info names it (``GP257``).

Parameters no node's FX record mentions any more (torch's forward never used them, or
their only use was dead code) are listed in an info (``GP253``): PyTorch gives them no
gradient either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Final

from graphpass.checkpoint import ReconcileResult
from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import Graph, Model, Node, Tensor
from graphpass.passes._reconcile_verify import FoldCheck, verify
from graphpass.torch import (
    INPUT_KIND,
    LEGACY_CONSTANT_NAME,
    TRAINABLE_TYPES,
    fx_arguments,
    fx_placeholders,
    fx_target,
    records_state,
    signature_parameters,
    unfolded_export_advice,
)
from graphpass.torch.folding import (
    Fold,
    Folding,
    UnrestorableParameters,
    find_folds,
    find_merged_constants,
    find_merges,
    mark_state,
    mark_ties,
    recompute,
    split_merged_constants,
    split_merges,
)
from graphpass.training.rules import weight_matches

__all__ = ["RestoreParameters"]

RESTORED_CODE: Final = "GP250"
UNRECOVERABLE_CODE: Final = "GP251"
LEGACY_COPY_CODE: Final = "GP252"
UNUSED_CODE: Final = "GP253"
MERGED_CODE: Final = "GP254"
TIED_CODE: Final = "GP255"
SPLIT_CODE: Final = "GP256"
FROZEN_FOLD_CODE: Final = "GP257"

MERGED_ADVICE: Final = (
    "run restore-parameters with merges = true (its default) to give each its own "
    "initializer, or pass the model's initial weights with --checkpoint (a "
    "graphpass.torch.save_state file): reconcile-initializers fills each from its own key")
_TAG: Final = "graphpass.restore-parameters"
_LINEAR: Final = "aten.linear.default"
_WEIGHT_SLOTS: Final = {"MatMul": (1,), "Gemm": (1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2)}
"""Inputs that hold a layer's weights (where the legacy exporter's folded copies land)."""
_SHOWN: Final = 4


class RestoreParameters(Pass):
    """Give folded parameters back their own initializers; name the ones that cannot be."""

    name = "restore-parameters"
    description = ("Undo the exporter's folding of torch parameters into anonymous copies "
                   "(transposes), so that training trains the parameters; name the "
                   "parameters that cannot be recovered.")
    after = ("inline-functions", "reconcile-initializers", "detect-missing-buffers")
    before = ("fix-training-ops", "lint-gradients")
    provides = (UnrestorableParameters,)
    # Restoring adds initializers and rewires their readers; it renames and refills none.
    preserves = (ReconcileResult,)
    codes: ClassVar[dict[str, str]] = {
        RESTORED_CODE: "parameters restored from the exporter's folded transposes",
        UNRECOVERABLE_CODE: "torch parameters folded, fused or rewritten beyond recovery",
        LEGACY_COPY_CODE: "the legacy exporter's constant folding copied a parameter",
        UNUSED_CODE: "parameters no node uses any more",
        MERGED_CODE: "the legacy exporter merged parameters into one initializer",
        TIED_CODE: "tied parameters: one tensor under several torch names",
        SPLIT_CODE: "parameters the legacy exporter merged by value, split again",
        FROZEN_FOLD_CODE: "frozen parameters that survive only as the exporter's constants",
    }

    @dataclass
    class Options:
        """Options of ``restore-parameters``.

        Attributes:
            transposes: Restore parameters from folded transposes (else only report).
            merges: Give parameters the legacy exporter merged because their values were
                equal (``b = Identity(a)``) their own initializers again (else only
                report them, ``GP254``).
            frozen: Parameters torch does not train (names or ``fnmatch`` patterns;
                ``train-ready`` shares ``lint-gradients.frozen`` here): one that survives
                only as a fold beyond recovery is no error, its fold stays a constant
                (``GP257``, info).
        """

        transposes: bool = True
        merges: bool = True
        frozen: list[str] = field(default_factory=list)

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Restore folded parameters of the main graph and report the others."""
        graph = model.graph
        parameters = signature_parameters(graph)
        if parameters and records_state(graph):
            split_merged_constants(graph, find_merged_constants(graph))
            work = _Restorer(graph, parameters, self.options.transposes, find_folds(graph))
            reconciled = context.analysis(ReconcileResult)
            work.frozen = [*self.options.frozen, *(reconciled.frozen if reconciled else ())]
            work.restore_folds()
            work.find_lost()
        elif not parameters and not records_state(graph):
            work = _Restorer(graph, {}, self.options.transposes, find_folds(graph))
            work.split_merges = self.options.merges
            work.legacy_copies()
        else:
            return PassResult()
        work.mark_ties()
        verification = verify(graph, work.checks, [])
        verification.raise_problems(self.name)
        return PassResult(changed=bool(work.restored) or bool(work.folding.ties)
                          or bool(work.split),
                          findings=[f.with_pass(self.name) for f in work.findings()],
                          stats={"restored": len(work.restored),
                                 "unrecoverable": len(work.lost), "split": len(work.split),
                                 "frozen kept": len(work.kept)},
                          analyses=[UnrestorableParameters(frozenset(
                              name for lost in work.lost for name in lost.parameters))])


@dataclass
class _Lost:
    """Parameters that went into one value or node."""

    parameters: list[str]
    value: str | None
    node: str | None
    how: str


class _Restorer:
    def __init__(self, graph: Graph, parameters: dict[str, str], transposes: bool,
                 folding: Folding) -> None:
        self.graph = graph
        self.parameters = parameters
        self.transposes = transposes
        self.folding = folding
        self.advice = unfolded_export_advice(graph)
        self.restored: dict[str, str] = {}  # folded value -> the parameter it is computed from
        self.recipes: dict[str, str] = {}  # folded value -> how (``Transpose(W)``)
        self.evidence: dict[str, str] = {}  # folded value -> how its recipe was established
        self.lost: list[_Lost] = []
        self.legacy: list[tuple[str, str]] = []  # (copy, consumer)
        self.merged: dict[str, str] = {}  # parameter name -> the initializer it reads
        self.split: dict[str, str] = {}  # parameter name -> the initializer it was split from
        self.split_merges = True
        self.unused: list[str] = []
        self.checks: list[FoldCheck] = []  # recomputations to run in onnxruntime
        self.frozen: list[str] = []  # names or patterns of parameters torch does not train
        self.kept: list[_Lost] = []  # frozen parameters left as the exporter's constants

    # ----------------------------------------------------------- dynamo exports
    def restore_folds(self) -> None:
        """Compute each parameter's folded copies from the parameter, where the file holds it."""
        for fold in self.folding.parameter_folds():
            if fold.source not in self.parameters:
                continue
            problem = self._restore_problem(fold)
            if problem is None:
                self._restore(fold)
                continue
            lost = _Lost(
                [fold.source], fold.name, self._first_consumer(fold.name),
                f"the exporter's optimizer computed {fold.name!r} at export time from "
                f"{_listed([fold.source, *fold.others])} ({problem})")
            (self.kept if self._is_frozen(fold.source) else self.lost).append(lost)

    def _is_frozen(self, parameter: str) -> bool:
        """Whether torch does not train ``parameter`` (the ``frozen`` option, the record)."""
        return weight_matches(parameter, self.frozen)

    def _restore_problem(self, fold: Fold) -> str | None:
        """Why ``fold`` cannot be computed from its parameter (``None``: it can)."""
        if not self.transposes:
            return "restoring is switched off"
        if fold.recipe is None:
            return fold.problem or "graphpass does not know how it was computed"
        if self.graph.values[fold.name].is_graph_output:
            return "it is a graph output"
        if fold.name not in self.graph.initializers:
            return "the file does not hold it"
        unread = [name for name in fold.recipe.reads if name not in self.graph.initializers]
        if unread:
            return (f"{fold.recipe.describe(fold.source)} reads {_listed(unread)} too, "
                    "whose values the file does not hold")
        others = [self.graph.initializers[name].numpy() for name in fold.recipe.reads]
        if fold.source in self.graph.initializers and fold.source not in self.folding.fused:
            # the parameter is there (a tied weight, or restored for another copy)
            source = self.graph.initializers[fold.source].numpy()
            constant = self.graph.initializers[fold.name].numpy()
            try:
                same = fold.recipe.same_values(fold.recipe.compute(source, *others), constant)
            except (ValueError, IndexError):
                same = False
            return None if same else (f"it differs from {fold.recipe.describe(fold.source)}, "
                                      f"and {fold.source!r} is in the model")
        if self.graph.is_defined(fold.source) or self.graph.is_used(fold.source):
            return f"the name {fold.source!r} is taken by another value"
        constant = self.graph.initializers[fold.name].numpy()
        values = fold.recipe.source_of(constant, None)
        if values is None:
            return (f"{fold.recipe.describe(fold.source)} holds only part of the parameter's "
                    "values")
        if not fold.recipe.same_values(fold.recipe.compute(values, *others), constant):
            return (f"the parameter's values read back from it do not give it again through "
                    f"{fold.recipe.describe(fold.source)}")
        return None

    def _restore(self, fold: Fold) -> None:
        graph = self.graph
        assert fold.recipe is not None
        constant = graph.initializers[fold.name].numpy()
        if fold.source not in graph.initializers:
            folded = graph.initializers[fold.name]
            values = fold.recipe.source_of(folded.numpy(), None)
            assert values is not None
            graph.set_initializer(Tensor.from_array(fold.source, values, folded.dtype))
            mark_state(graph, fold.source, "parameter", self.parameters.get(fold.source))
            graph.values[fold.source].set_metadata(
                _TAG, f"restored from the exporter's {fold.name!r} "
                      f"({fold.recipe.describe(fold.source)}"
                      + (f"; {fold.evidence})" if fold.evidence else ")"))
        nodes = recompute(graph, fold)
        for node in nodes:
            node.set_metadata(_TAG, f"{fold.recipe.describe(fold.source)} replaces the "
                                    f"exporter's folded copy")
        if fold.recipe.kind != "transpose":  # a Transpose node cannot differ
            self.checks.append(FoldCheck(fold.name, nodes, constant, fold.recipe.exact))
        self.restored[fold.name] = fold.source
        self.recipes[fold.name] = fold.recipe.describe(fold.source)
        self.evidence[fold.name] = fold.evidence

    def find_lost(self) -> None:
        """Parameters the signature lists that the model lacks, or holds rewritten."""
        graph = self.graph
        accounted = {p for lost in (*self.lost, *self.kept) for p in lost.parameters}
        accounted.update(alias for aliases in self.folding.ties.values() for alias in aliases)
        rewritten = [p for p in self.parameters if p in graph.initializers
                     and self._rewritten(p)]
        missing = [p for p in self.parameters
                   if p not in graph.initializers and p not in accounted]
        readers = self._fx_readers()
        by_node: dict[int, tuple[Node, list[str]]] = {}
        for parameter in [*rewritten, *missing]:
            nodes = readers.get(self.parameters[parameter], [])
            if parameter in rewritten:
                nodes = nodes or [n for n in graph.consumers(parameter)]
            if not nodes:
                self.unused.append(parameter)
                continue
            node = nodes[0]
            by_node.setdefault(id(node), (node, []))[1].append(parameter)
        for node, lost in by_node.values():
            held = [p for p in lost if p in rewritten]
            what = fx_target(node) or node.op_type
            self.lost.append(_Lost(
                lost, held[0] if held else None, node.name or node.op_type,
                f"node {node.name or node.op_type!r} ({node.op_type}) is what the exporter's "
                f"optimizer made of {what} on them"
                + (f"; {_listed(held)} now hold{'s' * (len(held) == 1)} the fused values, "
                   "not the parameter's" if held else "")))

    def _rewritten(self, parameter: str) -> bool:
        """Whether the initializer named ``parameter`` holds something else now.

        It lost its ``InputSpec`` record, and the nodes that read it are recorded as FX
        nodes that do not read the parameter (a Conv recorded as the BatchNorm fused into
        it). A weight filled from a checkpoint has no record either, but its readers'
        FX nodes read its placeholder.
        """
        metadata = self.graph.values[parameter].metadata
        if INPUT_KIND in metadata or _TAG in metadata:
            return False
        consumers = self.graph.consumers(parameter)
        placeholder = self.parameters[parameter]
        recorded = [node for node in consumers if fx_arguments(node)]
        return bool(recorded) and len(recorded) == len(consumers) and \
            not any(placeholder in fx_arguments(node) for node in recorded)

    def _fx_readers(self) -> dict[str, list[Node]]:
        readers: dict[str, list[Node]] = {}
        for node in self.graph:
            for placeholder in fx_placeholders(node):
                if placeholder.kind == "parameter":
                    readers.setdefault(placeholder.name, []).append(node)
        return readers

    # ----------------------------------------------------------- legacy exports
    def legacy_copies(self) -> None:
        """The legacy exporter's folded copies: tied ones restored, the others reported."""
        reported: set[int] = set()
        for fold in self.folding.folds.values():
            if fold.recipe is not None and fold.source in self.graph.initializers \
                    and self.transposes and not self.graph.values[fold.name].is_graph_output:
                constant = self.graph.initializers[fold.name].numpy()
                nodes = recompute(self.graph, fold)
                for node in nodes:
                    node.set_metadata(_TAG, f"{fold.recipe.describe(fold.source)} replaces the "
                                            "legacy exporter's folded copy")
                if fold.recipe.kind != "transpose":
                    self.checks.append(FoldCheck(fold.name, nodes, constant, fold.recipe.exact))
                self.restored[fold.name] = fold.source
                self.recipes[fold.name] = fold.recipe.describe(fold.source)
                continue
            consumers = [node for node, slot in self.graph.uses(fold.name) if node is not None
                         and slot in _WEIGHT_SLOTS.get(node.op_type, ())]
            if consumers and id(consumers[0]) not in reported:
                reported.add(id(consumers[0]))
                self.legacy.append((fold.name, consumers[0].name or consumers[0].op_type))
        for fused in self.folding.fused.values():  # found only with a checkpoint's values
            self.legacy.append((fused.weight, fused.node.name or "Conv"))
        for name, tensor in self.graph.initializers.items():  # fused convolutions
            if LEGACY_CONSTANT_NAME.fullmatch(name) and tensor.dtype in TRAINABLE_TYPES and \
                    name not in self.folding.folds:
                consumers = [node for node, slot in self.graph.uses(name) if node is not None
                             and node.op_type == "Conv" and slot == 1]
                if consumers and id(consumers[0]) not in reported:
                    reported.add(id(consumers[0]))
                    self.legacy.append((name, consumers[0].name or "Conv"))
        self._merged_parameters()

    def _merged_parameters(self) -> None:
        """Split the parameters the legacy exporter merged because their values were equal.

        :func:`~graphpass.torch.folding.find_merges` says why such an ``Identity`` is
        never a tie; each gets its own initializer again (``GP256``), or, with
        ``merges = false``, is reported as training as one tensor (``GP254``).
        """
        merges = find_merges(self.graph)
        if self.split_merges:
            split = split_merges(self.graph, merges)
            self.split = {name: merges[name] for name in split}
            merges = {name: source for name, source in merges.items() if name not in split}
        self.merged = merges

    # -------------------------------------------------------------------- ties
    def mark_ties(self) -> None:
        """Record on each tied initializer its other torch names (for checkpoints written back)."""
        mark_ties(self.graph, self.folding.ties)

    # ----------------------------------------------------------------- findings
    def findings(self) -> list[Finding]:
        found: list[Finding] = []
        if self.restored:
            pairs = [f"{v} = {how}" for v, how in self.recipes.items()]
            count = len(set(self.restored.values()))
            found.append(Finding(
                RESTORED_CODE, Severity.INFO,
                f"restored {count} parameter{'s' * (count != 1)} the exporter had folded into "
                f"copies; the copies are computed from {'them' if count != 1 else 'it'} again, "
                f"so that training updates {'them' if count != 1 else 'it'}: "
                f"{shortened_list(pairs, _SHOWN)}",
                data={"restored": dict(self.restored), "recipes": dict(self.recipes),
                      "evidence": dict(self.evidence)}))
        if self.folding.ties:
            pairs = [f"{alias} is {name}" for name, aliases in self.folding.ties.items()
                     for alias in aliases]
            found.append(Finding(
                TIED_CODE, Severity.INFO,
                f"{len(pairs)} tied parameter name{'s' * (len(pairs) != 1)}: "
                f"{shortened_list(pairs, _SHOWN)} (one tensor in torch; the export reads one "
                "initializer for every use, which trains once, with the gradient of all its "
                "uses, as torch's does)",
                value=next(iter(self.folding.ties)),
                data={"ties": {name: list(aliases)
                               for name, aliases in self.folding.ties.items()}}))
        for lost in self.lost:
            found.append(Finding(
                UNRECOVERABLE_CODE, Severity.ERROR,
                f"torch parameter{'s' * (len(lost.parameters) != 1)} "
                f"{shortened_list(lost.parameters, _SHOWN, quote=True)} cannot be trained: "
                f"{lost.how}, and their own values are not in the model. Training would "
                "update an exporter-made copy, not the parameter",
                node=lost.node, value=lost.value,
                hint=self.advice + " (or fill the model from a checkpoint that holds the "
                     "parameters: reconcile-initializers computes the copies from them)",
                data={"parameters": lost.parameters}))
        for kept in self.kept:
            found.append(Finding(
                FROZEN_FOLD_CODE, Severity.INFO,
                f"frozen torch parameter{'s' * (len(kept.parameters) != 1)} "
                f"{shortened_list(kept.parameters, _SHOWN, quote=True)} survive"
                f"{'s' * (len(kept.parameters) == 1)} only as a constant: {kept.how}. Torch "
                "does not train it (named frozen), so the constant stays as exported and "
                "training is not affected; the model does not hold the parameter itself, so a "
                "checkpoint written back for torch cannot hold its key without the model's "
                "state given as --checkpoint",
                node=kept.node, value=kept.value,
                hint="to write a torch checkpoint after training, fill the model from its "
                     "state (--checkpoint with a graphpass.torch.save_state file or a "
                     "state_dict()); " + self.advice,
                data={"parameters": kept.parameters}))
        for copy, consumer in self.legacy:
            found.append(Finding(
                LEGACY_COPY_CODE, Severity.ERROR,
                f"initializer {copy!r} is read as a weight of {consumer!r}, but has a name the "
                "legacy exporter gives constants: its constant folding made it from "
                "parameters (a transposed linear weight, a convolution with the BatchNorm "
                "after it fused in), which training would not update",
                node=consumer, value=copy,
                hint=self.advice + " (or fill the model from a checkpoint that holds the "
                     "parameters: reconcile-initializers computes the copies from them)"))
        if self.split:
            pairs = [f"{name} = Identity({source})" for name, source in self.split.items()]
            found.append(Finding(
                SPLIT_CODE, Severity.INFO,
                f"split {len(pairs)} torch tensor{'s' * (len(pairs) != 1)} (parameters, "
                f"running statistics) the legacy exporter had merged because their values were "
                f"equal: {shortened_list(pairs, _SHOWN)} "
                "became initializers of their own (exported in eval mode, it writes distinct "
                "tensors of equal values, such as fresh LayerNorm weights (all ones), as "
                "Identity of one; a tie, one Parameter, is exported once), so each trains "
                "apart, as in torch",
                value=next(iter(self.split)), data={"split": dict(self.split)}))
        if self.merged:
            pairs = [f"{name} = Identity({source})" for name, source in self.merged.items()]
            found.append(Finding(
                MERGED_CODE, Severity.WARNING,
                f"{len(pairs)} parameter{'s' * (len(pairs) != 1)} of the legacy export read "
                "another parameter's initializer, so training updates them as one tensor: "
                f"{shortened_list(pairs, _SHOWN)}. In eval mode the exporter merges distinct "
                "tensors of equal values (fresh LayerNorm weights are all ones, biases all "
                "zeros); torch trains them apart",
                value=next(iter(self.merged)), hint=MERGED_ADVICE,
                data={"merged": dict(self.merged)}))
        if self.unused:
            absent = [p for p in self.unused if p not in self.graph.initializers]
            found.append(Finding(
                UNUSED_CODE, Severity.INFO,
                f"{len(self.unused)} torch parameter{'s' * (len(self.unused) != 1)} no node "
                f"uses any more (torch gives them no gradient either): "
                f"{shortened_list(self.unused, _SHOWN, quote=True)}"
                + (f"; the file does not hold the values of {_listed(absent)}" if absent
                   else ""),
                hint=("to write a torch checkpoint with every state_dict() key after "
                      "training (graphpass train --checkpoint-out), give the model's state "
                      "as --checkpoint (graphpass.torch.save_state, or its state_dict() as "
                      "safetensors); the trained model itself (--save) needs none of them")
                if absent else None,
                data={"parameters": self.unused, "not_held": absent}))
        return found

    def _first_consumer(self, name: str) -> str | None:
        nodes = [node for node, _ in self.graph.uses(name) if node is not None]
        return (nodes[0].name or nodes[0].op_type) if nodes else None


def _listed(names: Iterable[str]) -> str:
    return shortened_list(list(names), _SHOWN, quote=True)
