"""ONNX's node test cases wrapped into model-local functions, for the inline-functions tests.

Each case of ``onnx.backend.test.case.node.collect_testcases()`` is a small model
with inputs and expected outputs. :func:`wrap` moves its graph into local
functions in one of several ways (:data:`VARIANTS`); :func:`check_case` inlines
the wrapped model with ``inline-functions`` and checks that no call is left, that
``onnx.checker.check_model(full_check=True)`` passes, and that onnxruntime gives
the expected outputs with the tolerances ONNX's backend tests use.

A case is skipped, with the reason, when onnxruntime cannot run the original
(unwrapped) model or gets other outputs than expected for it, or when the
original already fails the checker: then there is nothing to preserve.

``tests/test_inline_corpus.py`` runs it in the test suite and
``benchmarks/inline_corpus.py`` runs the full matrix.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

import graphpass
from graphpass.framework import PassContext, default_registry
from graphpass.passes.inline_functions import InlineFunctions

DOMAIN = "wrap"
VARIANTS = (
    "whole",  # the whole graph is one function, called once
    "node-call",  # one function per node; attributes are references given by the call
    "node-default",  # one function per node; attributes are references with defaults
    "nested",  # per-node functions called from an outer function forwarding attributes
    "repeated",  # the whole-graph function called twice, both calls named alike
    "colliding",  # the caller already uses every name the body uses (and the prefixed ones)
)


# =================================================================== wrapping
def _opsets(model: onnx.ModelProto) -> list[onnx.OperatorSetIdProto]:
    return [*model.opset_import, helper.make_opsetid(DOMAIN, 1)]


def _function(name: str, inputs: Sequence[str], outputs: Sequence[str],
              nodes: Iterable[onnx.NodeProto], model: onnx.ModelProto,
              attributes: Sequence[str] = (),
              defaults: Sequence[onnx.AttributeProto] = ()) -> onnx.FunctionProto:
    return helper.make_function(DOMAIN, name, list(inputs), list(outputs), list(nodes),
                                _opsets(model), attributes=list(attributes),
                                attribute_protos=list(defaults))


def _call(name: str, inputs: Sequence[str], outputs: Sequence[str], node_name: str,
          attributes: Iterable[onnx.AttributeProto] = ()) -> onnx.NodeProto:
    call = helper.make_node(name, list(inputs), list(outputs), name=node_name, domain=DOMAIN)
    call.attribute.extend(attributes)
    return call


def _rebuild(model: onnx.ModelProto, nodes: Iterable[onnx.NodeProto],
             functions: Iterable[onnx.FunctionProto]) -> onnx.ModelProto:
    wrapped = onnx.ModelProto()
    wrapped.CopyFrom(model)
    del wrapped.graph.node[:]
    wrapped.graph.node.extend(nodes)
    wrapped.functions.extend(functions)
    wrapped.opset_import.add(domain=DOMAIN, version=1)
    wrapped.ir_version = max(model.ir_version, 8)  # local functions need IR 8
    return wrapped


def _free_names(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph uses from enclosing scopes."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                free[name] = None
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                for name in _free_names(sub):
                    if name not in defined:
                        free[name] = None
        defined.update(node.output)
    return list(free)


def _captures(node: onnx.NodeProto) -> list[str]:
    names: dict[str, None] = {}
    for attribute in node.attribute:
        for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            names.update(dict.fromkeys(_free_names(sub)))
    return list(names)


def _is_graph(attribute: onnx.AttributeProto) -> bool:
    return attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def _node_function(model: onnx.ModelProto, index: int, node: onnx.NodeProto, *,
                   given: bool) -> tuple[onnx.FunctionProto, onnx.NodeProto]:
    """Wrap one node: every input slot a formal (``""`` stays omitted at the call), its
    attributes references ``p_<name>``, given by the call (``given``) or as defaults."""
    captures = _captures(node)
    formals = [f"in{j}" for j in range(len(node.input))] + captures
    outputs = [f"out{j}" for j in range(len(node.output))]
    body = onnx.NodeProto()
    body.CopyFrom(node)
    body.input[:] = formals[:len(node.input)]
    body.output[:] = outputs
    del body.attribute[:]
    call_attributes: list[onnx.AttributeProto] = []
    declared: list[str] = []
    defaults: list[onnx.AttributeProto] = []
    for attribute in node.attribute:
        if _is_graph(attribute) and not given:
            body.attribute.append(attribute)  # graphs stay in the body
            continue
        body.attribute.append(onnx.AttributeProto(
            name=attribute.name, ref_attr_name=f"p_{attribute.name}", type=attribute.type))
        value = onnx.AttributeProto()
        value.CopyFrom(attribute)
        value.name = f"p_{attribute.name}"
        if given:
            declared.append(value.name)
            call_attributes.append(value)
        else:
            defaults.append(value)
    name = f"N{index}_{node.op_type}"
    function = _function(name, formals, outputs, [body], model, declared, defaults)
    call_outputs = list(node.output)
    while call_outputs and not call_outputs[-1]:
        call_outputs.pop()  # trailing omitted outputs are left out of the call
    call = _call(name, [*node.input, *captures], call_outputs, node.name or f"n{index}",
                 call_attributes)
    return function, call


def _whole(model: onnx.ModelProto) -> onnx.FunctionProto:
    graph = model.graph
    function = _function("Whole", [i.name for i in graph.input], [o.name for o in graph.output],
                         graph.node, model)
    function.value_info.extend(graph.value_info)
    return function


def _body_names(function: onnx.FunctionProto) -> list[str]:
    names: dict[str, None] = {}
    for node in function.node:
        names.update(dict.fromkeys(n for n in node.output if n))
    for name in [*function.input, *function.output]:
        names.pop(name, None)
    return list(names)


def wrap(model: onnx.ModelProto, variant: str) -> onnx.ModelProto:
    """Move ``model``'s graph into local functions, the ``variant`` way."""
    graph = model.graph
    inputs = [i.name for i in graph.input]
    outputs = [o.name for o in graph.output]
    if variant in ("whole", "repeated", "colliding"):
        whole = _whole(model)
        calls = [_call("Whole", inputs, outputs, "call")]
        if variant == "repeated":
            calls.append(_call("Whole", inputs, [f"again_{o}" for o in outputs], "call"))
        if variant == "colliding":
            zero = numpy_helper.from_array(np.zeros((), np.float32))
            taken = [n.name for n in graph.node if n.name]
            clashes = [name for name in _body_names(whole) for name in (name, f"call/{name}")]
            calls[:0] = [helper.make_node("Constant", [], [name], value=zero,
                                          name=taken[i % len(taken)] if taken else name)
                         for i, name in enumerate(clashes)]
        return _rebuild(model, calls, [whole])
    if variant in ("node-call", "node-default"):
        pairs = [_node_function(model, i, n, given=variant == "node-call")
                 for i, n in enumerate(graph.node)]
        return _rebuild(model, [c for _, c in pairs], [f for f, _ in pairs])
    if variant == "nested":
        functions = []
        inner_calls = []
        outer_attributes: list[str] = []
        outer_call_attributes = []
        for index, node in enumerate(graph.node):
            function, call = _node_function(model, index, node, given=False)
            functions.append(function)
            for default in function.attribute_proto:
                if _is_graph(default):
                    continue
                forwarded = f"q{index}_{default.name}"
                call.attribute.append(onnx.AttributeProto(
                    name=default.name, ref_attr_name=forwarded, type=default.type))
                outer_attributes.append(forwarded)
                if index % 2 == 0:  # odd nodes fall back to the inner function's default
                    given = onnx.AttributeProto()
                    given.CopyFrom(default)
                    given.name = forwarded
                    outer_call_attributes.append(given)
            inner_calls.append(call)
        outer = _function("Outer", inputs, outputs, inner_calls, model, outer_attributes)
        main = _call("Outer", inputs, outputs, "outer", outer_call_attributes)
        return _rebuild(model, [main], [*functions, outer])
    raise ValueError(f"unknown variant {variant!r}")


