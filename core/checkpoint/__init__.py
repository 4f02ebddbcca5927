"""Checkpoints: weights saved by a training framework, read lazily.

```python
from graphpass.checkpoint import open_checkpoint

checkpoint = open_checkpoint("model.safetensors")      # or .pt/.bin, .npz, index JSON, folder
for key, entry in checkpoint.items():
    print(key, entry.dtype_name, entry.shape)          # no tensor data read
tensor = checkpoint["lm_head.weight"].tensor("lm_head.weight")   # a lazy graphpass.Tensor
```

:func:`open_checkpoint` picks the loader by content (magic bytes, header, JSON
index), not by the file name. The built-in loaders are registered through the
``graphpass_checkpoint_loaders`` hook like any plugin's.
"""

from __future__ import annotations

from graphpass.checkpoint._checkpoint import Checkpoint, CheckpointEntry
from graphpass.checkpoint._loader import CheckpointLoader, open_checkpoint, read_magic
from graphpass.checkpoint._numpy import NumpyLoader
from graphpass.checkpoint._reconciled import ReconcileResult
from graphpass.checkpoint._safetensors import SafetensorsLoader
from graphpass.checkpoint._sharded import ShardedLoader
from graphpass.checkpoint._torch import TorchLoader

__all__ = [
    "Checkpoint",
    "CheckpointEntry",
    "CheckpointLoader",
    "NumpyLoader",
    "ReconcileResult",
    "SafetensorsLoader",
    "ShardedLoader",
    "TorchLoader",
    "builtin_loaders",
    "open_checkpoint",
    "read_magic",
]


def builtin_loaders() -> list[CheckpointLoader]:
    """The built-in checkpoint loaders: safetensors, torch, numpy and sharded."""
    return [SafetensorsLoader(), TorchLoader(), NumpyLoader(), ShardedLoader()]
