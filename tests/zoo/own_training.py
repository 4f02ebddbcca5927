"""Judge graphpass's own trainer on a zoo export: standard ONNX on stock onnxruntime vs torch.

:func:`own_judge` runs, in this Python (the main venv: stock onnxruntime, no
onnxruntime-training), ``graphpass run MODEL -p train-ready [--checkpoint CK]
--emit-training-graph DIR`` and, when graphpass says ready, checks the directory
against torch:

* ``gradient.onnx`` and ``step.onnx`` pass ``onnx.checker.check_model(full_check=True)``
  and hold no node outside the default ONNX domain (functions included);
* ``gradient.onnx``, run by onnxruntime on the case's batch with the initial weights,
  gives torch's loss (relative :data:`LOSS_RTOL`) and torch's gradient of every
  parameter (``torch.autograd`` in float64, BatchNorm with batch statistics: the
  zoo's measure, :func:`zoo.compare_gradients`, relative 1e-3 plus twice torch's own
  float32 error on that parameter: a sum that nearly cancels leaves float32 rounding to
  decide it), each parameter trained
  once and nothing else trained (gradients off within :data:`ROUNDING_FACTOR` of how far
  float32 noise in the weights moves torch's float64 ones, when that is over the
  tolerance, are ``undecided``: a kink decides them, not graphpass);
* :data:`~zoo.adamw_reference.OWN_STEPS` steps of ``step.onnx`` through
  :class:`graphpass.training.Trainer` give the weights of as many
  ``torch.optim.AdamW`` steps (:func:`zoo.adamw_reference.torch_adamw`) within
  :data:`WEIGHT_ATOL`; a weight further than that must be within :data:`WEIGHT_ATOL`
  plus twice torch's own float32 error of torch's float64 run (rounding noise that
  AdamW amplifies decides it, see :mod:`zoo.adamw_reference`).

A refusal is judged as the zoo judges one (:mod:`zoo.judging`): right when every error
names where and its hint, followed, leads to an export that trains.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from zoo.adamw_reference import OWN_STEPS, AdamWReference, torch_adamw
from zoo.cases import Case, ZooError
from zoo.exporting import Export, ExportFailed, export
from zoo.judging import (
    GRADIENT_RTOL,
    ROUNDING_FACTOR,
    GradientCheck,
    compare_gradients,
    exit_reason,
    followed_advice,
    parameters_left_out,
    rounding_spread,
)
from zoo.reference import SENSITIVITY_DELTA, Reference, torch_reference
from zoo.training import TrainingRun

__all__ = ["GRADIENT_RTOL", "LOSS_RTOL", "WEIGHT_ATOL", "OwnOutcome", "build_training_graph",
           "own_judge"]

LOSS_RTOL = 1e-3
"""Largest relative difference of the first loss from torch's."""
WEIGHT_ATOL = 1e-4
"""Largest difference of a weight after the AdamW steps from torch's."""


@dataclass
class OwnOutcome:
    """The own trainer's verdict on one case in one mode.

    Attributes:
        case: The case's name.
        mode: The export mode.
        label: ``trains``, ``refused rightly``, ``wrong``, ``not exported`` (the
            exporter failed), or ``undecided``: the gradients equal torch's, but torch's
            own float32 training run ends further than :data:`WEIGHT_ATOL` from its
            float64 run on most weights, so the weights after the steps decide nothing;
            or the gradients are off, but torch's own float64 gradients move as much
            under float32 noise in the weights (:data:`ROUNDING_FACTOR`).
        reason: One line: why.
        seconds: ``graphpass`` (the ``train-ready`` process), ``check`` (gradients and
            steps) and ``total``.
        loss_error: Relative difference of ``gradient.onnx``'s loss from torch's.
        gradients: The gradient check (``None`` unless ``gradient.onnx`` ran).
        weight_error: Largest difference of a weight after the steps from torch's.
        noisy: Weights further than :data:`WEIGHT_ATOL` from torch's float32 run, with
            torch's own float32 error (its float32 run's distance from its float64
            run); they count as right within :data:`WEIGHT_ATOL` plus twice that of
            the float64 run, and are left out of ``weight_error``.
        losses: The loss of each ``step.onnx`` step.
        torch_losses: torch's.
        findings: The error findings of a refusal.
        followed: For a refusal: the outcome of following its hint.
        left_out: For a run graphpass called ready: the torch parameters the loss
            reaches that are outside the manifest's trainable set
            (:func:`zoo.judging.parameters_left_out`); any makes it ``wrong``.
    """

    case: str
    mode: str
    label: str
    reason: str
    seconds: dict[str, float] = field(default_factory=dict)
    loss_error: float | None = None
    gradients: GradientCheck | None = None
    weight_error: float | None = None
    noisy: dict[str, float] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    torch_losses: list[float] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    followed: OwnOutcome | None = None
    left_out: list[str] = field(default_factory=list)

    @property
    def gradient_error(self) -> float | None:
        """The largest relative gradient error (``None`` unless checked)."""
        if self.gradients is None:
            return None
        return max(self.gradients.errors.values(), default=0.0)


