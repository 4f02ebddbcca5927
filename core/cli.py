"""The ``graphpass`` command line.

```
graphpass run MODEL... -o OUT [-p PASS,PASS...] [-c pipeline.toml] [--checkpoint PATH...]
                           [--format text|json|sarif] [--verify-each] [--fixed-point] ...
graphpass lint MODEL_OR_DIR_OR_GLOB... [-p ...] [-j N] [--executor dask --scheduler ADDR]
                           [--format ...]
graphpass train MODEL_OR_DIR --data PATH... [--batch-size B] [--epochs E | --steps N]
                           [--shuffle --seed S] [--drop-last] [--eval-data PATH... --eval-every N]
                           [--accumulate N] [--lr LR] [--warmup N --schedule constant|linear|cosine]
                           [--log metrics.jsonl] [--plot loss.png] [--save-every N --state-dir DIR]
                           [--resume DIR] [--save OUT.onnx] [--checkpoint-out CK.safetensors]
                           [--emit-training-graph DIR] [-p ...] [--checkpoint PATH...] [-O ...]
                           [--format text|json]
graphpass passes | plan -p ... | plugins | inspect MODEL
```

Exit codes (:class:`graphpass.ExitCode`): 0 when all went well, 1 when a pass reported
an error finding, 2 for bad input or usage (one readable message on standard error, never
a traceback), 130 when interrupted. A run that fails writes nothing. Over several models
(files, folders, globs) the exit code is the worst of theirs, and one report covers them
all.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import logging
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from graphpass.errors import ExitCode, GraphpassError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from graphpass.batch import Command, ModelResult, Settings
    from graphpass.framework import PipelineFile, Registry, RunSpec, RunSummary, VerifyOptions
    from graphpass.reporting import ReportInfo

__all__ = ["main"]

TRAINING_GRAPH_PRESET = "training-graph"
"""The preset ``--emit-training-graph DIR`` adds (its pass writes DIR: ``-O
build-training-graph.directory=DIR``)."""


class UsageError(Exception):
    """A command line that cannot be carried out (exit code 2)."""

    def __init__(self, message: str, command: str = "graphpass"):
        super().__init__(message)
        self.command = command


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports mistakes as :class:`UsageError`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)", self.prog)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in arguments
    with _plugin_problems_printed_here():
        return _main(arguments, show_traceback)


@contextlib.contextmanager
def _plugin_problems_printed_here() -> Iterator[None]:
    """Keep the plugin loading's log of plugin problems quiet while the command runs.

    The command line prints those problems itself (``graphpass: warning:`` lines, or the
    table of ``graphpass plugins``); the log is for Python callers.
    """
    logger = logging.getLogger("graphpass.plugins")
    handler = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _main(arguments: list[str], show_traceback: bool) -> int:
    try:
        parser = _parser()
        args = parser.parse_args(arguments)
        if args.handler is None:
            parser.print_help(sys.stderr)
            return ExitCode.USAGE
        code: int = args.handler(args)
        return code
    except UsageError as error:
        _fail(f"{error.command}: error: {error}")
        _error_document(arguments, "UsageError", str(error), None, None)
        return ExitCode.USAGE
    except GraphpassError as error:
        if show_traceback:
            traceback.print_exception(error, file=sys.stderr)
        _fail(f"graphpass: error: {error}")
        _error_document(arguments, type(error).__name__, error.message, error.where,
                        error.hint, error.exit_code)
        return error.exit_code
    except KeyboardInterrupt:
        _fail("graphpass: interrupted; nothing was written")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    except Exception as error:
        if show_traceback:
            traceback.print_exception(error, file=sys.stderr)
        hint = "this is a bug in graphpass; run again with --traceback and report it"
        _fail(f"graphpass: internal error: {type(error).__name__}: {error}\n  hint: {hint}")
        _error_document(arguments, "InternalError", f"{type(error).__name__}: {error}", None,
                        hint)
        return ExitCode.USAGE


def _fail(message: str) -> None:
    print(message, file=sys.stderr)


ERROR_SCHEMA_ID = "graphpass-error/1"
"""The ``schema`` of the JSON document printed instead of a report when a command fails."""


def _error_document(arguments: Sequence[str], kind: str, message: str, where: str | None,
                    hint: str | None, code: ExitCode = ExitCode.USAGE) -> None:
    """With ``--format json``, print the error as a JSON object on standard output.

    Scripts that parse the report then get a document on every exit: the report, or
    this (``ok`` false, ``exit_code`` 2, the error's type, message, where and hint).
    """
    if _format_asked(arguments) != "json":
        return
    document = {"schema": ERROR_SCHEMA_ID, "ok": False, "exit_code": int(code),
                "error": {"type": kind, "message": message, "where": where, "hint": hint}}
    try:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass


def _format_asked(arguments: Sequence[str]) -> str | None:
    """The value of ``--format`` in ``arguments`` (read by hand: parsing may have failed)."""
    found = None
    for index, argument in enumerate(arguments):
        if argument == "--":
            break
        if argument == "--format" and index + 1 < len(arguments):
            found = arguments[index + 1]
        elif argument.startswith("--format="):
            found = argument.partition("=")[2]
    return found


# ====================================================================== parser
def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--disable-plugin", action="append", default=[], metavar="NAME",
                        help="switch a plugin off (repeatable; also GRAPHPASS_DISABLE_PLUGINS)")
    common.add_argument("--strict-plugins", action="store_true",
                        help="fail when a plugin cannot be loaded instead of skipping it")
    common.add_argument("--traceback", action="store_true",
                        help="show the traceback of errors (for debugging plugins)")

    planning = _Parser(add_help=False)
    planning.add_argument("-p", "--passes", action="append", default=[], metavar="PASS,...",
                          help="passes or presets to run, comma-separated (repeatable)")
    planning.add_argument("-c", "--config", metavar="PIPELINE.toml",
                          help="a pipeline file (passes, options, plugins, instruments)")
    planning.add_argument("--checkpoint", action="extend", nargs="+", default=[],
                          metavar="PATH", help="checkpoint file(s) for passes that read one")
    planning.add_argument("-O", "--option", action="append", default=[],
                          metavar="PASS.OPTION=VALUE",
                          help="set a pass option (value in TOML syntax, or plain text)")
    planning.add_argument("--disable-pass", action="append", default=[], metavar="PASS",
                          help="leave a pass out of the plan (repeatable)")

    reporting = _Parser(add_help=False)
    reporting.add_argument("--format", choices=("text", "json", "sarif"), default="text",
                           help="report format (default: text)")
    reporting.add_argument("--report", metavar="FILE",
                           help="write the report to FILE instead of standard output")
    reporting.add_argument("--time", action="store_true", help="show per-pass timing")
    reporting.add_argument("--no-timing", action="store_true",
                           help="leave every timing out of the report, so that the same "
                                "model and passes give a byte-identical report")

    listing = _Parser(add_help=False)
    listing.add_argument("--format", choices=("text", "json"), default="text")

    parser = _Parser(prog="graphpass", description="Graph-rewrite passes for ONNX models.")
    parser.add_argument("--version", action="version", version=f"graphpass {_version()}")
    parser.set_defaults(handler=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    batch = _Parser(add_help=False)
    batch.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                       help="check N models at once, in N processes (0: one per CPU)")
    batch.add_argument("--executor", choices=("local", "dask"), default="local",
                       help="where models are checked: here (local, the default) or on a "
                            "Dask cluster (dask, with --scheduler)")
    batch.add_argument("--scheduler", metavar="ADDRESS",
                       help="the Dask scheduler for --executor dask (tcp://HOST:PORT)")
    batch.add_argument("--reproducer", metavar="DIR",
                       help="where a pass that crashes leaves its reproducer (the model as "
                            "it entered the pass, the pipeline, the versions and replay.sh; "
                            "default: graphpass-reproducers in the temporary folder)")

    run = commands.add_parser("run", parents=[common, planning, reporting, batch],
                              help="run passes on models and write the results")
    run.add_argument("models", nargs="+", metavar="MODEL",
                     help="model files, folders (every .onnx below) or quoted globs")
    run.add_argument("-o", "--output", metavar="OUT",
                     help="where to write the result: a file for one model, a folder for "
                          "several (each at its path below the folder or glob given)")
    run.add_argument("--in-place", action="store_true",
                     help="allow writing over MODEL (the default when -o is left out)")
    run.add_argument("--verify-each", action="store_true",
                     help="run the ONNX checker after every transforming pass")
    run.add_argument("--verify", action="store_true",
                     help="run the model before and after in onnxruntime (or the ONNX "
                          "reference evaluator) and fail if the outputs differ")
    run.add_argument("--verify-inputs", metavar="FILE.npz",
                     help="inputs for --verify (default: generated from the input types)")
    run.add_argument("--verify-optional", action="store_true",
                     help="with --verify, let a run that could verify nothing (the model does "
                          "not run on the inputs) pass with a warning instead of failing")
    run.add_argument("--verify-per-pass", action="store_true",
                     help="with --verify, compare after every transforming pass")
    run.add_argument("--verify-dim", action="append", default=[], metavar="NAME=SIZE",
                     help="with --verify, the size of a symbolic dimension (default 2)")
    run.add_argument("--verify-rtol", type=float, metavar="X",
                     help="with --verify, the relative tolerance (default 1e-4)")
    run.add_argument("--verify-atol", type=float, metavar="X",
                     help="with --verify, the absolute tolerance (default 1e-5)")
    run.add_argument("--dump-after", action="append", default=[], metavar="PASS",
                     help="also save the model after PASS (repeatable)")
    run.add_argument("--dump-dir", metavar="DIR",
                     help="where --dump-after writes (default: next to OUT)")
    run.add_argument("--fixed-point", action="store_true",
                     help="repeat the passes until nothing changes")
    run.add_argument("--max-iterations", type=int, metavar="N",
                     help="the most rounds of --fixed-point (default 10)")
    run.add_argument("--emit-training-artifacts", metavar="DIR",
                     help="also write onnxruntime-training artifacts to DIR (needs "
                          "onnxruntime-training; options: -O emit-training-artifacts.loss=...)")
    run.add_argument("--emit-training-graph", metavar="DIR",
                     help="also write graphpass's own training graphs to DIR (standard ONNX, "
                          "stock onnxruntime runs them; options: -O build-training-graph."
                          "loss=...)")
    run.add_argument("--keep-going", action="store_true",
                     help="run every pass even after error findings (still writes nothing)")
    run.set_defaults(handler=_run)

    lint = commands.add_parser("lint", parents=[common, planning, reporting, batch],
                               help="run analysis passes on models and report; writes nothing")
    lint.add_argument("models", nargs="+", metavar="MODEL",
                      help="model files, folders (every .onnx below) or quoted globs")
    lint.set_defaults(handler=_lint)

    passes = commands.add_parser("passes", parents=[common, listing],
                                 help="list the available passes")
    passes.set_defaults(handler=_passes)

    plan = commands.add_parser("plan", parents=[common, planning, listing],
                               help="show the order passes would run in")
    plan.set_defaults(handler=_plan)

    plugins = commands.add_parser("plugins", parents=[common, listing],
                                  help="list plugins, what they give, and their status")
    plugins.set_defaults(handler=_plugins)

    train = commands.add_parser(
        "train", parents=[common, planning, listing],
        help="train a model (or a training-graph directory) on stock onnxruntime",
        description="Train with graphpass's own training graphs on stock onnxruntime. Given a "
                    "model, build them first (-p train-ready --emit-training-graph, the same "
                    "options); given a training-graph directory, train it.")
    train.add_argument("model", metavar="MODEL_OR_DIR",
                       help="an ONNX model, or a directory build-training-graph wrote")
    data = train.add_argument_group("data")
    data.add_argument("--data", required=True, nargs="+", metavar="PATH",
                      help="one .npz (one batch: an array per model input, and 'target'); "
                           "several .npz, a folder or a glob (one batch each); with "
                           "--batch-size, .npz of stacked samples, a datasets save_to_disk "
                           "folder, or Parquet/Arrow files (columns named as the inputs)")
    data.add_argument("--batch-size", type=int, metavar="B",
                      help="samples per batch: split the data's samples along axis 0")
    data.add_argument("--shuffle", action="store_true",
                      help="shuffle the samples (or batch files) every epoch")
    data.add_argument("--seed", type=int, default=0, metavar="S",
                      help="the shuffle's seed (default 0)")
    data.add_argument("--drop-last", action="store_true",
                      help="leave out a short last batch (a static export needs whole ones)")
    data.add_argument("--eval-data", nargs="+", metavar="PATH",
                      help="evaluation data (the same forms), evaluated with eval.onnx at "
                           "the end of each epoch, every --eval-every steps and at the end")
    data.add_argument("--eval-every", type=int, metavar="N",
                      help="also evaluate every N steps")
    length = train.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, metavar="E",
                        help="epochs to train (default 1; one .npz batch: --steps 10)")
    length.add_argument("--steps", type=int, metavar="N",
                        help="optimizer steps to train instead of epochs")
    train.add_argument("--accumulate", type=int, default=1, metavar="N",
                       help="batches per optimizer step (gradient accumulation)")
    train.add_argument("--lr", type=float, metavar="LR",
                       help="the learning rate (default: the training graph's, 0.001 unless "
                            "-O build-training-graph.lr=... says otherwise)")
    train.add_argument("--schedule", choices=["constant", "linear", "cosine"],
                       default="constant", help="the learning-rate schedule (default constant)")
    train.add_argument("--warmup", type=int, default=0, metavar="N",
                       help="steps of linear warmup before the schedule")
    train.add_argument("--log", metavar="metrics.jsonl",
                       help="write one JSON line per step and per evaluation")
    train.add_argument("--plot", metavar="loss.png",
                       help="draw the training and evaluation loss (needs matplotlib)")
    train.add_argument("--state-dir", metavar="DIR",
                       help="save the trainer's whole state here at the end (and every "
                            "--save-every steps), atomically")
    train.add_argument("--save-every", type=int, metavar="N",
                       help="save the state every N steps")
    train.add_argument("--resume", metavar="DIR",
                       help="continue the run saved in DIR (the same command otherwise, "
                            "or a larger --steps/--epochs to extend it); from the beginning "
                            "when DIR holds no state yet")
    train.add_argument("--save", metavar="OUT.onnx",
                       help="write the model with the trained weights (atomic)")
    train.add_argument("--checkpoint-out", metavar="CK.safetensors",
                       help="write the trained weights under their torch state_dict keys, "
                            "every key a strict load_state_dict needs")
    train.add_argument("--emit-training-graph", metavar="DIR",
                       help="with a MODEL: keep the training graphs in DIR (default: a "
                            "temporary folder, removed after training)")
    train.set_defaults(handler=_train)

    inspect = commands.add_parser("inspect", parents=[common, listing], help="summarize a model")
    inspect.add_argument("model", metavar="MODEL")
    inspect.set_defaults(handler=_inspect)
    return parser


# ==================================================================== commands
def _run(args: argparse.Namespace) -> int:
    return _check_models(args, "run")


def _lint(args: argparse.Namespace) -> int:
    return _check_models(args, "lint")


def _check_models(args: argparse.Namespace, command: Command) -> int:
    """``run`` or ``lint``: one model as before, several as a batch with one report."""
    from graphpass.batch import is_many
    config, registry = _setup(args)
    emit = getattr(args, "emit_training_graph", None)
    settings = _settings(args, command, config, registry,
                         training_graph=Path(emit) if emit else None)
    if not is_many(args.models):
        return _check_one(args, settings, config, registry)
    return _check_many(args, settings, config, registry)


def _check_one(args: argparse.Namespace, settings: Settings, config: PipelineFile | None,
               registry: Registry) -> int:
    from graphpass.batch import ModelTask, run_model
    command = settings.command
    model_path = Path(args.models[0])
    output = None
    if command == "run":
        if args.output is None and not args.in_place:
            raise UsageError("give the output file with -o OUT (or --in-place to write over "
                             "MODEL)", "graphpass run")
        output = Path(args.output) if args.output is not None else model_path
        if args.output is not None and (output.is_dir() or args.output.endswith(("/",
                                                                                 os.sep))):
            output = output / model_path.name  # -o DIR/: the model's name in DIR
        if not args.in_place and _same_path(output, model_path):
            raise UsageError(f"-o {args.output} is the input model; refusing to write over "
                             "it without --in-place", "graphpass run")
    _check_report_path(args, f"graphpass {command}", model_path,
                       *([output] if output is not None else []))
    task = ModelTask(str(model_path), replace(settings, progress=True),
                     str(output) if output is not None else None, label=args.models[0])
    outcome, _ = run_model(task, registry=registry, config=config)
    assert outcome.summary is not None
    _report(args, outcome.summary, config, registry, command=command, model=outcome.model,
            output=outcome.output)
    return outcome.exit_code


def _check_many(args: argparse.Namespace, settings: Settings, config: PipelineFile | None,
                registry: Registry) -> int:
    from graphpass.batch import exit_code, make_tasks, map_tasks
    from graphpass.reporting import FileProgress
    command = settings.command
    name = f"graphpass {command}"
    for flag, given in (("--dump-after", settings.dump_after),
                        ("--verify-inputs", getattr(args, "verify_inputs", None)),
                        ("--emit-training-artifacts",
                         getattr(args, "emit_training_artifacts", None)),
                        ("--emit-training-graph", getattr(args, "emit_training_graph", None))):
        if given:
            raise UsageError(f"{flag} takes one model; give one model, or leave {flag} out",
                             name)
    output_dir = None
    if command == "run":
        if args.output is None and not args.in_place:
            raise UsageError("give the folder the outputs go to with -o DIR (each model is "
                             "written at its path below the folder or glob given), or "
                             "--in-place to write each over itself", name)
        output_dir = args.output
        if output_dir is not None and Path(output_dir).is_file():
            raise UsageError(f"-o {output_dir} is a file; with several models -o names the "
                             "folder the outputs go to", name)
    settings.manager(registry, config)  # plan once here: a bad pass or option stops it all
    tasks = make_tasks(args.models, settings, output_dir=output_dir)
    _check_report_path(args, name, *(Path(t.model) for t in tasks))
    verb = "linting" if command == "lint" else "running"
    try:
        with _executor(args, len(tasks)) as executor, FileProgress(len(tasks),
                                                                   verb=verb) as shown:
            results = map_tasks(tasks, executor=executor,
                                on_result=lambda result, _done, _total: shown.done(result.model))
    except KeyboardInterrupt:
        _fail("graphpass: interrupted; " + ("the models finished before were written, and no "
                                             "file was left half-written" if command == "run"
                                             else "nothing was written"))
        return ExitCode.INTERRUPTED
    for result in results:
        if result.error is None:
            continue
        if args.format != "text":
            _fail(f"graphpass: error: {result.model}: {result.error.text()}")
        if args.traceback and result.error.traceback:
            print(f"graphpass: traceback of {result.model}:\n{result.error.traceback}",
                  file=sys.stderr, end="")
    _report_batch(args, results, config, registry, command=command)
    return exit_code(results)


@contextlib.contextmanager
def _executor(args: argparse.Namespace, tasks: int) -> Iterator[Executor | None]:
    """Where a batch runs: here (-j 1), in a process pool (-j N), on a Dask cluster."""
    from graphpass.batch import dask_executor, process_pool
    if args.executor == "dask":
        if not args.scheduler:
            raise UsageError("--executor dask needs --scheduler ADDRESS (tcp://HOST:PORT)")
        with dask_executor(args.scheduler) as executor:
            yield executor
        return
    if args.scheduler:
        raise UsageError("--scheduler is for --executor dask")
    if args.jobs < 0:
        raise UsageError("-j must be at least 1 (or 0: one process per CPU)")
    jobs = min(args.jobs or os.cpu_count() or 1, tasks)
    if jobs <= 1:
        yield None
        return
    with process_pool(jobs) as pool:
        yield pool


def _train(args: argparse.Namespace) -> int:
    """``train``: build the training graphs of a model (or take a directory) and train."""
    from graphpass.batch import ModelTask, run_model
    from graphpass.reporting import print_build_summary, report_dict
    from graphpass.training import MANIFEST
    name = "graphpass train"
    _check_train_arguments(args, name)
    source = Path(args.model)
    if not source.exists():
        raise UsageError(f"{args.model}: no such file or directory", name)
    for flag, given in (("--save", args.save), ("--checkpoint-out", args.checkpoint_out),
                        ("--log", args.log), ("--plot", args.plot)):
        if given and _same_path(Path(given), source):
            raise UsageError(f"{flag} {given} is the input; refusing to write over it", name)
    if source.is_dir():
        given = [flag for flag, value in (
            ("-p", args.passes), ("-c", args.config), ("--checkpoint", args.checkpoint),
            ("-O", args.option), ("--disable-pass", args.disable_pass),
            ("--emit-training-graph", args.emit_training_graph)) if value]
        if given:
            raise UsageError(f"{', '.join(given)} build the training graphs of a model; "
                             f"{args.model} is a training-graph directory already", name)
        return _train_directory(args, source, kept=True, build=None)
    kept = bool(args.emit_training_graph)
    with contextlib.ExitStack() as stack:
        if kept:
            directory = Path(args.emit_training_graph)
        else:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="graphpass-train-"))
            directory = Path(scratch) / "train"
        config, registry = _setup(args)
        settings = _settings(args, "run", config, registry, training_graph=directory,
                             default_passes=("train-ready",))
        task = ModelTask(str(source), replace(settings, progress=True), None, label=args.model)
        outcome, _ = run_model(task, registry=registry, config=config)
        assert outcome.summary is not None
        if outcome.exit_code != ExitCode.OK or not (directory / MANIFEST).exists():
            _report(args, outcome.summary, config, registry, command="train",
                    model=args.model, output=None)
            return ExitCode.FINDINGS
        build = report_dict(outcome.summary, _report_info(args, config, registry, "train",
                                                          args.model, None))
        if args.format == "text":
            print_build_summary(outcome.summary, _stdout_console())
        return _train_directory(args, directory, kept=kept, build=build)


def _check_train_arguments(args: argparse.Namespace, name: str) -> None:
    """Usage errors of ``train``, before anything is built."""
    for flag, value in (("--steps", args.steps), ("--epochs", args.epochs),
                        ("--batch-size", args.batch_size), ("--eval-every", args.eval_every),
                        ("--save-every", args.save_every), ("--accumulate", args.accumulate)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1", name)
    if args.warmup < 0:
        raise UsageError("--warmup must be 0 or more", name)
    if args.lr is not None and not args.lr > 0:
        raise UsageError("--lr must be a positive number", name)
    if args.save_every and not (args.state_dir or args.resume):
        raise UsageError("--save-every needs --state-dir DIR (where the state goes)", name)
    if args.eval_every and not args.eval_data:
        raise UsageError("--eval-every needs --eval-data", name)
    import glob

    for flag, paths in (("--data", args.data), ("--eval-data", args.eval_data or [])):
        for path in paths:
            if not Path(path).exists() and not glob.has_magic(path):
                raise UsageError(f"{flag} {path}: no such file", name)


def _open_data(paths: list[str], args: argparse.Namespace, columns: list[str], *,
               training: bool) -> Any:
    from graphpass.training import open_batches

    return open_batches(paths, batch_size=args.batch_size,
                        shuffle=args.shuffle and training, seed=args.seed,
                        drop_last=args.drop_last, columns=columns)


def _train_directory(args: argparse.Namespace, directory: Path, *, kept: bool,
                     build: dict[str, Any] | None) -> int:
    from graphpass.reporting import (
        StepProgress,
        TrainingReport,
        print_evaluation,
        print_step,
        print_training_summary,
        training_dict,
    )
    from graphpass.training import Trainer, fit

    trainer = Trainer(directory, lr=args.lr)
    if args.checkpoint_out:  # before the first step: a key it cannot write is an error now
        from graphpass.training import check_checkpoint

        check_checkpoint(trainer.manifest)
    columns = list(trainer.batch_shapes())
    batches = _open_data(args.data, args, columns, training=True)
    evaluation = (_open_data(args.eval_data, args, columns, training=False)
                  if args.eval_data else None)
    steps, epochs = args.steps, args.epochs
    if steps is None and epochs is None:
        steps, epochs = (10, None) if batches.batch_size is None and len(batches) == 1 \
            else (None, 1)
    per_epoch = -(-len(batches) // args.accumulate)
    total = steps if steps is not None else (epochs or 1) * per_epoch
    state_dir = args.state_dir or args.resume
    report = TrainingReport(args.model, str(directory) if kept else None,
                            trainer.manifest["optimizer"]["kind"], trainer.lr, total,
                            build=build, state=state_dir, log=args.log, plot=args.plot)
    if args.resume and not _has_state(Path(args.resume)):
        report.notes.append(f"no saved state in {args.resume}: started from the beginning")
    text = args.format == "text"
    console = _stdout_console()
    records: list[dict[str, Any]] = []
    with StepProgress(total, epochs=epochs) as progress:
        def shown(record: dict[str, Any]) -> None:
            records.append(record)
            if record.get("eval"):
                report.evaluations.append(record)
                if text:
                    print_evaluation(console, record)
                return
            report.losses.append(record["loss"])
            progress.done(record["loss"], step=record["step"], epoch=record["epoch"],
                          samples_per_s=record["samples_per_s"])
            if text:
                print_step(console, record["step"], total, record["loss"],
                           epoch=record["epoch"] if epochs is not None else None)

        result = fit(trainer, batches, epochs=epochs, steps=steps, eval_batches=evaluation,
                     eval_every=args.eval_every, accumulate=args.accumulate,
                     schedule=args.schedule, warmup=args.warmup, callback=shown, log=args.log,
                     state_dir=state_dir, save_every=args.save_every,
                     resume=Path(args.resume) if args.resume else False,
                     settings={"data_paths": _absolute(args.data),
                               "eval_data_paths": _absolute(args.eval_data or [])})
    report.seconds = result.seconds
    report.error = result.error
    report.resumed_from = result.resumed_from
    report.notes.extend(result.notes)
    report.epochs = result.epochs
    if report.error is None:
        if args.save:
            report.saved = str(trainer.save(args.save))
        if args.checkpoint_out:
            report.checkpoint = str(trainer.save_checkpoint(args.checkpoint_out))
    if args.plot and (records or args.log):
        from graphpass.training import plot_metrics

        report.plot = str(plot_metrics(args.log if args.log else records, args.plot))
    if text:
        print_training_summary(report, console)
    else:
        _write_json(training_dict(report))
    return ExitCode.OK if report.error is None else ExitCode.FINDINGS


def _has_state(folder: Path) -> bool:
    from graphpass.files import POINTER

    return (folder / POINTER).is_file()


def _absolute(paths: list[str]) -> list[str]:
    return [str(Path(p).absolute()) for p in paths]


def _passes(args: argparse.Namespace) -> int:
    from graphpass.reporting import passes_data, pipelines_data, print_passes
    registry = _registry(args, None)
    if args.format == "json":
        _write_json({"passes": passes_data(registry), "pipelines": pipelines_data(registry)})
    else:
        print_passes(registry, _stdout_console())
    return ExitCode.OK


def _plan(args: argparse.Namespace) -> int:
    from graphpass.reporting import plan_data, print_plan
    config, registry = _setup(args)
    manager = _settings(args, "run", config, registry).manager(registry, config)
    for warning in manager.warnings:
        print(f"graphpass: warning: {warning.message}", file=sys.stderr)
    if args.format == "json":
        _write_json({"plan": plan_data(manager.plan),
                     "warnings": [warning.to_dict() for warning in manager.warnings]})
    else:
        print_plan(manager.plan, _stdout_console())
    return ExitCode.OK


def _plugins(args: argparse.Namespace) -> int:
    from graphpass.reporting import clashes_data, plugins_data, print_plugins
    registry = _registry(args, None, report_problems=False)
    if args.format == "json":
        _write_json({"plugins": plugins_data(registry), "warnings": list(registry.warnings),
                     "clashes": clashes_data(registry)})
    else:
        print_plugins(registry, _stdout_console())
    return ExitCode.OK


def _inspect(args: argparse.Namespace) -> int:
    from graphpass.reporting import model_summary, render_summary
    model = _load(Path(args.model))
    summary = model_summary(model)
    summary["model"]["path"] = args.model
    if args.format == "json":
        _write_json(summary)
    else:
        render_summary(summary, _stdout_console())
    return ExitCode.OK


# ===================================================================== helpers
def _setup(args: argparse.Namespace) -> tuple[PipelineFile | None, Registry]:
    """The pipeline file (read, not yet checked: its run spec checks it) and the registry."""
    from graphpass.framework import load_pipeline_file
    config = load_pipeline_file(args.config) if args.config else None
    return config, _registry(args, config)


def _plugin_spec(args: argparse.Namespace, config: PipelineFile | None) -> RunSpec:
    """The run spec of the pipeline file (or none) with the plugin flags over it."""
    from graphpass.framework import RunSpec
    spec = RunSpec.from_pipeline(config) if config is not None else RunSpec()
    return spec.with_overrides(disable_plugins=args.disable_plugin,
                               strict_plugins=args.strict_plugins or None)


def _registry(args: argparse.Namespace, config: PipelineFile | None, *,
              report_problems: bool = True) -> Registry:
    registry = _plugin_spec(args, config).registry()
    if report_problems:
        for problem in registry.problems:
            print(f"graphpass: warning: {problem}", file=sys.stderr)
    if args.traceback:
        for info in registry.plugins:
            if info.exception is not None:
                print(f"graphpass: traceback of plugin {info.label!r}:", file=sys.stderr)
                traceback.print_exception(info.exception, file=sys.stderr)
    return registry


def _verify_options(args: argparse.Namespace,
                    configured: VerifyOptions | None) -> VerifyOptions | None:
    from graphpass.framework import VerifyOptions
    asked = (args.verify or args.verify_inputs or args.verify_per_pass or args.verify_dim
             or args.verify_optional or args.verify_rtol is not None
             or args.verify_atol is not None)
    if not asked:
        return configured
    options = configured or VerifyOptions()
    if args.verify_inputs:
        options.inputs = Path(args.verify_inputs)  # RunSpec.check: that it exists
    if args.verify_per_pass:
        options.each = True
    if args.verify_optional:
        options.optional = True
    for text in args.verify_dim:
        name, separator, size = text.partition("=")
        if not separator or not name or not size.isdigit() or int(size) < 1:
            raise UsageError(f"--verify-dim {text!r}: write NAME=SIZE, e.g. batch=2",
                             "graphpass run")
        options.dims[name] = int(size)
    for name in ("rtol", "atol"):
        value = getattr(args, f"verify_{name}")
        if value is not None:
            if value < 0:
                raise UsageError(f"--verify-{name} must be at least 0", "graphpass run")
            setattr(options, name, value)
    return options


def _settings(args: argparse.Namespace, command: Command, config: PipelineFile | None,
              registry: Registry, *, training_graph: Path | None = None,
              default_passes: tuple[str, ...] = ()) -> Settings:
    """The settings of every model's task, from the flags (paths made absolute).

    The flags become overrides of the run spec (:meth:`graphpass.batch.Settings.spec`),
    which checks the inputs (checkpoints ...) and plans.

    Args:
        args: The parsed flags.
        command: ``run`` or ``lint``.
        config: The pipeline file, read.
        registry: The plugins in use.
        training_graph: Where graphpass's training graphs go (``--emit-training-graph``,
            or the folder ``train`` builds them in).
        default_passes: What to run when ``-p`` names nothing, in place of the pipeline
            file's passes as ``-p`` would be (``train``: ``train-ready``).
    """
    from graphpass.batch import Settings
    from graphpass.framework import default_folder as default_reproducer_folder
    passes = tuple(name.strip() for group in args.passes for name in group.split(",")
                   if name.strip()) or default_passes
    options: dict[str, dict[str, Any]] = {}
    for text in args.option:
        name, option, value = _parse_option(text)
        options.setdefault(name, {})[option] = value
    extra_passes: dict[str, dict[str, Any]] = {}
    if getattr(args, "emit_training_artifacts", None):
        if "emit-training-artifacts" not in registry.passes:
            raise UsageError(
                "--emit-training-artifacts needs onnxruntime-training, which is not installed "
                "here (pip install onnxruntime-training, in place of onnxruntime)",
                "graphpass run")
        extra_passes["emit-training-artifacts"] = {
            "directory": str(Path(args.emit_training_artifacts).absolute())}
    if training_graph is not None:
        extra_passes[TRAINING_GRAPH_PRESET] = {}
        options.setdefault("build-training-graph", {})["directory"] = str(
            training_graph.absolute())
    instruments = config.instruments if config else None
    verify = (_verify_options(args, instruments.verify if instruments else None)
              if command == "run" and hasattr(args, "verify") else None)
    return Settings(
        command=command, passes=passes, options=options,
        config=str(Path(args.config).absolute()) if args.config else None,
        checkpoints=tuple(str(Path(c).absolute()) for c in args.checkpoint),
        disable_passes=tuple(args.disable_pass), disable_plugins=tuple(args.disable_plugin),
        strict_plugins=args.strict_plugins, extra_passes=extra_passes,
        verify=verify,
        verify_each=getattr(args, "verify_each", False),
        dump_after=tuple(getattr(args, "dump_after", ())),
        dump_dir=str(Path(args.dump_dir).absolute()) if getattr(args, "dump_dir", None)
        else None,
        fixed_point=getattr(args, "fixed_point", False),
        max_iterations=getattr(args, "max_iterations", None),
        keep_going=getattr(args, "keep_going", False),
        in_place=getattr(args, "in_place", False),
        reproducer=str(Path(args.reproducer).absolute()) if getattr(args, "reproducer", None)
        else str(default_reproducer_folder()),
        base_dir=str(Path.cwd()))


def _parse_option(text: str) -> tuple[str, str, Any]:
    from graphpass.framework import parse_value
    key, separator, value = text.partition("=")
    name, dot, option = key.strip().rpartition(".")
    if not separator or not dot or not name or not option:
        raise UsageError(f"-O {text!r}: write options as PASS.OPTION=VALUE, e.g. "
                         "-O inline-functions.max-depth=8")
    return name, option, parse_value(value.strip())


def _load(path: Path) -> Any:
    from graphpass.files import load
    from graphpass.reporting import loading
    with loading(path):
        return load(path)


def _report_info(args: argparse.Namespace, config: PipelineFile | None, registry: Registry,
                 command: str, model: str | None, output: str | None) -> ReportInfo:
    from graphpass.reporting import ReportInfo
    return ReportInfo(command=command, model=model, output=output,
                      tool_version=_version(), rules=_rule_descriptions(registry),
                      show_time=getattr(args, "time", False)
                      or bool(config and config.instruments.time),
                      timing=not getattr(args, "no_timing", False))


def _report_batch(args: argparse.Namespace, results: Sequence[ModelResult],
                  config: PipelineFile | None, registry: Registry, *, command: str) -> None:

    from graphpass.batch import (
        batch_totals,
        render_batch_json,
        render_batch_sarif,
        render_batch_text,
    )
    info = _report_info(args, config, registry, command, None, None)
    _emit(args, lambda console: render_batch_text(results, console, info),
          lambda: render_batch_json(results, info) if args.format == "json"
          else render_batch_sarif(results, info))
    if args.report:
        _print_report_written(batch_totals(results), args.report)


def _report(args: argparse.Namespace, result: RunSummary, config: PipelineFile | None,
            registry: Registry, *, command: str, model: str, output: str | None) -> None:

    from graphpass.reporting import render_json, render_sarif, render_text, summary_line
    info = _report_info(args, config, registry, command, model, output)
    report = getattr(args, "report", None)
    _emit(args, lambda console: render_text(result, console, info),
          lambda: render_json(result, info) if args.format == "json"
          else render_sarif(result, info))
    if report:
        _print_report_written(summary_line(result, info), report)


def _emit(args: argparse.Namespace, as_text: Callable[[Console], None],
          as_data: Callable[[], str]) -> None:
    """Print the report, or write it to ``--report FILE`` whole (``replace_file``)."""
    from rich.console import Console

    from graphpass.files import replace_file

    report = getattr(args, "report", None)
    if args.format == "text" and not report:
        as_text(_stdout_console())
        return
    if args.format == "text":
        buffer = io.StringIO()
        as_text(Console(file=buffer, width=120, markup=False))
        text = buffer.getvalue()
    else:
        text = as_data() + "\n"
    if report:
        replace_file(report, text, step="report")
    else:
        sys.stdout.write(text)


def _print_report_written(summary: Text, report: str) -> None:
    """With ``--report``, the report's summary line on the console and where the report went."""
    line = summary.copy()
    line.append(f"; report written to {report}")
    _stdout_console().print(line, soft_wrap=True)


def _rule_descriptions(registry: Registry) -> dict[str, str]:
    rules: dict[str, str] = {}
    for entry in registry.passes.values():
        rules.update(entry.item.codes)
    return rules


def _write_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _stdout_console() -> Console:
    from rich.console import Console
    console = Console(file=sys.stdout, highlight=False, markup=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 120  # logs and pipes: wide enough that tables rarely wrap
    return console


def _check_report_path(args: argparse.Namespace, command: str, *models: Path) -> None:
    """Refuse a --report file that is the input or output model."""
    if args.report and any(_same_path(Path(args.report), model) for model in models):
        raise UsageError(f"--report {args.report} is a model file; refusing to write the "
                         "report over it", command)


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def _version() -> str:
    try:
        return importlib.metadata.version("graphpass")
    except importlib.metadata.PackageNotFoundError:
        return "0"
