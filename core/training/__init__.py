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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "Emitter": "graphpass.training._emit",
    "NameScope": "graphpass.training._emit",
    "Gradients": "graphpass.training.autodiff",
    "differentiate": "graphpass.training.autodiff",
    "prune": "graphpass.training.autodiff",
    "BuilderResult": "graphpass.training.builder",
    "GradientBuilder": "graphpass.training.builder",
    "GradientContext": "graphpass.training.builder",
    "GradientError": "graphpass.training.builder",
    "Refusal": "graphpass.training.builder",
    "GradientRules": "graphpass.training.rules.model",
    "BuilderTable": "graphpass.training.table",
    "registered_builders": "graphpass.training.table",
    "Evaluation": "graphpass.training.trainer",
    "Trainer": "graphpass.training.trainer",
    "TrainingError": "graphpass.training.trainer",
    "default_session_options": "graphpass.training.trainer",
}
"""Each public name and the module that gives it, imported on first use
(:func:`__getattr__`): a module of this package that another layer imports (the gradient
rules, the region walk) does not load the trainer, autodiff and the builders with it, so
that the command line's ``passes`` and ``plan`` start without them."""


def __getattr__(name: str) -> Any:
    """Import a public name of :data:`_LAZY` on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphpass.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
