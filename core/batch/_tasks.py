"""The unit of a batch: one model's lint or run, as a picklable task and result.

A :class:`ModelTask` holds plain data (paths as strings, names, option values): it
pickles to a worker process or a Dask worker, which builds the registry, plans the
passes and runs them there, and sends back a :class:`ModelResult`: the report data
(:class:`~graphpass.framework._results.RunSummary`, no model) or the error that stopped
that model. :func:`run_task` is the function every executor maps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from graphpass.errors import ExitCode, GraphpassError
from graphpass.files import load, save
from graphpass.framework import (
    PassManager,
    PipelineFile,
    Registry,
    RunResult,
    RunSpec,
    RunSummary,
    VerifyOptions,
    load_pipeline_file,
)
from graphpass.reporting import PassProgress, loading

__all__ = ["LINT_DEFAULT", "ErrorInfo", "ModelResult",
           "ModelTask", "Settings", "run_model", "run_task"]

LINT_DEFAULT = ("check",)
"""What ``lint`` runs when no pass is named."""

Command = Literal["lint", "run"]


@dataclass(frozen=True)
class Settings:
    """What to do with each model: the passes, their options, the instruments.

    Everything is plain data, so that a task pickles. Relative paths are resolved when
    the task runs, against the folder it runs in: give absolute paths for tasks that
    run elsewhere (the command line does).

    Attributes:
        command: ``lint`` (analysis passes, nothing written) or ``run``.
        passes: Pass and preset names (empty: the pipeline file's, else ``check`` for
            ``lint``).
        options: Options by pass name, over the pipeline file's.
        config: A pipeline file.
        checkpoints: Checkpoint files.
        disable_passes: Passes left out of the plan.
        disable_plugins: Plugins switched off.
        strict_plugins: Make a plugin problem an error.
        extra_passes: Passes (or presets) added to the plan, with their options (name:
            options; a preset's options are what it carries).
        verify: Semantic verification (``--verify``), or ``None``.
        verify_each: Run the ONNX checker after every transforming pass.
        dump_after: Save the model after these passes.
        dump_dir: Where dumps go (default: next to the output).
        fixed_point: Repeat the plan until nothing changes.
        max_iterations: The most rounds of a fixed-point run (default: the pipeline
            file's, else 10).
        keep_going: Run every pass even after error findings (``lint`` always does).
        in_place: Let ``run`` write over its model.
        progress: Show a spinner while the model loads and a progress bar over the passes
            (for one model on a terminal; never in a batch).
        base_dir: What relative paths in options are resolved against without a pipeline
            file (default: the folder the task runs in).
        reproducer: Where a pass that crashes leaves a reproducer (``--reproducer``;
            ``None``: none is written).
    """

    command: Command = "lint"
    passes: tuple[str, ...] = ()
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    config: str | None = None
    checkpoints: tuple[str, ...] = ()
    disable_passes: tuple[str, ...] = ()
    disable_plugins: tuple[str, ...] = ()
    strict_plugins: bool = False
    extra_passes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    verify: VerifyOptions | None = None
    verify_each: bool = False
    dump_after: tuple[str, ...] = ()
    dump_dir: str | None = None
    fixed_point: bool = False
    max_iterations: int | None = None
    keep_going: bool = False
    in_place: bool = False
    progress: bool = False
    base_dir: str | None = None
    reproducer: str | None = None

    def pipeline_file(self) -> PipelineFile | None:
        """The pipeline file, read (``None`` without one).

        Raises:
            ConfigError: It cannot be read.
        """
        return load_pipeline_file(self.config) if self.config else None

    def spec(self, config: PipelineFile | None, *, output: Path | None = None) -> RunSpec:
        """These settings as a :class:`~graphpass.RunSpec`: the pipeline file's, overridden.

        Args:
            config: The pipeline file, read.
            output: Where ``run`` writes (the default folder of dumps).
        """
        run = self.command == "run"
        spec = (RunSpec.from_pipeline(config) if config is not None
                else RunSpec(base_dir=Path(self.base_dir or Path.cwd())))
        spec = spec.with_overrides(
            passes=self.passes, options=self.options, add_passes=self.extra_passes,
            checkpoints=self.checkpoints, disable=self.disable_passes,
            disable_plugins=self.disable_plugins, strict_plugins=self.strict_plugins or None,
            verify_each=self.verify_each or None, dump_after=self.dump_after,
            dump_dir=self.dump_dir, fixed_point=self.fixed_point or None,
            max_iterations=self.max_iterations, verify=self.verify)
        spec = spec.with_overrides(options={name: values for name, values
                                            in self.extra_passes.items() if values})
        if not spec.passes and not run:
            spec = spec.with_overrides(passes=LINT_DEFAULT)
        if not run:  # lint writes nothing and changes nothing: no run-only instruments
            spec = dataclasses.replace(spec, verify=None, verify_each=False, dump_after=(),
                                       fixed_point=False)
        dump_dir = spec.dump_dir or (output.parent if output is not None else Path.cwd())
        return spec.with_overrides(
            dump_dir=dump_dir, instruments=[PassProgress()] if self.progress else [],
            stop_on_error=run and not self.keep_going, analysis_only=not run,
            reproducer=Path(self.reproducer) if self.reproducer is not None else None)

    def registry(self, config: PipelineFile | None = None) -> Registry:
        """The registry these settings ask for (plugins switched off, strictness)."""
        return self.spec(config).registry()

    def manager(self, registry: Registry, config: PipelineFile | None, *,
                output: Path | None = None) -> PassManager:
        """Plan the passes (which checks names, options and inputs before any model is read).

        Args:
            registry: Where names are looked up.
            config: The pipeline file, read.
            output: Where ``run`` writes (the default folder of dumps).

        Raises:
            PipelineError: Nothing to run, an unknown pass, a cycle, a bad option; for
                ``lint``, a transforming pass asked for.
            ConfigError: A checkpoint that does not exist.
        """
        return self.spec(config, output=output).manager(registry)


@dataclass(frozen=True)
class ModelTask:
    """One model to lint or run: the unit that executors map.

    Attributes:
        model: The model file.
        settings: What to do with it.
        output: Where ``run`` writes the result (``None`` for ``lint``).
        label: How reports name the model (default: ``model``).
    """

    model: str
    settings: Settings
    output: str | None = None
    label: str | None = None

    @property
    def name(self) -> str:
        """The model as reports name it."""
        return self.label or self.model


@dataclass(frozen=True)
class ErrorInfo:
    """Why a model could not be checked (what the command line prints for exit code 2).

    Attributes:
        type: The error's class (``ModelLoadError``, ``PassError`` ...).
        message: What went wrong.
        where: Where, if known (a file and line, a node).
        hint: What to do about it.
        traceback: The traceback, for ``--traceback`` (errors that are not graphpass's
            own, which are bugs, always have one).
    """

    type: str
    message: str
    where: str | None = None
    hint: str | None = None
    traceback: str | None = None

    def text(self) -> str:
        """The error as one readable message (like ``str()`` of a graphpass error)."""
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text}\n  hint: {self.hint}" if self.hint else text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the traceback left out)."""
        return {"type": self.type, "message": self.message, "where": self.where,
                "hint": self.hint}


@dataclass(frozen=True)
class ModelResult:
    """What came of one task.

    Attributes:
        model: The model as reports name it.
        exit_code: 0 (no error findings), 1 (error findings) or 2 (the model could not
            be checked: see :attr:`error`).
        summary: The run's passes and findings, when it ran.
        output: The file ``run`` wrote, if it wrote one.
        error: Why the model could not be checked, when it could not.
        seconds: How long the task took (wall clock, loading included).
    """

    model: str
    exit_code: int
    summary: RunSummary | None = None
    output: str | None = None
    error: ErrorInfo | None = None
    seconds: float = 0.0


def run_model(task: ModelTask, *, registry: Registry | None = None,
              config: PipelineFile | None = None) -> tuple[ModelResult, RunResult]:
    """Run one task in this process and keep the resulting model too.

    Args:
        task: The task.
        registry: The registry to use (default: the one the settings ask for).
        config: The settings' pipeline file, already read (default: read it).

    Raises:
        GraphpassError: The model cannot be read, the plan is wrong, a pass failed.
    """
    start = time.perf_counter()
    settings = task.settings
    if config is None:
        config = settings.pipeline_file()
    output = Path(task.output) if task.output is not None else None
    spec = settings.spec(config, output=output)
    manager = spec.manager(registry if registry is not None else spec.registry())
    with loading(task.model) if settings.progress else contextlib.nullcontext():
        model = load(task.model)
    result = manager.run(model, copy=False)  # loaded for this run only: no copy needed
    written = None
    if settings.command == "run" and result.ok and output is not None:
        save(result.model, output, overwrite_input=settings.in_place)
        written = str(output)
    code = ExitCode.OK if result.ok else ExitCode.FINDINGS
    outcome = ModelResult(task.name, code, result.summary(),
                          written, seconds=time.perf_counter() - start)
    return outcome, result


def run_task(task: ModelTask) -> ModelResult:
    """Run one task; every failure becomes the result's :attr:`~ModelResult.error`.

    This is the function every executor maps over the tasks (in this process, a process
    pool, a Dask cluster): its argument and result pickle, and it never raises for a
    bad model, so one model cannot stop the others. ``KeyboardInterrupt`` still does.
    """
    start = time.perf_counter()
    try:
        return run_model(task)[0]
    except GraphpassError as error:
        info = ErrorInfo(type(error).__name__, error.message, error.where, error.hint,
                         _traceback(error))
    except Exception as error:  # a bug, in graphpass or a plugin: reported with the model
        info = ErrorInfo("InternalError", f"{type(error).__name__}: {error}", None,
                         "this is a bug in graphpass or a plugin; report it with the "
                         "traceback (--traceback)", _traceback(error))
    return ModelResult(task.name, ExitCode.USAGE, error=info,
                       seconds=time.perf_counter() - start)


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))
