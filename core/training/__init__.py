"""Training: what a trainer can differentiate, and graphpass's own training graphs.

* :mod:`graphpass.training.rules`: :class:`GradientRules`, which
  ``(domain, op)`` a trainer differentiates and under which conditions;
* ``_value_types``: element types and shapes of values, declared
  or inferred;
* gradient builders (:class:`GradientBuilder`, the built-in ones in
  ``_builders``), reverse-mode differentiation in standard ONNX
  (:func:`differentiate`), losses, optimizers and the training-graph directory
  (``_graphs``, ``_directory``);
* the runner :class:`Trainer` (``_trainer``), which trains such a
  directory on stock onnxruntime.

```python
from graphpass.training import GradientBuilder, GradientContext, Trainer, differentiate
```
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports

if TYPE_CHECKING:
    from graphpass.training._autodiff import Gradients, differentiate, prune
    from graphpass.training._batch_norm import (
        BatchNormMode,
    )
    from graphpass.training._builder import (
        BuilderResult,
        GradientBuilder,
        GradientContext,
        GradientError,
        Refusal,
    )
    from graphpass.training._builders import (
        builtin_builders,
    )
    from graphpass.training._data import (
        DataError,
        open_batches,
    )
    from graphpass.training._directory import (
        MANIFEST,
        initial_values,
        write_training_directory,
    )
    from graphpass.training._emit import Emitter, NameScope
    from graphpass.training._fit import (
        fit,
    )
    from graphpass.training._graphs import (
        TrainingGraphs,
        build_training_graphs,
    )
    from graphpass.training._metrics import (
        plot_metrics,
        read_metrics,
    )
    from graphpass.training._optimizers import (
        SGD,
        AdamW,
        Optimizer,
    )
    from graphpass.training._recompute import (
        RecomputePolicy,
    )
    from graphpass.training._region import (
        Region,
        differentiable_region,
        input_bits,
        names_of,
        weight_bits,
    )
    from graphpass.training._schedule import (
        Schedule,
    )
    from graphpass.training._sequences import (
        split_sequences,
    )
    from graphpass.training._table import BuilderTable, registered_builders
    from graphpass.training._torch_checkpoint import (
        check_checkpoint,
    )
    from graphpass.training._trainer import (
        Evaluation,
        Trainer,
        TrainingError,
        default_session_options,
    )
    from graphpass.training._value_types import (
        FunctionTypes,
        ModelTypes,
        TypeInfo,
    )
    from graphpass.training._vjp import (
        ForwardBackward,
        build_forward_backward,
    )
    from graphpass.training.rules import GradientRules

__all__ = [
    "MANIFEST",
    "SGD",
    "AdamW",
    "BatchNormMode",
    "BuilderResult",
    "BuilderTable",
    "DataError",
    "Emitter",
    "Evaluation",
    "ForwardBackward",
    "FunctionTypes",
    "GradientBuilder",
    "GradientContext",
    "GradientError",
    "GradientRules",
    "Gradients",
    "ModelTypes",
    "NameScope",
    "Optimizer",
    "RecomputePolicy",
    "Refusal",
    "Region",
    "Schedule",
    "Trainer",
    "TrainingError",
    "TrainingGraphs",
    "TypeInfo",
    "build_forward_backward",
    "build_training_graphs",
    "builtin_builders",
    "check_checkpoint",
    "default_session_options",
    "differentiable_region",
    "differentiate",
    "fit",
    "initial_values",
    "input_bits",
    "names_of",
    "open_batches",
    "plot_metrics",
    "prune",
    "read_metrics",
    "registered_builders",
    "split_sequences",
    "weight_bits",
    "write_training_directory",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "input_bits": "graphpass.training._region",
    "Emitter": "graphpass.training._emit",
    "NameScope": "graphpass.training._emit",
    "Gradients": "graphpass.training._autodiff",
    "differentiate": "graphpass.training._autodiff",
    "prune": "graphpass.training._autodiff",
    "BuilderResult": "graphpass.training._builder",
    "GradientBuilder": "graphpass.training._builder",
    "GradientContext": "graphpass.training._builder",
    "GradientError": "graphpass.training._builder",
    "Refusal": "graphpass.training._builder",
    "GradientRules": "graphpass.training.rules._model",
    "BuilderTable": "graphpass.training._table",
    "registered_builders": "graphpass.training._table",
    "Evaluation": "graphpass.training._trainer",
    "Trainer": "graphpass.training._trainer",
    "TrainingError": "graphpass.training._trainer",
    "default_session_options": "graphpass.training._trainer",
    "AdamW": "graphpass.training._optimizers",
    "BatchNormMode": "graphpass.training._batch_norm",
    "DataError": "graphpass.training._data",
    "ForwardBackward": "graphpass.training._vjp",
    "FunctionTypes": "graphpass.training._value_types",
    "MANIFEST": "graphpass.training._directory",
    "ModelTypes": "graphpass.training._value_types",
    "Optimizer": "graphpass.training._optimizers",
    "RecomputePolicy": "graphpass.training._recompute",
    "Region": "graphpass.training._region",
    "SGD": "graphpass.training._optimizers",
    "Schedule": "graphpass.training._schedule",
    "TrainingGraphs": "graphpass.training._graphs",
    "TypeInfo": "graphpass.training._value_types",
    "build_forward_backward": "graphpass.training._vjp",
    "build_training_graphs": "graphpass.training._graphs",
    "builtin_builders": "graphpass.training._builders",
    "check_checkpoint": "graphpass.training._torch_checkpoint",
    "differentiable_region": "graphpass.training._region",
    "fit": "graphpass.training._fit",
    "initial_values": "graphpass.training._directory",
    "names_of": "graphpass.training._region",
    "open_batches": "graphpass.training._data",
    "plot_metrics": "graphpass.training._metrics",
    "read_metrics": "graphpass.training._metrics",
    "split_sequences": "graphpass.training._sequences",
    "weight_bits": "graphpass.training._region",
    "write_training_directory": "graphpass.training._directory",
})
"""Every public name, imported on first use: a module of this package that another layer
imports (the gradient rules, the region walk) does not load the trainer, autodiff and the
builders with it, so that the command line's ``passes`` and ``plan`` start without them."""
