"""One frozen run specification: what to run, with which options, plugins and instruments.

A :class:`RunSpec` is the one place where a run's settings meet: a pipeline file, the
presets it names, options, and overrides (the command line's flags, a batch task's
settings, a caller's own). It gives the registry the run needs (:meth:`RunSpec.registry`)
and the planned :class:`~graphpass.PassManager` (:meth:`RunSpec.manager`), and checks
the run's inputs (checkpoints that exist, the pipeline file's names and options) in one
place (:meth:`RunSpec.check`)::

    import graphpass

    spec = graphpass.RunSpec.from_pipeline("pipeline.toml")
    spec = spec.with_overrides(options={"lint-gradients": {"frozen": ["embeddings.*"]}})
    result = spec.manager().run(graphpass.load("model.onnx"))

Nothing above the framework builds a ``PassManager`` or a registry itself: the command
line, the batch layer, ``graphpass.torch.Module`` and ``graphpass.testing`` all go
through a ``RunSpec`` (``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphpass.errors import ConfigError, PipelineError
from graphpass.framework._config import PipelineFile, load_pipeline_file
from graphpass.framework._instruments import Instrument
from graphpass.framework._manager import PassManager
from graphpass.framework._pass_base import resolve_path
from graphpass.framework._pipeline import Pipeline
from graphpass.framework._planning import PassSpec
from graphpass.framework._plugin_loading import default_registry
from graphpass.framework._registry import Registry
from graphpass.framework._verify import VerifyOptions, VerifySemantics

__all__ = ["RunSpec"]

_APPENDED = ("add_passes", "checkpoints", "disable", "disable_plugins", "dump_after",
             "instruments")
"""Overrides that add to what the spec has (the rest replace it)."""


@dataclass(frozen=True)
class RunSpec:
    """What to run: passes and presets, options, plugins, instruments (frozen).

    Attributes:
        passes: Pass and preset names (or pass classes, instances, pipelines), in order.
        options: Options by pass name (a table of option names to values).
        checkpoints: Checkpoint files (relative paths: relative to ``base_dir``).
        base_dir: What relative paths are resolved against (default: the current folder;
            a pipeline file's folder for a spec read from one).
        disable: Passes to leave out of the plan.
        disable_plugins: Plugins to switch off.
        strict_plugins: Make a plugin that fails to load an error.
        presets: Presets defined outside the registry (a pipeline file's), by name.
        verify: Semantic verification before and after (``None``: off).
        verify_each: Run the ONNX checker after every transforming pass.
        dump_after: Save the model after these passes.
        dump_dir: Where ``dump_after`` writes (default: the current folder).
        fixed_point: Repeat the plan until nothing changes.
        max_iterations: The most rounds of a fixed-point run.
        stop_on_error: Stop after a pass that reports an error finding.
        analysis_only: Refuse a plan that asks for a transforming pass (``lint``).
        instruments: Further instruments (progress bars ...), run after the built-in ones.
        reproducer: Where a pass that crashes leaves a reproducer
            (:mod:`graphpass.framework._reproducer`; ``None``: none is written).
        source: The pipeline file this spec was read from, if any (for error locations).
    """

    passes: tuple[PassSpec, ...] = ()
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    checkpoints: tuple[Path, ...] = ()
    base_dir: Path | None = None
    disable: tuple[str, ...] = ()
    disable_plugins: tuple[str, ...] = ()
    strict_plugins: bool = False
    presets: Mapping[str, Pipeline] = field(default_factory=dict)
    verify: VerifyOptions | None = None
    verify_each: bool = False
    dump_after: tuple[str, ...] = ()
    dump_dir: Path | None = None
    fixed_point: bool = False
    max_iterations: int = 10
    stop_on_error: bool = True
    analysis_only: bool = False
    instruments: tuple[Instrument, ...] = ()
    reproducer: Path | None = None
    source: PipelineFile | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        passes = self.passes
        if isinstance(passes, (str, Pipeline, type)) or not isinstance(passes, Iterable):
            passes = (passes,)  # one pass given on its own
        set_ = object.__setattr__
        set_(self, "passes", tuple(passes))
        set_(self, "options", {name: dict(values) if isinstance(values, Mapping) else values
                               for name, values in (self.options or {}).items()})
        set_(self, "checkpoints", tuple(Path(c) for c in self.checkpoints))
        if self.base_dir is not None:
            set_(self, "base_dir", Path(self.base_dir))
        if self.dump_dir is not None:
            set_(self, "dump_dir", Path(self.dump_dir))
        for name in ("disable", "disable_plugins", "dump_after", "instruments"):
            value = getattr(self, name)
            set_(self, name, (value,) if isinstance(value, str) else tuple(value))
        set_(self, "presets", dict(self.presets))
        if self.max_iterations < 1:
            raise PipelineError(f"max-iterations must be at least 1, got {self.max_iterations}",
                                hint="a fixed-point run makes 1 round or more "
                                     "(--max-iterations N, or max-iterations in [instrument])")

    # ------------------------------------------------------------------ building
    @classmethod
    def from_pipeline(cls, path: str | Path | PipelineFile) -> RunSpec:
        """The spec a pipeline file describes (its passes, options, plugins, instruments).

        Args:
            path: The ``.toml`` file, or one already read.

        Raises:
            ConfigError: The file cannot be read or has a bad shape (names and options
                are checked against a registry by :meth:`check` and :meth:`manager`).
        """
        config = path if isinstance(path, PipelineFile) else load_pipeline_file(path)
        settings = config.instruments
        return cls(
            passes=tuple(config.passes), options=config.options,
            checkpoints=config.checkpoints, base_dir=config.base_dir,
            disable=settings.disable, disable_plugins=config.disable_plugins,
            strict_plugins=config.strict_plugins, presets=config.presets,
            verify=settings.verify, verify_each=settings.verify_each,
            dump_after=settings.dump_after, dump_dir=settings.dump_dir,
            fixed_point=settings.fixed_point, max_iterations=settings.max_iterations,
            source=config)

    def with_overrides(self, *, passes: Iterable[PassSpec] | None = None,
                       options: Mapping[str, Mapping[str, Any]] | None = None,
                       **changes: Any) -> RunSpec:
        """A new spec with these settings over this one's (this one is not changed).

        Args:
            passes: Passes and presets that replace this spec's (``None`` or empty: keep
                them).
            options: Options by pass name, merged over this spec's option by option.
            **changes: Other fields. ``add_passes`` (appended to the passes),
                ``checkpoints``, ``disable``, ``disable_plugins``, ``dump_after`` and
                ``instruments`` add to this spec's; every other field is replaced
                unless its value is ``None``.

        Raises:
            TypeError: A field that a spec does not have.
        """
        known = {f.name for f in dataclasses.fields(self)} | {"add_passes"}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"RunSpec has no field {', '.join(map(repr, unknown))}")
        new: dict[str, Any] = {}
        if passes:
            new["passes"] = tuple(passes)
        merged = {name: dict(values) for name, values in self.options.items()}
        for name, values in (options or {}).items():
            merged.setdefault(name, {}).update(values)
        new["options"] = merged
        for name, value in changes.items():
            if value is None:
                continue
            if name in _APPENDED:
                added = (value,) if isinstance(value, str) else tuple(value)
                target = "passes" if name == "add_passes" else name
                new[target] = (*new.get(target, getattr(self, target)), *added)
            else:
                new[name] = value
        return dataclasses.replace(self, **new)

    # ------------------------------------------------------------------ using
    def registry(self) -> Registry:
        """The registry of this run: the installed plugins less those switched off.

        Raises:
            PluginError: With ``strict_plugins``, a plugin that fails to load.
        """
        return default_registry(disable=self.disable_plugins, strict=self.strict_plugins)

    def resolved_checkpoints(self) -> tuple[Path, ...]:
        """The checkpoints, with relative paths resolved against :attr:`base_dir`."""
        base = self.base_dir or Path.cwd()
        return tuple(resolve_path(c, base) for c in self.checkpoints)

    def check(self, registry: Registry | None = None) -> None:
        """Check the run's inputs before any model is read: the one place that does.

        Every checkpoint and the verification's inputs file must exist; a pipeline
        file's pass names, preset names and options must be known to ``registry``.

        Args:
            registry: Where names are looked up (default: :meth:`registry`).

        Raises:
            ConfigError: A checkpoint or inputs file that does not exist (located at the
                pipeline file's line when the file names it), an unknown name or a bad
                option in the
                pipeline file. Its ``exit_code`` is :attr:`graphpass.ExitCode.USAGE`.
        """
        from_file = set(self.source.checkpoints) if self.source is not None else set()
        for given, path in zip(self.checkpoints, self.resolved_checkpoints(), strict=True):
            if path.exists():
                continue
            if self.source is not None and given in from_file:
                raise self.source.error(("pipeline", "checkpoints"),
                                        f"no such checkpoint: {path}",
                                        "paths are relative to the pipeline file",
                                        value=str(given))
            raise ConfigError(f"checkpoint {given}: no such file or folder",
                              hint="give a checkpoint file or folder that exists"
                              + ("" if given.is_absolute()
                                 else f" (relative paths are read from {self.base_dir or '.'})"))
        self._check_verify_inputs()
        if self.source is not None:
            self.source.check(registry if registry is not None else self.registry())

    def _check_verify_inputs(self) -> None:
        inputs = self.verify.inputs if self.verify is not None else None
        if inputs is None or inputs.exists():
            return
        source = self.source
        if source is not None and source.instruments.verify is not None \
                and source.instruments.verify.inputs == inputs:
            raise source.error(("instrument", "verify", "inputs"), f"no such file: {inputs}",
                               "paths are relative to the pipeline file")
        raise ConfigError(f"verify inputs {inputs} (--verify-inputs): no such file",
                          hint="give an .npz file that exists (one array per model input, "
                               "by input name)")

    def manager(self, registry: Registry | None = None) -> PassManager:
        """Check the inputs and plan the passes (before any model is read).

        Args:
            registry: Where names are looked up (default: :meth:`registry`; give the one
                you already have to spare loading the plugins again).

        Raises:
            ConfigError: See :meth:`check`.
            PipelineError: Nothing to run, an unknown pass, a cycle, a bad option; with
                ``analysis_only``, a transforming pass asked for.
        """
        registry = registry if registry is not None else self.registry()
        self.check(registry)
        if not self.passes:
            raise PipelineError("nothing to run: no passes were named",
                                hint="name passes or presets (-p PASS,... on the command "
                                     "line), or give a pipeline file (-c) that lists them")
        instruments = list(self.instruments)
        if self.verify is not None:
            instruments.append(VerifySemantics(self.verify))
        manager = PassManager(
            [self.presets.get(p, p) if isinstance(p, str) else p for p in self.passes],
            self.options, registry=registry, disable=self.disable,
            checkpoints=self.checkpoints, base_dir=self.base_dir, instruments=instruments,
            verify_each=self.verify_each, dump_after=self.dump_after,
            dump_dir=self.dump_dir if self.dump_dir is not None else Path.cwd(),
            fixed_point=self.fixed_point, max_iterations=self.max_iterations,
            stop_on_error=self.stop_on_error, reproducer=self.reproducer)
        if self.analysis_only:
            transforming = [p.name for p in manager.plan if p.requested and not p.analysis]
            if transforming:
                raise PipelineError(
                    f"lint runs analysis passes only, and {', '.join(map(repr, transforming))}"
                    f" change{'s' * (len(transforming) == 1)} the model",
                    hint="use `graphpass run` for transforming passes")
        return manager