# =================================================================== running
def _to_feed(item: Any) -> Any:
    if isinstance(item, onnx.TensorProto):
        return numpy_helper.to_array(item)
    if isinstance(item, onnx.SequenceProto):
        return numpy_helper.to_list(item)
    if isinstance(item, onnx.OptionalProto):
        return numpy_helper.to_optional(item)
    if isinstance(item, np.ndarray):
        return item.copy()  # onnxruntime may write into its inputs (BatchNormalization does)
    if isinstance(item, list):
        return [_to_feed(element) for element in item]
    return item


def run_onnxruntime(model: onnx.ModelProto, inputs: Sequence[Any]) -> list[Any]:
    """Run ``model`` on positional ``inputs`` with onnxruntime (CPU, quiet)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds = {name: _to_feed(value) for name, value in zip(names, inputs, strict=False)}
    return list(session.run(None, feeds))


def run_reference(model: onnx.ModelProto, inputs: Sequence[Any]) -> list[Any]:
    """Run ``model`` on positional ``inputs`` with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    names = [i.name for i in model.graph.input]
    feeds = {name: _to_feed(value) for name, value in zip(names, inputs, strict=False)}
    return list(ReferenceEvaluator(model).run(None, feeds))


def outputs_match(case: Any, model: onnx.ModelProto, runner: str = "onnxruntime") -> str | None:
    """Run ``model`` on every data set of ``case``; ``None`` if all match, else why not."""
    from onnx.backend.test.runner import Runner

    run = run_onnxruntime if runner == "onnxruntime" else run_reference
    for inputs, expected in case.data_sets:
        outputs = run(model, inputs)
        try:
            Runner.assert_similar_outputs([_to_feed(e) for e in expected], outputs,
                                          rtol=case.rtol, atol=case.atol)
        except AssertionError as error:
            return _first_line(error)
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines() or [type(error).__name__])[0][:200]


