"""Optional plugin: ONNX Runtime training artifacts.

Active only where ``onnxruntime.training`` imports (the ``onnxruntime-training``
package, which ships its own ``onnxruntime`` module; graphpass never depends on
it). It gives one pass, ``emit-training-artifacts``, which writes the training,
eval and optimizer models and the checkpoint with
``onnxruntime.training.artifacts.generate_artifacts``, after ``lint-gradients``
says the model can be differentiated::

    graphpass run model.onnx -p train-ready --emit-training-artifacts artifacts/ -o ready.onnx

The artifacts are written at an IR version the installed runtime accepts (with
onnx 1.23, ``generate_artifacts`` writes the optimizer model at IR version 14,
which onnxruntime-training 1.19.2 refuses) and are loaded once with
``onnxruntime.training.api`` to prove it. Then one real training step runs on
generated inputs (as ``--verify`` makes them) and a random target, and its gradient
is checked against finite differences along a random direction (two more forward
runs; ``_training_check``): a model that loads but fails in its
first step, or computes a wrong gradient, is an error, not a "ready". The artifacts
are built in a scratch folder and moved into place only when every check passes.
Failures come back as findings.

Everything that runs onnxruntime-training's native training code on the model
(``generate_artifacts``, loading the artifacts, the step and its finite-difference runs)
runs in a child process (``_training_child``: this Python, started
afresh): the runtime can crash instead of raising (1.19.2 segfaults in the first step of
a ``MaxPool`` over dynamic image sizes, which ``lint-gradients`` now refuses up front).
A crash is an error finding of the stage it happened in (``GP701`` building, ``GP703``
loading, ``GP704`` stepping) naming the signal and the inputs; nothing is written.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import onnx

from graphpass.checkpoint import ReconcileResult
from graphpass.files import owner_of, replace_file, replace_folder, temporary_folder
from graphpass.findings import Finding, Severity
from graphpass.framework import Pass, PassContext, PassResult, hookimpl
from graphpass.ir import Model
from graphpass.ir.proto import model_to_proto
from graphpass.plugins._training_check import StepInputs, StepOutcome, step_inputs
from graphpass.torch import TRAINABLE_TYPES
from graphpass.training.rules import trainable_weights

__all__ = ["EXTERNAL_DATA_BYTES", "EmitTrainingArtifacts", "graphpass_passes",
           "training_available"]

WROTE_CODE = "GP700"
FAILED_CODE = "GP701"
NO_TRAINABLE_CODE = "GP702"
DOES_NOT_LOAD_CODE = "GP703"
STEP_FAILS_CODE = "GP704"
WRONG_GRADIENT_CODE = "GP705"
NOT_CHECKED_CODE = "GP706"

EXTERNAL_DATA_BYTES = 1_800_000_000
"""Weights from which the model goes to ``generate_artifacts`` as a path with external
data (protobuf cannot hold 2 GB); the ``external_data_bytes`` option's default."""
_MISSING_BUILDER = re.compile(r"The gradient builder has not been registered: (\S+) for node (\S*)")


def training_available() -> bool:
    """Whether ``onnxruntime.training`` is installed here.

    Looked up without importing ``onnxruntime`` (``find_spec`` of a submodule imports
    its package, which every command would then pay for): the training build is the
    ``onnxruntime`` package with a ``training`` package inside.
    """
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    return any((Path(folder) / "training" / "__init__.py").is_file()
               for folder in spec.submodule_search_locations)


@hookimpl
def graphpass_passes() -> Iterable[type[Pass]]:
    """The ``emit-training-artifacts`` pass, where onnxruntime-training is installed."""
    return [EmitTrainingArtifacts] if training_available() else []


