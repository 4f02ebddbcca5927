"""The pass framework: passes, planning, running, instruments, the registry, plugins.

* ``_pass_base``: what a pass declares, receives and returns;
* ``_onnx_ir_pass``: passes that work on ``onnx_ir`` models, and
  onnxscript pattern rewrites as passes;
* ``_pipeline``: named pipeline presets;
* ``_planning``: from the passes asked for to the order they run;
* ``_manager``: :class:`PassManager`, which plans and runs them;
* ``_runspec``: :class:`RunSpec`, one frozen run specification
  (pipeline file, presets, options, overrides) that gives the registry and the manager;
* ``_results``: what a run gives back;
* ``_instruments``: code that runs around every pass;
* ``_verify``: semantic verification (``--verify``);
* ``_config``: pipeline files (TOML);
* ``_registry``: passes, loaders, rules and pipelines by name;
* ``_hookspecs``: the hooks a plugin implements;
* ``_plugin_loading``: finding plugins and filling a registry.
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.framework._hookspecs import PROJECT_NAME, hookimpl, hookspec
from graphpass.framework._instruments import Instrument
from graphpass.framework._manager import PassManager
from graphpass.framework._pass_base import (
    AnalysisPass,
    NoOptions,
    Pass,
    PassContext,
    PassResult,
)
from graphpass.framework._pipeline import Pipeline, PipelineStep
from graphpass.framework._plugin_loading import build_registry, default_registry
from graphpass.framework._registry import PluginInfo, Registry
from graphpass.framework._results import PassRecord, RunResult
from graphpass.framework._runspec import RunSpec

if TYPE_CHECKING:
    from graphpass.framework._config import (
        PipelineFile,
        load_pipeline_file,
        parse_value,
    )
    from graphpass.framework._onnx_ir_pass import (
        OnnxIRPass,
        RewritePass,
        RewriteRules,
    )
    from graphpass.framework._option_types import (
        toml_text,
    )
    from graphpass.framework._pass_base import (
        describe_type,
        option_fields,
    )
    from graphpass.framework._planning import (
        PassSpec,
        PlannedPass,
        unknown_order_names,
    )
    from graphpass.framework._plugin_loading import (
        BUILTIN,
        reset_default_registry,
    )
    from graphpass.framework._registry import (
        KIND_WORDS,
    )
    from graphpass.framework._reproducer import default_folder
    from graphpass.framework._results import (
        RunSummary,
    )
    from graphpass.framework._verify import (
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
    "default_folder": "graphpass.framework._reproducer",
    "BUILTIN": "graphpass.framework._plugin_loading",
    "KIND_WORDS": "graphpass.framework._registry",
    "OnnxIRPass": "graphpass.framework._onnx_ir_pass",
    "PassSpec": "graphpass.framework._planning",
    "PipelineFile": "graphpass.framework._config",
    "PlannedPass": "graphpass.framework._planning",
    "RewritePass": "graphpass.framework._onnx_ir_pass",
    "RewriteRules": "graphpass.framework._onnx_ir_pass",
    "RunSummary": "graphpass.framework._results",
    "VERIFY_MISMATCH_CODE": "graphpass.framework._verify",
    "VERIFY_SKIPPED_CODE": "graphpass.framework._verify",
    "VerifyOptions": "graphpass.framework._verify",
    "VerifySemantics": "graphpass.framework._verify",
    "compare_outputs": "graphpass.framework._verify",
    "describe_type": "graphpass.framework._pass_base",
    "load_pipeline_file": "graphpass.framework._config",
    "make_inputs": "graphpass.framework._verify",
    "option_fields": "graphpass.framework._pass_base",
    "parse_value": "graphpass.framework._config",
    "reset_default_registry": "graphpass.framework._plugin_loading",
    "run_model": "graphpass.framework._verify",
    "toml_text": "graphpass.framework._option_types",
    "unknown_order_names": "graphpass.framework._planning",
})
