"""PyTorch interop: a model's full state, and what torch's exporters record.

* :func:`capture_state` and :func:`save_state` (in :mod:`graphpass.torch._state`):
  a model's parameters, buffers and tensor constants under the names its ONNX export
  uses;
* :class:`Module` (in :mod:`graphpass.torch.module`): a module trained through
  graphpass inside the user's own torch loop;
* :mod:`graphpass.torch.export_record`: the state kinds, graph signature and folding
  records that ``torch.onnx.export`` writes into a model, read without torch.

PyTorch is imported only when a function here needs it.
"""

from typing import TYPE_CHECKING, Any

from graphpass.torch._state import capture_state, save_state

if TYPE_CHECKING:
    from graphpass.torch.module import Module

__all__ = ["Module", "capture_state", "save_state"]


def __getattr__(name: str) -> Any:
    # Module needs the pass framework and the training layer, which import this package's
    # export records: it is imported when asked for, not with the package.
    if name == "Module":
        from graphpass.torch.module import Module

        return Module
    raise AttributeError(f"module 'graphpass.torch' has no attribute {name!r}")
