"""graphpass: a pluggable graph-rewrite pass framework for ONNX models.

```python
import graphpass

model = graphpass.load("model.onnx")
result = graphpass.PassManager(["inline-functions", "lint-gradients"]).run(model)
graphpass.save(result.model, "out.onnx")
```
"""

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

__all__ = [
    "Attribute",
    "CheckpointError",
    "ConfigError",
    "CycleError",
    "ExternalDataError",
    "Function",
    "FunctionId",
    "Graph",
    "GraphpassError",
    "InvalidModelError",
    "Model",
    "ModelLoadError",
    "ModelSaveError",
    "Node",
    "PassError",
    "PipelineError",
    "PluginError",
    "Tensor",
    "Use",
    "Value",
    "load",
    "save",
]
