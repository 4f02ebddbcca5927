"""Train a torch module through graphpass inside the user's own torch loop.

```python
import torch
import graphpass.torch

wrapped = graphpass.torch.Module(model)              # exports on the first call
optimizer = torch.optim.AdamW(wrapped.parameters())  # the model's own Parameter objects
loss = loss_fn(wrapped(x), y)                        # forward in onnxruntime
loss.backward()                                      # backward in onnxruntime
optimizer.step()
```

On the first call, and again when the input signature changes (see
:mod:`graphpass.torch._module._export`), the module is exported with ``torch.onnx.export``,
made trainable by the ``train-ready`` pipeline (and any passes the caller names), and
split into a forward and a backward graph in standard ONNX
(:func:`graphpass.training._vjp.build_forward_backward`), which stock onnxruntime
runs inside a ``torch.autograd.Function``. Everything else stays torch's: the
parameters and buffers (onnxruntime reads them in place), ``.grad`` accumulation,
optimizers, schedulers, hooks, ``no_grad``, ``train()``/``eval()``, ``state_dict()``.
"""

from graphpass.torch._module._export import ExportError
from graphpass.torch._module._module import Module
from graphpass.torch._module._program import PreparationError

__all__ = ["ExportError", "Module", "PreparationError"]
