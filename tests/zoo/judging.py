"""Judge a zoo case against the torch oracle: trains, refused rightly, or wrong.

:func:`judge` exports a case, runs ``train-ready`` and training on it
(:func:`zoo.training.train_ready`) and compares with :func:`zoo.torch_reference`:

``trains``
    graphpass exits 0; the model it wrote computes torch's outputs in onnxruntime; the
    first training step's gradient of **every** torch parameter equals torch's
    (torch's, computed in float64: relative 1e-3 of the parameter's largest gradient,
    see :data:`GRADIENT_FLOOR`), each
    parameter trained once and under its own name, nothing else trained; and the loss
    falls over the steps; the first AdamW step gives torch's weights
    (:data:`WEIGHT_TOLERANCE`).
``refused``
    graphpass exits 1 with error findings. The refusal is *right* when every error names
    the node, weight or buffer it is about and gives a hint, and the hint, followed,
    gives a model that trains (see :data:`ADVICE`); otherwise it is a false refusal.
``wrong``
    anything else: a false refusal, a "ready" followed by a failing training step, wrong
    outputs or gradients, torch parameters left untrained or copies trained instead, a
    crash.
``not exported``
    the exporter failed on the case (Optimum cannot export every architecture): the
    exporter's error is the reason; graphpass is not judged.

The worst failure gets a check of its own: graphpass exits 0 ("ready") while a torch
parameter the loss reaches is outside the trainable set it wrote (the writer's
``trainable``: GP700 for the artifacts, GP850 for the training graphs), so that training
"works" and the parameter never moves (:func:`parameters_left_out`,
:attr:`Outcome.left_out`): always ``wrong``, whatever else is right.

Following a hint means one of the re-exports or extra state a user can act on
(:data:`ADVICE`): ``save_state`` (fill from the full state: ``dynamo-state-dict`` ->
``dynamo-full-state``), ``optimize=False`` (``dynamo`` -> ``dynamo-unoptimized``, and
with the same checkpoint for ``dynamo+state_dict`` and ``dynamo+finetuned``),
``do_constant_folding=False`` (``legacy-functions`` -> ``legacy-unfolded``,
``legacy+state_dict`` -> ``legacy-unfolded+state_dict``) and, for the Optimum exports,
Optimum's own ``--no-constant-folding`` (``optimum`` -> ``optimum-unfolded``, with the
same checkpoint for the others): advice worded for ``torch.onnx.export`` does not apply
to a file ``optimum-cli`` made, and such a refusal is a false one. A refusal whose only
advice is to change which weights are trained is a false one too: the export holds
everything needed.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zoo.cases import Case, ZooError
from zoo.exporting import OPTIMUM_MODES, Export, ExportFailed, export
from zoo.reference import ADAMW, Reference, gradient_sensitivity, torch_reference
from zoo.training import TrainingRun, train_ready

__all__ = ["ADVICE", "GRADIENT_RTOL", "TORCH_EXPORT_ADVICE", "GradientCheck", "Outcome",
           "compare_gradients", "exit_reason", "followed_advice", "judge", "parameters_left_out",
           "trainable_set"]

GRADIENT_RTOL = 1e-3
"""Largest gradient error, relative to the parameter's largest gradient (in float64)."""
ROUNDING_FACTOR = 2.0
"""How many times torch's own float32 error a result may add to a tolerance: a gradient
whose float32 sum nearly cancels (MobileViT's fusion BatchNorm bias: terms of 5 summing to
3e-5) is off in torch's own float32 run too, by rounding, not by anything the model does."""
GRADIENT_FLOOR = 1e-3
"""Gradients smaller than this fraction of the model's largest gradient are compared as if
they were this large: float32 rounding, in torch and in onnxruntime alike, reaches them
from the large gradients they are computed with (an attention key's bias has a zero
gradient in exact arithmetic, 1e-10 in float32)."""
OUTPUT_RTOL, OUTPUT_ATOL = 1e-4, 1e-5
WEIGHT_TOLERANCE = 1e-2
"""Largest difference, in units of ``lr``, between a weight after onnxruntime-training's
first AdamW step and the torch weight moved by that AdamW step of onnxruntime's own
gradient. (Not torch's weight after torch's step: AdamW's first step is
``lr * g / (|g| + 31.6 eps)``, so a gradient element near ``31.6 eps = 3e-5`` moves by
half a step for a rounding difference in ``g``; the gradients are compared above.)"""

