"""Pipeline presets: a named list of passes with their options.

A :class:`Pipeline` is what a plugin returns from ``graphpass_pipelines`` and what a
``[presets.<name>]`` table in a pipeline file defines. Asking for its name (``-p
train-ready``) plans its passes as if each had been named::

    from graphpass import Pipeline, PipelineStep

    TRAIN_READY = Pipeline(
        name="train-ready",
        description="Make an exported model ready for ONNX Runtime training.",
        passes=[
            "inline-functions",
            PipelineStep("reconcile-initializers", when="checkpoint"),
            "detect-missing-buffers",
            "lint-gradients",
        ],
        options={"lint-gradients": {"frozen": ["embeddings.*"]}},
    )

A step with ``when="checkpoint"`` is planned only when a checkpoint is given
(``--checkpoint`` on the command line, ``checkpoints`` in a pipeline file, or
``PassManager(checkpoints=...)``).

A preset also carries what its passes share with passes planned beside it:
``options`` for a pass that is not one of its steps apply to that pass when it is planned
anyway (under the options the user gives), and ``share`` copies an option of one pass to
another unless the user gave that one::

    TRAINING_GRAPH = Pipeline(
        name="training-graph",
        passes=["build-training-graph"],
        options={"lint-gradients": {"rules": "graphpass"}},
        share=[("lint-gradients.frozen", "build-training-graph.frozen")],
    )
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

__all__ = ["Pipeline", "PipelineStep", "StepCondition", "split_option_path"]

StepCondition = Literal["always", "checkpoint"]
"""When a pipeline step is planned: always, or only when a checkpoint is given."""

_CONDITIONS: tuple[str, ...] = get_args(StepCondition)


@dataclass(frozen=True)
class PipelineStep:
    """One pass of a pipeline.

    Attributes:
        pass_name: The pass to run.
        options: Options for that pass (merged under the pipeline's ``options`` and
            any options the user gives, which win).
        when: ``"always"``, or ``"checkpoint"`` to plan the step only when a
            checkpoint is given.
    """

    pass_name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    when: StepCondition = "always"

    def __post_init__(self) -> None:
        if not isinstance(self.pass_name, str) or not self.pass_name:
            raise TypeError(f"a pipeline step needs a pass name, got {self.pass_name!r}")
        if self.when not in _CONDITIONS:
            raise ValueError(f"step {self.pass_name!r}: 'when' must be one of "
                             f"{', '.join(map(repr, _CONDITIONS))}, got {self.when!r}")
        if not isinstance(self.options, Mapping):
            raise TypeError(f"step {self.pass_name!r}: options must be a mapping")

    def applies(self, *, has_checkpoint: bool) -> bool:
        """Whether this step is planned (given whether a checkpoint was given)."""
        return self.when == "always" or has_checkpoint


@dataclass(frozen=True)
class Pipeline:
    """A named preset: passes in order, with options.

    Attributes:
        name: The name users ask for (``-p NAME``, ``preset = "NAME"``).
        description: One line saying what the pipeline is for.
        passes: The steps, as pass names or :class:`PipelineStep` objects.
        options: Options by pass name, applied to that pass wherever it runs (for a pass
            that is not a step: when something else plans it, under the user's options).
        share: ``("PASS.OPTION", "OTHER.OPTION")`` pairs: when both passes are planned
            and the first has the option (from anyone), the second takes its value,
            unless it was given one.
    """

    name: str
    description: str = ""
    passes: tuple[PipelineStep, ...] = ()
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    share: tuple[tuple[str, str], ...] = ()

    def __init__(
        self,
        name: str,
        description: str = "",
        passes: Iterable[str | PipelineStep] = (),
        options: Mapping[str, Mapping[str, Any]] | None = None,
        share: Iterable[tuple[str, str]] = (),
    ):
        """Create a pipeline.

        Args:
            name: The pipeline name.
            description: One line saying what it is for.
            passes: Pass names or :class:`PipelineStep` objects, in order.
            options: Options by pass name.
            share: ``("PASS.OPTION", "OTHER.OPTION")`` pairs (see the class).

        Raises:
            TypeError: A step is neither a name nor a :class:`PipelineStep`.
            ValueError: A ``share`` entry is not a pair of ``PASS.OPTION`` names.
        """
        steps: list[PipelineStep] = []
        if isinstance(passes, str):
            raise TypeError(f"pipeline {name!r}: passes must be a list of pass names, "
                            "not one string")
        for step in passes:
            if isinstance(step, str):
                steps.append(PipelineStep(step))
            elif isinstance(step, PipelineStep):
                steps.append(step)
            else:
                raise TypeError(f"pipeline {name!r}: a step must be a pass name or a "
                                f"PipelineStep, got {step!r}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "passes", tuple(steps))
        object.__setattr__(self, "options", {k: dict(v) for k, v in (options or {}).items()})
        pairs = tuple(tuple(pair) for pair in share)
        for pair in pairs:
            if len(pair) != 2 or not all(_option_path(key) for key in pair):
                raise ValueError(f"pipeline {name!r}: share takes (\"PASS.OPTION\", "
                                 f"\"PASS.OPTION\") pairs, got {pair!r}")
        object.__setattr__(self, "share", pairs)

    def steps(self, *, has_checkpoint: bool) -> list[tuple[str, dict[str, Any]]]:
        """The passes this pipeline plans, with their options.

        Args:
            has_checkpoint: Whether a checkpoint was given (decides conditional steps).

        Returns:
            ``(pass name, options)`` pairs, in order.
        """
        planned = []
        for step in self.passes:
            if step.applies(has_checkpoint=has_checkpoint):
                options = {**self.options.get(step.pass_name, {}), **step.options}
                planned.append((step.pass_name, options))
        return planned

    @property
    def pass_names(self) -> tuple[str, ...]:
        """Every pass the pipeline names (conditional ones too)."""
        return tuple(step.pass_name for step in self.passes)


def split_option_path(key: str) -> tuple[str, str]:
    """``"lint-gradients.frozen"`` as ``("lint-gradients", "frozen")``."""
    pass_name, _, option = key.rpartition(".")
    return pass_name, option


def _option_path(key: object) -> bool:
    return isinstance(key, str) and all(split_option_path(key))
