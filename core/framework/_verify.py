"""Semantic verification: run a model, compare its outputs with a reference run.

Used by the ``--verify`` instrument: the model is run before and after the
pipeline (or after each pass) on the same inputs, and the outputs must agree
within tolerances. Inputs are generated from the graph's declared types (symbolic
dimensions get small values; integer inputs that index something are kept in
range) or read from an ``.npz`` file. onnxruntime runs the model when it is
installed and can; otherwise ``onnx.reference.ReferenceEvaluator`` does, and when
neither can, :class:`RunOutcome` says why nothing was checked.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphpass.errors import GraphpassError
from graphpass.findings import Finding, Severity
from graphpass.framework._instruments import Instrument
from graphpass.framework._pass_base import PassContext
from graphpass.framework._planning import PlannedPass
from graphpass.framework._results import PassRecord
from graphpass.ir import Graph, Model, numpy_dtype
from graphpass.ir.proto import model_to_proto

__all__ = [
    "VERIFIED_CODE",
    "VERIFY_MISMATCH_CODE",
    "VERIFY_SKIPPED_CODE",
    "Mismatch",
    "RunOutcome",
    "VerifyOptions",
    "VerifySemantics",
    "compare_outputs",
    "make_inputs",
    "run_model",
]

VERIFIED_CODE = "GP600"
"""The outputs after the pipeline equal the reference outputs."""
VERIFY_MISMATCH_CODE = "GP601"
"""A pass changed what the model computes."""
VERIFY_SKIPPED_CODE = "GP602"
"""Nothing could be verified (the model could not run, or inputs could not be made): an
error, since a run asked to verify must not look verified; a warning with ``optional``."""

_EMBED_LIMIT = 1_500_000_000


@dataclass
class VerifyOptions:
    """How to verify.

    Attributes:
        inputs: An ``.npz`` file with the inputs to feed (by input name); generated when
            ``None``.
        dims: Values for symbolic dimensions, by name (others get ``default_dim``).
        default_dim: The value of a symbolic or unknown dimension.
        seed: The random seed for generated inputs.
        rtol: Relative tolerance for floating-point outputs.
        atol: Absolute tolerance for floating-point outputs.
        each: Check after every pass, not only at the end.
        backend: ``auto`` (onnxruntime, else the reference evaluator), ``onnxruntime``
            or ``reference``.
        optional: Let a run that could verify nothing pass, with a warning (``GP602``);
            by default that is an error, so that nothing unverified looks verified.
    """

    inputs: Path | None = None
    dims: dict[str, int] = field(default_factory=dict)
    default_dim: int = 2
    seed: int = 0
    rtol: float = 1e-4
    atol: float = 1e-5
    each: bool = False
    backend: str = "auto"
    optional: bool = False


@dataclass
class RunOutcome:
    """The result of running a model once.

    Attributes:
        outputs: The outputs by name, or ``None`` when the model could not run.
        backend: ``onnxruntime`` or ``reference`` (what actually ran it).
        reason: Why the model could not run, when it could not.
    """

    outputs: dict[str, Any] | None
    backend: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Mismatch:
    """One output that differs between two runs."""

    output: str
    detail: str


# ======================================================================= inputs
def make_inputs(
    model: Model, options: VerifyOptions | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """Make inputs for every graph input that is not an initializer.

    Raises:
        GraphpassError: An input's type is not a tensor (sequences, maps, optionals) and
            no ``.npz`` gives it, or the ``.npz`` lacks an input.
    """
    options = options or VerifyOptions()
    graph = model.graph
    given: dict[str, np.ndarray[Any, Any]] = {}
    if options.inputs is not None:
        try:
            with np.load(options.inputs) as data:
                given = {name: data[name] for name in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise GraphpassError(f"cannot read inputs from {str(options.inputs)!r}: {error}",
                                 hint="give an .npz file saved with numpy.savez") from None
    rng = np.random.default_rng(options.seed)
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    for value in graph.inputs:
        if value.name in graph.initializers:
            continue
        if value.name in given:
            inputs[value.name] = given[value.name]
            continue
        if options.inputs is not None:
            raise GraphpassError(f"the inputs file has no array named {value.name!r}",
                                 where=str(options.inputs),
                                 hint=f"it has: {', '.join(sorted(given)) or 'nothing'}")
        elem_type = value.elem_type
        shape = value.shape
        if elem_type is None or shape is None:
            raise GraphpassError(
                f"cannot generate a value for input {value.name!r}: its type is not a tensor "
                "with a known element type and rank",
                hint="give the inputs in an .npz file (verify inputs = 'feeds.npz')",
            )
        implied = _implied_dims(graph, value.name, len(shape), options.default_dim)
        dims = tuple(_dim(d, options, implied.get(axis)) for axis, d in enumerate(shape))
        inputs[value.name] = _random_tensor(graph, value.name, elem_type, dims, rng)
    return inputs


def _dim(dim: int | str | None, options: VerifyOptions, implied: int | None = None) -> int:
    if isinstance(dim, int) and dim > 0:
        return dim
    if isinstance(dim, str) and dim in options.dims:
        return options.dims[dim]
    return implied if implied is not None else options.default_dim


def _implied_dims(graph: Graph, name: str, rank: int, default: int) -> dict[int, int]:
    """Sizes an input's free dimensions must have for the ``Conv`` that reads it.

    An image input's channels (``num_channels`` in an Optimum export) are the weight's
    input channels times the groups, and its spatial sizes at least the kernel's.
    """
    implied: dict[int, int] = {}
    for use in graph.uses(name):
        node = use.node
        if node is None or node.op_type != "Conv" or use.slot != 0 or len(node.inputs) < 2:
            continue
        weight = graph.initializers.get(node.inputs[1])
        if weight is None or len(weight.shape) != rank:
            continue
        groups = int(node.attribute("group", 1) or 1)
        implied[1] = int(weight.shape[1]) * groups
        dilations = list(node.attribute("dilations", None) or [1] * (rank - 2))
        for axis, (kernel, dilation) in enumerate(zip(weight.shape[2:], dilations,
                                                      strict=False), start=2):
            implied[axis] = max(implied.get(axis, default), (int(kernel) - 1) * int(dilation) + 1)
    return implied


def _random_tensor(graph: Graph, name: str, elem_type: int, dims: tuple[int, ...],
                   rng: np.random.Generator) -> np.ndarray[Any, Any]:
    dtype = numpy_dtype(elem_type)
    if elem_type == onnx.TensorProto.BOOL:
        return rng.random(dims) < 0.5
    if elem_type == onnx.TensorProto.STRING:
        return np.array(rng.choice(["a", "b", "c"], size=dims), dtype=object)
    if np.issubdtype(dtype, np.integer):
        # indices stay in range; any other integer input gets 0 and 1, the values of the
        # masks and flags such inputs usually are (random values there, an attention mask
        # of -3..3, make a model compute nonsense)
        high = _index_bound(graph, name)
        return rng.integers(0, high if high is not None else 2, size=dims).astype(dtype)
    return (rng.standard_normal(dims) * 0.5).astype(dtype)


def _index_bound(graph: Graph, name: str) -> int | None:
    """The exclusive upper bound for an integer input used as indices, if one is known."""
    bound: int | None = None
    for use in graph.uses(name):
        node = use.node
        if node is None or use.slot < 0:
            continue
        if node.op_type in ("Gather", "GatherElements") and use.slot == 1:
            axis = int(node.attribute("axis", 0))
            size = _static_dim(graph, node.inputs[0], axis)
        elif node.op_type == "OneHot" and use.slot == 0:
            size = None
        else:
            continue
        if size is not None:
            bound = size if bound is None else min(bound, size)
        elif bound is None:
            bound = 2
    return bound


def _static_dim(graph: Graph, name: str, axis: int) -> int | None:
    tensor = graph.initializers.get(name)
    shape: tuple[Any, ...] | None = tensor.shape if tensor is not None else None
    if shape is None:
        value = graph.values.get(name)
        shape = value.shape if value is not None else None
    if not shape:
        return None
    dim = shape[axis] if -len(shape) <= axis < len(shape) else None
    return dim if isinstance(dim, int) and dim > 0 else None


# ====================================================================== running
def run_model(model: Model, inputs: Mapping[str, Any], backend: str = "auto") -> RunOutcome:
    """Run ``model`` on ``inputs`` and return its outputs (or why it could not run)."""
    try:
        proto, cleanup = _runnable_proto(model)
    except GraphpassError as error:
        return RunOutcome(None, reason=error.message)
    try:
        reasons = []
        if backend in ("auto", "onnxruntime"):
            outcome = _run_onnxruntime(proto, inputs)
            if outcome.outputs is not None or backend == "onnxruntime":
                return outcome
            reasons.append(outcome.reason)
        outcome = _run_reference(proto, inputs)
        if outcome.outputs is None and reasons:
            outcome.reason = "; ".join([*reasons, outcome.reason])
        return outcome
    finally:
        cleanup()


def _runnable_proto(model: Model) -> tuple[onnx.ModelProto | str, Any]:
    total = sum(t.nbytes for g in model.graphs() for t in g.initializers.values())
    if total < _EMBED_LIMIT:
        proto = model_to_proto(model, lambda tensor: tensor.to_embedded_proto()
                               if tensor.is_external else tensor.to_proto())
        return proto, lambda: None
    from graphpass.files import save

    folder = tempfile.TemporaryDirectory(prefix="graphpass-verify-")
    path = Path(folder.name) / "model.onnx"
    save(model, path, external_data=True)
    return str(path), folder.cleanup


def _run_onnxruntime(proto: onnx.ModelProto | str, inputs: Mapping[str, Any]) -> RunOutcome:
    try:
        import onnxruntime
    except ImportError:
        return RunOutcome(None, reason="onnxruntime is not installed")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    try:
        source = proto if isinstance(proto, str) else proto.SerializeToString()
        session = onnxruntime.InferenceSession(source, options,
                                               providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        feeds = {i.name: inputs[i.name] for i in session.get_inputs() if i.name in inputs}
        values = session.run(names, feeds)
    except Exception as error:  # onnxruntime raises its own exception types
        return RunOutcome(None, "onnxruntime", reason=f"onnxruntime: {_first_line(error)}")
    return RunOutcome(dict(zip(names, values, strict=True)), "onnxruntime")


def _run_reference(proto: onnx.ModelProto | str, inputs: Mapping[str, Any]) -> RunOutcome:
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(proto)
        feeds = {name: inputs[name] for name in evaluator.input_names if name in inputs}
        values = evaluator.run(None, feeds)
    except Exception as error:  # the reference evaluator raises anything
        return RunOutcome(None, "reference", reason=f"reference evaluator: {_first_line(error)}")
    return RunOutcome(dict(zip(evaluator.output_names, values, strict=True)), "reference")


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


# =================================================================== comparing
def compare_outputs(expected: Mapping[str, Any], actual: Mapping[str, Any],
                    rtol: float = 1e-4, atol: float = 1e-5) -> list[Mismatch]:
    """Compare two runs' outputs; return what differs (empty when they agree)."""
    mismatches = []
    for name, want in expected.items():
        if name not in actual:
            mismatches.append(Mismatch(name, "missing after the pipeline"))
            continue
        detail = _difference(want, actual[name], rtol, atol)
        if detail:
            mismatches.append(Mismatch(name, detail))
    return mismatches