ADVICE: tuple[tuple[str, str, str], ...] = (
    (r"save_state", "dynamo-state-dict", "dynamo-full-state"),
    (r"optimize\s*=\s*False", "dynamo", "dynamo-unoptimized"),
    (r"do_constant_folding\s*=\s*False", "legacy-functions", "legacy-unfolded"),
    (r"optimize\s*=\s*False", "dynamo+state_dict", "dynamo-unoptimized+state_dict"),
    (r"optimize\s*=\s*False", "dynamo+finetuned", "dynamo-unoptimized+finetuned"),
    (r"do_constant_folding\s*=\s*False", "legacy+state_dict", "legacy-unfolded+state_dict"),
    (r"--no-constant-folding", "optimum", "optimum-unfolded"),
    (r"--no-constant-folding", "optimum+state_dict", "optimum-unfolded+state_dict"),
    (r"--no-constant-folding", "optimum+pretrained", "optimum-unfolded+pretrained"),
    (r"make_dynamic_shape_fixed", "optimum", "optimum-fixed"),
    (r"make_dynamic_shape_fixed", "optimum+state_dict", "optimum-fixed+state_dict"),
    (r"make_dynamic_shape_fixed", "optimum+pretrained", "optimum-fixed+pretrained"),
    (r"make_dynamic_shape_fixed", "optimum-unfolded", "optimum-unfolded-fixed"),
    (r"make_dynamic_shape_fixed", "optimum-unfolded+state_dict",
     "optimum-unfolded-fixed+state_dict"),
    (r"make_dynamic_shape_fixed", "optimum-unfolded+pretrained",
     "optimum-unfolded-fixed+pretrained"),
)
"""(hint pattern, mode it applies to, the mode that follows the hint)."""
TORCH_EXPORT_ADVICE = r"do_constant_folding\s*=\s*False|optimize\s*=\s*False|torch\.onnx\.export"
"""Advice worded for ``torch.onnx.export``: a false refusal of an Optimum export unless it
also gives Optimum's flag."""
WRITERS = ("GP700", "GP850")
"""The findings of the writers of training artifacts and graphs (``data["trainable"]``)."""

Verdict = Literal["trains", "refused", "wrong", "unexported"]