@dataclass
class Outcome:
    """What happened to one case in one variant."""

    case: str
    variant: str
    status: str  # passed / failed / skipped
    reason: str = ""


@dataclass
class Report:
    """Outcomes of a corpus run."""

    outcomes: list[Outcome] = field(default_factory=list)

    def counts(self) -> Counter[tuple[str, str]]:
        """(variant, status) -> count."""
        return Counter((o.variant, o.status) for o in self.outcomes)

    def passed_by_reference(self) -> list[Outcome]:
        """Passed outcomes that only the reference evaluator confirmed."""
        return [o for o in self.outcomes if o.status == "passed" and o.reason]

    def failures(self) -> list[Outcome]:
        """The failed outcomes."""
        return [o for o in self.outcomes if o.status == "failed"]

    def skip_reasons(self) -> Counter[str]:
        """Why cases were skipped (the reason's kind, before the colon)."""
        return Counter(o.reason.split(":")[0] for o in self.outcomes if o.status == "skipped")


def original_problem(case: Any) -> str | None:
    """Why the original case cannot serve as a reference, or ``None`` if it can."""
    try:
        onnx.checker.check_model(case.model, full_check=True)
    except Exception as error:
        return f"the original fails the ONNX checker: {_first_line(error)}"
    try:
        mismatch = outputs_match(case, case.model)
    except Exception as error:
        return f"onnxruntime cannot run the original: {_first_line(error)}"
    if mismatch is not None:
        return f"onnxruntime's outputs for the original differ from the expected: {mismatch}"
    return None


def check_variant(case: Any, variant: str) -> Outcome:
    """Wrap, inline and check one case in one variant (the original must be usable)."""
    try:
        wrapped = wrap(case.model, variant)
        model = graphpass.Model.from_proto(wrapped)
        InlineFunctions().run(model, PassContext(registry=default_registry()))
        inlined = model.to_proto()
    except Exception as error:
        return Outcome(case.name, variant, "failed", f"inlining raised {error!r}"[:300])
    if inlined.functions:
        return Outcome(case.name, variant, "failed", "functions left in the model")
    calls = {f.name for f in wrapped.functions}
    if any(n.domain == DOMAIN and n.op_type in calls for n in _all_nodes(inlined.graph)):
        return Outcome(case.name, variant, "failed", "a call was left")
    try:
        onnx.checker.check_model(inlined, full_check=True)
    except Exception as error:
        return Outcome(case.name, variant, "failed", f"checker: {_first_line(error)}")
    try:
        mismatch = outputs_match(case, inlined)
    except Exception as error:
        return Outcome(case.name, variant, "failed", f"onnxruntime: {_first_line(error)}")
    if mismatch is not None:
        # onnxruntime writes into graph inputs in a few kernels (BatchNormalization in
        # training mode updates ``mean`` and ``var``): a second reader then sees changed
        # values. The reference evaluator decides those cases.
        try:
            second = outputs_match(case, inlined, runner="reference")
        except Exception as error:
            second = _first_line(error)
        if second is not None:
            return Outcome(case.name, variant, "failed", f"outputs differ: {mismatch}")
        return Outcome(case.name, variant, "passed",
                       f"onnx.reference gives the expected outputs, onnxruntime: {mismatch}")
    return Outcome(case.name, variant, "passed")


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                yield from _all_nodes(sub)


def run_corpus(cases: Sequence[Any], variants: Sequence[str]) -> Report:
    """Check every case in every variant."""
    report = Report()
    for case in cases:
        problem = original_problem(case)
        for variant in variants:
            if problem is not None:
                report.outcomes.append(Outcome(case.name, variant, "skipped", problem))
            else:
                report.outcomes.append(check_variant(case, variant))
    return report


def collect_cases() -> list[Any]:
    """ONNX's node test cases (quietly: collecting them prints deprecation warnings)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), open(os.devnull, "w") as sink, \
            contextlib.redirect_stdout(sink):
        warnings.simplefilter("ignore")
        return list(collect_testcases())
