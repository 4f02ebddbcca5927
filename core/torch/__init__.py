"""PyTorch interop: a model's full state, and what torch's exporters record.

* :func:`capture_state` and :func:`save_state` (in :mod:`graphpass.torch._state`):
  a model's parameters, buffers and tensor constants under the names its ONNX export
  uses;
* :mod:`graphpass.torch.export_record`: the state kinds, graph signature and folding
  records that ``torch.onnx.export`` writes into a model, read without torch.

PyTorch is imported only when a function here needs it.
"""

from graphpass.torch._state import capture_state, save_state

__all__ = ["capture_state", "save_state"]