@dataclass
class GradientCheck:
    """First-step gradients of onnxruntime-training against torch's.

    Attributes:
        errors: Canonical torch name -> relative error of its gradient.
        untrained: Torch parameters the loss reaches that onnxruntime-training did not train.
        copies: Torch parameters trained under several names (each copy updated alone).
        extra: Trained tensors that are no torch parameter (exporter copies, buffers).
        weight_drift: Largest difference of a weight after the first optimizer step from
            the expected one, in units of ``lr`` (see :data:`WEIGHT_TOLERANCE`).
        torch32: The largest error of torch's own float32 gradients by the same measure
            (how well-conditioned the case is: well under :data:`GRADIENT_RTOL`).
        torch32_by: That error per parameter.
    """

    errors: dict[str, float] = field(default_factory=dict)
    untrained: list[str] = field(default_factory=list)
    copies: dict[str, list[str]] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)
    weight_drift: float = 0.0
    torch32: float = 0.0
    torch32_by: dict[str, float] = field(default_factory=dict)

    @property
    def wrong(self) -> dict[str, float]:
        """The parameters whose gradient is off by more than :data:`GRADIENT_RTOL` plus
        :data:`ROUNDING_FACTOR` times torch's own float32 error on it."""
        return {name: e for name, e in self.errors.items()
                if e > GRADIENT_RTOL + ROUNDING_FACTOR * self.torch32_by.get(name, 0.0)}

    @property
    def ok(self) -> bool:
        """Every torch parameter trained once, with torch's gradient, nothing else trained,
        and the weights after the steps are torch's."""
        return not (self.wrong or self.untrained or self.copies or self.extra
                    or self.weight_drift > WEIGHT_TOLERANCE)

    def summary(self) -> str:
        """One line: what is wrong, or the largest error."""
        parts = []
        if self.untrained:
            parts.append(f"{len(self.untrained)} of {len(self.errors) + len(self.untrained)} "
                         f"torch parameters untrained ({_some(self.untrained)})")
        if self.extra:
            parts.append(f"{len(self.extra)} non-parameters trained ({_some(self.extra)})")
        if self.copies:
            parts.append(f"{len(self.copies)} parameters trained as several copies "
                         f"({_some(list(self.copies))})")
        if self.wrong:
            worst = max(self.wrong, key=self.wrong.__getitem__)
            parts.append(f"{len(self.wrong)} gradients off (worst {worst}: "
                         f"{self.wrong[worst]:.1e} relative)")
        if not parts and self.weight_drift > WEIGHT_TOLERANCE:
            parts.append(f"gradients equal torch's, but the weights after an AdamW step differ "
                         f"by {self.weight_drift:.2f} x lr")
        if not parts:
            worst_error = max(self.errors.values(), default=0.0)
            return (f"{len(self.errors)} gradients equal torch's (max rel. error "
                    f"{worst_error:.1e}; torch's own float32: {self.torch32:.1e}), and so "
                    "do the weights after a step")
        return "; ".join(parts)


@dataclass
class Outcome:
    """The verdict on one case in one mode.

    Attributes:
        case: The case's name.
        mode: The export mode.
        verdict: ``trains``, ``refused`` or ``wrong``.
        right: For ``trains``: correct; for ``refused``: the refusal is right (and its
            advice works); for ``wrong``: ``False``.
        reason: One line: why.
        seconds: ``export``, ``graphpass``, ``training`` (the runner process) and ``total``.
        run: The training run (``None`` when the export failed).
        gradients: The gradient check (``None`` unless training ran).
        followed: For a refusal: the outcome of following its hint.
        findings: The error findings (for refusals).
        left_out: For a run graphpass called ready: the torch parameters the loss reaches
            that are outside the trainable set it wrote (:func:`parameters_left_out`);
            any makes the outcome ``wrong``.
        trainable: That trainable set (the writer's ``trainable``), for a ready run.
    """

    case: str
    mode: str
    verdict: Verdict
    right: bool
    reason: str
    seconds: dict[str, float] = field(default_factory=dict)
    run: TrainingRun | None = None
    gradients: GradientCheck | None = None
    followed: Outcome | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    trainable: list[str] | None = None

    @property
    def label(self) -> str:
        """``trains``, ``refused rightly``, ``wrong`` or ``not exported``."""
        if self.verdict == "unexported":
            return "not exported"
        if self.verdict == "refused":
            return "refused rightly" if self.right else "wrong"
        return "trains" if self.right else "wrong"


def rounding_spread(case: Case, oracle: str, reference: Reference) -> float | None:
    """How far float32 noise in the weights moves torch's float64 gradients, relative.

    The largest change, over the seeds of :func:`zoo.reference.gradient_sensitivity` and
    every parameter, by :func:`compare_gradients`' measure. Above :data:`GRADIENT_RTOL`,
    float32 arithmetic cannot decide the gradients to that tolerance (a kink within
    rounding). ``None`` for the ``optimum`` oracle (its torch model lives in another venv).
    """
    if oracle not in ("export", "finetuned"):
        return None
    largest = _largest_gradient(reference)
    return max((_relative_error(moved[name], expected, largest)
                for moved in gradient_sensitivity(case, oracle).values()
                for name, expected in reference.gradients.items() if name in moved),
               default=0.0)


