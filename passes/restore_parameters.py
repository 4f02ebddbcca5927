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
* every other parameter the graph signature lists that is folded, fused or rewritten
  is an error naming the value or node it went into (``GP251``), with the advice to
  re-export with ``optimize=False``;
* the legacy exporter (``dynamo=False``) records nothing, but its constant folding
  names the copies it makes ``onnx::MatMul_N``, ``onnx::Conv_N``: a copy whose
  transpose equals an initializer is replaced by ``Transpose`` of it (tied weights);
  any other float ``onnx::`` initializer read as a layer's weight (``MatMul``,
  ``Gemm``, ``Conv``) is an error (``GP252``, one per node) with the advice to
  re-export with ``do_constant_folding=False``.

Parameters no node's FX record mentions any more (torch's forward never used them, or
their only use was dead code) are listed in an info (``GP253``): PyTorch gives them no
gradient either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np

from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework.pass_base import Pass, PassContext, PassResult
from graphpass.ir import Graph, Model, Node, Tensor
from graphpass.torch.export_record import (
    FOLDED_FROM,
    INPUT_KIND,
    LEGACY_CONSTANT_NAME,
    ORIGINAL_NAME,
    TRAINABLE_TYPES,
    folded_from,
    fx_arguments,
    fx_placeholders,
    fx_target,
    records_state,
    signature_parameters,
)

__all__ = ["RestoreParameters"]

RESTORED_CODE: Final = "GP250"
UNRECOVERABLE_CODE: Final = "GP251"
LEGACY_COPY_CODE: Final = "GP252"
UNUSED_CODE: Final = "GP253"
MERGED_CODE: Final = "GP254"

OPTIMIZE_ADVICE: Final = (
    "re-export with torch.onnx.export(..., dynamo=True, optimize=False): every parameter "
    "then keeps an initializer of its own (or train only the parameters that are there, "
    "naming them with lint-gradients' trainable option)")
FOLDING_ADVICE: Final = (
    "re-export with torch.onnx.export(..., dynamo=False, do_constant_folding=False), or "
    "with dynamo=True, optimize=False: every parameter then keeps an initializer of its own")
