"""Running a plugin's passes in tests: a registry of just that plugin, and a runner.

::

    from graphpass.testing import PassRunner, models, plugin_registry

    runner = PassRunner(plugin_registry("example"))
    result = runner.run("example-op-counts", models.chain("Relu"))
    runner.assert_preserves_semantics("prefix-node-names", models.mlp())
"""

from __future__ import annotations

import importlib.metadata
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphpass.errors import PluginError
from graphpass.files import load
from graphpass.findings import Finding, Severity
from graphpass.framework import (
    BUILTIN,
    PROJECT_NAME,
    VERIFY_MISMATCH_CODE,
    VERIFY_SKIPPED_CODE,
    Pass,
    PassSpec,
    Pipeline,
    Registry,
    RunResult,
    RunSpec,
    VerifyOptions,
    VerifySemantics,
)
from graphpass.ir import Model

__all__ = ["PassRunner", "plugin_registry"]


def plugin_registry(name: str | None = None, *, builtin: bool = True) -> Registry:
    """A registry of the plugin under test, and nothing else installed.

    Other installed plugins are switched off, so that they can neither clash with the
    plugin under test nor change what a test sees; the plugin is loaded strictly, so a
    plugin that fails to load, or gives something graphpass cannot use, fails the test
    with its own error (``PluginError``, whose ``__cause__`` is the plugin's exception).

    Args:
        name: The plugin's entry-point name in the ``graphpass`` group (``None``: only
            graphpass's built-in plugin).
        builtin: Keep graphpass's own passes (the ones a plugin's passes ``require``).

    Raises:
        PluginError: No plugin has that name, or it fails to load.
    """
    installed = sorted({entry.name for entry in
                        importlib.metadata.entry_points(group=PROJECT_NAME)})
    if name is not None and name not in installed:
        raise PluginError(f"no plugin called {name!r} is installed",
                          hint="installed plugins: " + ", ".join(installed)
                          + " (the name is the entry point's, in the 'graphpass' group)")
    keep = {name} | ({BUILTIN} if builtin else set())
    try:
        registry = RunSpec(disable_plugins=tuple(n for n in installed if n not in keep),
                           strict_plugins=True).registry()
    except PluginError as error:
        # The command line's advice (--disable-plugin, --strict-plugins) is no help in a test.
        raise PluginError(error.message, where=error.where,
                          hint=_test_hint(name)) from error.__cause__
    if name is not None:
        info = registry.plugin(name)
        if info is None or info.status != "active":
            raise PluginError(f"plugin {name!r} is not active here "
                              f"({info.status if info else 'not found'})",
                              hint="is it switched off by GRAPHPASS_DISABLE_PLUGINS?")
    return registry


class PassRunner:
    """Runs passes on models the way the pass manager does, for tests.

    Attributes:
        registry: Where pass names are looked up.
    """

    def __init__(self, registry: Registry | None = None):
        """Use ``registry`` (default: graphpass's built-in plugin only)."""
        self.registry = registry if registry is not None else plugin_registry()

    def run(self, passes: Iterable[PassSpec] | PassSpec, model: Model | onnx.ModelProto | str
            | Path, *, options: Mapping[str, Any] | None = None,
            **settings: Any) -> RunResult:
        """Run ``passes`` on a copy of ``model``, checking the model after each one.

        The ONNX checker runs after every transforming pass (``verify_each``): a pass
        that leaves an invalid model gives an error finding (``GP010``).

        Args:
            passes: Pass names, classes or instances (what ``PassManager`` takes).
            model: A model, a ``ModelProto`` or a file.
            options: Options by pass name.
            **settings: Further :class:`~graphpass.RunSpec` fields, which are named as
                ``PassManager``'s arguments (``stop_on_error=False`` ...).
        """
        settings.setdefault("verify_each", True)
        one = isinstance(passes, (str, type, Pass, Pipeline))
        spec = RunSpec((passes,) if one else tuple(passes),  # type: ignore[arg-type]
                       options or {}, **settings)
        return spec.manager(self.registry).run(_model(model))

    def assert_preserves_semantics(
            self, passes: Iterable[PassSpec] | PassSpec,
            model: Model | onnx.ModelProto | str | Path, *,
            options: Mapping[str, Any] | None = None,
            inputs: Mapping[str, np.ndarray[Any, Any]] | None = None,
            dims: Mapping[str, int] | None = None, rtol: float = 1e-4, atol: float = 1e-5,
            backend: str = "auto") -> RunResult:
        """Run ``passes`` and check that the model computes what it computed before.

        The model runs before the passes and after every transforming pass on the same
        inputs (onnxruntime, else ONNX's reference evaluator), as ``graphpass run
        --verify --verify-per-pass`` does.

        Args:
            passes: What to run.
            model: The model.
            options: Options by pass name.
            inputs: The inputs to feed by name (default: generated from the input types).
            dims: Sizes of symbolic dimensions (default 2).
            rtol: Relative tolerance.
            atol: Absolute tolerance.
            backend: ``auto``, ``onnxruntime`` or ``reference``.

        Returns:
            The run's result, for further checks.

        Raises:
            AssertionError: A pass changed the outputs (naming it and the outputs that
                differ), nothing could be verified, or a pass reported an error.
        """
        with tempfile.TemporaryDirectory(prefix="graphpass-testing-") as folder:
            feeds = None
            if inputs is not None:
                feeds = Path(folder) / "inputs.npz"
                arrays: dict[str, Any] = {name: np.asarray(a) for name, a in inputs.items()}
                np.savez(feeds, **arrays)
            verify = VerifyOptions(inputs=feeds, dims=dict(dims or {}), rtol=rtol, atol=atol,
                                   each=True, backend=backend)
            result = self.run(passes, model, options=options,
                              instruments=[VerifySemantics(verify)])
        problems = [f for f in result.findings
                    if f.severity is Severity.ERROR or f.code == VERIFY_SKIPPED_CODE]
        if problems:
            raise AssertionError(_describe(problems))
        return result


def _test_hint(name: str | None) -> str:
    what = f"plugin {name!r}" if name is not None else "the plugin"
    return (f"fix {what}: graphpass loads the plugin under test strictly, so whatever it "
            "gives that graphpass cannot use fails the test (the plugin's own exception, "
            "if it raised one, is this error's __cause__)")


def _model(model: Model | onnx.ModelProto | str | Path) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, onnx.ModelProto):
        return Model.from_proto(model)
    return load(model)


def _describe(findings: Sequence[Finding]) -> str:
    first = findings[0]
    lines = [first.message if first.code == VERIFY_MISMATCH_CODE else
             f"{first.code} ({first.pass_name or 'graphpass'}): {first.message}"]
    for finding in findings[1:]:
        lines.append(f"{finding.code} ({finding.pass_name or 'graphpass'}): {finding.message}")
    if first.hint:
        lines.append(f"hint: {first.hint}")
    return "\n".join(lines)