def _largest_gradient(reference: Reference) -> float:
    return max((float(np.abs(g).max(initial=0.0)) for g in reference.gradients.values()),
               default=0.0)


def _relative_error(got: np.ndarray, expected: np.ndarray, largest: float) -> float:
    """The largest difference over the expected gradient's largest value (floored)."""
    scale = max(float(np.abs(expected).max(initial=0.0)), GRADIENT_FLOOR * largest, 1e-30)
    return float(np.abs(got - expected).max(initial=0.0)) / scale


def compare_gradients(reference: Reference, run: TrainingRun) -> GradientCheck:
    """Map onnxruntime-training's trained tensors to torch parameters and compare."""
    check = GradientCheck()
    by_parameter: dict[str, list[str]] = {}
    largest = _largest_gradient(reference)
    for name in run.gradients:
        canonical = reference.aliases.get(name)
        if canonical is None:
            check.extra.append(name)
        else:
            by_parameter.setdefault(canonical, []).append(name)
    for name, expected in reference.gradients.items():
        names = by_parameter.get(name, [])
        if not names:
            check.untrained.append(name)
            continue
        if len(names) > 1:
            check.copies[name] = names
        got = run.gradients[names[0]]
        if got.shape != expected.shape:
            check.errors[name] = float("inf")
            continue
        check.errors[name] = _relative_error(got, expected, largest)
        check.torch32_by[name] = _relative_error(reference.gradients32[name], expected, largest)
        check.torch32 = max(check.torch32, check.torch32_by[name])
    drifts = []
    for name, names in by_parameter.items():
        after, gradient = run.weights.get(names[0]), run.gradients[names[0]]
        start = reference.initial[name]
        if after is not None and after.shape == start.shape == gradient.shape:
            expected = start - _first_adamw_step(gradient.astype(np.float64))
            drifts.append(float(np.abs(after - expected).max(initial=0.0)))
    check.weight_drift = max(drifts, default=0.0) / float(ADAMW["lr"])
    return check


def trainable_set(report: dict[str, Any]) -> list[str] | None:
    """The trainable set a ready run wrote (its writer's ``data["trainable"]``), or ``None``."""
    for finding in report.get("findings", []):
        if finding.get("code") in WRITERS and "trainable" in (finding.get("data") or {}):
            return list(finding["data"]["trainable"])
    return None


def parameters_left_out(reference: Reference, trainable: list[str],
                        torch_names: dict[str, str] | None = None) -> list[str]:
    """The torch parameters the loss reaches that no name in ``trainable`` stands for.

    Args:
        reference: The torch oracle (its gradients name the parameters the loss reaches;
            its aliases map every name of a tensor to its canonical one).
        trainable: The initializer names a run trains.
        torch_names: Initializer name -> the torch name graphpass recorded for it (the
            training-graph manifest's ``torch_names``), where the names differ.
    """
    covered = set()
    for name in trainable:
        key = (torch_names or {}).get(name)
        for candidate in (name, key, reference.prefix + key if key else None):
            if candidate and candidate in reference.aliases:
                covered.add(reference.aliases[candidate])
                break
    return sorted(name for name in reference.gradients if name not in covered)


def _first_adamw_step(gradient: np.ndarray) -> np.ndarray:
    """The first update of onnxruntime-training's AdamW (:func:`zoo.reference.adamw_step`)."""
    beta1, beta2 = ADAMW["betas"]
    size = ADAMW["lr"] * (1 - beta2) ** 0.5 / (1 - beta1)
    moment = (1 - beta1) * gradient
    second = np.sqrt((1 - beta2) * gradient * gradient) + ADAMW["eps"]
    return np.asarray(size * moment / second)