def _difference(want: Any, got: Any, rtol: float, atol: float) -> str:
    if isinstance(want, list) or isinstance(got, list):
        if not isinstance(want, list) or not isinstance(got, list) or len(want) != len(got):
            return "sequence lengths differ"
        for index, (a, b) in enumerate(zip(want, got, strict=True)):
            detail = _difference(a, b, rtol, atol)
            if detail:
                return f"item {index}: {detail}"
        return ""
    if want is None or got is None:
        return "" if want is None and got is None else "one run gave no value"
    a = np.asarray(want)
    b = np.asarray(got)
    if a.shape != b.shape:
        return f"shape {list(a.shape)} became {list(b.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} became {b.dtype}"
    if a.dtype.kind in "fc":
        a64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
        b64 = b.astype(a64.dtype)
        both_nan = np.isnan(a64) & np.isnan(b64)
        close = np.isclose(a64, b64, rtol=rtol, atol=atol) | both_nan
        if not close.all():
            diff = np.abs(np.where(both_nan, 0, a64 - b64))
            return (f"{int((~close).sum())} of {close.size} values differ "
                    f"(max abs difference {float(np.nanmax(diff)):.3g})")
        return ""
    if a.dtype == object:
        return "" if a.tolist() == b.tolist() else "values differ"
    if not np.array_equal(a, b):
        return f"{int((a != b).sum())} of {a.size} values differ"
    return ""



