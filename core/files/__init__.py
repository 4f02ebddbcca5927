"""Model files: reading and writing them, and what stands between a file and the IR.

* :func:`load` and :func:`save` (atomic, external data kept external);
* the one atomic-write module's pieces, for every other output: :func:`replace_file`,
  :func:`replace_folder`, :func:`new_folder`, :func:`temporary_folder`, :func:`publish`,
  and the snapshots a training state is kept in (:func:`write_snapshot`,
  :func:`read_snapshot`);
* :class:`OnnxIRConversion`: the conversion to ``onnx_ir`` and back, keeping what a pass
  did not change as it was;
* :func:`validate` and :func:`find_problems`: the structural rules every saved model keeps;
* :func:`run_checker`, :func:`infer_shapes`: ONNX's checker and shape inference, run
  without reading the weights.

The implementation lives in private modules (``_model_io``, ``_atomic``, ``_commit`` ...);
names other than :func:`load`, :func:`save` and :func:`same_file` are imported on first use.

```python
from graphpass.files import load, save

model = load("model.onnx")
save(model, "copy.onnx")
```
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.files._model_io import AUTO_EXTERNAL_BYTES, load, same_file, save

if TYPE_CHECKING:
    from graphpass.files._atomic import (
        new_folder,
        owner_of,
        publish,
        recover_folder,
        replace_file,
        replace_folder,
        temporary_folder,
    )
    from graphpass.files._checking import (
        infer_shapes,
        run_checker,
        strict_inference,
        structural_proto,
    )
    from graphpass.files._onnx_ir_bridge import (
        OnnxIRConversion,
        count_nodes,
    )
    from graphpass.files._snapshots import (
        POINTER,
        read_snapshot,
        write_snapshot,
    )
    from graphpass.files._validate import find_problems, validate

__all__ = [
    "AUTO_EXTERNAL_BYTES",
    "POINTER",
    "OnnxIRConversion",
    "count_nodes",
    "find_problems",
    "infer_shapes",
    "load",
    "new_folder",
    "owner_of",
    "publish",
    "read_snapshot",
    "recover_folder",
    "replace_file",
    "replace_folder",
    "run_checker",
    "same_file",
    "save",
    "strict_inference",
    "structural_proto",
    "temporary_folder",
    "validate",
    "write_snapshot",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "new_folder": "graphpass.files._atomic",
    "OnnxIRConversion": "graphpass.files._onnx_ir_bridge",
    "POINTER": "graphpass.files._snapshots",
    "count_nodes": "graphpass.files._onnx_ir_bridge",
    "find_problems": "graphpass.files._validate",
    "infer_shapes": "graphpass.files._checking",
    "owner_of": "graphpass.files._atomic",
    "publish": "graphpass.files._atomic",
    "read_snapshot": "graphpass.files._snapshots",
    "recover_folder": "graphpass.files._atomic",
    "replace_file": "graphpass.files._atomic",
    "replace_folder": "graphpass.files._atomic",
    "run_checker": "graphpass.files._checking",
    "strict_inference": "graphpass.files._checking",
    "structural_proto": "graphpass.files._checking",
    "temporary_folder": "graphpass.files._atomic",
    "validate": "graphpass.files._validate",
    "write_snapshot": "graphpass.files._snapshots",
})