def judge(case: Case, mode: str, workdir: Path, *, follow_hints: bool = True,
          arguments: tuple[str, ...] = ()) -> Outcome:
    """Export ``case`` in ``mode``, run ``train-ready`` and training, compare with torch.

    Args:
        case: The case.
        mode: An export mode (:data:`zoo.MODES`, or an advice mode).
        workdir: A folder of its own for this run (graphpass's output, artifacts).
        follow_hints: For a refusal, also judge the export its hint leads to.
        arguments: More ``graphpass run`` arguments (``-O PASS.OPTION=VALUE``), for tests
            of the judge itself; a followed hint is judged without them.
    """
    started = time.perf_counter()
    try:
        exported = export(case, mode)
    except ExportFailed as error:
        return Outcome(case.name, mode, "unexported", False, f"not exported: {error}",
                       {"total": time.perf_counter() - started})
    except ZooError as error:
        return Outcome(case.name, mode, "wrong", False, f"export failed: {error}",
                       {"total": time.perf_counter() - started})
    reference = torch_reference(case, exported.oracle)
    run = train_ready(exported, workdir / mode, arguments=arguments)
    seconds = {"export": float(exported.manifest.get("seconds", 0.0)),
               "graphpass": run.seconds.get("graphpass", 0.0),
               "training": run.seconds.get("process", 0.0)}
    outcome = _verdict(case, mode, exported, reference, run, workdir, follow_hints)
    seconds["total"] = time.perf_counter() - started
    outcome.seconds = seconds
    return outcome


def _verdict(case: Case, mode: str, exported: Export, reference: Reference, run: TrainingRun,
             workdir: Path, follow_hints: bool) -> Outcome:
    def outcome(verdict: Verdict, right: bool, reason: str, **more: Any) -> Outcome:
        return Outcome(case.name, mode, verdict, right, reason, run=run, **more)

    if run.exit_code is None:
        return outcome("wrong", False, f"graphpass or onnxruntime-training crashed: {run.crash}")
    if run.exit_code == 1 and run.errors:
        return _refusal(case, mode, run, workdir, follow_hints)
    if run.exit_code != 0:
        return outcome("wrong", False, exit_reason(run.exit_code, run.report))
    trainable = trainable_set(run.report)
    if trainable is None and run.trained:
        trainable = sorted(run.gradients)
    left_out = parameters_left_out(reference, trainable) if trainable is not None else []

    def ready(verdict: Verdict, right: bool, reason: str, **more: Any) -> Outcome:
        if left_out:
            verdict, right = "wrong", False
            reason = (f"exit 0 with {len(left_out)} torch parameters outside the trainable "
                      f"set ({_some(left_out)}); " + reason)
        return outcome(verdict, right, reason, left_out=left_out, trainable=trainable, **more)

    if not run.trained:
        return ready("wrong", False, "graphpass said ready, then the training step failed: "
                     f"{_first_line(run.training_error or '')}")
    problem = _output_mismatch(exported, reference, run.output)
    if problem:
        return ready("wrong", False, problem)
    check = compare_gradients(reference, run)
    if not check.ok:
        return ready("wrong", False, check.summary(), gradients=check)
    if not run.losses or not run.losses[-1] < run.losses[0]:
        return ready("wrong", False, f"the loss does not fall: {run.losses}", gradients=check)
    return ready("trains", True, check.summary(), gradients=check)


