"""The ``lint-gradients`` pass: say, before training, which nodes the trainer cannot differentiate.

Training an exported model with onnxruntime-training fails late and one node at a
time (``The gradient builder has not been registered: M for node M_1``). This pass
computes the region gradients flow through (forward from the trainable weights,
backward from the loss, through float edges that are not stop edges: see
``_region``) and judges every node in it against a
:class:`~graphpass.GradientRules` (default: onnxruntime-training).

Findings, in the order the trainer meets the problems (the first error is the one
the trainer reports):

* ``GP406`` a trainable weight is read inside a subgraph;
* ``GP402`` a trainable weight reaches no loss through differentiable edges;
* ``GP401`` no gradient builder for a node's operator;
* ``GP410`` a call of a model-local function (no builder; run ``inline-functions``);
* ``GP403`` a registered builder that fails on this node (a known condition);
* ``GP420`` (warning) a function or custom-domain op named like a registered
  operator of another domain: the trainer would silently use that gradient;
* ``GP404`` a weight reaches the loss only through non-differentiable inputs;
* ``GP405`` one node reads a weight at two differentiable inputs;
* ``GP407`` the loss has an element type the trainer does not accept;
* ``GP423`` (info) float weights left out of the default trainable set, with the rule
  that left out each (torch's export record, a running statistic, a constant's name or
  use: :func:`graphpass.torch._export_record.default_trainable_rules`);
* ``GP426`` torch parameters the model still computes with that the default trainable
  set leaves out (folded into a constant, fused into a node, or left out by name):
  training would leave them where they are;
* ``GP427`` (info) parameters kept fixed because the checkpoint the model was filled
  from records that torch does not train them (``requires_grad=False``, the record of
  ``graphpass.torch.save_state``; ``ReconcileResult.frozen``);
* ``GP425`` a registered builder that computes a wrong gradient on this node (a known
  condition, measured against finite differences: the trainer builds and runs it, and
  the gradients come out wrong);
* ``GP424`` (warning) a ``BatchNormalization`` on the gradient path normalises so few
  values a channel (batch x spatial size) that its float32 gradient is rounding noise;
* ``GP421`` / ``GP422`` (warnings) a ``trainable``/``frozen`` pattern that matches
  nothing, a requested weight that is not of a float type.

Inside the body of a called function (judged as if inlined), the findings carry the
function's name and come after the main graph's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from graphpass.checkpoint import ReconcileResult
from graphpass.errors import PassError, PluginError
from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework import AnalysisPass, PassContext, PassResult
from graphpass.ir import CAPTURE, Function, Graph, Model, Node, dtype_name, paused_gc
from graphpass.passes._gradient_view import resolve_constant_ifs
from graphpass.torch import INPUT_KIND, NOT_SAVED, default_trainable_rules, parameters_left_out
from graphpass.torch.folding import UnrestorableParameters
from graphpass.training import (
    FunctionTypes,
    ModelTypes,
    Region,
    TypeInfo,
    differentiable_region,
    input_bits,
    names_of,
    registered_builders,
    weight_bits,
)
from graphpass.training.rules import (
    DerivedRules,
    GradientRules,
    NodeSite,
    SelectionReport,
    TrainerFailureKind,
    normalize_domain,
    trainable_weights,
    weight_matches,
)

__all__ = ["CODES", "LintGradients"]

CODES: Final = {
    "missing": "GP401",
    "unreachable": "GP402",
    "broken": "GP403",
    "no-gradient": "GP404",
    "duplicate": "GP405",
    "captured": "GP406",
    "loss-type": "GP407",
    "function": "GP410",
    "borrowed": "GP420",
    "no-match": "GP421",
    "not-float": "GP422",
    "not-parameters": "GP423",
    "few-values": "GP424",
    "wrong-gradient": "GP425",
    "parameter-left-out": "GP426",
    "frozen-in-torch": "GP427",
}
"""The finding codes of ``lint-gradients`` by problem (stable)."""

_DESCRIPTIONS: Final = {
    "missing": "No gradient builder for a node's operator.",
    "unreachable": "A trainable weight reaches no loss through differentiable edges.",
    "broken": "A registered gradient builder fails on this node (a known condition).",
    "no-gradient": "A weight reaches the loss only through non-differentiable inputs.",
    "duplicate": "One node reads a weight at two differentiable inputs.",
    "captured": "A trainable weight is read inside a subgraph.",
    "loss-type": "The loss has an element type the trainer does not accept.",
    "function": "A call of a model-local function has no gradient builder (run "
                "inline-functions).",
    "borrowed": "A function or custom-domain op is named like a registered operator of "
                "another domain: the trainer would silently use that gradient.",
    "no-match": "A trainable or frozen pattern matches no weight.",
    "not-float": "A requested trainable weight is not of a float type.",
    "not-parameters": "Float weights left out of the default trainable set, with the rule "
                      "that left out each.",
    "few-values": "A BatchNormalization on the gradient path normalises so few values a "
                  "channel that its float32 gradient is rounding noise.",
    "wrong-gradient": "A registered gradient builder computes a wrong gradient on this node "
                      "(a known condition).",
    "parameter-left-out": "Torch parameters the model still computes with are left out of "
                          "the default trainable set.",
    "frozen-in-torch": "Parameters the checkpoint records as not trained in torch "
                       "(requires_grad=False, graphpass.torch.save_state's record) are kept "
                       "fixed.",
}

_SHOWN: Final = 4
_MAX_FUNCTION_DEPTH: Final = 32
FEW_VALUES: Final = 8
"""A trained ``BatchNormalization`` over at most this many values a channel is warned about.

