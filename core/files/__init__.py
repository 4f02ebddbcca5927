"""Model files: reading and writing them, and what stands between a file and the IR.

* :mod:`graphpass.files.model_io`: :func:`load` and :func:`save` (atomic, external
  data kept external);
* :mod:`graphpass.files.onnx_ir_bridge`: the conversion to ``onnx_ir`` and back, keeping
  what a pass did not change as it was;
* :mod:`graphpass.files.validate`: the structural rules every saved model keeps;
* :mod:`graphpass.files.checking`: ONNX's checker and shape inference, run without
  reading the weights.

```python
from graphpass.files import load, save

model = load("model.onnx")
save(model, "copy.onnx")
```
"""

from graphpass.files.model_io import AUTO_EXTERNAL_BYTES, load, same_file, save

__all__ = ["AUTO_EXTERNAL_BYTES", "load", "same_file", "save"]