class EmitTrainingArtifacts(Pass):
    """Write ONNX Runtime training artifacts for the model (the model itself is unchanged)."""

    name = "emit-training-artifacts"
    description = ("Write onnxruntime-training artifacts (training, eval, optimizer models, "
                   "checkpoint) once lint-gradients says the model can be differentiated.")
    requires = ("lint-gradients",)
    codes: ClassVar[dict[str, str]] = {
        WROTE_CODE: "training artifacts written and loaded by the runtime",
        FAILED_CODE: "onnxruntime-training could not build the artifacts",
        NO_TRAINABLE_CODE: "no trainable weight",
        DOES_NOT_LOAD_CODE: "the runtime does not load the artifacts it wrote",
        STEP_FAILS_CODE: "the first training step fails in the runtime",
        WRONG_GRADIENT_CODE: "the step's gradient disagrees with finite differences",
        NOT_CHECKED_CODE: "the gradient could not be checked against finite differences",
    }

    @dataclass
    class Options:
        """Options of ``emit-training-artifacts``.

        Attributes:
            directory: Where the artifacts go (relative to the pipeline file).
            loss: The loss block added after the model's outputs; ``none`` when the
                model's first output already is the loss.
            loss_inputs: The model outputs fed to the loss (default: all outputs).
            trainable: Weights to train, as names or globs (default: every float
                initializer except those torch's export record marks as buffers or
                constants, as ``lint-gradients`` chooses).
            frozen: Weights to keep fixed, as names or globs.
            optimizer: The optimizer model to write.
            max_ir_version: The highest IR version to write (default: the highest the
                installed runtime accepts).
            train_step: Run one training step on the artifacts before writing them.
            check_gradients: With ``train_step``, compare the step's gradient with
                finite differences along a random direction (two more forward runs).
            inputs: An ``.npz`` of the model's inputs (and the loss's, such as
                ``target``) for the step (default: generated, as ``--verify`` does).
            external_data_bytes: From this many bytes of weights on, the model goes to
                ``generate_artifacts`` as a file with its weights in external data (a
                path, as it needs past protobuf's 2 GB) instead of in memory; 0 takes
                that path for any model (the default is just under 2 GB).
        """

        directory: str = ""
        loss: Literal["mse", "crossentropy", "bce", "l1", "none"] = "mse"
        loss_inputs: list[str] = field(default_factory=list)
        trainable: list[str] = field(default_factory=list)
        frozen: list[str] = field(default_factory=list)
        optimizer: Literal["adamw", "sgd"] = "adamw"
        max_ir_version: int | None = None
        train_step: bool = True
        check_gradients: bool = True
        inputs: str = ""
        external_data_bytes: int = EXTERNAL_DATA_BYTES

        def __post_init__(self) -> None:
            if not self.directory:
                raise ValueError("give the folder for the artifacts: directory = \"...\"")
            if self.external_data_bytes < 0:
                raise ValueError("external_data_bytes is a number of bytes, 0 or more")

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Generate the artifacts, rewrite their IR version, and load them once."""
        options = self.options
        directory = context.resolve_path(options.directory)
        trainable, frozen = _weights(model, options.trainable, options.frozen,
                                     context.analysis(ReconcileResult))
        findings: list[Finding]
        if not trainable:
            return PassResult(findings=[Finding(
                NO_TRAINABLE_CODE, Severity.ERROR, "no trainable weight: nothing to train",
                hint="name weights with the trainable option, or check that the model has float "
                     "initializers (run reconcile-initializers to fill them from a checkpoint)")])
        with temporary_folder(directory.parent, directory.name) as scratch:
            findings, step = self._build_and_check(model, context, scratch, trainable, frozen)
            if any(f.severity is Severity.ERROR for f in findings):
                return PassResult(findings=findings)
            files = _publish(scratch, directory)
        max_ir = options.max_ir_version or _max_ir_version()
        checked = "" if step is None or step.relative_error is None else (
            f"; one training step ran (loss {step.loss:.6g}) and its gradient agrees with "
            f"finite differences (relative difference {step.relative_error:.1e})")
        findings.append(Finding(
            WROTE_CODE, Severity.INFO,
            f"wrote training artifacts for {len(trainable)} trainable weight"
            f"{'s' * (len(trainable) != 1)} to {directory} ({', '.join(files)}); "
            f"onnxruntime-training {_runtime_version()} loads them{checked}",
            data={"directory": str(directory), "files": files, "trainable": trainable,
                  "frozen": frozen, "max_ir_version": max_ir,
                  "loss": None if step is None else step.loss,
                  "gradient_check": None if step is None else {
                      "analytic": step.analytic, "numeric": step.numeric,
                      "relative_error": step.relative_error}}))
        return PassResult(findings=findings,
                          stats={"artifacts": str(directory),
                                 "trainable weights": len(trainable)})

    def _build_and_check(self, model: Model, context: PassContext, scratch: Path,
                         trainable: list[str], frozen: list[str]
                         ) -> tuple[list[Finding], StepOutcome | None]:
        """Generate the artifacts into ``scratch``, load them, run and check a step.

        The inputs of the step are made here (stock inference); everything that runs
        onnxruntime-training's training code runs in a child process
        (``_training_child``), so that a crash of the runtime
        becomes a finding instead of ending graphpass.
        """
        options = self.options
        inputs = context.resolve_path(options.inputs) if options.inputs else None
        prepared: StepInputs | None = None
        step: StepOutcome | None = None
        if options.train_step:
            made = step_inputs(model, inputs=inputs)
            if isinstance(made, StepOutcome):
                step = made  # no usable inputs: the artifacts are still built and loaded
            else:
                prepared = made
        with temporary_folder(scratch.parent, owner_of(scratch)) as job_dir:  # the output's
            child = _run_child(model, job_dir, scratch, options, trainable, frozen, prepared)
        if child.crashed:
            return [_crash_finding(child, prepared, inputs)], None
        if child.generation_error is not None:
            return [_generation_failure(child.generation_error)], None
        if child.load_problem:
            return [Finding(
                DOES_NOT_LOAD_CODE, Severity.ERROR,
                f"onnxruntime-training wrote artifacts but cannot load them: "
                f"{child.load_problem}",
                hint="check the onnx and onnxruntime-training versions")], None
        if not options.train_step:
            return [], None
        if child.step is not None:
            step = child.step
        if step is None:
            return [], None
        return _step_findings(model, step, generated=inputs is None), step


@dataclass(frozen=True)
class _ChildResult:
    """What the child process did (``_training_child``).

    Attributes:
        crashed: The signal's name (``SIGSEGV``) or ``exit N`` when the child died
            without writing its result; ``None`` when it wrote one.
        stage: The stage it was in: ``generating``, ``loading``, ``stepping`` (the first
            training step) or ``checking`` (the finite-difference runs after it).
        generation_error: ``generate_artifacts``'s error message.
        load_problem: Why the runtime does not load the artifacts.
        step: The step's outcome.
        log: The last lines the child wrote (the runtime's log), when it crashed.
    """

    crashed: str | None = None
    stage: str = ""
    generation_error: str | None = None
    load_problem: str | None = None
    step: StepOutcome | None = None
    log: str = ""


def _run_child(model: Model, job_dir: Path, scratch: Path, options: Any, trainable: list[str],
               frozen: list[str], prepared: StepInputs | None) -> _ChildResult:
    """Write the job into ``job_dir``, run the child on it, and read what it did."""
    path = job_dir / "model.onnx"
    external = _weight_bytes(model) >= options.external_data_bytes
    if external:
        from graphpass.files import save

        save(model, path, external_data=True)
    else:
        proto = model_to_proto(model, lambda tensor: tensor.to_embedded_proto()
                               if tensor.is_external else tensor.to_proto())
        path.write_bytes(proto.SerializeToString())
    step: dict[str, Any] | None = None
    if prepared is not None:
        step = {"random_ops": list(prepared.random_ops),
                "gradients": bool(options.check_gradients), "seed": 0}
        for name, arrays in (("feeds", prepared.feeds), ("given", prepared.given),
                             ("outputs", prepared.outputs)):
            # by position: an input may be called like a keyword of np.savez ("file")
            np.savez(job_dir / f"{name}.npz", *arrays.values())
            step[name] = {"path": str(job_dir / f"{name}.npz"), "names": list(arrays)}
    stage, result = job_dir / "stage", job_dir / "result.json"
    job = {"model": str(path), "external": external, "artifacts": str(scratch),
           "generate": {"requires_grad": trainable, "frozen_params": frozen,
                        "loss": options.loss, "optimizer": options.optimizer,
                        "loss_input_names": list(options.loss_inputs) or None},
           "max_ir_version": options.max_ir_version or _max_ir_version(),
           "step": step, "stage": str(stage), "result": str(result)}
    (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    log = job_dir / "child.log"
    with open(log, "wb") as sink:
        done = subprocess.run(
            [sys.executable, "-m", "graphpass.plugins._training_child",
             str(job_dir / "job.json")],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, cwd=job_dir,
            check=False)
    reached = stage.read_text(encoding="utf-8") if stage.exists() else "starting"
    if done.returncode != 0 or not result.exists():
        return _ChildResult(crashed=_exit_name(done.returncode), stage=reached,
                            log=_log_tail(log))
    found = json.loads(result.read_text(encoding="utf-8"))
    return _ChildResult(generation_error=found["generation_error"],
                        load_problem=found["load_problem"], stage=reached,
                        step=StepOutcome(**found["step"]) if found["step"] else None)


def _exit_name(code: int) -> str:
    """``SIGSEGV`` for a child killed by signal 11, else ``exit N``."""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def _log_tail(log: Path, lines: int = 12) -> str:
    """The child's last lines, without the runtime's INFO log and blank lines."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines()
            if line.strip() and not re.match(r"^\S+ \S+ \[I:onnxruntime", line)]
    return "\n".join(kept[-lines:])[-2000:]


