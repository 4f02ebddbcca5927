"""Finite-difference checks of gradient graphs, in float64.

:func:`vjp_model` turns a model into one that also takes a cotangent for every float
output and returns the gradients of ``sum(cotangent * output)`` with respect to the
chosen inputs (graphpass's engine builds them). :func:`check_gradients` compares
them with central differences along random directions: for a direction ``v`` of
input ``x``, ``<grad_x, v>`` must equal ``(f(x + h v) - f(x - h v)) / 2h``. A
direction where the two one-sided differences disagree crosses a kink (``Relu`` at
0, a tie in ``Max``): it is skipped and counted, never passed.

Models run in onnxruntime when it has the float64 kernels, else in
``onnx.reference``.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import graphpass
from graphpass.training import BuilderTable, builtin_builders, differentiate, prune

FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
TABLE = BuilderTable(builtin_builders())


# ============================================================== float64
def to_double(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy computing in float64 where ``model`` computes in float32/16."""
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def retype(info: onnx.ValueInfoProto) -> None:
        tensor = info.type.tensor_type
        if info.type.HasField("tensor_type") and tensor.elem_type in FLOATS:
            tensor.elem_type = TensorProto.DOUBLE

    def retensor(tensor: onnx.TensorProto) -> None:
        if tensor.data_type in FLOATS and tensor.data_type != TensorProto.DOUBLE:
            array = numpy_helper.to_array(tensor).astype(np.float64)
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))

    graph = out.graph
    for info in (*graph.input, *graph.output, *graph.value_info):
        retype(info)
    for tensor in graph.initializer:
        retensor(tensor)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                retensor(attribute.t)
            if node.op_type in ("Cast", "EyeLike", "RandomNormal", "RandomUniform") \
                    and attribute.name in ("to", "dtype") and attribute.i in FLOATS:
                attribute.i = TensorProto.DOUBLE
            if node.op_type == "LayerNormalization" and attribute.name == "stash_type":
                attribute.i = TensorProto.DOUBLE
    return out


def as_double(value: Any) -> np.ndarray:
    value = np.asarray(value)
    if value.dtype.kind == "f" or str(value.dtype) == "bfloat16":
        return np.asarray(value, dtype=np.float64)
    return value


# ============================================================== running
def reference_evaluator(model: onnx.ModelProto) -> Any:
    """``onnx.reference`` with ``Erf`` computed in float64 (its own Erf rounds to float32)."""
    import math

    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    erf = np.vectorize(math.erf, otypes=[np.float64])

    class Erf(OpRun):
        op_domain = ""

        def _run(self, x):  # type: ignore[no-untyped-def]
            return (erf(x).astype(x.dtype),)

    class Gelu(OpRun):  # its function body would run the float32 Erf
        op_domain = ""

        def _run(self, x, approximate="none"):  # type: ignore[no-untyped-def]
            if approximate == "tanh":
                inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
                return ((0.5 * x * (1 + np.tanh(inner))).astype(x.dtype),)
            return ((0.5 * x * (1 + erf(x / math.sqrt(2)))).astype(x.dtype),)

    class Softsign(OpRun):  # its own rejects float64
        op_domain = ""

        def _run(self, x):  # type: ignore[no-untyped-def]
            return ((x / (1 + np.abs(x))).astype(x.dtype),)

    from onnx.reference.ops.op_conv_transpose import ConvTranspose as _ConvTranspose

    class ConvTranspose(_ConvTranspose):  # its own handles group 1 only: run it per group
        op_domain = ""

        def _run(self, X, W, B=None, **attributes):  # type: ignore[no-untyped-def]
            group = attributes.get("group") or 1
            if group == 1:
                return super()._run(X, W, B, **attributes)
            attributes["group"] = 1
            xs = np.split(X, group, axis=1)
            ws = np.split(W, group, axis=0)
            bs = np.split(B, group) if B is not None else [None] * group
            parts = [super(ConvTranspose, self)._run(x, w, b, **attributes)[0]
                     for x, w, b in zip(xs, ws, bs, strict=True)]
            return (np.concatenate(parts, axis=1),)

    class GlobalMaxPool(OpRun):  # its own drops an axis of 3-D inputs
        op_domain = ""

        def _run(self, x):  # type: ignore[no-untyped-def]
            return (np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True),)

    return ReferenceEvaluator(model, new_ops=[Erf, Gelu, Softsign, ConvTranspose,
                                              GlobalMaxPool])


