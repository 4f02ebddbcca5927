"""graphpass: a pluggable graph-rewrite pass framework for ONNX models.

```python
import graphpass

model = graphpass.load("model.onnx")
result = graphpass.PassManager(["inline-functions", "lint-gradients"]).run(model)
graphpass.save(result.model, "out.onnx")
```
"""

from graphpass import _moved
from graphpass.checkpoint import Checkpoint, CheckpointLoader, open_checkpoint
from graphpass.errors import (
    CheckpointError,
    ConfigError,
    CycleError,
    ExternalDataError,
    GraphpassError,
    InvalidModelError,
    ModelLoadError,
    ModelSaveError,
    PassError,
    PipelineError,
    PluginError,
)
from graphpass.files import load, save
from graphpass.files.validate import validate
from graphpass.findings import Finding, Severity
from graphpass.framework.instruments import Instrument
from graphpass.framework.manager import PassManager
from graphpass.framework.onnx_ir_pass import OnnxIRPass, RewriteRules
from graphpass.framework.pass_base import AnalysisPass, Pass, PassContext, PassResult
from graphpass.framework.pipeline import Pipeline, PipelineStep
from graphpass.framework.results import PassRecord, RunResult
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
from graphpass.training.gradient_rules import GradientRules

__all__ = [
    "AnalysisPass",
    "Attribute",
    "Checkpoint",
    "CheckpointError",
    "CheckpointLoader",
    "ConfigError",
    "CycleError",
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
    "Severity",
    "Tensor",
    "Use",
    "Value",
    "load",
    "open_checkpoint",
    "save",
    "validate",
]

_moved.install()  # the module paths of 0.1 keep working until 0.3, with a warning