_STAGES = {
    "starting": ("while starting", FAILED_CODE),
    "generating": ("while building the artifacts (generate_artifacts: the gradient graph)",
                   FAILED_CODE),
    "loading": ("while loading the artifacts it wrote (creating the training sessions)",
                DOES_NOT_LOAD_CODE),
    "stepping": ("in its first training step", STEP_FAILS_CODE),
    "checking": ("in the forward runs of the finite-difference check after its first "
                 "training step", STEP_FAILS_CODE),
}


def _crash_finding(child: _ChildResult, prepared: StepInputs | None,
                   inputs: Path | None) -> Finding:
    """GP701/GP703/GP704 (by stage) for a child that onnxruntime-training crashed."""
    where, code = _STAGES.get(child.stage, _STAGES["starting"])
    on = ""
    if prepared is not None and child.stage in ("stepping", "checking"):
        shapes = ", ".join(f"{name} {list(np.shape(value))}"
                           for name, value in prepared.feeds.items())
        source = f"the inputs of {inputs}" if inputs is not None else (
            "generated inputs (2 for every named dimension)")
        on = f", on {source}: {shapes}"
    signal_name = child.crashed or ""
    if signal_name.startswith("SIG"):
        died = f"crashed ({signal_name})"
    else:  # the child exited without its result: its last line says why
        last = child.log.splitlines()[-1] if child.log else ""
        died = f"died ({signal_name}{': ' + last[:300] if last else ''})"
    memory = " (SIGKILL: often the system ran out of memory)" \
        if signal_name == "SIGKILL" else ""
    return Finding(
        code, Severity.ERROR,
        f"onnxruntime-training {_runtime_version()} {died} {where}{on}; "
        f"nothing was written", data={"signal": child.crashed, "stage": child.stage,
                                      "log": child.log},
        hint=f"this is a bug of onnxruntime-training{memory}, not of the model (graphpass ran "
             "it in a child process and stopped): train with graphpass's own trainer, which "
             "runs on stock onnxruntime (graphpass train MODEL --data BATCH.npz, or graphpass run "
             "MODEL -p train-ready --emit-training-graph DIR), and please report the model; "
             "if the inputs have named dimensions, fixing their sizes (python -m "
             "onnxruntime.tools.make_dynamic_shape_fixed) may avoid it")