def _refusal(case: Case, mode: str, run: TrainingRun, workdir: Path,
             follow_hints: bool) -> Outcome:
    errors = run.errors
    codes = ", ".join(sorted({f["code"] for f in errors}))
    named = [f for f in errors if f.get("node") or f.get("value") or f.get("function")]
    unnamed = [f["code"] for f in errors if f not in named]
    about = _first_line(errors[0]["message"])
    if unnamed:
        return Outcome(case.name, mode, "refused", False,
                       f"refused ({codes}) without naming where: {about}", run=run,
                       findings=errors)
    target, false, instead = followed_advice(mode, errors)
    if target is None:
        reason, followed = f"{false} ({codes}): {about}", None
        if instead and follow_hints:
            followed = judge(case, instead, workdir / "followed", follow_hints=False)
            reason += f"; the producer's own flag followed instead ({instead}): {followed.label}"
        return Outcome(case.name, mode, "refused", False, reason, run=run, followed=followed,
                       findings=errors)
    if not follow_hints:
        return Outcome(case.name, mode, "refused", True, f"refused ({codes}): {about}",
                       run=run, findings=errors)
    followed = judge(case, target, workdir / "followed", follow_hints=False)
    verdict_line = (f"refused ({codes}): {about}; advice followed ({target}): "
                    f"{followed.label}")
    then = followed_advice(target, followed.findings)[0] \
        if followed.verdict == "refused" and followed.right and followed.findings else None
    if then is not None:
        # the export the advice leads to is refused in turn, rightly by its own advice
        # (Optimum's ResNet: --no-constant-folding, then fixed image sizes): follow it too
        followed = judge(case, then, workdir / "followed-again", follow_hints=False)
        verdict_line += f"; its advice followed ({then}): {followed.label}"
    right = followed.label == "trains"
    return Outcome(case.name, mode, "refused", right, verdict_line, run=run,
                   followed=followed, findings=errors)


def followed_advice(mode: str, errors: list[dict[str, Any]]
                    ) -> tuple[str | None, str, str | None]:
    """Where following the errors' hints leads (:data:`ADVICE`).

    Returns:
        ``(mode, "", None)``: the mode the hints lead to; or ``(None, why, instead)``: why
        the refusal is a false one and, where its advice is worded for
        ``torch.onnx.export`` on an Optimum export, the mode Optimum's own flag
        (``--no-constant-folding``) leads to.
    """
    hints = " ".join(f.get("hint") or "" for f in errors)
    target = next((follow for pattern, source, follow in ADVICE
                   if source == mode and re.search(pattern, hints)), None)
    if target is not None:
        return target, "", None
    if mode in OPTIMUM_MODES and re.search(TORCH_EXPORT_ADVICE, hints):
        instead = next((follow for pattern, source, follow in ADVICE
                        if source == mode and pattern == "--no-constant-folding"), None)
        return None, ("refused with advice for torch.onnx.export, not for the file's "
                      "producer (optimum-cli: --no-constant-folding)"), instead
    return None, "false refusal", None


def _output_mismatch(exported: Export, reference: Reference, model: Path) -> str | None:
    import onnxruntime

    try:
        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        with np.load(exported.inputs) as data:
            feeds = {name: data[name] for name in data.files}
        got = session.run(None, feeds)[0]
    except Exception as error:  # the runtime's own exception types
        return f"the written model does not run in onnxruntime: {_first_line(str(error))}"
    expected = reference.outputs
    if got.shape != expected.shape:
        return f"output shape {list(got.shape)} != torch's {list(expected.shape)}"
    scale = float(np.abs(expected).max(initial=0.0))
    difference = float(np.abs(got - expected).max(initial=0.0))
    if difference > OUTPUT_ATOL + OUTPUT_RTOL * scale:
        return f"outputs differ from torch's by {difference:.2e} (scale {scale:.2e})"
    return None


def exit_reason(code: int, report: dict[str, Any], stderr: str = "") -> str:
    """One line for a run that ended with ``code`` and no error findings: the error the
    JSON report gives (its type, and its message's first two lines), or standard error."""
    error = report.get("error")
    if isinstance(error, dict):
        lines = [line.strip() for line in str(error.get("message", "")).splitlines()
                 if line.strip()][:2]
        kind = error.get("type") or "error"
        return (f"graphpass exit {code} ({kind}, no finding code): "
                f"{' '.join(lines)[:400]}")
    return f"graphpass exit {code}: {_first_line(str(error or report.get('stderr') or stderr))}"


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _some(names: list[str], shown: int = 3) -> str:
    text = ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")
