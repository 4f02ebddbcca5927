"""The pass manager: plan passes once, then run them on a copy of a model.

```python
import graphpass

manager = graphpass.PassManager(
    ["inline-functions", "lint-gradients"],
    options={"lint-gradients": {"frozen": ["embeddings.*"]}},
    verify_each=True,
)
print(manager.plan_names)            # requires pulled in, topologically sorted
result = manager.run(graphpass.load("model.onnx"))
result.model, result.findings, result.changed, result.records
```

Planning happens when the manager is created (see :mod:`graphpass.framework._planning`), so
an unknown pass, a cycle or a bad option fails before any pass runs. ``run``
works on ``model.copy()``: the caller's model is never changed, whatever a pass
does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from graphpass.errors import GraphpassError, PassError, PipelineError
from graphpass.files import load
from graphpass.findings import Finding, Severity
from graphpass.framework._instruments import DumpAfter, Instrument, VerifyEach
from graphpass.framework._pass_base import PassContext, PassResult, resolve_path
from graphpass.framework._pipeline import Pipeline
from graphpass.framework._planning import PassSpec, PlannedPass, plan_passes
from graphpass.framework._plugin_loading import default_registry
from graphpass.framework._registry import Registry
from graphpass.framework._results import PassRecord, RunResult, unique_findings
from graphpass.ir import Model, describe_node, sparing_older_objects

__all__ = ["CHANGED_UNSAID_CODE", "DANGLING_CODE", "FIXED_POINT_CODE", "UNPLANNED_OPTIONS_CODE",
           "PassManager"]

FIXED_POINT_CODE = "GP001"
"""A fixed-point run still changed the model in its last allowed round."""
CHANGED_UNSAID_CODE = "GP002"
"""A transforming pass changed the model but returned ``changed=False`` (a bug in it)."""
DANGLING_CODE = "GP003"
"""A transforming pass left nodes reading names that nothing defines (a bug in it)."""
UNPLANNED_OPTIONS_CODE = "GP004"
"""Options were given for a pass that is not planned; they are ignored."""


class PassManager:
    """Plans passes and runs them.

    Attributes:
        plan: The planned passes, in the order they run.
        registry: Where pass and preset names were looked up.
        instruments: What watches each pass (verify-each, dumps, progress ...).
        fixed_point: Whether :meth:`run` repeats the plan until nothing changes.
        max_iterations: The most rounds a fixed-point run makes.
        stop_on_error: Whether a run stops after a pass that reports an error finding.
        base_dir: What relative paths in options are resolved against.
        checkpoints: The checkpoints given for this run.
        warnings: What planning noticed that does not stop a run (options for a pass
            that is not planned, ``GP004``); :meth:`run` reports them with its findings.
    """

    def __init__(
        self,
        passes: Iterable[PassSpec] | PassSpec,
        options: Mapping[str, Any] | None = None,
        *,
        registry: Registry | None = None,
        disable: Iterable[str] = (),
        checkpoints: Iterable[str | Path] = (),
        base_dir: str | Path | None = None,
        instruments: Iterable[Instrument] = (),
        verify_each: bool = False,
        dump_after: Iterable[str] = (),
        dump_dir: str | Path = ".",
        fixed_point: bool = False,
        max_iterations: int = 10,
        stop_on_error: bool = True,
        reproducer: str | Path | None = None,
    ):
        """Plan the passes.

        Args:
            passes: Pass names, preset names, pass classes, pass instances or
                :class:`~graphpass.Pipeline` objects (one, or an iterable).
            options: Options by pass name (a mapping of option names to values, or the
                pass's ``Options`` instance).
            registry: Where names are looked up (default: built-ins and installed plugins).
            disable: Pass names to leave out of the plan.
            checkpoints: Checkpoint files for passes that read one (relative paths are
                resolved against ``base_dir``). Preset steps marked ``when="checkpoint"``
                are planned only when there is one.
            base_dir: What relative paths in options are resolved against (default: the
                current folder).
            instruments: Extra instruments, run after the built-in ones.
            verify_each: Run the ONNX checker after every transforming pass that
                changed the model.
            dump_after: Save the model after these passes (into ``dump_dir``).
            dump_dir: Where ``dump_after`` writes.
            fixed_point: Repeat the whole plan until no pass changes the model.
            max_iterations: The most rounds of a fixed-point run (a warning finding says
                when the model still changed in the last one).
            stop_on_error: Stop after a pass that reports an error finding.
            reproducer: When a pass raises an exception that is not a
                :class:`~graphpass.GraphpassError` (a bug), write a reproducer into this
                folder (:mod:`graphpass.framework._reproducer`); the error says where.
                ``None`` (the default): write none.

        Raises:
            PipelineError: An unknown pass or preset (with a suggestion), a dependency
                cycle (naming the passes on it), a bad option (name, expected type,
                allowed values), or a disabled pass that another pass requires.
        """
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.registry = registry if registry is not None else default_registry()
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self.checkpoints = tuple(resolve_path(c, self.base_dir) for c in checkpoints)
        self.plan: list[PlannedPass] = plan_passes(
            passes, options, self.registry, has_checkpoint=bool(self.checkpoints),
            disable=disable)
        self.warnings: list[Finding] = _unplanned_options(
            options or {}, self.plan, passes, self.registry, set(disable),
            has_checkpoint=bool(self.checkpoints))
        dump_names = tuple(dump_after)
        planned_names = {p.name for p in self.plan}
        for name in dump_names:
            if name not in planned_names:
                raise PipelineError(f"--dump-after names pass {name!r}, which is not planned",
                                    hint="planned passes: " + ", ".join(self.plan_names))
        built_in: list[Instrument] = []
        if verify_each:
            built_in.append(VerifyEach())
        if dump_names:
            built_in.append(DumpAfter(dump_names, dump_dir))
        self.instruments: list[Instrument] = [*built_in, *instruments]
        self.fixed_point = fixed_point
        self.max_iterations = max_iterations
        self.stop_on_error = stop_on_error
        self.reproducer = Path(reproducer) if reproducer is not None else None

    @property
    def plan_names(self) -> tuple[str, ...]:
        """The planned pass names, in order."""
        return tuple(p.name for p in self.plan)

    # ------------------------------------------------------------------ running
    def run(self, model: Model, *, copy: bool = True) -> RunResult:
        """Run the plan on a copy of ``model`` (or, with ``copy=False``, on ``model``).

        Args:
            model: The model; it is not changed (unless ``copy`` is false).
            copy: Work on a copy of ``model`` (the default). With ``False`` the passes
                change ``model`` itself, which becomes ``result.model``: for a model
                nobody needs as it was, such as one just loaded to be written out
                again (``graphpass run`` does so), this spares copying every node.
                If a pass raises, ``model`` is left as that pass left it.

        Returns:
            The resulting model, findings, per-pass records and the analyses still
            valid at the end (``result.analysis(ReconcileResult)``). When a pass reports
            an error finding (and ``stop_on_error``), the run stops after it:
            ``result.stopped_after`` names it and ``result.ok`` is false.

        Raises:
            PassError: A pass raised, returned something other than a
                :class:`~graphpass.PassResult`, or (being an analysis pass) changed the
                model. The error names the pass, its plugin and the passes that ran
                before it; the original exception is its ``__cause__``. With
                ``reproducer``, an unexpected exception also leaves a reproducer, and
                the error's ``reproducer`` is its folder.
        """
        working = model.copy() if copy else model
        context = PassContext(base_dir=self.base_dir, checkpoints=self.checkpoints,
                              plan=self.plan_names, registry=self.registry)
        result = RunResult(working, plan=self.plan_names, analyses=context.analyses)
        run_level: list[Finding] = []
        for instrument in self.instruments:
            instrument.before_run(self.plan, working, context)
        ran: list[PlannedPass] = []
        source = model.source_path
        try:
            self._run_rounds(working, context, result, _ChangeWatch(), run_level, ran)
        except PassError as error:
            for instrument in self.instruments:
                instrument.after_run(None, context)
            if self.reproducer is not None and error.unexpected:
                self._leave_reproducer(error, model if copy else None, source, ran)
            raise
        except BaseException:
            for instrument in self.instruments:
                instrument.after_run(None, context)
            raise
        result.findings = unique_findings(
            [*self.warnings,
             *(finding for record in result.records for finding in record.findings),
             *run_level])
        if self._unconverged(result):
            changing = sorted({r.name for r in result.records
                               if r.changed and r.iteration == result.iterations})
            result.findings.append(Finding(
                FIXED_POINT_CODE, Severity.WARNING,
                f"no fixed point after {self.max_iterations} rounds: the last round still "
                f"changed the model ({', '.join(changing)})",
                hint="raise max-iterations, or check whether these passes undo each other",
                data={"iterations": self.max_iterations, "changing": changing}))
        for instrument in self.instruments:
            instrument.after_run(result, context)
        return result

    def _unconverged(self, result: RunResult) -> bool:
        return (self.fixed_point and result.stopped_after is None
                and result.iterations == self.max_iterations
                and any(r.changed for r in result.records if r.iteration == result.iterations))

    def _leave_reproducer(self, error: PassError, original: Model | None,
                          source: Path | None, ran: Sequence[PlannedPass]) -> None:
        """Write a reproducer of ``error`` and say where in its message.

        The model the failing pass saw is rebuilt by running the passes before it again
        on ``original`` (or on the file the model was loaded from). A reproducer that
        cannot be written is mentioned in the message; the pass's error still stands.
        """
        from graphpass.framework._reproducer import REPLAY, write_reproducer
        assert self.reproducer is not None and error.__cause__ is not None
        failing = ran[-1]
        entering: Model | None = None
        lost = ""
        try:
            entering = self._replay(original, source, ran[:-1])
        except Exception as failed:  # (a pass that ran fine once may not run twice)
            lost = f"the model as it entered the pass could not be rebuilt: {failed}"
        try:
            folder = write_reproducer(
                self.reproducer, entering, self.plan[self.plan.index(failing):],
                checkpoints=self.checkpoints, registry=self.registry,
                error=error.__cause__, message=error.message + (f"\n  ({lost})" if lost else ""))
        except (GraphpassError, OSError) as failed:
            error.message += f"\n  (no reproducer: {failed})"
        else:
            error.reproducer = folder
            error.message += (f"\n  a reproducer is in {folder}: send it with a bug report "
                              f"(replay: sh {folder / REPLAY})")
            if lost:
                error.message += f" ({lost})"
        GraphpassError.__init__(error, error.message, hint=error.hint)

    def _replay(self, original: Model | None, source: Path | None,
                before: Sequence[PlannedPass]) -> Model:
        """The model as the passes ``before`` left it, run again on a fresh copy.

        The copy is of ``original`` (the caller's model, unchanged), else the file
        ``source`` is loaded again (a model the run changed in place).

        Raises:
            GraphpassError: No unchanged model to start from, or a pass fails again.
        """
        if original is not None:
            working = original.copy()
        elif source is not None:
            working = load(source)
        else:
            raise GraphpassError("the model was changed in place and was not loaded from a "
                                 "file, so the model the pass saw cannot be rebuilt")
        context = PassContext(base_dir=self.base_dir, checkpoints=self.checkpoints,
                              plan=self.plan_names, registry=self.registry)
        for planned in before:
            outcome = planned.instance.run(working, context)
            if outcome.changed and not planned.analysis:
                context.analyses.invalidate(type(planned.instance).preserves)
            for analysis in outcome.analyses:
                context.analyses.put(analysis)
        return working

    def _run_rounds(self, working: Model, context: PassContext, result: RunResult,
                    watch: _ChangeWatch, run_level: list[Finding],
                    history: list[PlannedPass]) -> None:
        ran: list[str] = []
        for iteration in range(1, self.max_iterations + 1):
            result.iterations = iteration
            changed = False
            for planned in self.plan:
                history.append(planned)
                record = self._run_one(planned, working, context, ran, iteration, watch)
                result.records.append(record)
                ran.append(planned.name)
                changed |= record.changed
                errors = record.has_errors
                for instrument in self.instruments:
                    extra = instrument.after_pass(planned, working, record, context) or ()
                    errors |= _credit(list(extra), planned, result.records, run_level)
                if self.stop_on_error and errors:
                    result.stopped_after = planned.name
                    return
            if not self.fixed_point or not changed:
                return

    def _run_one(self, planned: PlannedPass, working: Model, context: PassContext,
                 ran: Sequence[str], iteration: int, watch: _ChangeWatch) -> PassRecord:
        watch.before(working)
        undefined_before = _undefined_names(working)
        for instrument in self.instruments:
            instrument.before_pass(planned, working, context)
        start = time.perf_counter()
        try:
            with sparing_older_objects():  # collections during the pass skip the model
                outcome = planned.instance.run(working, context)
        except KeyboardInterrupt:
            raise
        except SystemExit as error:  # a pass has no business ending the program
            failure = _pass_error(planned, ran, f"called sys.exit({error.code!r})", error,
                                  hint=f"this is a bug in plugin {planned.plugin!r}")
            failure.unexpected = True
            raise failure from error
        except PassError as error:
            # The pass's own error type (e.g. a subclass with a code): keep it, add context.
            _describe_failure(error, planned, ran, error.message, error.where, error.hint)
            raise
        except GraphpassError as error:
            raise _pass_error(planned, ran, error.message, error, hint=error.hint,
                              where=error.where) from error
        except Exception as error:
            failure = _pass_error(
                planned, ran, f"{type(error).__name__}: {error}", error,
                hint=f"this is a bug in pass {planned.name!r}; report it to the authors of "
                     f"plugin {planned.plugin!r} (the original traceback is the error's "
                     "__cause__; --traceback shows it)")
            failure.unexpected = True
            raise failure from error
        seconds = time.perf_counter() - start
        if not isinstance(outcome, PassResult):
            raise _pass_error(planned, ran, f"run() returned {type(outcome).__name__}, not "
                              "a graphpass.PassResult", None)
        if isinstance(outcome.findings, (str, bytes, Mapping)) or not isinstance(
                outcome.findings, Iterable):
            raise _pass_error(planned, ran, "returned findings that are "
                              f"{type(outcome.findings).__name__}, not a list of "
                              "graphpass.Finding", None)
        if not isinstance(outcome.stats, Mapping):
            raise _pass_error(planned, ran, f"returned stats that are "
                              f"{type(outcome.stats).__name__}, not a mapping of names to "
                              "values", None)
        try:  # reading them runs plugin code too (a generator, a custom mapping)
            outcome.findings = list(outcome.findings)
            stats = {str(key): value for key, value in outcome.stats.items()}
        except Exception as error:
            raise _pass_error(planned, ran, "its findings or stats cannot be read: "
                              f"{type(error).__name__}: {error}", error) from error
        bad = [f for f in outcome.findings if not isinstance(f, Finding)]
        if bad:
            raise _pass_error(planned, ran, f"reported {bad[0]!r}, which is not a "
                              "graphpass.Finding", None)
        provides = tuple(type(planned.instance).provides)
        analyses = list(outcome.analyses)
        stray = [a for a in analyses if type(a) not in provides]
        if stray:
            raise _pass_error(planned, ran, f"gave an analysis of type "
                              f"{type(stray[0]).__name__}, which its provides does not list",
                              None, hint=f"this is a bug in plugin {planned.plugin!r}: add the "
                                         "type to the pass's provides")
        # A transforming pass that says it changed the model needs no closer look.
        mutated = watch.changed(working, look_closely=planned.analysis or not outcome.changed)
        if planned.analysis and mutated:
            raise _pass_error(planned, ran, "changed the model, but it is an analysis pass "
                              "(analysis passes must only report)", None,
                              hint=f"this is a bug in plugin {planned.plugin!r}")
        # A pass's findings are its own, whatever name the code that built them gave.
        findings = [f.credited_to(planned.name) for f in outcome.findings]
        changed = not planned.analysis and (bool(outcome.changed) or mutated)
        if changed and not outcome.changed:
            findings.append(Finding(
                CHANGED_UNSAID_CODE, Severity.WARNING,
                f"pass {planned.name!r} returned changed=False, but it changed the model; "
                "the run counts it as changed", planned.name,
                hint=f"this is a bug in plugin {planned.plugin!r}: a pass that changes the "
                     "model returns PassResult(changed=True)"))
        if changed:
            findings.extend(_dangling(working, undefined_before, planned))
        record = PassRecord(
            planned.name, planned.plugin, seconds, changed=changed, findings=findings,
            stats=stats, iteration=iteration, analysis=planned.analysis)
        if changed:  # what described the model before may not any more
            context.analyses.invalidate(type(planned.instance).preserves)
        for analysis in analyses:
            context.analyses.put(analysis)
        return record


def _unplanned_options(options: Mapping[str, Any], plan: Sequence[PlannedPass],
                       passes: Iterable[PassSpec] | PassSpec, registry: Registry,
                       disabled: set[str], *, has_checkpoint: bool) -> list[Finding]:
    """A warning for each pass given options that is not in the plan.

    Planning ignores them: the pass is known, so the name is no typo.
    """
    planned = {p.name for p in plan}
    requested = [passes] if isinstance(passes, (str, Pipeline)) or not isinstance(
        passes, Iterable) else list(passes)
    presets = [item if isinstance(item, Pipeline) else registry.pipelines[item].item
               for item in requested
               if isinstance(item, Pipeline) or (isinstance(item, str)
                                                  and item in registry.pipelines)]
    warnings = []
    for name in options:
        if name in planned:
            continue
        why = ""
        if name in disabled:
            why = " (it is disabled)"
        elif not has_checkpoint and any(
                isinstance(preset, Pipeline) and name in preset.pass_names for preset in presets):
            why = " (the preset plans it only with a checkpoint: --checkpoint)"
        warnings.append(Finding(
            UNPLANNED_OPTIONS_CODE, Severity.WARNING,
            f"options given for pass {name!r}, which is not planned{why}; they are ignored",
            hint=f"plan {name!r} (-p {name}), or leave its options out"))
    return warnings


def _undefined_names(model: Model) -> set[tuple[str, str]]:
    """What the main graph and the function bodies use but nothing defines.

    Returns:
        ``(function, name)`` pairs; the function is ``""`` for the main graph.
    """
    names = {("", name) for name in model.graph.free_names}
    for function in model.functions.values():
        names.update((function.qualified_name, name) for name in function.graph.free_names)
    return names


def _dangling(model: Model, before: set[tuple[str, str]],
              planned: PlannedPass) -> list[Finding]:
    """An error for each name a pass left undefined (the model can no longer be saved)."""
    bodies = {f.qualified_name: f.graph for f in model.functions.values()}
    findings = []
    for owner, value in sorted(_undefined_names(model) - before):
        graph = bodies[owner] if owner else model.graph
        readers = [use.node for use in graph.uses(value) if use.node is not None]
        described = ", ".join(f"node {describe_node(node)}" for node in readers[:3])
        where = f" in function {owner}" if owner else ""
        findings.append(Finding(
            DANGLING_CODE, Severity.ERROR,
            f"pass {planned.name!r} left {described or 'a graph output'}{where} reading "
            f"{value!r}, which nothing defines any more", planned.name,
            node=(readers[0].name or readers[0].op_type) if readers else None,
            function=owner or None, value=value,
            hint=f"this is a bug in pass {planned.name!r} (plugin {planned.plugin!r}): it "
                 "removed what other nodes read, and such a model cannot be saved"))
    return findings


def _credit(findings: Sequence[Finding], planned: PlannedPass, records: Sequence[PassRecord],
            run_level: list[Finding]) -> bool:
    """File an instrument's findings about ``planned`` where reports count them.

    A finding with no pass is the pass's that just ran; one naming an earlier pass of
    the run (``--verify`` naming the first pass at fault) goes to that pass's latest
    record; one naming no planned pass (the instrument's own, such as "verified") is a
    finding of the run, counted by no pass. So the pass table and the findings list
    credit every finding to the same pass.

    Returns:
        Whether any of them is an error.
    """
    for reported in findings:
        finding = reported.with_pass(planned.name)
        target = next((r for r in reversed(records) if r.name == finding.pass_name), None)
        if target is not None:
            target.findings.append(finding)
        else:
            run_level.append(finding)
    return any(f.severity is Severity.ERROR for f in findings)


class _ChangeWatch:
    """Tells whether a pass changed the model.

    The IR's version counter moves with every change made through its methods; the
    fingerprint also covers plain attributes set directly (a node's name, doc strings,
    metadata), but walks every node. So a fingerprint is taken only when the version
    cannot tell, and one taken after a pass that left the version where it was serves
    as the one before the next pass (instruments, which run in between, must not
    change the model).
    """

    def __init__(self) -> None:
        self._version = -1
        self._fingerprint: int | None = None

    def before(self, model: Model) -> None:
        """Note the model as it is before a pass."""
        if self._fingerprint is None or model.version != self._version:
            self._version = model.version
            self._fingerprint = model.fingerprint()

    def changed(self, model: Model, *, look_closely: bool) -> bool:
        """Whether the model changed since :meth:`before`.

        Args:
            model: The model.
            look_closely: Compare fingerprints when the version did not move; without
                it, such a change goes unnoticed (and is not mistaken for the state
                before the next pass).
        """
        if model.version != self._version:
            self._fingerprint = None
            return True
        if not look_closely:
            self._fingerprint = None
            return False
        fingerprint = model.fingerprint()
        if fingerprint == self._fingerprint:
            return False
        self._fingerprint = fingerprint
        return True


def _pass_error(planned: PlannedPass, ran: Sequence[str], message: str,
                cause: BaseException | None, *, hint: str | None = None,
                where: str | None = None) -> PassError:
    error = PassError(message)
    _describe_failure(error, planned, ran, message, where, hint)
    error.__cause__ = cause
    return error


def _describe_failure(error: PassError, planned: PlannedPass, ran: Sequence[str], message: str,
                      where: str | None, hint: str | None) -> None:
    """Make ``error`` name the pass, its plugin and the passes that ran before it."""
    ran_before = tuple(dict.fromkeys(ran))
    before = ", ".join(ran_before) if ran_before else "none (it was the first)"
    text = f"pass {planned.name!r} (plugin {planned.plugin!r}) failed: {message}"
    if where:
        text += f" [{where}]"
    GraphpassError.__init__(error, f"{text}\n  passes run before it: {before}", hint=hint)
    error.pass_name = planned.name
    error.plugin = planned.plugin
    error.ran_before = ran_before