def _step_findings(model: Model, step: StepOutcome, *, generated: bool) -> list[Finding]:
    if step.error is not None:
        node = _forward_node(model, step.node)
        where = f" in node {step.node!r}" + (
            f" (the gradient of {node!r})" if node and node != step.node else "") \
            if step.node else ""
        return [Finding(
            STEP_FAILS_CODE, Severity.ERROR,
            f"onnxruntime-training builds and loads the artifacts, but the first training "
            f"step fails{where}: {step.error}", node=node or step.node,
            hint=("lint-gradients should have named this node; freeze the weights whose "
                  "gradient passes through it, or rewrite it, and please report the model"
                  + ("; the step ran on generated inputs (2 for every named dimension): if "
                     "the model needs other sizes, give real ones with "
                     "-O emit-training-artifacts.inputs=BATCH.npz" if generated else "")))]
    if step.gradient_wrong:
        weight = f"; weight {step.weight!r}'s own part is off by {step.weight_error:.0%}" \
            if step.weight and step.weight_error is not None else ""
        return [Finding(
            WRONG_GRADIENT_CODE, Severity.ERROR,
            f"onnxruntime-training's gradient disagrees with finite differences: along a "
            f"random direction d, g . d = {step.analytic:.6g} but (L(w + d) - L(w - d)) / 2 "
            f"= {step.numeric:.6g} ({step.relative_error:.0%} apart){weight}",
            value=step.weight,
            hint=("see the warnings of lint-gradients (a BatchNormalization over very few "
                  "values a channel makes float32 gradients meaningless); freeze the weights "
                  "whose gradient is wrong, or train with larger inputs"
                  + ("" if not generated else "; the check ran on generated inputs "
                     "(2 for every named dimension): give real ones with "
                     "-O emit-training-artifacts.inputs=BATCH.npz")))]
    if step.skipped and step.skipped != "not asked for":
        return [Finding(NOT_CHECKED_CODE, Severity.INFO,
                        f"one training step ran; its gradient was not checked: {step.skipped}")]
    return []


