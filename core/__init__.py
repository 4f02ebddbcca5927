"""graphpass: a pluggable graph-rewrite pass framework for ONNX models.

```python
import graphpass

model = graphpass.load("model.onnx")
result = graphpass.PassManager(["inline-functions", "lint-gradients"]).run(model)
graphpass.save(result.model, "out.onnx")
```
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.errors import (
    CheckpointError,
    ConfigError,
    CycleError,
    ExitCode,
    ExternalDataError,
    GraphpassError,
    InvalidModelError,
    ModelLoadError,
    ModelSaveError,
    PassError,
    PipelineError,
    PluginError,
)
from graphpass.findings import Finding, Severity

if TYPE_CHECKING:
    from graphpass.checkpoint import Checkpoint, CheckpointLoader, open_checkpoint
    from graphpass.files import load, save, validate
    from graphpass.framework import (
        AnalysisPass,
        Instrument,
        OnnxIRPass,
        Pass,
        PassContext,
        PassManager,
        PassRecord,
        PassResult,
        Pipeline,
        PipelineStep,
        RewriteRules,
        RunResult,
        RunSpec,
    )
    from graphpass.ir import (
        Attribute,
        Function,
        FunctionId,
        Graph,
        Model,
        Node,
        Tensor,
        Use,
        Value,
    )
    from graphpass.training.rules import GradientRules

_LAZY: dict[str, str] = {
    "Checkpoint": "graphpass.checkpoint",
    "CheckpointLoader": "graphpass.checkpoint",
    "open_checkpoint": "graphpass.checkpoint",
    "load": "graphpass.files",
    "save": "graphpass.files",
    "validate": "graphpass.files._validate",
    "Instrument": "graphpass.framework._instruments",
    "PassManager": "graphpass.framework._manager",
    "OnnxIRPass": "graphpass.framework._onnx_ir_pass",
    "RewriteRules": "graphpass.framework._onnx_ir_pass",
    "AnalysisPass": "graphpass.framework._pass_base",
    "Pass": "graphpass.framework._pass_base",
    "PassContext": "graphpass.framework._pass_base",
    "PassResult": "graphpass.framework._pass_base",
    "Pipeline": "graphpass.framework._pipeline",
    "PipelineStep": "graphpass.framework._pipeline",
    "PassRecord": "graphpass.framework._results",
    "RunResult": "graphpass.framework._results",
    "RunSpec": "graphpass.framework._runspec",
    "Attribute": "graphpass.ir",
    "Function": "graphpass.ir",
    "FunctionId": "graphpass.ir",
    "Graph": "graphpass.ir",
    "Model": "graphpass.ir",
    "Node": "graphpass.ir",
    "Tensor": "graphpass.ir",
    "Use": "graphpass.ir",
    "Value": "graphpass.ir",
    "GradientRules": "graphpass.training.rules._model",
}
"""The public names that need onnx (and numpy) to import, and the modules that give them.

They are imported on first use (:func:`graphpass._lazy.lazy_exports`), so that ``import
graphpass`` alone, and the command line's ``--version`` and ``--help``, import neither
onnx nor numpy."""

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = [
    "AnalysisPass",
    "Attribute",
    "Checkpoint",
    "CheckpointError",
    "CheckpointLoader",
    "ConfigError",
    "CycleError",
    "ExitCode",
    "ExternalDataError",
    "Finding",
    "Function",
    "FunctionId",
    "GradientRules",
    "Graph",
    "GraphpassError",
    "Instrument",
    "InvalidModelError",
    "Model",
    "ModelLoadError",
    "ModelSaveError",
    "Node",
    "OnnxIRPass",
    "Pass",
    "PassContext",
    "PassError",
    "PassManager",
    "PassRecord",
    "PassResult",
    "Pipeline",
    "PipelineError",
    "PipelineStep",
    "PluginError",
    "RewriteRules",
    "RunResult",
    "RunSpec",
    "Severity",
    "Tensor",
    "Use",
    "Value",
    "load",
    "open_checkpoint",
    "save",
    "validate",
]
