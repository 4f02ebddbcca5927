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

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
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

if TYPE_CHECKING:
    from graphpass.framework.config import (
        PipelineFile,
        load_pipeline_file,
        parse_value,
    )
    from graphpass.framework.onnx_ir_pass import (
        OnnxIRPass,
        RewritePass,
        RewriteRules,
    )
    from graphpass.framework.option_types import (
        toml_text,
    )
    from graphpass.framework.pass_base import (
        describe_type,
        option_fields,
    )
    from graphpass.framework.planning import (
        PassSpec,
        PlannedPass,
        unknown_order_names,
    )
    from graphpass.framework.plugin_loading import (
        BUILTIN,
        reset_default_registry,
    )
    from graphpass.framework.registry import (
        KIND_WORDS,
    )
    from graphpass.framework.reproducer import default_folder
    from graphpass.framework.results import (
        RunSummary,
    )
    from graphpass.framework.verify import (
        VERIFY_MISMATCH_CODE,
        VERIFY_SKIPPED_CODE,
        VerifyOptions,
        VerifySemantics,
        compare_outputs,
        make_inputs,
        run_model,
    )

__all__ = [
    "BUILTIN",
    "KIND_WORDS",
    "PROJECT_NAME",
    "VERIFY_MISMATCH_CODE",
    "VERIFY_SKIPPED_CODE",
    "AnalysisPass",
    "Instrument",
    "NoOptions",
    "OnnxIRPass",
    "Pass",
    "PassContext",
    "PassManager",
    "PassRecord",
    "PassResult",
    "PassSpec",
    "Pipeline",
    "PipelineFile",
    "PipelineStep",
    "PlannedPass",
    "PluginInfo",
    "Registry",
    "RewritePass",
    "RewriteRules",
    "RunResult",
    "RunSpec",
    "RunSummary",
    "VerifyOptions",
    "VerifySemantics",
    "build_registry",
    "compare_outputs",
    "default_folder",
    "default_registry",
    "describe_type",
    "hookimpl",
    "hookspec",
    "load_pipeline_file",
    "make_inputs",
    "option_fields",
    "parse_value",
    "reset_default_registry",
    "run_model",
    "toml_text",
    "unknown_order_names",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "default_folder": "graphpass.framework.reproducer",
    "BUILTIN": "graphpass.framework.plugin_loading",
    "KIND_WORDS": "graphpass.framework.registry",
    "OnnxIRPass": "graphpass.framework.onnx_ir_pass",
    "PassSpec": "graphpass.framework.planning",
    "PipelineFile": "graphpass.framework.config",
    "PlannedPass": "graphpass.framework.planning",
    "RewritePass": "graphpass.framework.onnx_ir_pass",
    "RewriteRules": "graphpass.framework.onnx_ir_pass",
    "RunSummary": "graphpass.framework.results",
    "VERIFY_MISMATCH_CODE": "graphpass.framework.verify",
    "VERIFY_SKIPPED_CODE": "graphpass.framework.verify",
    "VerifyOptions": "graphpass.framework.verify",
    "VerifySemantics": "graphpass.framework.verify",
    "compare_outputs": "graphpass.framework.verify",
    "describe_type": "graphpass.framework.pass_base",
    "load_pipeline_file": "graphpass.framework.config",
    "make_inputs": "graphpass.framework.verify",
    "option_fields": "graphpass.framework.pass_base",
    "parse_value": "graphpass.framework.config",
    "reset_default_registry": "graphpass.framework.plugin_loading",
    "run_model": "graphpass.framework.verify",
    "toml_text": "graphpass.framework.option_types",
    "unknown_order_names": "graphpass.framework.planning",
})
