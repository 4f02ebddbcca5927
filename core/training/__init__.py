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

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports

if TYPE_CHECKING:
    from graphpass.training._emit import Emitter, NameScope
    from graphpass.training._region import (
        Region,
        differentiable_region,
        input_bits,
        names_of,
        weight_bits,
    )
    from graphpass.training.autodiff import Gradients, differentiate, prune
    from graphpass.training.batch_norm import (
        BatchNormMode,
    )
    from graphpass.training.builder import (
        BuilderResult,
        GradientBuilder,
        GradientContext,
        GradientError,
        Refusal,
    )
    from graphpass.training.builders import (
        builtin_builders,
    )
    from graphpass.training.data import (
        DataError,
        open_batches,
    )
    from graphpass.training.directory import (
        MANIFEST,
        initial_values,
        write_training_directory,
    )
    from graphpass.training.fit import (
        fit,
    )
    from graphpass.training.graphs import (
        TrainingGraphs,
        build_training_graphs,
    )
    from graphpass.training.metrics import (
        plot_metrics,
        read_metrics,
    )
    from graphpass.training.optimizers import (
        SGD,
        AdamW,
        Optimizer,
    )
    from graphpass.training.recompute import (
        RecomputePolicy,
    )
    from graphpass.training.rules.model import GradientRules
    from graphpass.training.schedule import (
        Schedule,
    )
    from graphpass.training.sequences import (
        split_sequences,
    )
    from graphpass.training.table import BuilderTable, registered_builders
    from graphpass.training.torch_checkpoint import (
        check_checkpoint,
    )
    from graphpass.training.trainer import (
        Evaluation,
        Trainer,
        TrainingError,
        default_session_options,
    )
    from graphpass.training.value_types import (
        FunctionTypes,
        ModelTypes,
        TypeInfo,
    )
    from graphpass.training.vjp import (
        ForwardBackward,
        build_forward_backward,
    )

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
    "AdamW": "graphpass.training.optimizers",
    "BatchNormMode": "graphpass.training.batch_norm",
    "DataError": "graphpass.training.data",
    "ForwardBackward": "graphpass.training.vjp",
    "FunctionTypes": "graphpass.training.value_types",
    "MANIFEST": "graphpass.training.directory",
    "ModelTypes": "graphpass.training.value_types",
    "Optimizer": "graphpass.training.optimizers",
    "RecomputePolicy": "graphpass.training.recompute",
    "Region": "graphpass.training._region",
    "SGD": "graphpass.training.optimizers",
    "Schedule": "graphpass.training.schedule",
    "TrainingGraphs": "graphpass.training.graphs",
    "TypeInfo": "graphpass.training.value_types",
    "build_forward_backward": "graphpass.training.vjp",
    "build_training_graphs": "graphpass.training.graphs",
    "builtin_builders": "graphpass.training.builders",
    "check_checkpoint": "graphpass.training.torch_checkpoint",
    "differentiable_region": "graphpass.training._region",
    "fit": "graphpass.training.fit",
    "initial_values": "graphpass.training.directory",
    "names_of": "graphpass.training._region",
    "open_batches": "graphpass.training.data",
    "plot_metrics": "graphpass.training.metrics",
    "read_metrics": "graphpass.training.metrics",
    "split_sequences": "graphpass.training.sequences",
    "weight_bits": "graphpass.training._region",
    "write_training_directory": "graphpass.training.directory",
})
"""Every public name, imported on first use: a module of this package that another layer
imports (the gradient rules, the region walk) does not load the trainer, autodiff and the
builders with it, so that the command line's ``passes`` and ``plan`` start without them."""
