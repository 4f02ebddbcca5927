"""Training graphs in standard ONNX.

Gradient builders, reverse-mode differentiation, losses, optimizers and the
training-graph directory.

```python
from graphpass.training import GradientBuilder, GradientContext, differentiate
```
"""

from graphpass.training._emit import Emitter, NameScope
from graphpass.training.autodiff import Gradients, differentiate, prune
from graphpass.training.builder import (
    BuilderResult,
    GradientBuilder,
    GradientContext,
    GradientError,
    Refusal,
)
from graphpass.training.table import BuilderTable, registered_builders

__all__ = [
    "BuilderResult",
    "BuilderTable",
    "Emitter",
    "GradientBuilder",
    "GradientContext",
    "GradientError",
    "Gradients",
    "NameScope",
    "Refusal",
    "differentiate",
    "prune",
    "registered_builders",
]