# ================================================================== instrument
class VerifySemantics(Instrument):
    """Check that the pipeline does not change what the model computes.

    The model is run on the same inputs before the pipeline and after it (and, with
    ``each``, after every transforming pass). A pass that changes values on purpose
    (``preserves_semantics = False``, e.g. ``reconcile-initializers``) moves the
    reference: the outputs after it become what later passes must preserve. When the
    final outputs differ, the models kept after each transforming pass are run to
    name the first pass whose outputs differ (an error finding, so nothing is
    written).

    Attributes:
        options: Inputs, tolerances, backend, and whether to check after each pass.
    """

    name = "verify"

    def __init__(self, options: VerifyOptions | None = None):
        self.options = options or VerifyOptions()
        self._plan: Sequence[PlannedPass] = ()
        self._inputs: dict[str, Any] | None = None
        self._reference: RunOutcome | None = None
        self._reference_label = "the input model"
        self._problem = ""
        self._pending: list[tuple[str, Model]] = []

    def before_run(self, plan: Sequence[PlannedPass], model: Model, context: PassContext) -> None:
        """Make the inputs and run the input model once."""
        self._plan = plan
        self._pending = []
        self._reference = None
        self._reference_label = "the input model"
        try:
            self._inputs = make_inputs(model, self.options)
        except GraphpassError as error:
            self._inputs = None
            self._problem = error.message
            return
        self._take_reference(model, "the input model")

    def after_pass(self, planned: PlannedPass, model: Model, record: PassRecord,
                   context: PassContext) -> Iterable[Finding]:
        """Move the reference, check, or keep a snapshot; at the end, compare."""
        findings: list[Finding] = []
        if self._inputs is not None and not planned.analysis and record.changed:
            if not type(planned.instance).preserves_semantics:
                self._take_reference(model, f"the model after {planned.name!r}")
            elif self._reference is not None and self._reference.outputs is not None:
                if self.options.each:
                    findings.extend(self._check(model, planned.name, planned.name))
                else:
                    self._pending.append((planned.name, model.copy()))
        if self._plan and planned is self._plan[-1] and not any(
                f.severity is Severity.ERROR for f in findings):
            findings.extend(self._final(model))
        return findings

    # ----------------------------------------------------------------- helpers
    def _take_reference(self, model: Model, label: str) -> None:
        assert self._inputs is not None
        outcome = run_model(model, self._inputs, self.options.backend)
        self._pending = []
        if outcome.outputs is None:
            self._reference = None
            self._problem = f"{label} could not run ({outcome.reason})"
            return
        self._reference = outcome
        self._reference_label = label

    def _check(self, model: Model, culprit: str, label: str) -> list[Finding]:
        assert self._reference is not None and self._reference.outputs is not None
        assert self._inputs is not None
        outcome = run_model(model, self._inputs, self._reference.backend or "auto")
        if outcome.outputs is None:
            return [Finding(
                VERIFY_MISMATCH_CODE, Severity.ERROR,
                f"the model no longer runs after pass {label!r} ({outcome.reason}), though "
                f"{self._reference_label} did", pass_name=culprit,
                hint=f"pass {culprit!r} broke the model; run with --dump-after {culprit} to "
                     "look at it")]
        mismatches = compare_outputs(self._reference.outputs, outcome.outputs,
                                     self.options.rtol, self.options.atol)
        if not mismatches:
            return []
        described = "; ".join(f"{m.output}: {m.detail}" for m in mismatches[:5])
        return [Finding(
            VERIFY_MISMATCH_CODE, Severity.ERROR,
            f"pass {culprit!r} changed what the model computes: outputs differ from those of "
            f"{self._reference_label} ({described})",
            pass_name=culprit,
            hint=f"pass {culprit!r} is wrong for this model; leave it out (--disable-pass "
                 f"{culprit}) and report it with the model",
            data={"mismatches": [{"output": m.output, "detail": m.detail} for m in mismatches],
                  "reference": self._reference_label,
                  "backend": self._reference.backend,
                  "rtol": self.options.rtol, "atol": self.options.atol})]

    def _final(self, model: Model) -> list[Finding]:
        if self._reference is None or self._reference.outputs is None or self._inputs is None:
            optional = self.options.optional
            return [Finding(
                VERIFY_SKIPPED_CODE, Severity.WARNING if optional else Severity.ERROR,
                f"nothing was verified: {self._problem or 'the model could not run'}",
                pass_name=self.name,
                hint="give inputs the model accepts with --verify-inputs FILE.npz (one array "
                     "per input, numpy.savez), or sizes of its symbolic dimensions with "
                     "--verify-dim NAME=SIZE" + ("" if optional else
                                                 "; or let such a run pass with a warning: "
                                                 "--verify-optional"),
                data={"reason": self._problem, "optional": optional})]
        if not self.options.each:
            final = self._check(model, "?", "the pipeline")
            if final:
                for name, snapshot in self._pending:
                    located = self._check(snapshot, name, name)
                    if located:
                        return located
                return final
        count = len(self._reference.outputs)
        return [Finding(
            VERIFIED_CODE, Severity.INFO,
            f"verified: the {count} output{'s' * (count != 1)} after the pipeline equal those "
            f"of {self._reference_label} ({self._reference.backend}, rtol={self.options.rtol}, "
            f"atol={self.options.atol})",
            pass_name=self.name,
            data={"reference": self._reference_label, "backend": self._reference.backend,
                  "outputs": sorted(self._reference.outputs)})]
