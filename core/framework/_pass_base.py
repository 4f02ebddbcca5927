"""The pass interface: what a pass declares, what it receives, what it returns.

A pass is a class with a ``name``, a one-line ``description``, typed ``Options``
(a dataclass), the passes it ``requires`` (added to the plan automatically), the
passes it must run ``after`` or ``before`` when they are planned too, and a
``run`` method::

    from dataclasses import dataclass, field
    import graphpass

    class OpCounts(graphpass.AnalysisPass):
        name = "example-op-counts"
        description = "Report how many nodes use each operator."

        @dataclass
        class Options:
            ops: list[str] = field(default_factory=list)

        def run(self, model, context):
            ...
            return graphpass.PassResult(changed=False, findings=[...])
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from graphpass.errors import PipelineError
from graphpass.findings import Finding
from graphpass.framework._analyses import Analyses
from graphpass.framework._option_types import (
    OptionValueError,
    check_value,
    describe_type,
    toml_text,
)

if TYPE_CHECKING:
    from graphpass.framework._registry import Registry
    from graphpass.ir import Model

_T = typing.TypeVar("_T")

__all__ = ["AnalysisPass", "NoOptions", "Pass", "PassContext", "PassResult", "describe_type",
           "resolve_path", "validate_options"]


@dataclass
class NoOptions:
    """Options of a pass that takes none."""


@dataclass
class PassResult:
    """What a pass returns.

    Attributes:
        changed: Whether the pass changed the model.
        findings: What the pass reports.
        stats: Counters worth showing (``{"inlined calls": 12}``), kept in reports only
            (no pass reads another's stats: later passes ask for ``analyses``).
        analyses: Typed facts later passes ask for by type
            (:meth:`PassContext.analysis`); each one's type must be listed in the pass's
            ``provides`` (see :mod:`graphpass.framework._analyses`).
    """

    changed: bool = False
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    analyses: list[object] = field(default_factory=list)


@dataclass
class PassContext:
    """What a pass can use besides the model.

    :class:`~graphpass.PassManager` makes one per run. To run a pass on its own, give
    it a registry: ``PassContext(registry=default_registry())`` (from
    :mod:`graphpass.framework._plugin_loading`).

    Attributes:
        registry: The passes, checkpoint loaders, gradient rules and pipelines of this
            run (required, keyword only).
        base_dir: The folder relative paths in options are resolved against (the
            pipeline file's folder, or the current folder).
        checkpoints: Checkpoints given on the command line (``--checkpoint``).
        plan: The names of every pass in this run, in order.
        analyses: The valid analyses earlier passes gave (ask with :meth:`analysis`).
        log: A logger for progress messages.
    """

    registry: Registry = field(kw_only=True)
    base_dir: Path = field(default_factory=Path.cwd)
    checkpoints: tuple[Path, ...] = ()
    plan: tuple[str, ...] = ()
    analyses: Analyses = field(default_factory=Analyses)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("graphpass"))

    def analysis(self, kind: type[_T]) -> _T | None:
        """The valid analysis of type ``kind`` an earlier pass gave, or ``None``.

        ``None`` when no pass of the run provides it, or when a pass changed the model
        since and did not list ``kind`` in its ``preserves``.
        """
        return self.analyses.get(kind)

    def resolve_path(self, path: str | os.PathLike[str]) -> Path:
        """Resolve a path from an option against :attr:`base_dir`."""
        return resolve_path(path, self.base_dir)


def resolve_path(path: str | os.PathLike[str], base_dir: Path) -> Path:
    """``path`` with ``~`` expanded, relative to ``base_dir`` unless it is absolute.

    How every path a user gives is read: options, checkpoints, pipeline-file entries.
    """
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base_dir / candidate


class Pass:
    """Base class of every pass.

    Subclasses set the class attributes below and implement :meth:`run`.

    Attributes:
        name: The pass name used in pipelines (lowercase, dash-separated).
        description: One line saying what the pass does.
        analysis: Whether the pass only reports (never changes the model).
        requires: Passes that must run before this one; planned automatically.
        after: Passes this one runs after, when they are planned too.
        before: Passes this one runs before, when they are planned too.
        preserves_semantics: Whether the model computes the same outputs after the pass.
            ``False`` for passes that change values on purpose (filling weights from a
            checkpoint); semantic verification re-takes its reference after them.
        codes: Every finding code the pass can report, with a one-line description
            (the SARIF report's rule descriptions).
        provides: The types of the analyses the pass gives in
            :attr:`PassResult.analyses` (see :mod:`graphpass.framework._analyses`).
        preserves: The analysis types that stay true when this pass changes the model;
            every other analysis is dropped after a change.
        Options: A dataclass of the pass's options, with defaults.
        options: The validated options of this instance.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    analysis: ClassVar[bool] = False
    requires: ClassVar[Sequence[str]] = ()
    after: ClassVar[Sequence[str]] = ()
    before: ClassVar[Sequence[str]] = ()
    preserves_semantics: ClassVar[bool] = True
    codes: ClassVar[Mapping[str, str]] = {}
    provides: ClassVar[Sequence[type[Any]]] = ()
    preserves: ClassVar[Sequence[type[Any]]] = ()
    Options: ClassVar[type[Any]] = NoOptions

    def __init__(self, options: Any = None, **option_values: Any):
        """Create the pass with its options.

        ``DropIdentity(keep_graph_outputs=False)``, ``DropIdentity({"keep-graph-outputs":
        False})`` and ``DropIdentity(DropIdentity.Options(keep_graph_outputs=False))``
        make the same pass; keywords are added to (and win over) a mapping.

        Args:
            options: An ``Options`` instance, a mapping of option names to values (as
                read from a pipeline file), or ``None`` for the defaults.
            **option_values: Options as keywords (Python names: ``keep_graph_outputs``).

        Raises:
            PipelineError: An option is unknown or has a wrong type or value.
        """
        self.options = validate_options(type(self), _with_keywords(type(self), options,
                                                                   option_values),
                                        python_names=True if option_values else None)

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Run the pass on ``model``, changing it in place (unless this is an analysis).

        Args:
            model: The model.
            context: Paths, checkpoints, the plan and earlier results.

        Returns:
            Whether the model changed, and the findings.
        """
        raise NotImplementedError(f"pass {self.name!r} does not implement run()")

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


def _with_keywords(pass_class: type[Pass], options: Any, keywords: Mapping[str, Any]) -> Any:
    """``options`` with the keyword options added (keywords win)."""
    if not keywords:
        return options
    if options is None:
        return dict(keywords)
    if isinstance(options, Mapping):
        return {**{str(k).replace("-", "_"): v for k, v in options.items()}, **keywords}
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return {**{f.name: getattr(options, f.name) for f in dataclasses.fields(options)},
                **keywords}
    raise PipelineError(
        f"options of pass {pass_class.name!r} must be a table of option names to values, "
        f"not {type(options).__name__}")


class AnalysisPass(Pass):
    """A pass that only inspects the model and reports findings."""

    analysis: ClassVar[bool] = True


def option_fields(pass_class: type[Pass]) -> list[dataclasses.Field[Any]]:
    """The option fields a pass declares (empty when it takes none)."""
    options = pass_class.Options
    if not dataclasses.is_dataclass(options):
        return []
    return list(dataclasses.fields(options))


def validate_options(pass_class: type[Pass], options: Any, *, where: str | None = None,
                     python_names: bool | None = None) -> Any:
    """Check and convert a pass's options.

    Messages name options the way the caller writes them: as a pipeline file does
    (``keep-names``), or as Python does (``keep_names``).

    Args:
        pass_class: The pass.
        options: An ``Options`` instance, a mapping, or ``None``.
        where: Where the options come from (file and line), for messages.
        python_names: Name options as Python does (``True``: they are keywords) or as a
            file does (``False``: they come from one); ``None``: as Python does when a key
            is written with an underscore.

    Returns:
        An instance of ``pass_class.Options``.

    Raises:
        PipelineError: Unknown option (with a suggestion), or a value of the wrong type
            (with the expected type and allowed values).
    """
    options_type = pass_class.Options
    if options is None:
        options = {}
    if isinstance(options, options_type):
        return options
    if not isinstance(options, Mapping):
        raise PipelineError(
            f"options of pass {pass_class.name!r} must be a table of option names to values, "
            f"not {type(options).__name__}",
            where=where,
        )
    fields = {f.name.replace("_", "-"): f for f in option_fields(pass_class)}
    by_python_name = {f.name: f for f in fields.values()}
    normalized: dict[str, Any] = {}
    # keep_names to Python (keywords, or keys written so), keep-names to a file.
    python_style = python_names if python_names is not None else any(
        "_" in str(key) for key in options)
    spelled = {name: name if python_style else name.replace("_", "-")
               for name in by_python_name}
    for key in options:
        python_name = str(key).replace("-", "_")
        if python_name not in by_python_name:
            known = sorted(fields)
            close = difflib.get_close_matches(str(key).replace("_", "-"), known, n=1)
            if python_style:
                close = [name.replace("-", "_") for name in close]
                known = [name.replace("-", "_") for name in known]
            hint = f"did you mean {close[0]!r}?" if close else (
                f"known options: {', '.join(known)}" if known else "this pass takes no options")
            raise PipelineError(
                f"pass {pass_class.name!r} has no option {key!r}", where=where, hint=hint)
        normalized[python_name] = options[key]
    try:
        hints = typing.get_type_hints(options_type)
        checked = {name: _checked_value(pass_class, spelled[name], value,
                                        hints.get(name, Any), where)
                   for name, value in normalized.items()}
        return options_type(**checked)
    except (TypeError, ValueError) as error:
        raise PipelineError(f"options of pass {pass_class.name!r}: {error}", where=where) from None


def _checked_value(pass_class: type[Pass], spelled: str, value: Any, annotation: Any,
                   where: str | None) -> Any:
    """``value`` checked against ``annotation`` strictly (see :mod:`.option_types`).

    ``spelled`` is the option's name as the caller writes it (``keep-names`` in a file,
    ``keep_names`` from Python).
    """
    try:
        return check_value(annotation, value)
    except OptionValueError as refused:
        raise PipelineError(
            f"option {spelled!r} of pass {pass_class.name!r} "
            f"must be {refused.expected}, got {toml_text(value)}",
            where=where,
            hint=refused.hint,
        ) from None
