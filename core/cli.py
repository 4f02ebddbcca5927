"""The ``graphpass`` command line.

```
graphpass run MODEL -o OUT [-p PASS,PASS...] [-c pipeline.toml] [--checkpoint PATH...]
                           [--format text|json|sarif] [--verify-each] [--fixed-point] ...
graphpass lint MODEL [-p ...] [--format ...]
graphpass passes | plan -p ... | plugins | inspect MODEL
```

Exit codes: 0 when all went well, 1 when a pass reported an error finding, 2 for bad
input or usage (one readable message on standard error, never a traceback), 130 when
interrupted. A run that fails writes nothing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console

from graphpass.errors import GraphpassError
from graphpass.files import load, save
from graphpass.framework.config import PipelineFile, load_pipeline_file, parse_value
from graphpass.framework.manager import PassManager
from graphpass.framework.pipeline import Pipeline
from graphpass.framework.plugin_loading import default_registry
from graphpass.framework.registry import Registry
from graphpass.framework.results import RunResult
from graphpass.framework.verify import VerifyOptions, VerifySemantics
from graphpass.reporting.listings import (
    passes_data,
    pipelines_data,
    plan_data,
    plugins_data,
    print_passes,
    print_plan,
    print_plugins,
)
from graphpass.reporting.progress import PassProgress, loading
from graphpass.reporting.render import ReportInfo, render_json, render_sarif, render_text
from graphpass.reporting.summary import model_summary, render_summary

__all__ = ["main"]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
LINT_DEFAULT = ("check",)
"""What ``graphpass lint`` runs when no pass is named."""


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
    try:
        parser = _parser()
        args = parser.parse_args(arguments)
        if args.handler is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        code: int = args.handler(args)
        return code
    except UsageError as error:
        _fail(f"{error.command}: error: {error}")
        return EXIT_USAGE
    except GraphpassError as error:
        if show_traceback:
            traceback.print_exception(error, file=sys.stderr)
        _fail(f"graphpass: error: {error}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _fail("graphpass: interrupted; nothing was written")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as error:
        if show_traceback:
            traceback.print_exception(error, file=sys.stderr)
        _fail(f"graphpass: internal error: {type(error).__name__}: {error}\n"
              "  hint: this is a bug in graphpass; run again with --traceback and report it")
        return EXIT_USAGE


def _fail(message: str) -> None:
    print(message, file=sys.stderr)


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

    run = commands.add_parser("run", parents=[common, planning, reporting],
                              help="run passes on a model and write the result")
    run.add_argument("model", metavar="MODEL")
    run.add_argument("-o", "--output", metavar="OUT", help="where to write the result")
    run.add_argument("--in-place", action="store_true",
                     help="allow writing over MODEL (the default when -o is left out)")
    run.add_argument("--verify-each", action="store_true",
                     help="run the ONNX checker after every transforming pass")
    run.add_argument("--verify", action="store_true",
                     help="run the model before and after in onnxruntime (or the ONNX "
                          "reference evaluator) and fail if the outputs differ")
    run.add_argument("--verify-inputs", metavar="FILE.npz",
                     help="inputs for --verify (default: generated from the input types)")
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
    run.add_argument("--keep-going", action="store_true",
                     help="run every pass even after error findings (still writes nothing)")
    run.set_defaults(handler=_run)

    lint = commands.add_parser("lint", parents=[common, planning, reporting],
                               help="run analysis passes and report; writes nothing")
    lint.add_argument("model", metavar="MODEL")
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

    inspect = commands.add_parser("inspect", parents=[common, listing], help="summarize a model")
    inspect.add_argument("model", metavar="MODEL")
    inspect.set_defaults(handler=_inspect)
    return parser


# ==================================================================== commands
def _run(args: argparse.Namespace) -> int:
    model_path = Path(args.model)
    if args.output is None and not args.in_place:
        raise UsageError("give the output file with -o OUT (or --in-place to write over "
                         "MODEL)", "graphpass run")
    output = Path(args.output) if args.output is not None else model_path
    if not args.in_place and _same_path(output, model_path):
        raise UsageError(f"-o {args.output} is the input model; refusing to write over it "
                         "without --in-place", "graphpass run")
    _check_report_path(args, "graphpass run", model_path, output)
    config, registry = _setup(args)
    if args.max_iterations is not None and args.max_iterations < 1:
        raise UsageError("--max-iterations must be at least 1", "graphpass run")
    instruments = config.instruments if config else None
    dump_after = [*(instruments.dump_after if instruments else ()), *args.dump_after]
    dump_dir = Path(args.dump_dir) if args.dump_dir else (
        instruments.dump_dir if instruments and instruments.dump_dir else
        output.parent)
    verify = _verify_options(args, instruments.verify if instruments else None)
    extra_passes: dict[str, dict[str, Any]] = {}
    if args.emit_training_artifacts:
        if "emit-training-artifacts" not in registry.passes:
            raise UsageError(
                "--emit-training-artifacts needs onnxruntime-training, which is not installed "
                "here (pip install onnxruntime-training, in place of onnxruntime)",
                "graphpass run")
        extra_passes["emit-training-artifacts"] = {
            "directory": str(Path(args.emit_training_artifacts).absolute())}
    manager = _manager(
        args, config, registry, required=True, extra_passes=extra_passes,
        extra_instruments=[VerifySemantics(verify)] if verify is not None else [],
        verify_each=args.verify_each or bool(instruments and instruments.verify_each),
        dump_after=dump_after, dump_dir=dump_dir,
        fixed_point=args.fixed_point or bool(instruments and instruments.fixed_point),
        max_iterations=args.max_iterations or (instruments.max_iterations if instruments
                                               else 10),
        stop_on_error=not args.keep_going)
    model = _load(model_path)
    result = manager.run(model)
    written = None
    if result.ok:
        save(result.model, output, overwrite_input=args.in_place)
        written = str(output)
    _report(args, result, config, registry, command="run", output=written)
    return EXIT_OK if result.ok else EXIT_FINDINGS


def _lint(args: argparse.Namespace) -> int:
    _check_report_path(args, "graphpass lint", Path(args.model))
    config, registry = _setup(args)
    manager = _manager(args, config, registry, required=False, stop_on_error=False)
    transforming = [p.name for p in manager.plan if p.requested and not p.analysis]
    if transforming:
        raise UsageError(
            f"lint runs analysis passes only, and {', '.join(map(repr, transforming))} "
            f"change{'s' * (len(transforming) == 1)} the model; use `graphpass run` for "
            "transforming passes", "graphpass lint")
    result = manager.run(_load(Path(args.model)))
    _report(args, result, config, registry, command="lint", output=None)
    return EXIT_OK if result.ok else EXIT_FINDINGS


def _passes(args: argparse.Namespace) -> int:
    registry = _registry(args, None)
    if args.format == "json":
        _write_json({"passes": passes_data(registry), "pipelines": pipelines_data(registry)})
    else:
        print_passes(registry, _stdout_console())
    return EXIT_OK


def _plan(args: argparse.Namespace) -> int:
    config, registry = _setup(args)
    manager = _manager(args, config, registry, required=True)
    if args.format == "json":
        _write_json({"plan": plan_data(manager.plan)})
    else:
        print_plan(manager.plan, _stdout_console())
    return EXIT_OK


def _plugins(args: argparse.Namespace) -> int:
    registry = _registry(args, None, report_problems=False)
    if args.format == "json":
        _write_json({"plugins": plugins_data(registry), "warnings": list(registry.warnings)})
    else:
        print_plugins(registry, _stdout_console())
    return EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    model = _load(Path(args.model))
    summary = model_summary(model)
    summary["model"]["path"] = args.model
    if args.format == "json":
        _write_json(summary)
    else:
        render_summary(summary, _stdout_console())
    return EXIT_OK


# ===================================================================== helpers
def _setup(args: argparse.Namespace) -> tuple[PipelineFile | None, Registry]:
    config = load_pipeline_file(args.config) if args.config else None
    registry = _registry(args, config)
    if config is not None:
        config.check(registry)
    return config, registry


def _registry(args: argparse.Namespace, config: PipelineFile | None, *,
              report_problems: bool = True) -> Registry:
    disable = [*args.disable_plugin, *(config.disable_plugins if config else ())]
    strict = args.strict_plugins or bool(config and config.strict_plugins)
    registry = default_registry(disable=disable, strict=strict)
    if report_problems:
        for problem in registry.problems:
            print(f"graphpass: warning: {problem}", file=sys.stderr)
    return registry


def _verify_options(args: argparse.Namespace,
                    configured: VerifyOptions | None) -> VerifyOptions | None:
    asked = (args.verify or args.verify_inputs or args.verify_per_pass or args.verify_dim
             or args.verify_rtol is not None or args.verify_atol is not None)
    if not asked:
        return configured
    options = configured or VerifyOptions()
    if args.verify_inputs:
        options.inputs = Path(args.verify_inputs)
        if not options.inputs.exists():
            raise UsageError(f"--verify-inputs {args.verify_inputs}: no such file",
                             "graphpass run")
    if args.verify_per_pass:
        options.each = True
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


def _manager(args: argparse.Namespace, config: PipelineFile | None, registry: Registry, *,
             required: bool, extra_instruments: Sequence[Any] = (),
             extra_passes: Mapping[str, Mapping[str, Any]] | None = None,
             **settings: Any) -> PassManager:
    """A manager for the pipeline file and arguments, plus ``extra_passes`` (name: options)."""
    extra_passes = extra_passes or {}
    requested: list[str | Pipeline] = []
    presets = config.presets if config else {}
    for group in args.passes:
        for name in group.split(","):
            if name.strip():
                requested.append(presets.get(name.strip(), name.strip()))
    if not requested and config is not None:
        requested = config.requested()
    requested.extend(extra_passes)
    if not requested:
        if required:
            raise UsageError("nothing to run: name passes with -p PASS,... or give a pipeline "
                             "file with -c", f"graphpass {args.handler.__name__.strip('_')}")
        requested = list(LINT_DEFAULT)
    options: dict[str, dict[str, Any]] = {
        name: dict(values) for name, values in (config.options if config else {}).items()}
    for text in args.option:
        name, option, value = _parse_option(text)
        options.setdefault(name, {})[option] = value
    for name, values in extra_passes.items():
        options.setdefault(name, {}).update(values)
    checkpoints = [Path(c).absolute() for c in args.checkpoint]
    for given, path in zip(args.checkpoint, checkpoints, strict=True):
        if not path.exists():
            raise UsageError(f"--checkpoint {given}: no such file or folder")
    if config is not None:
        checkpoints.extend(config.checkpoints)
    disable = [*args.disable_pass, *(config.instruments.disable if config else ())]
    progress = PassProgress()
    return PassManager(requested, options, registry=registry, disable=disable,
                       checkpoints=checkpoints,
                       base_dir=config.base_dir if config else Path.cwd(),
                       instruments=[progress, *extra_instruments], **settings)


def _parse_option(text: str) -> tuple[str, str, Any]:
    key, separator, value = text.partition("=")
    name, dot, option = key.strip().rpartition(".")
    if not separator or not dot or not name or not option:
        raise UsageError(f"-O {text!r}: write options as PASS.OPTION=VALUE, e.g. "
                         "-O inline-functions.max-depth=8")
    return name, option, parse_value(value.strip())


def _load(path: Path) -> Any:
    with loading(path):
        return load(path)


def _report(args: argparse.Namespace, result: RunResult, config: PipelineFile | None,
            registry: Registry, *, command: str, output: str | None) -> None:
    info = ReportInfo(command=command, model=args.model, output=output,
                      tool_version=_version(), rules=_rule_descriptions(registry),
                      show_time=args.time or bool(config and config.instruments.time),
                      timing=not args.no_timing)
    if args.format == "text":
        if args.report:
            with open(args.report, "w", encoding="utf-8") as handle:
                render_text(result, Console(file=handle, width=120, markup=False), info)
        else:
            render_text(result, _stdout_console(), info)
        return
    text = render_json(result, info) if args.format == "json" else render_sarif(result, info)
    if args.report:
        Path(args.report).write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")


def _rule_descriptions(registry: Registry) -> dict[str, str]:
    rules: dict[str, str] = {}
    for entry in registry.passes.values():
        codes = getattr(entry.item, "codes", None)
        if isinstance(codes, Mapping):
            rules.update({str(k): str(v) for k, v in codes.items()})
    return rules


def _write_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _stdout_console() -> Console:
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
