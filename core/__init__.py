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
    from graphpass.files import load, save
    from graphpass.files.validate import validate
    from graphpass.framework.instruments import Instrument
    from graphpass.framework.manager import PassManager
    from graphpass.framework.onnx_ir_pass import OnnxIRPass, RewriteRules
    from graphpass.framework.pass_base import AnalysisPass, Pass, PassContext, PassResult
    from graphpass.framework.pipeline import Pipeline, PipelineStep
    from graphpass.framework.results import PassRecord, RunResult
    from graphpass.framework.runspec import RunSpec
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
    from graphpass.training.rules.model import GradientRules

_LAZY: dict[str, str] = {
    "Checkpoint": "graphpass.checkpoint",
    "CheckpointLoader": "graphpass.checkpoint",
    "open_checkpoint": "graphpass.checkpoint",
    "load": "graphpass.files",
    "save": "graphpass.files",
    "validate": "graphpass.files.validate",
    "Instrument": "graphpass.framework.instruments",
    "PassManager": "graphpass.framework.manager",
    "OnnxIRPass": "graphpass.framework.onnx_ir_pass",
    "RewriteRules": "graphpass.framework.onnx_ir_pass",
    "AnalysisPass": "graphpass.framework.pass_base",
    "Pass": "graphpass.framework.pass_base",
    "PassContext": "graphpass.framework.pass_base",
    "PassResult": "graphpass.framework.pass_base",
    "Pipeline": "graphpass.framework.pipeline",
    "PipelineStep": "graphpass.framework.pipeline",
    "PassRecord": "graphpass.framework.results",
    "RunResult": "graphpass.framework.results",
    "RunSpec": "graphpass.framework.runspec",
    "Attribute": "graphpass.ir",
    "Function": "graphpass.ir",
    "FunctionId": "graphpass.ir",
    "Graph": "graphpass.ir",
    "Model": "graphpass.ir",
    "Node": "graphpass.ir",
    "Tensor": "graphpass.ir",
    "Use": "graphpass.ir",
    "Value": "graphpass.ir",
    "GradientRules": "graphpass.training.rules.model",
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