def build_training_graph(exported: Export, workdir: Path, *arguments: str
                         ) -> tuple[int, dict[str, Any], str]:
    """``graphpass run -p train-ready --emit-training-graph workdir/train`` on an export.

    Returns:
        The exit code, the JSON report (empty if none) and the standard error.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "graphpass", "run", str(exported.model),
               "-o", str(workdir / "ready.onnx"), "-p", "train-ready",
               "--emit-training-graph", str(workdir / "train"), "--format", "json"]
    if exported.checkpoint is not None:
        command += ["--checkpoint", str(exported.checkpoint)]
    done = subprocess.run([*command, *arguments], capture_output=True, text=True, check=False,
                          timeout=900)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = {}
    return done.returncode, report, done.stderr


def own_judge(case: Case, mode: str, workdir: Path, *, follow_hints: bool = True,
              arguments: tuple[str, ...] = ()) -> OwnOutcome:
    """Export ``case`` in ``mode``, build its training graphs, check them against torch.

    ``arguments``: more ``graphpass run`` arguments (``-O PASS.OPTION=VALUE``), for tests
    of the judge itself; a followed hint is judged without them.
    """
    started = time.perf_counter()
    try:
        exported = export(case, mode)
    except ExportFailed as error:
        return OwnOutcome(case.name, mode, "not exported", f"not exported: {error}",
                          {"total": time.perf_counter() - started})
    except ZooError as error:
        return OwnOutcome(case.name, mode, "wrong", f"export failed: {error}",
                          {"total": time.perf_counter() - started})
    code, report, stderr = build_training_graph(exported, workdir / mode,
                                                *user_options(exported), *arguments)
    built = time.perf_counter()
    seconds = {"graphpass": built - started}
    errors = [f for f in report.get("findings", []) if f.get("severity") == "error"]
    if code == 1 and errors:
        outcome = _refusal(case, mode, errors, workdir, follow_hints)
    elif code != 0:
        outcome = OwnOutcome(case.name, mode, "wrong", exit_reason(code, report, stderr))
    else:
        outcome = _check(case, mode, exported, workdir / mode / "train")
        seconds["check"] = time.perf_counter() - built
    seconds["total"] = time.perf_counter() - started
    outcome.seconds = seconds
    return outcome


def user_options(exported: Export) -> tuple[str, ...]:
    """The options a user would give for what the export's files do not say.

    Nothing in an ONNX file says which parameters torch does not train
    (``requires_grad=False``): torch's export record lists them as parameters. Only a
    ``save_state`` checkpoint (``dynamo-full-state``) records them, and then nothing is
    named; in every other mode (no checkpoint, as ``dynamo``, or a plain ``state_dict()``,
    as ``dynamo-state-dict``, ``dynamo+state_dict`` and the other ``+state_dict`` /
    ``+finetuned`` modes) they are named with ``lint-gradients.frozen``, as the docs ask a
    user who froze them to do.
    """
    frozen = exported.manifest.get("torch_frozen") or []
    if frozen and exported.mode != "dynamo-full-state":
        return ("-O", f"lint-gradients.frozen={json.dumps(frozen)}")
    return ()


# ================================================================== the checks
def _check(case: Case, mode: str, exported: Export, directory: Path) -> OwnOutcome:
    def wrong(reason: str, **more: Any) -> OwnOutcome:
        return OwnOutcome(case.name, mode, "wrong", reason, **more)

    manifest = json.loads((directory / "manifest.json").read_text())
    reference = torch_reference(case, exported.oracle)
    left_out = parameters_left_out(reference, manifest["trainable"],
                                   manifest.get("torch_names", {}))
    if left_out:
        return OwnOutcome(case.name, mode, "wrong",
                          f"exit 0 with {len(left_out)} torch parameters outside the trainable "
                          f"set ({', '.join(left_out[:3])}"
                          f"{f' and {len(left_out) - 3} more' if len(left_out) > 3 else ''})",
                          left_out=left_out)
    for file in ("gradient", "step"):
        problem = _standard_onnx(directory / manifest["files"][file])
        if problem:
            return wrong(problem)
    with np.load(exported.batch) as data:
        batch = {name: data[name] for name in data.files}
    loss, gradients = _run_gradient(directory, manifest, batch)
    names = _canonical_names(manifest, reference)
    # Keyed by the trainable names, with their torch names as aliases: two trainable
    # copies of one parameter (a tie split in two) stay two, and are caught.
    run = TrainingRun(0, {}, directory / "ready.onnx", directory, gradients=gradients)
    check = compare_gradients(replace(reference, aliases={**reference.aliases, **names}), run)
    loss_error = abs(loss - reference.loss) / max(abs(reference.loss), 1e-30)
    measured: dict[str, Any] = {"gradients": check, "loss_error": loss_error}
    if loss_error > LOSS_RTOL:
        return wrong(f"the loss {loss:.6g} differs from torch's {reference.loss:.6g} "
                     f"({loss_error:.1e} relative)", **measured)
    if not check.ok:
        spread = rounding_spread(case, exported.oracle, reference) if (
            check.wrong and not (check.untrained or check.copies or check.extra)) else None
        worst = max(check.wrong.values(), default=0.0)
        if spread is not None and spread > GRADIENT_RTOL and worst <= ROUNDING_FACTOR * spread:
            return OwnOutcome(
                case.name, mode, "undecided",
                f"{check.summary()}; torch's own float64 gradients move by up to "
                f"{spread:.1e} when the weights move by {SENSITIVITY_DELTA:g} relative: an "
                "input within float32 rounding of a kink (ReLU6) decides them, so no float32 "
                "run can match them to 1e-3", **measured)
        return wrong(check.summary(), **measured)
    trained, losses = _train(directory, batch)
    expected = torch_adamw(case, exported.oracle)
    measured.update(losses=losses, torch_losses=expected.losses)
    drift, allowed, own = _weight_drift(trained, names, expected)
    over = {name: d for name, d in drift.items() if d > allowed[name]}
    strict = [name for name, d in drift.items() if allowed[name] == WEIGHT_ATOL]
    weight_error = max((drift[name] for name in strict), default=0.0)
    noisy = {name: (allowed[name] - WEIGHT_ATOL) / 2 for name in drift if name not in strict}
    measured.update(weight_error=weight_error, noisy=noisy)
    if over and float(np.median(list(own.values()))) > WEIGHT_ATOL:
        return OwnOutcome(
            case.name, mode, "undecided",
            f"{len(check.errors)} gradients equal torch's (max rel. error "
            f"{max(check.errors.values(), default=0.0):.1e}); after {OWN_STEPS} AdamW steps "
            f"torch's own float32 run ends further than {WEIGHT_ATOL:g} from its float64 run "
            f"on most weights (median {np.median(list(own.values())):.1e}): float32 "
            "rounding decides this training run, so the weights cannot be compared "
            f"(ours: up to {max(over.values()):.1e} from float64's)", **measured)
    if over:
        worst = max(over, key=over.__getitem__)
        return wrong(f"after {OWN_STEPS} AdamW steps the weights differ from torch.optim.AdamW's "
                     f"by up to {over[worst]:.1e} ({worst}; allowed {allowed[worst]:.1e})",
                     **measured)
    if not losses[-1] < losses[0]:
        return wrong(f"the loss does not fall: {losses}", **measured)
    largest = max(check.errors.values(), default=0.0)
    aside = (f"; {len(noisy)} weights that float32 rounding decides (torch's own float32 "
             f"run ends up to {max(noisy.values()):.1e} from float64's) within 1e-4 plus "
             "twice that of float64's" if noisy else "")
    return OwnOutcome(
        case.name, mode, "trains",
        f"{len(check.errors)} gradients equal torch's (max rel. error {largest:.1e}; loss "
        f"{loss_error:.1e}); after {OWN_STEPS} AdamW steps the weights are "
        f"torch.optim.AdamW's within {weight_error:.1e}{aside}", **measured)


def _weight_drift(trained: dict[str, np.ndarray], names: dict[str, str],
                  expected: AdamWReference
                  ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """How far each weight after the steps is from torch's, and how far it may be.

    Returns ``(drift, allowed, own)`` by canonical name. ``drift`` is the largest
    difference from torch's float32 AdamW run, ``allowed`` is :data:`WEIGHT_ATOL`. A
    weight further than that is measured from torch's float64 run instead and allowed
    :data:`WEIGHT_ATOL` plus twice torch's own float32 error, ``own`` (how far torch's
    float32 runs end from its float64 run, the larger of two: on every thread and on one,
    two orders of summation): rounding noise that AdamW amplifies decides such weights
    (:mod:`zoo.adamw_reference`), in torch and here alike.
    """
    drift: dict[str, float] = {}
    allowed: dict[str, float] = {}
    own: dict[str, float] = {}
    for name, value in trained.items():
        canonical = names.get(name)
        if canonical not in expected.weights:
            continue
        torch32 = expected.weights[canonical].astype(np.float64)
        torch64 = expected.weights64[canonical]
        ours = value.astype(np.float64)
        drift[canonical] = float(np.abs(ours - torch32).max(initial=0.0))
        own[canonical] = max(float(np.abs(run.astype(np.float64) - torch64).max(initial=0.0))
                             for run in (torch32, expected.weights_one_thread[canonical]))
        allowed[canonical] = WEIGHT_ATOL
        if drift[canonical] > WEIGHT_ATOL:
            allowed[canonical] += ROUNDING_FACTOR * own[canonical]
            drift[canonical] = float(np.abs(ours - torch64).max(initial=0.0))
    return drift, allowed, own


def _standard_onnx(path: Path) -> str | None:
    """Why ``path`` is not checked standard ONNX, or ``None``."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as error:  # the checker raises several exception types
        return f"{path.name} fails onnx.checker (full_check): {_first_line(str(error))}"
    proto = onnx.load(str(path), load_external_data=False)
    nodes = [*proto.graph.node, *(n for f in proto.functions for n in f.node)]
    foreign = sorted({n.domain for n in nodes if n.domain not in ("", "ai.onnx")})
    if foreign:
        return f"{path.name} has nodes outside the default ONNX domain: {foreign}"
    return None