class Runner:
    """Runs a model in onnxruntime, or ``onnx.reference`` where onnxruntime cannot."""

    def __init__(self, model: onnx.ModelProto, prefer: str = "onnxruntime"):
        self.backend = "reference"
        self._session: Any = None
        self._reference: Any = None
        if prefer == "onnxruntime":
            try:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.log_severity_level = 4
                onnxruntime.set_default_logger_severity(4)
                self._session = onnxruntime.InferenceSession(
                    model.SerializeToString(), options, providers=["CPUExecutionProvider"])
                self.backend = "onnxruntime"
            except Exception:  # no double kernel, or an op onnxruntime lacks
                self._session = None
        if self._session is None:
            self._reference = reference_evaluator(model)
        self.outputs = [o.name for o in model.graph.output]

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        if self._session is not None:
            try:
                return list(self._session.run(None, dict(feeds)))
            except Exception:  # a kernel that fails at run time: fall back
                self._session = None
                self.backend = "reference"
                self._reference = reference_evaluator(self._model_for_reference)
        with contextlib.redirect_stdout(io.StringIO()):
            return [np.asarray(v) for v in self._reference.run(None, dict(feeds))]

    _model_for_reference: Any = None


IMPRECISE_IN_ONNXRUNTIME = frozenset({"Gelu"})
"""Operators whose float64 kernel in onnxruntime rounds like float32 (``Gelu``'s tanh form
is off by 6e-9): finite differences need the reference evaluator there."""


def runner(model: onnx.ModelProto) -> Runner:
    imprecise = any(n.op_type in IMPRECISE_IN_ONNXRUNTIME for n in model.graph.node)
    found = Runner(model, prefer="reference" if imprecise else "onnxruntime")
    found._model_for_reference = model
    return found


# =================================================================== vjp
@dataclass
class VJP:
    model: onnx.ModelProto
    cotangents: dict[str, str]  # output -> cotangent input name
    gradients: dict[str, str]  # wrt -> output name
    missing: list[str] = field(default_factory=list)


def vjp_model(model: onnx.ModelProto, wrt: Sequence[str],
              outputs: Sequence[str] | None = None,
              builders: BuilderTable | None = None,
              ranks: Mapping[str, int] | None = None) -> VJP:
    """``model`` with cotangent inputs and gradient outputs (see the module docstring)."""
    ir = graphpass.Model.from_proto(model)
    graph = ir.graph
    chosen = list(outputs) if outputs is not None else [
        o.name for o in model.graph.output
        if o.type.tensor_type.elem_type in FLOATS]
    cotangents = {}
    for info in model.graph.output:
        if info.name not in chosen:
            continue
        name = f"{info.name}__cotangent"
        declared = onnx.ValueInfoProto()
        declared.CopyFrom(info)
        declared.name = name
        tensor = declared.type.tensor_type
        if not tensor.HasField("shape") and ranks is not None and info.name in ranks:
            tensor.shape.SetInParent()
            for i in range(ranks[info.name]):  # declare the rank: strict inference needs it
                tensor.shape.dim.add().dim_param = f"{name}_d{i}"
        graph.add_input(declared)
        cotangents[info.name] = name
    result = differentiate(ir, list(wrt), cotangents, builders=builders or TABLE)
    gradients = {}
    declared = []
    infos = {i.name: i for i in (*model.graph.input, *model.graph.value_info)}
    for name, grad in result.values.items():
        if grad is None:
            continue
        out = f"{name}__grad"
        ir.graph.append(graphpass.Node("Identity", [grad], [out], name=f"{out}_identity"))
        gradients[name] = out
        info = onnx.ValueInfoProto()
        info.CopyFrom(infos[name])
        info.name = out
        declared.append(info)
    graph.set_outputs(declared)
    prune(graph, [i.name for i in declared])
    proto = ir.to_proto()
    return VJP(proto, cotangents, gradients, result.missing)


# ================================================================= check
@dataclass
class Outcome:
    passed: int = 0
    skipped: int = 0  # kinks
    failures: list[str] = field(default_factory=list)
    backend: str = ""
    max_error: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures and self.passed > 0