With batch statistics (how onnxruntime-training trains it) over ``n`` values, the
normalised output is nearly independent of the input when ``n`` is tiny (``n = 2``:
+-1 whatever the input), so the gradient of everything before it is a difference of
nearly equal float32 numbers. Measured on MobileNetV2 (32x32 images, batch 2, so 2
values a channel in its last stages): torch's own float32 gradients differ from its
float64 ones by up to twice the largest gradient, onnxruntime-training's likewise; at
64x64 and batch 4 (16 values) both agree with float64 to 1e-4."""


def _op_label(domain: str, op_type: str) -> str:
    domain = normalize_domain(domain)
    return f"{domain}::{op_type}" if domain else op_type


def _node_label(node: Node) -> str:
    return node.name or node.op_type


def _torch_origin(graph: Graph, name: str, torch_export: bool) -> str:
    """`` (a torch buffer)`` and the like, from torch's export metadata, else ``""``.

    ``torch_export``: whether the graph carries that metadata at all.
    """
    value = graph.values.get(name)
    kind = value.metadata.get(INPUT_KIND) if value is not None else None
    if kind in ("BUFFER", "CONSTANT_TENSOR"):
        return f" (torch's export marks it as a {kind.lower().replace('_', ' ')})"
    if kind is None and torch_export:
        return " (not a torch parameter: an exporter constant)"
    return ""


def _graph_path(graph: Graph) -> str | None:
    """``None`` for a top-level graph, else ``main > If 'cond' > then_branch``."""
    parts: list[str] = []
    current = graph
    while current.parent is not None and current.parent_graph is not None:
        node = current.parent
        attribute = next((name for name, attr in node.attributes.items()
                          if any(g is current for g in attr.graphs)), "?")
        label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        parts.append(f"{label} > {attribute}")
        current = current.parent_graph
    if not parts:
        return None
    root = "body" if current.function is not None else "main"
    return " > ".join([root, *reversed(parts)])


@dataclass
class _Scope:
    """Where nodes are judged: the main graph, a function body or a subgraph."""

    graph: Graph
    type_of: Callable[[str], TypeInfo]
    function: Function | None = None
    caller: str | None = None
    blocks: list[str] | None = None  # weights blocked by the caller (bodies, subgraphs)


@dataclass
class _Report:
    """Findings by stage, in the order the trainer meets them."""

    graph: list[Finding] = field(default_factory=list)
    captured: list[Finding] = field(default_factory=list)
    unreachable: list[Finding] = field(default_factory=list)
    nodes: list[Finding] = field(default_factory=list)
    deferred: list[Finding] = field(default_factory=list)
    after_build: list[Finding] = field(default_factory=list)
    bodies: dict[tuple[int, int], Finding] = field(default_factory=dict)

    def ordered(self) -> list[Finding]:
        return [*self.graph, *self.captured, *self.unreachable, *self.nodes, *self.deferred,
                *self.after_build, *self.bodies.values()]


class LintGradients(AnalysisPass):
    """Name every node on the trainable path that the trainer cannot differentiate."""

    name = "lint-gradients"
    codes: ClassVar[Mapping[str, str]] = {CODES[problem]: text
                                          for problem, text in _DESCRIPTIONS.items()}
    description = "Name every node on the trainable path that the trainer cannot differentiate."
    after = ("inline-functions", "reconcile-initializers", "detect-missing-buffers")
    provides = (SelectionReport,)

    @dataclass
    class Options:
        """Options of ``lint-gradients``.

        Attributes:
            rules: The gradient rule set to judge by (default: the default rule set,
                ``onnxruntime-training``; see ``graphpass plugins`` for others).
            trainable: The trainable weights: initializer (or graph input) names or
                ``fnmatch`` patterns. Default: every initializer of a float type, except
                those torch's export record marks as buffers or constants (PyTorch
                never trains those); ``["*"]`` takes every float initializer.
            frozen: Weights to leave out of ``trainable`` (names or patterns).
            loss: The loss outputs. Default: every graph output.
            loss_added: Whether the trainer adds a loss block after the outputs
                (``generate_artifacts`` with a loss: ``emit-training-artifacts``' default),
                which then stop being graph outputs; false when the model's output
                already is the loss (``emit-training-artifacts.loss = "none"``).
        """

        rules: str | None = None
        trainable: list[str] = field(default_factory=list)
        frozen: list[str] = field(default_factory=list)
        loss: list[str] = field(default_factory=list)
        loss_added: bool = True

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Judge every node on the differentiable path.

        Args:
            model: The model (not changed).
            context: Gives the registry the rule set comes from.

        Returns:
            The findings, in the order the trainer would meet them.

        Raises:
            PassError: A ``loss`` output is not in the model.
            PipelineError: The rule set is unknown.
        """
        # What the lint builds (edges, sites, types of every value) is freed when it
        # returns, by reference counting; the collector would only scan it over and over.
        with paused_gc():
            return self._run(model, context)

    def _run(self, model: Model, context: PassContext) -> PassResult:
        rules = self._rules(context)
        reconciled = context.analysis(ReconcileResult)
        findings, trainable, frozen, because = _select_trainable(model.graph, self.options,
                                                                 rules, reconciled)
        selection = SelectionReport(
            tuple(self.options.trainable), tuple(self.options.frozen),
            frozenset((str(f.data["selection"]), str(f.value)) for f in findings
                      if isinstance(f.data, dict) and "selection" in f.data))
        if not self.options.trainable:
            findings.extend(_parameters_left_out(
                model.graph, trainable,
                [*self.options.frozen, *(reconciled.frozen if reconciled else ())], context))
        losses = _select_losses(model.graph, self.options.loss)
        view = None
        if rules.resolves_constant_ifs:
            view = resolve_constant_ifs(model, frozenset(trainable) | frozen)
        linter = _Linter(view or model, rules, trainable, loss_added=self.options.loss_added,
                         because=because)
        findings.extend(linter.run(losses))
        return PassResult(changed=False, findings=[f.with_pass(self.name) for f in findings],
                          stats={"rules": rules.label, "trainable weights": len(trainable),
                                 "nodes on the gradient path": linter.visited_count},
                          analyses=[selection])

    def _rules(self, context: PassContext) -> GradientRules:
        rules = context.registry.gradient_rule_set(self.options.rules)
        if isinstance(rules, DerivedRules):  # graphpass's own: from every registered builder
            rules = rules.resolve(registered_builders(context.registry))
        if not isinstance(rules, GradientRules):
            raise PluginError(
                f"gradient rule set {getattr(rules, 'name', rules)!r} is a "
                f"{type(rules).__name__}, not a graphpass.GradientRules",
                hint="a plugin's graphpass_gradient_rules hook must return GradientRules objects")
        return rules


# ====================================================================== selection
def _select_trainable(graph: Graph, options: Any, rules: GradientRules,
                      reconciled: ReconcileResult | None
                      ) -> tuple[list[Finding], list[str], frozenset[str], dict[str, str]]:
    """Pick the weights to train (the checkpoint's record of frozen parameters applies).

    Returns:
        The findings of the selection, the trainable and the frozen weights, and for
        the weights the default took, the rule that made each trainable.
    """
    weights = trainable_weights(graph, options.trainable, options.frozen, codes=CODES,
                                trainer=rules.label, types=rules.differentiable_types,
                                reconciled=reconciled)
    findings = [f for f in weights.findings if f.data["selection"] == "no-match"]
    left_out = weights.selection.left_out
    rules_of: dict[str, str] = {}
    if not options.trainable:
        rules_of = default_trainable_rules(graph)
        if left_out:
            why = {name: rules_of[name] for name in left_out}
            findings.append(Finding(
                CODES["not-parameters"], Severity.INFO,
                f"{len(left_out)} float weight{'s' * (len(left_out) != 1)} left out of the "
                f"default trainable set (they are not parameters): {_by_rule(why)}",
                hint='to train them anyway, name them with the trainable option '
                     '(trainable = ["*"] takes every float weight)',
                data={"left_out": dict(left_out), "rules": why}))
    recorded = weights.selection.recorded
    if recorded:
        findings.append(Finding(
            CODES["frozen-in-torch"], Severity.INFO,
            f"{len(recorded)} parameter{'s' * (len(recorded) != 1)} kept fixed: the "
            f"checkpoint records that torch does not train {'them' if len(recorded) != 1 else 'it'}"
            f" (requires_grad=False): {shortened_list(recorded, _SHOWN, quote=True)}",
            value=recorded[0],
            hint="to train them anyway, name the weights to train with the trainable option "
                 "(it wins over the checkpoint's record)",
            data={"frozen": list(recorded)}))
    findings += [f for f in weights.findings if f.data["selection"] == "not-float"]
    trainable, frozen = weights.trainable, frozenset(weights.frozen)
    return findings, trainable, frozen, {name: rules_of[name] for name in trainable
                                         if name in rules_of}


def _by_rule(rules: dict[str, str]) -> str:
    """``rule: 'a', 'b'; other rule: 'c'``, in the order the rules first come."""
    grouped: dict[str, list[str]] = {}
    for name, rule in rules.items():
        grouped.setdefault(rule, []).append(name)
    return "; ".join(f"{rule}: {shortened_list(names, _SHOWN, quote=True)}"
                     for rule, names in grouped.items())


def _parameters_left_out(graph: Graph, trainable: Sequence[str],
                         frozen_patterns: Sequence[str], context: PassContext) -> list[Finding]:
    """GP426: torch parameters the model computes with that the trainable set leaves out.

    Parameters the user froze are not listed, nor those ``restore-parameters`` already
    reported as beyond recovery (its analysis :class:`UnrestorableParameters`, GP251).
    """
    unrestorable = context.analysis(UnrestorableParameters)
    reported = unrestorable.names if unrestorable is not None else frozenset()
    left_out = {name: where for name, where in parameters_left_out(graph, trainable).items()
                if name not in reported and not weight_matches(name, frozen_patterns)}
    if not left_out:
        return []
    shown = shortened_list([f"{name!r} ({where})" for name, where in left_out.items()], _SHOWN)
    unsaved = [name for name, where in left_out.items() if where == NOT_SAVED]
    hints = []
    if unsaved:  # the file lacks them: a re-export without folding would not help
        hints.append("fill the weights the file does not hold from a checkpoint (graphpass run "
                     "MODEL -o OUT -p train-ready --checkpoint model.safetensors; "
                     "reconcile-initializers fills names the model uses without defining "
                     "them), or save the export with its weights (ONNXProgram.save(path) "
                     "without include_initializers=False)")
    if len(unsaved) < len(left_out):
        hints.append("fill the model from a checkpoint that holds them (reconcile-initializers "
                     "computes the exporter's copies from them), or export without constant "
                     "folding (torch.onnx.export(..., dynamo=True, optimize=False))")
    hints.append("to train without them, name them in lint-gradients' frozen option")
    return [Finding(
        CODES["parameter-left-out"], Severity.ERROR,
        f"{len(left_out)} torch parameter{'s' * (len(left_out) != 1)} the model computes with "
        f"{'are' if len(left_out) != 1 else 'is'} not in the trainable set, so training would "
        f"leave {'them' if len(left_out) != 1 else 'it'} as exported: {shown}",
        value=next(iter(left_out)),
        hint="; ".join(hints),
        data={"parameters": list(left_out), "where": left_out})]


def _select_losses(graph: Graph, loss: Sequence[str]) -> list[str]:
    if not loss:
        return list(graph.output_names)
    for name in loss:
        if name not in graph.values or not graph.is_defined(name):
            raise PassError(f"loss {name!r} is not a value of the model",
                            where="lint-gradients option 'loss'",
                            hint="graph outputs: " + ", ".join(graph.output_names))
    return list(loss)


# ========================================================================= linter
class _Linter:
    """Judges one model against one rule set."""

    def __init__(self, model: Model, rules: GradientRules, trainable: list[str], *,
                 loss_added: bool = True, because: dict[str, str] | None = None):
        self.model = model
        self.because = because or {}  # weight -> the default rule that made it trainable
        self.loss_added = loss_added
        self.rules = rules
        self.trainable = trainable
        self.trainable_set = frozenset(trainable)
        self.types = ModelTypes(model)
        self.report = _Report()
        self.visited_count = 0
        self._bodies_seen: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()

    # -------------------------------------------------------------- main graph
    def run(self, losses: list[str]) -> list[Finding]:
        graph = self.model.graph
        scope = _Scope(graph, lambda name: self.types.of(graph, name))
        self._whole_graph(scope)
        region = differentiable_region(graph, self.trainable, losses, self.rules, scope.type_of)
        self.visited_count = len(region.visited)
        self._weights(region)
        self._loss_types(region, losses, scope)
        bits: list[dict[Node, int]] = []

        def bits_of() -> dict[Node, int]:
            # Needed for findings only: a model without any costs no walk for it.
            if not bits:
                bits.append(weight_bits(region, self.trainable))
            return bits[0]

        self._judge_nodes(region, scope,
                          lambda node: names_of(bits_of().get(node, 0), self.trainable), depth=0)
        self._few_values(region, scope, bits_of)
        return self.report.ordered()

    def _few_values(self, region: Region, scope: _Scope,
                    bits_of: Callable[[], dict[Node, int]]) -> None:
        """Warn about trained BatchNorms whose batch statistics cover very few values."""
        for node in region.ordered():
            # Only weights before it (reaching its X) get the noise: its own scale and shift
            # act after the normalisation.
            if node.op_type != "BatchNormalization" or normalize_domain(node.domain) or \
                    not node.inputs or not input_bits(region, bits_of(), self.trainable,
                                                      node, 0):
                continue
            shape = scope.type_of(node.inputs[0]).static_shape
            if shape is None or len(shape) < 2:
                continue
            count = shape[0]
            for size in shape[2:]:
                count *= size
            if count > FEW_VALUES:
                continue
            self.report.after_build.append(self._finding(
                "few-values", Severity.WARNING,
                f"BatchNormalization {_node_label(node)!r} is trained with batch statistics "
                f"over {count} value{'s' * (count != 1)} a channel (input "
                f"{'x'.join(map(str, shape))}): its normalised output hardly depends on its "
                "input, so the float32 gradient of everything before it is rounding noise, in "
                "onnxruntime-training and in torch alike",
                node, scope,
                "train with larger batches or inputs (more than "
                f"{FEW_VALUES} values a channel), or freeze the weights before it",
                {"values_per_channel": count, "shape": list(shape)}))

    def _whole_graph(self, scope: _Scope) -> None:
        """Failures the trainer meets wherever the node is (in its graph optimizer)."""
        if not any(failure.scope == "graph" for failure in self.rules.op_failures):
            return
        may_fail = self.rules.may_fail
        for node in scope.graph:
            if not may_fail(node.domain, node.op_type, "graph"):
                continue
            failures = self.rules.failures_for(NodeSite(node), scope="graph")
            if not failures:
                continue
            reasons = "; ".join(f"{f.reason} ({f.describe()})" for f in failures)
            data: dict[str, Any] = {"op_type": node.op_type, "domain": node.domain,
                                    "rules": self.rules.name, "rule_op": failures[0].op_type,
                                    "conditions": [f.describe() for f in failures],
                                    "scope": "graph"}
            if failures[0].trainer_message:
                data["trainer_message"] = failures[0].trainer_message
            self.report.graph.append(self._finding(
                "broken", Severity.ERROR,
                f"{self.rules.label} fails on node {_node_label(node)!r} "
                f"({_op_label(node.domain, node.op_type)}) wherever it is: {reasons}",
                node, scope, "; ".join(dict.fromkeys(f.hint for f in failures)), data))

    def _trainer_failure(self, kind: TrainerFailureKind, code: str, message: str, *,
                         value: str, node: Node | None = None, hint: str | None = None,
                         data: dict[str, Any] | None = None) -> Finding:
        known = self.rules.trainer_failure(kind)
        severity = Severity.ERROR if known is not None else Severity.WARNING
        details = {"problem": kind, "rules": self.rules.name, **(data or {})}
        text = message
        if known is not None:
            text = f"{message}. {known.reason.replace('<weight>', value)}"
            if known.trainer_message:
                details["trainer_message"] = known.trainer_message
        return Finding(code, severity, text, node=_node_label(node) if node else None,
                       value=value, hint=known.hint if known is not None else hint,
                       data=details)

    def _origin(self, graph: Graph, name: str, torch_export: bool) -> str:
        """`` (trainable by default: <rule>)``, or what torch's record says it is."""
        rule = self.because.get(name)
        if rule is not None:
            return f" (trainable by default: {rule})"
        return _torch_origin(graph, name, torch_export)

    def _weights(self, region: Region) -> None:
        graph, report = region.graph, self.report
        torch_export = any(INPUT_KIND in v.metadata for v in graph.value_info)
        nested = any(True for _ in graph.subgraphs())  # else nothing is read in a subgraph
        for name in self.trainable:
            captured = [use.node for use in graph.uses(name)
                        if use.slot == CAPTURE and use.node] if nested else []
            if captured:
                node = captured[0]
                report.captured.append(self._trainer_failure(
                    "captured", CODES["captured"],
                    f"trainable weight {name!r}{self._origin(graph, name, torch_export)} is "
                    f"read inside a subgraph of node "
                    f"{_node_label(node)!r} ({node.op_type})", value=name, node=node,
                    hint="freeze it, or remove the control flow"))
                continue
            entries = region.entries.get(name, set())
            if not entries:
                origin = self._origin(graph, name, torch_export)
                consumers = graph.consumers(name)
                why = ("nothing uses it" if not consumers else
                       "no loss output is differentiable (float) and computed from a "
                       "trainable weight" if not region.loss_nodes else
                       "none of its uses leads to the loss through differentiable edges")
                report.unreachable.append(self._trainer_failure(
                    "unreachable", CODES["unreachable"],
                    f"trainable weight {name!r}{origin} reaches no loss ({why})", value=name,
                    hint="freeze it, or check that the loss depends on it",
                    data={"consumers": [_node_label(n) for n in consumers]}))
                continue
            carrying = []
            for node in sorted(entries, key=_node_label) if len(entries) > 1 else entries:
                if self.rules.builder_for(node.domain, node.op_type) is None:
                    carrying.append(-1)  # no builder: reported as such, not as a weight problem
                    continue
                site = region.site(node) if self.rules.has_stop_edges(node.domain,
                                                                      node.op_type) \
                    else NodeSite(node)  # what stops nothing needs no types
                given = self.rules.inputs_given_gradient(site)  # memoized per operator
                slots = [i for i, input_name in enumerate(node.inputs)
                         if input_name == name and i in given]
                carrying.extend(slots)
                if len(slots) > 1:
                    report.after_build.append(self._trainer_failure(
                        "duplicate", CODES["duplicate"],
                        f"node {_node_label(node)!r} ({node.op_type}) reads trainable weight "
                        f"{name!r}{self._origin(graph, name, torch_export)} at {len(slots)} "
                        f"differentiable inputs {slots}",
                        value=name, node=node, data={"inputs": slots}))
            if not carrying:
                origin = self._origin(graph, name, torch_export)
                where = ", ".join(f"{n.op_type} {_node_label(n)!r}" for n in
                                  sorted(entries, key=_node_label)[:_SHOWN])
                report.after_build.insert(0, self._trainer_failure(
                    "no-gradient", CODES["no-gradient"],
                    f"trainable weight {name!r}{origin} reaches the loss only through "
                    f"non-differentiable inputs (of {where})", value=name,
                    hint="freeze it"))

    def _loss_types(self, region: Region, losses: list[str], scope: _Scope) -> None:
        accepted = self.rules.loss_types
        if accepted is None or not any(region.entries.values()):
            return
        for name in losses:
            producer = region.graph.producer(name)
            elem_type = scope.type_of(name).elem_type
            if producer in region.loss_nodes and elem_type is not None \
                    and elem_type not in accepted:
                allowed = ", ".join(dtype_name(t) for t in sorted(accepted))
                self.report.after_build.append(self._trainer_failure(
                    "loss-type", CODES["loss-type"],
                    f"the loss {name!r} is {dtype_name(elem_type)}; {self.rules.label} "
                    f"takes {allowed} losses", value=name,
                    hint="cast the loss before it leaves the graph"))

    # -------------------------------------------------------------------- nodes
    def _judge_nodes(self, region: Region, scope: _Scope,
                     blocks_of: Callable[[Node], list[str]], depth: int) -> None:
        rules = self.rules
        deferred = rules.deferred_ops
        plain: dict[tuple[str, str], bool] = {}  # by operator: nothing to judge but subgraphs
        for node in region.ordered():
            operator = (node.domain, node.op_type)
            is_plain = plain.get(operator)
            if is_plain is None:
                is_plain = plain[operator] = (
                    rules.builder_for(*operator) == rules.trainer_view(*operator)
                    and not rules.may_fail(*operator))
            if is_plain and not any(node.subgraphs()):
                continue  # the common case (as in _judge), decided without a site
            site = region.site(node, self.trainable_set, loss_added=self.loss_added)
            found = self._judge(node, site, scope, functools.partial(blocks_of, node), depth)
            if found is None:
                continue
            if scope.function is not None or scope.blocks is not None:
                key = (id(scope.graph), id(node))
                previous = self.report.bodies.get(key)
                if previous is None or previous.severity.rank < found.severity.rank:
                    self.report.bodies[key] = found
            elif self.rules.trainer_view(node.domain, node.op_type)[1] in deferred:
                self.report.deferred.append(found)
            else:
                self.report.nodes.append(found)

    def _judge(self, node: Node, site: NodeSite, scope: _Scope,
               blocks_of: Callable[[], list[str]], depth: int) -> Finding | None:
        rules = self.rules
        function = self.model.function_for(node)
        builder = rules.builder_for(node.domain, node.op_type)
        view = rules.trainer_view(node.domain, node.op_type)
        failures = rules.failures_for(site) if builder is not None else []
        if builder == view and not failures and not any(node.subgraphs()):
            return None  # the common case: a builder of its own, no known failure
        blocks = blocks_of()
        where = self._where(scope)
        data: dict[str, Any] = {"op_type": node.op_type, "domain": node.domain,
                                "blocks": blocks, "rules": rules.name,
                                "inputs_needing_gradient": sorted(site.inputs_needing_gradient)}
        blocked = (f"; it lies on the gradient path of {len(blocks)} trainable weight"
                   f"{'s' if len(blocks) != 1 else ''} "
                   f"({shortened_list(blocks, _SHOWN, quote=True)})" if blocks else "")
        if builder is None and function is not None:
            self._judge_body(node, site, function, scope, blocks, depth)
            return self._finding(
                "function", Severity.ERROR,
                f"{where}node {_node_label(node)!r} calls the model-local function "
                f"{function.qualified_name}, and {rules.label} has no gradient builder for a "
                f"function call{blocked}", node, scope,
                "inline the model's functions first: run `inline-functions` before "
                "`lint-gradients` (graphpass run MODEL -o OUT -p inline-functions)", data)
        if builder is None:
            return self._finding(
                "missing", Severity.ERROR,
                f"{where}{rules.label} has no gradient builder for "
                f"{_op_label(node.domain, node.op_type)} (node {_node_label(node)!r}){blocked}",
                node, scope,
                "rewrite that part of the model with operators the trainer can "
                "differentiate, or freeze the weights whose gradient passes through it "
                "(option `frozen`) so that the node leaves the trainable path", data)
        for subgraph in node.subgraphs():
            self._judge_subgraph(node, subgraph, scope, blocks, depth)
        if failures:
            refusing = [f for f in failures if f.effect == "fails"]
            shown = refusing or failures
            first = shown[0]
            reasons = "; ".join(f"{f.reason} ({f.describe()})" for f in shown)
            data["rule_op"] = first.op_type
            data["conditions"] = [f.describe() for f in shown]
            if first.trainer_message:
                data["trainer_message"] = first.trainer_message
            if not refusing:
                return self._finding(
                    "wrong-gradient", Severity.ERROR,
                    f"{where}{rules.label} differentiates node {_node_label(node)!r} "
                    f"({_op_label(node.domain, node.op_type)}) wrongly: {reasons}{blocked}",
                    node, scope, "; ".join(dict.fromkeys(f.hint for f in shown)), data)
            return self._finding(
                "broken", Severity.ERROR,
                f"{where}{rules.label} cannot differentiate node {_node_label(node)!r} "
                f"({_op_label(node.domain, node.op_type)}): {reasons}{blocked}",
                node, scope, "; ".join(dict.fromkeys(f.hint for f in shown)), data)
        if builder is not None and builder != view:
            data["builder"] = _op_label(*builder)
            kind = "model-local function" if function is not None else "operator"
            return self._finding(
                "borrowed", Severity.WARNING,
                f"{where}node {_node_label(node)!r} is the {kind} "
                f"{_op_label(node.domain, node.op_type)}; {rules.label} finds gradient "
                f"builders by op_type alone and would silently use the gradient of "
                f"{_op_label(*builder)}", node, scope,
                "give the function or custom operator an op_type no registered operator "
                "has (or inline the functions first, so that their body is differentiated)",
                data)
        return None

    def _where(self, scope: _Scope) -> str:
        if scope.function is not None:
            return (f"inside function {scope.function.qualified_name} (called by node "
                    f"{scope.caller!r}; reached once it is inlined): ")
        return ""

    def _finding(self, problem: str, severity: Severity, message: str, node: Node,
                 scope: _Scope, hint: str, data: dict[str, Any]) -> Finding:
        return Finding(CODES[problem], severity, message, node=_node_label(node),
                       function=scope.function.qualified_name if scope.function else None,
                       graph=_graph_path(scope.graph), hint=hint,
                       data={"problem": problem, **data})

    # ------------------------------------------------------- bodies, subgraphs
    def _judge_body(self, call: Node, site: NodeSite, function: Function, scope: _Scope,
                    blocks: list[str], depth: int) -> None:
        """Judge a called function's body as the trainer would see it once inlined."""
        key = (id(function), tuple(sorted(site.inputs_needing_gradient)),
               tuple(sorted(site.outputs_needing_gradient)))
        if depth >= _MAX_FUNCTION_DEPTH or key in self._bodies_seen:
            return
        self._bodies_seen.add(key)
        body = function.graph
        types = FunctionTypes(self.model, function,
                              [scope.type_of(name) if name else TypeInfo(None)
                               for name in call.inputs])
        seeds = [body.input_names[i] for i in site.inputs_needing_gradient
                 if i < len(body.input_names)]
        losses = [body.output_names[i] for i in site.outputs_needing_gradient
                  if i < len(body.output_names)]
        inner = _Scope(body, lambda name: types.of(body, name), function,
                       _node_label(call), blocks)
        region = differentiable_region(body, seeds, losses, self.rules, inner.type_of)
        self._judge_nodes(region, inner, lambda _: blocks, depth + 1)

    def _judge_subgraph(self, owner: Node, subgraph: Graph, scope: _Scope,
                        blocks: list[str], depth: int) -> None:
        """Judge a control-flow body (only for trainers with a builder for its owner).

        Gradients enter through the body's inputs and the values it reads from outside,
        and leave through its outputs.
        """
        seeds = [*subgraph.input_names, *sorted(owner.captured_names)]
        type_of: Callable[[str], TypeInfo] = scope.type_of
        if scope.function is None:
            type_of = functools.partial(self.types.of, subgraph)
        inner = _Scope(subgraph, type_of, scope.function, scope.caller, blocks)
        region = differentiable_region(subgraph, seeds, subgraph.output_names, self.rules,
                                       inner.type_of)
        self._judge_nodes(region, inner, lambda _: blocks, depth + 1)

