"""Training: what a trainer can differentiate, and graphpass's own training graphs.

* :mod:`graphpass.training.rules.model`: :class:`GradientRules`, which
  ``(domain, op)`` a trainer differentiates and under which conditions;
* :mod:`graphpass.training.value_types`: element types and shapes of values, declared
  or inferred;
* gradient builders (:class:`GradientBuilder`, the built-in ones in
  :mod:`graphpass.training.builders`), reverse-mode differentiation in standard ONNX
  (:func:`differentiate`), losses, optimizers and the training-graph directory
  (:mod:`graphpass.training.graphs`, :mod:`graphpass.training.directory`);
* the runner :class:`Trainer` (:mod:`graphpass.training.trainer`), which trains such a
  directory on stock onnxruntime.

```python
from graphpass.training import GradientBuilder, GradientContext, Trainer, differentiate
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
from graphpass.training.rules.model import GradientRules
from graphpass.training.table import BuilderTable, registered_builders
from graphpass.training.trainer import (
    Evaluation,
    Trainer,
    TrainingError,
    default_session_options,
)

__all__ = [
    "BuilderResult",
    "BuilderTable",
    "Emitter",
    "Evaluation",
    "GradientBuilder",
    "GradientContext",
    "GradientError",
    "GradientRules",
    "Gradients",
    "NameScope",
    "Refusal",
    "Trainer",
    "TrainingError",
    "default_session_options",
    "differentiate",
    "prune",
    "registered_builders",
]