def differentiable_inputs(model: onnx.ModelProto, builders: BuilderTable | None = None
                          ) -> list[str]:
    """The float graph inputs the (single-node) model's builder differentiates."""
    table = builders or TABLE
    opsets = {normalize(o.domain): o.version for o in model.opset_import}
    floats = {i.name for i in model.graph.input if i.type.tensor_type.elem_type in FLOATS}
    chosen: list[str] = []
    for node in model.graph.node:
        builder = table.find(node.domain, node.op_type, opsets.get(normalize(node.domain), 0))
        if builder is None:
            continue
        for index, name in enumerate(node.input):
            if name in floats and builder.is_differentiable(index) and name not in chosen:
                chosen.append(name)
    return chosen


def normalize(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def check_gradients(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                    wrt: Sequence[str] | None = None, *, directions: int = 3,
                    seed: int = 0, step: float = 1e-6, rtol: float = 1e-5,
                    atol: float = 1e-8, builders: BuilderTable | None = None) -> Outcome:
    """Check the gradients of a float64 ``model`` at ``feeds`` against finite differences."""
    rng = np.random.default_rng(seed)
    wrt = list(wrt) if wrt is not None else differentiable_inputs(model, builders)
    forward = runner(model)
    out_names = [o.name for o in model.graph.output]
    base = {k: as_double(v) for k, v in feeds.items()}
    first = forward(base)
    ranks = {name: np.ndim(value) for name, value in zip(out_names, first, strict=True)}
    vjp = vjp_model(model, wrt, builders=builders, ranks=ranks)
    outcome = Outcome()
    onnx.checker.check_model(vjp.model, full_check=True)
    backward = runner(vjp.model)
    outcome.backend = backward.backend if backward.backend == forward.backend else \
        f"{forward.backend}+{backward.backend}"
    cot = {}
    for name, value in zip(out_names, first, strict=True):
        if name in vjp.cotangents:
            cot[name] = rng.standard_normal(np.shape(value)).astype(np.float64)

    def objective(values: Mapping[str, np.ndarray]) -> float:
        results = forward(values)
        total = 0.0
        for name, value in zip(out_names, results, strict=True):
            if name in cot:
                total += float(np.sum(cot[name] * np.asarray(value, dtype=np.float64)))
        return total

    grad_feeds = dict(base)
    grad_feeds.update({vjp.cotangents[name]: value for name, value in cot.items()})
    needed = {i.name for i in vjp.model.graph.input}
    grads = dict(zip([o.name for o in vjp.model.graph.output],
                     backward({k: v for k, v in grad_feeds.items() if k in needed}),
                     strict=True))
    f0 = objective(base)
    for name in wrt:
        gradient = grads.get(vjp.gradients.get(name, ""))
        x = base[name]
        if gradient is None:  # no gradient is a zero one: finite differences must agree
            gradient = np.zeros_like(x)
        if np.shape(gradient) != np.shape(x):
            outcome.failures.append(f"{name}: gradient shape {np.shape(gradient)} != "
                                    f"{np.shape(x)}")
            continue
        for _ in range(directions):
            v = rng.standard_normal(np.shape(x))
            plus = dict(base)
            plus[name] = x + step * v
            minus = dict(base)
            minus[name] = x - step * v
            f_plus, f_minus = objective(plus), objective(minus)
            central = (f_plus - f_minus) / (2 * step)
            forward_diff = (f_plus - f0) / step
            backward_diff = (f0 - f_minus) / step
            scale = max(1.0, abs(central))
            if abs(forward_diff - backward_diff) > 1e-3 * scale:
                outcome.skipped += 1  # a kink between x - hv and x + hv
                continue
            analytic = float(np.sum(np.asarray(gradient, dtype=np.float64) * v))
            error = abs(analytic - central)
            relative = error / max(abs(central), abs(analytic), 1e-12)
            if error > atol + rtol * max(abs(central), abs(analytic)) and error > 1e-6 * scale:
                outcome.failures.append(f"{name}: <grad, v> = {analytic:.10g}, finite "
                                        f"differences {central:.10g}")
            else:
                outcome.passed += 1
                if abs(central) > 1e-8:
                    outcome.max_error = max(outcome.max_error, relative)
    return outcome


def single_node_model(op_type: str, inputs: Sequence[tuple[str, int, Sequence[Any] | None]],
                      outputs: Sequence[str], opset: int = 21, n_outputs: int | None = None,
                      **attributes: Any) -> onnx.ModelProto:
    """A one-node model; ``inputs`` are ``(name, elem_type, shape)`` (``""`` skips a slot)."""
    node = helper.make_node(op_type, [name for name, _, _ in inputs], list(outputs),
                            **attributes)
    graph = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info(name, elem_type, shape)
         for name, elem_type, shape in inputs if name],
        [helper.make_tensor_value_info(name, TensorProto.DOUBLE, None) for name in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    return inferred


# ============================================================ node tests
FIRST_OUTPUT_ONLY = frozenset({"LayerNormalization", "BatchNormalization"})
"""Operators whose builders differentiate output 0 only (the others are statistics)."""


@dataclass
class CaseResult:
    name: str
    op_type: str
    status: str  # passed, failed, refused, no-gradient, kinks
    detail: str = ""
    directions: int = 0
    max_error: float = 0.0
    backend: str = ""


def upgraded(model: onnx.ModelProto, builders: BuilderTable | None = None) -> onnx.ModelProto:
    """``model`` converted to the first opset its node's builder covers, if it needs it."""
    table = builders or TABLE
    node = model.graph.node[0]
    opset = next(o.version for o in model.opset_import if normalize(o.domain) == "")
    versions = table.versions(node.domain, node.op_type)
    if not versions or any(b.covers(opset) for b in versions):
        return model
    target = min(b.since_version for b in versions if b.since_version > opset)
    from onnx import version_converter

    converted = version_converter.convert_version(model, target)
    return converted


def check_node_case(case: Any, directions: int = 3) -> CaseResult:
    """FD-check the builder of an ONNX node test case (a one-node model and its inputs)."""
    from graphpass.training import GradientError

    model = case.model
    node = model.graph.node[0]
    result = CaseResult(case.name, node.op_type, "no-gradient")
    inputs, _ = case.data_sets[0]
    feeds = {info.name: numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto)
             else np.asarray(value)
             for info, value in zip(model.graph.input, inputs, strict=False)}
    if any(v.dtype.kind == "f" and not np.all(np.isfinite(v.astype(np.float64)))
           for v in feeds.values()):
        result.detail = "an input holds NaN or infinity"
        return result
    double = to_double(upgraded(model))
    float_outputs = [o.name for o in double.graph.output
                     if o.type.tensor_type.elem_type in FLOATS]
    wrt = differentiable_inputs(double)
    if not wrt or not float_outputs:
        result.detail = "no float input the builder differentiates, or no float output"
        return result
    outputs = float_outputs[:1] if node.op_type in FIRST_OUTPUT_ONLY else float_outputs
    try:
        outcome = check_gradients(trimmed_outputs(double, outputs), feeds, wrt,
                                  directions=directions)
    except GradientError as error:
        result.status, result.detail = "refused", error.message
        return result
    result.directions, result.max_error, result.backend = (
        outcome.passed, outcome.max_error, outcome.backend)
    if outcome.failures:
        result.status, result.detail = "failed", "; ".join(outcome.failures[:3])
    elif outcome.passed:
        result.status = "passed"
    else:
        result.status, result.detail = "kinks", f"{outcome.skipped} directions cross a kink"
    return result


def trimmed_outputs(model: onnx.ModelProto, outputs: Sequence[str]) -> onnx.ModelProto:
    """``model`` with only ``outputs`` as graph outputs (the node keeps computing the rest)."""
    if [o.name for o in model.graph.output] == list(outputs):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [o for o in model.graph.output if o.name in outputs]
    del out.graph.output[:]
    out.graph.output.extend(kept)
    return out


def node_cases(op_types: set[str] | None = None) -> list[Any]:
    """ONNX's one-node test cases whose operator has a built-in builder."""
    from _inline_corpus import collect_cases

    known = {b.op_type for b in TABLE}
    chosen = []
    for case in collect_cases():
        model = case.model
        if model is None or len(model.graph.node) != 1 or not case.data_sets:
            continue
        op_type = model.graph.node[0].op_type
        if op_type in known and (op_types is None or op_type in op_types) \
                and not model.graph.node[0].domain:
            chosen.append(case)
    return chosen