def _forward_node(model: Model, node: str | None) -> str | None:
    """The model's node a gradient node comes from (``node_cat/.../SplitTraining_0``)."""
    if not node:
        return None
    names = {n.name for n in model.graph if n.name}
    if node in names:
        return node
    parts = node.split("/")
    for end in range(len(parts) - 1, 0, -1):
        candidate = "/".join(parts[:end])
        if candidate in names:
            return candidate
    return None


def _publish(scratch: Path, directory: Path) -> list[str]:
    """Put the artifacts written into ``scratch`` into place as ``directory``, as one.

    What an earlier ``directory`` holds besides the files of the new artifacts is
    carried over (hard links; copies where the filesystem has none), then the folder
    is replaced whole (:func:`~graphpass.files._atomic.replace_folder`): a reader finds
    the earlier artifacts or the new ones, never a mix. Returns the artifacts' names.
    """
    names = sorted(p.name for p in scratch.iterdir())
    if directory.is_dir() and not directory.is_symlink():
        for entry in sorted(directory.iterdir()):
            if entry.name in names:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, scratch / entry.name, symlinks=True,
                                copy_function=_link_or_copy)
            else:
                _link_or_copy(str(entry), str(scratch / entry.name))
    replace_folder(directory, scratch, step="artifacts")
    return names


def _link_or_copy(source: str, destination: str) -> str:
    if os.path.islink(source):
        os.symlink(os.readlink(source), destination)
        return destination
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
    return destination


def _weights(model: Model, trainable: list[str], frozen: list[str],
             reconciled: ReconcileResult | None) -> tuple[list[str], list[str]]:
    """The weights to train and to freeze (the same selection as ``lint-gradients``).

    Only float initializers are trained, and only initializers are frozen.
    """
    weights = trainable_weights(model.graph, trainable, frozen, trainer="onnxruntime-training",
                                codes={"no-match": "GP421", "not-float": "GP422"},
                                types=TRAINABLE_TYPES, initializers_only=True,
                                reconciled=reconciled)
    return weights.trainable, weights.frozen  # the findings: lint-gradients' (required)


def _weight_bytes(model: Model) -> int:
    return sum(t.nbytes for t in model.graph.initializers.values())


def _generation_failure(error: str) -> Finding:
    text = error.strip().splitlines()
    message = text[-1] if text else "generate_artifacts failed"
    match = _MISSING_BUILDER.search(error)
    if match:
        return Finding(
            FAILED_CODE, Severity.ERROR,
            f"onnxruntime-training has no gradient builder for {match.group(1)} "
            f"(node {match.group(2)})", node=match.group(2) or None,
            hint="lint-gradients should have named this node; please report the model")
    marker = " was false. "
    if marker in message:
        message = message.split(marker, 1)[1]
    return Finding(FAILED_CODE, Severity.ERROR,
                   f"onnxruntime-training could not build the artifacts: {message[:500]}",
                   hint="see the message; trainable/frozen/loss options choose what is trained")


@functools.cache
def _max_ir_version() -> int:
    """The highest IR version the installed onnxruntime accepts (probed once a process)."""
    import onnxruntime

    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])], "probe",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    for version in range(onnx.IR_VERSION, 6, -1):
        probe = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
        probe.ir_version = version
        try:
            onnxruntime.InferenceSession(probe.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
        except Exception:  # the runtime refuses IR versions it does not know
            continue
        return version
    return 7


def _cap_ir_versions(directory: Path, max_ir: int) -> list[str]:
    rewritten = []
    for path in sorted(directory.glob("*.onnx")):
        proto = onnx.load(str(path), load_external_data=False)
        if proto.ir_version > max_ir:
            proto.ir_version = max_ir
            replace_file(path, proto.SerializeToString(), step="artifact")
            rewritten.append(path.name)
    return rewritten


def _load_artifacts(directory: Path) -> str | None:
    from onnxruntime.training import api

    try:
        with _quiet_native_stderr():  # the training session logs every graph transformer
            state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
            module = api.Module(str(directory / "training_model.onnx"), state,
                                str(directory / "eval_model.onnx"))
            api.Optimizer(str(directory / "optimizer_model.onnx"), module)
    except Exception as error:  # the runtime's own exception types
        lines = str(error).strip().splitlines()
        return lines[-1] if lines else type(error).__name__
    return None


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Send what native code writes to file descriptor 2 to /dev/null for a while.

    onnxruntime-training's training sessions log at INFO level whatever the Python
    logger severity says; those lines would drown the report.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _runtime_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)