MERGED_ADVICE: Final = (
    "if they are distinct parameters in torch, re-export with torch.onnx.export(..., "
    "dynamo=True, optimize=False) (or from weights that differ, as after training); tied "
    "weights (one tensor in torch) are right as they are")
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
    codes: ClassVar[dict[str, str]] = {
        RESTORED_CODE: "parameters restored from the exporter's folded transposes",
        UNRECOVERABLE_CODE: "torch parameters folded, fused or rewritten beyond recovery",
        LEGACY_COPY_CODE: "the legacy exporter's constant folding copied a parameter",
        UNUSED_CODE: "parameters no node uses any more",
        MERGED_CODE: "the legacy exporter merged parameters into one initializer",
    }

    @dataclass
    class Options:
        """Options of ``restore-parameters``.

        Attributes:
            transposes: Restore parameters from folded transposes (else only report).
        """

        transposes: bool = True

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Restore folded parameters of the main graph and report the others."""
        graph = model.graph
        parameters = signature_parameters(graph)
        if parameters and records_state(graph):
            work = _Restorer(graph, parameters, self.options.transposes)
            work.restore_folds()
            work.find_lost()
        elif not parameters and not records_state(graph):
            work = _Restorer(graph, {}, self.options.transposes)
            work.legacy_copies()
        else:
            return PassResult()
        return PassResult(changed=bool(work.restored),
                          findings=[f.with_pass(self.name) for f in work.findings()],
                          stats={"restored": len(work.restored),
                                 "unrecoverable": len(work.lost)})


@dataclass
class _Lost:
    """Parameters that went into one value or node."""

    parameters: list[str]
    value: str | None
    node: str | None
    how: str


class _Restorer:
    def __init__(self, graph: Graph, parameters: dict[str, str], transposes: bool) -> None:
        self.graph = graph
        self.parameters = parameters
        self.transposes = transposes
        self.restored: dict[str, str] = {}  # folded value -> parameter
        self.lost: list[_Lost] = []
        self.legacy: list[tuple[str, str]] = []  # (copy, consumer)
        self.merged: dict[str, str] = {}  # parameter name -> the initializer it reads
        self.unused: list[str] = []
        self.position = {id(node): index for index, node in enumerate(graph)}

    # ----------------------------------------------------------- dynamo exports
    def restore_folds(self) -> None:
        for name in list(self.graph.initializers):
            sources = folded_from(self.graph.values[name].metadata)
            weights = [s for s in sources if s in self.parameters]
            if not weights:
                continue
            problem = "not a transpose of one parameter: other values went into it" \
                if len(sources) > 1 else \
                self._linear_transpose_problem(name, weights[0])
            if problem is None and self.transposes:
                self._restore(name, weights[0])
                continue
            self.lost.append(_Lost(
                weights, name, self._first_consumer(name),
                f"the exporter's optimizer computed {name!r} at export time from "
                f"{_listed(sources)} ({problem or 'restoring is switched off'})"))

    def _linear_transpose_problem(self, name: str, parameter: str) -> str | None:
        """Why ``name`` is not known to be ``Transpose(parameter)`` (``None``: it is)."""
        tensor = self.graph.initializers[name]
        if len(tensor.shape) != 2 or tensor.dtype not in TRAINABLE_TYPES:
            return f"a {len(tensor.shape)}-D tensor, not a transposed linear weight"
        if self.graph.values[name].is_graph_output:
            return "it is a graph output"
        placeholder = self.parameters[parameter]
        uses = self.graph.uses(name)
        for node, slot in uses:
            if node is None or node.op_type != "MatMul" or slot != 1:
                return "it is read other than as a MatMul weight"
            arguments = fx_arguments(node)
            if fx_target(node) != _LINEAR or len(arguments) < 2 or \
                    arguments[1] != placeholder:
                return f"node {node.name!r} is not recorded as aten.linear of the parameter"
        if not uses:
            return "nothing reads it"
        existing = self.graph.initializers.get(parameter)
        if existing is not None and not np.array_equal(existing.numpy().T, tensor.numpy()):
            return f"it differs from the transpose of {parameter!r}, which is in the model"
        if existing is None and parameter in self.graph.values and \
                self.graph.values[parameter].is_defined:
            return f"the name {parameter!r} is taken by another value"
        return None

    def _restore(self, name: str, parameter: str) -> None:
        graph = self.graph
        folded = graph.remove_initializer(name)
        if parameter not in graph.initializers:
            weight = np.ascontiguousarray(folded.numpy().T)
            value = graph.set_initializer(Tensor.from_array(parameter, weight, folded.dtype))
            value.set_metadata(INPUT_KIND, "PARAMETER")
            value.set_metadata(ORIGINAL_NAME, self.parameters[parameter])
            value.set_metadata(_TAG, f"restored as the transpose of the exporter's {name!r}")
        graph.values[name].set_metadata(FOLDED_FROM, None)
        consumers = [node for node, _ in graph.uses(name) if node is not None]
        first = min(consumers, key=lambda node: self.position.get(id(node), len(self.position)))
        graph.insert_before(first, Node(
            "Transpose", [parameter], [name], name=f"{name}__restored",
            attributes={"perm": [1, 0]},
            metadata={_TAG: f"Transpose({parameter}) replaces the exporter's folded copy"}))
        self.restored[name] = parameter

    def find_lost(self) -> None:
        """Parameters the signature lists that the model lacks, or holds rewritten."""
        graph = self.graph
        accounted = {p for lost in self.lost for p in lost.parameters}
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
        graph = self.graph
        named = {name: tensor for name, tensor in graph.initializers.items()
                 if not LEGACY_CONSTANT_NAME.fullmatch(name)
                 and tensor.dtype in TRAINABLE_TYPES and len(tensor.shape) == 2}
        reported: set[int] = set()
        for name, tensor in list(graph.initializers.items()):
            if not LEGACY_CONSTANT_NAME.fullmatch(name) or tensor.dtype not in TRAINABLE_TYPES \
                    or graph.values[name].is_graph_output:
                continue
            weight_uses = [node for node, slot in graph.uses(name) if node is not None
                           and slot in _WEIGHT_SLOTS.get(node.op_type, ())]
            if not weight_uses:
                continue
            tied = self._tied(tensor, named) if self.transposes and len(tensor.shape) == 2 \
                else None
            if tied is not None:
                self._restore_legacy(name, tied)
            elif id(weight_uses[0]) not in reported:
                reported.add(id(weight_uses[0]))
                self.legacy.append((name, weight_uses[0].name or weight_uses[0].op_type))

        self._merged_parameters()

    def _merged_parameters(self) -> None:
        """Parameters the legacy exporter wrote as ``Identity`` of another initializer.

        Its ``DeduplicateInitializers`` keeps one initializer for parameters that are one
        tensor (tied weights) and, exporting in eval mode, for parameters of equal values
        (fresh LayerNorms: all ones); the others become ``Identity`` nodes named as the
        parameter. Both look the same in the file, and both train as one tensor.
        """
        graph = self.graph
        for node in graph:
            if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or \
                    len(node.inputs) != 1 or len(node.outputs) != 1:
                continue
            source, name = node.inputs[0], node.outputs[0]
            tensor = graph.initializers.get(source)
            if tensor is None or tensor.dtype not in TRAINABLE_TYPES or \
                    name in graph.initializers or name.startswith("/") or \
                    LEGACY_CONSTANT_NAME.fullmatch(name) or "." not in name:
                continue
            self.merged[name] = source

    def _tied(self, tensor: Tensor, named: dict[str, Tensor]) -> str | None:
        shape = tuple(reversed(tensor.shape))
        values = tensor.numpy()
        for name, other in named.items():
            if tuple(other.shape) == shape and other.dtype == tensor.dtype and \
                    np.array_equal(other.numpy().T, values):
                return name
        return None

    def _restore_legacy(self, name: str, source: str) -> None:
        graph = self.graph
        graph.remove_initializer(name)
        consumers = [node for node, _ in graph.uses(name) if node is not None]
        first = min(consumers, key=lambda node: self.position.get(id(node), len(self.position)))
        graph.insert_before(first, Node(
            "Transpose", [source], [name], name=f"{name}__restored",
            attributes={"perm": [1, 0]},
            metadata={_TAG: f"Transpose({source}) replaces the legacy exporter's folded copy"}))
        self.restored[name] = source

    # ----------------------------------------------------------------- findings
    def findings(self) -> list[Finding]:
        found: list[Finding] = []
        if self.restored:
            pairs = [f"{v} = Transpose({p})" for v, p in self.restored.items()]
            found.append(Finding(
                RESTORED_CODE, Severity.INFO,
                f"restored {len(pairs)} parameter{'s' * (len(pairs) != 1)} the exporter had "
                f"folded into transposed copies, so that training updates them: "
                f"{shortened_list(pairs, _SHOWN)}",
                data={"restored": dict(self.restored)}))
        for lost in self.lost:
            found.append(Finding(
                UNRECOVERABLE_CODE, Severity.ERROR,
                f"torch parameter{'s' * (len(lost.parameters) != 1)} "
                f"{shortened_list(lost.parameters, _SHOWN, quote=True)} cannot be trained: "
                f"{lost.how}, and their own values are not in the model. Training would "
                "update an exporter-made copy, not the parameter",
                node=lost.node, value=lost.value, hint=OPTIMIZE_ADVICE,
                data={"parameters": lost.parameters}))
        for copy, consumer in self.legacy:
            found.append(Finding(
                LEGACY_COPY_CODE, Severity.ERROR,
                f"initializer {copy!r} is read as a weight of {consumer!r}, but has a name the "
                "legacy exporter gives constants: its constant folding made it from "
                "parameters (a transposed linear weight, a convolution with the BatchNorm "
                "after it fused in), which training would not update",
                node=consumer, value=copy, hint=FOLDING_ADVICE))
        if self.merged:
            pairs = [f"{name} = Identity({source})" for name, source in self.merged.items()]
            found.append(Finding(
                MERGED_CODE, Severity.WARNING,
                f"{len(pairs)} parameter{'s' * (len(pairs) != 1)} of the legacy export read "
                "another parameter's initializer, so training updates them as one tensor: "
                f"{shortened_list(pairs, _SHOWN)}. The exporter merges parameters that are one "
                "tensor (tied weights) and, in eval mode, parameters of equal values (fresh "
                "LayerNorm weights are all ones, biases all zeros)",
                value=next(iter(self.merged)), hint=MERGED_ADVICE,
                data={"merged": dict(self.merged)}))
        if self.unused:
            found.append(Finding(
                UNUSED_CODE, Severity.INFO,
                f"{len(self.unused)} torch parameter{'s' * (len(self.unused) != 1)} no node "
                f"uses any more (torch gives them no gradient either): "
                f"{shortened_list(self.unused, _SHOWN, quote=True)}",
                data={"parameters": self.unused}))
        return found

    def _first_consumer(self, name: str) -> str | None:
        nodes = [node for node, _ in self.graph.uses(name) if node is not None]
        return (nodes[0].name or nodes[0].op_type) if nodes else None


def _listed(names: Iterable[str]) -> str:
    return shortened_list(list(names), _SHOWN, quote=True)