def _run_gradient(directory: Path, manifest: dict[str, Any], batch: dict[str, np.ndarray]
                  ) -> tuple[float, dict[str, np.ndarray]]:
    """``gradient.onnx`` on stock onnxruntime: the loss and each trainable weight's gradient."""
    import onnxruntime
    from safetensors.numpy import load_file

    onnxruntime.set_default_logger_severity(3)
    weights = {**load_file(str(directory / manifest["files"]["weights"])),
               **load_file(str(directory / manifest["files"]["buffers"]))}
    session = onnxruntime.InferenceSession(str(directory / manifest["files"]["gradient"]),
                                           providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    feeds = {name: value for name, value in {**batch, **weights}.items() if name in wanted}
    loss, *gradients = session.run(None, feeds)[:1 + len(manifest["trainable"])]
    return float(loss), dict(zip(manifest["trainable"], gradients, strict=True))


def _train(directory: Path, batch: dict[str, np.ndarray]
           ) -> tuple[dict[str, np.ndarray], list[float]]:
    """:data:`OWN_STEPS` steps of ``step.onnx`` through the Trainer: the weights, the losses."""
    from graphpass.training import Trainer

    trainer = Trainer(directory)
    losses = [trainer.step(batch) for _ in range(OWN_STEPS)]
    names = set(trainer.manifest["trainable"])
    return {k: v for k, v in trainer.weights().items() if k in names}, losses


def _canonical_names(manifest: dict[str, Any], reference: Reference) -> dict[str, str]:
    """Initializer name -> canonical torch parameter name, for every trainable weight."""
    torch_names = manifest.get("torch_names", {})
    found = {}
    for name in manifest["trainable"]:
        key = torch_names.get(name)
        for candidate in (name, key, reference.prefix + key if key else None):
            if candidate and candidate in reference.aliases:
                found[name] = reference.aliases[candidate]
                break
    return found


# ================================================================== refusals
def _refusal(case: Case, mode: str, errors: list[dict[str, Any]], workdir: Path,
             follow_hints: bool) -> OwnOutcome:
    codes = ", ".join(sorted({f["code"] for f in errors}))
    about = _first_line(errors[0]["message"])
    kept = [{k: f.get(k) for k in ("code", "message", "node", "value", "hint")} for f in errors]
    if any(not (f.get("node") or f.get("value") or f.get("function")) for f in errors):
        return OwnOutcome(case.name, mode, "wrong",
                          f"refused ({codes}) without naming where: {about}", findings=kept)
    target, false, instead = followed_advice(mode, errors)
    if target is None:
        reason, followed = f"{false} ({codes}): {about}", None
        if instead and follow_hints:
            followed = own_judge(case, instead, workdir / "followed", follow_hints=False)
            reason += f"; the producer's own flag followed instead ({instead}): {followed.label}"
        return OwnOutcome(case.name, mode, "wrong", reason, findings=kept, followed=followed)
    if not follow_hints:
        return OwnOutcome(case.name, mode, "refused rightly", f"refused ({codes}): {about}",
                          findings=kept)
    followed = own_judge(case, target, workdir / "followed", follow_hints=False)
    label = "refused rightly" if followed.label in ("trains", "undecided") else "wrong"
    return OwnOutcome(case.name, mode, label,
                      f"refused ({codes}): {about}; advice followed ({target}): "
                      f"{followed.label}", findings=kept, followed=followed)


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
