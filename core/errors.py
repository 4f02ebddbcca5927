"""The exceptions graphpass raises on purpose.

Every error that graphpass raises deliberately derives from :class:`GraphpassError`.
Each one carries three things a person needs: what was wrong, where (a file, a
node, a function, a pass), and what to do about it. The command line prints
``str(error)`` and exits with the error's :attr:`~GraphpassError.exit_code` (2); it never
shows a traceback for these.

:class:`ExitCode` is the one table of exit codes: the command line, the batch layer and
every error use it.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CheckpointError",
    "ConfigError",
    "CycleError",
    "ExitCode",
    "ExternalDataError",
    "GraphpassError",
    "InvalidModelError",
    "ModelLoadError",
    "ModelSaveError",
    "PassError",
    "PipelineError",
    "PluginError",
    "first_line",
]


class ExitCode(enum.IntEnum):
    """The exit codes of ``graphpass`` (and of a batch, model by model).

    Attributes:
        OK: All went well.
        FINDINGS: A pass reported an error finding (or training failed).
        USAGE: Bad input or usage: one readable message, no traceback.
        INTERRUPTED: Interrupted (Ctrl-C); nothing half-written is left.
    """

    OK = 0
    FINDINGS = 1
    USAGE = 2
    INTERRUPTED = 130


class GraphpassError(Exception):
    """Base class of every error graphpass raises on purpose.

    Attributes:
        message: What went wrong, in one sentence.
        where: Where it went wrong (a file, node, function or pass), if known.
        hint: What the user can do about it, if anything.
        exit_code: The command line's exit code for it (:attr:`ExitCode.USAGE`).
    """

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.message
        if self.where:
            text = f"{self.where}: {text}"
        if self.hint:
            text = f"{text}\n  hint: {self.hint}"
        return text


class ModelLoadError(GraphpassError):
    """A model file could not be read or parsed."""


class ModelSaveError(GraphpassError):
    """A model could not be written. The output path is left as it was."""


class InvalidModelError(GraphpassError):
    """A model parsed but breaks a rule of the ONNX IR that graphpass relies on."""


class CycleError(InvalidModelError):
    """A graph's nodes depend on each other in a cycle."""


class ExternalDataError(GraphpassError):
    """External tensor data is missing, too short, or points outside the model's folder."""


class PipelineError(GraphpassError):
    """A pipeline cannot be planned: unknown pass, bad option, dependency cycle."""


class PassError(GraphpassError):
    """A pass failed while running. The caller's model is left untouched.

    Attributes:
        pass_name: The pass that failed.
        plugin: The plugin that gave it.
        ran_before: The passes that ran before it in this run, in order.
        unexpected: Whether the pass raised an exception graphpass did not expect (a
            bug in it), rather than refusing the model on purpose.
        reproducer: The reproducer folder written for it, if any
            (``_reproducer``).
    """

    pass_name: str = ""
    plugin: str = ""
    ran_before: tuple[str, ...] = ()
    unexpected: bool = False
    reproducer: Path | None = None


class PluginError(GraphpassError):
    """A plugin failed to load or gave something graphpass cannot use."""


class ConfigError(GraphpassError):
    """A pipeline file is malformed; the message names the file, line and key."""


class CheckpointError(GraphpassError):
    """A checkpoint could not be read, or its tensors do not fit the model."""


def first_line(error: BaseException, limit: int | None = 300) -> str:
    """The first line of an error's message (its class name when the message is empty).

    For quoting an error from ``onnx``, protobuf or another library inside one of ours.

    Args:
        error: The error.
        limit: Cut the line after this many characters (``None``: keep it whole).
    """
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:limit]
