"""The pass framework: passes, planning, running, instruments, the registry, plugins.

* :mod:`~graphpass.framework.pass_base`: what a pass declares, receives and returns;
* :mod:`~graphpass.framework.onnx_ir_pass`: passes that work on ``onnx_ir`` models, and
  onnxscript pattern rewrites as passes;
* :mod:`~graphpass.framework.pipeline`: named pipeline presets;
* :mod:`~graphpass.framework.planning`: from the passes asked for to the order they run;
* :mod:`~graphpass.framework.manager`: :class:`PassManager`, which plans and runs them;
* :mod:`~graphpass.framework.runspec`: :class:`RunSpec`, one frozen run specification
  (pipeline file, presets, options, overrides) that gives the registry and the manager;
* :mod:`~graphpass.framework.results`: what a run gives back;
* :mod:`~graphpass.framework.instruments`: code that runs around every pass;
* :mod:`~graphpass.framework.verify`: semantic verification (``--verify``);
* :mod:`~graphpass.framework.config`: pipeline files (TOML);
* :mod:`~graphpass.framework.registry`: passes, loaders, rules and pipelines by name;
* :mod:`~graphpass.framework.hookspecs`: the hooks a plugin implements;
* :mod:`~graphpass.framework.plugin_loading`: finding plugins and filling a registry.
"""

from graphpass.framework.hookspecs import PROJECT_NAME, hookimpl, hookspec
from graphpass.framework.instruments import Instrument
from graphpass.framework.manager import PassManager
from graphpass.framework.pass_base import (
    AnalysisPass,
    NoOptions,
    Pass,
    PassContext,
    PassResult,
)
from graphpass.framework.pipeline import Pipeline, PipelineStep
from graphpass.framework.plugin_loading import build_registry, default_registry
from graphpass.framework.registry import PluginInfo, Registry
from graphpass.framework.results import PassRecord, RunResult
from graphpass.framework.runspec import RunSpec

__all__ = [
    "PROJECT_NAME",
    "AnalysisPass",
    "Instrument",
    "NoOptions",
    "Pass",
    "PassContext",
    "PassManager",
    "PassRecord",
    "PassResult",
    "Pipeline",
    "PipelineStep",
    "PluginInfo",
    "Registry",
    "RunResult",
    "RunSpec",
    "build_registry",
    "default_registry",
    "hookimpl",
    "hookspec",
]
