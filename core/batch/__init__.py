"""graphpass.batch: lint (or run passes on) many models, here or on a cluster.

```python
from graphpass import batch

settings = batch.Settings(command="lint", passes=("check", "lint-gradients"))
results = batch.run(["models/", "extra/*.onnx"], settings)       # in this process
with batch.process_pool(2) as pool:                              # or in 2 processes
    results = batch.run(["models/"], settings, executor=pool)
with batch.dask_executor("tcp://scheduler:8786") as cluster:    # or on a Dask cluster
    results = batch.run(["models/"], settings, executor=cluster)
print(batch.exit_code(results))                                  # the worst model's
```

The unit is one model's lint or run: :func:`make_tasks` turns paths into
:class:`ModelTask` objects and :func:`run_task` runs one, both picklable (arguments and
result), so any engine can map :func:`run_task` over the tasks. :func:`run` is the one
function over an iterable of paths that the command line calls, whatever the executor.
Each :class:`ModelResult` carries the model's report data (no model) or why it could not
be checked; :func:`render_batch_text`, :func:`render_batch_json` and
:func:`render_batch_sarif` make one report of them.
"""

from typing import TYPE_CHECKING

from graphpass._lazy import lazy_exports
from graphpass.batch._executors import dask_executor, make_tasks, map_tasks, process_pool, run
from graphpass.batch._inputs import FoundModel, find_models, is_many, output_paths
from graphpass.batch._report import (
    BATCH_SCHEMA_ID,
    batch_dict,
    batch_totals,
    exit_code,
    render_batch_json,
    render_batch_sarif,
    render_batch_text,
)
from graphpass.batch._tasks import ErrorInfo, ModelResult, ModelTask, Settings, run_model, run_task

if TYPE_CHECKING:
    from graphpass.batch._tasks import (
        Command,
    )

__all__ = [
    "BATCH_SCHEMA_ID",
    "Command",
    "ErrorInfo",
    "FoundModel",
    "ModelResult",
    "ModelTask",
    "Settings",
    "batch_dict",
    "batch_totals",
    "dask_executor",
    "exit_code",
    "find_models",
    "is_many",
    "make_tasks",
    "map_tasks",
    "output_paths",
    "process_pool",
    "render_batch_json",
    "render_batch_sarif",
    "render_batch_text",
    "run",
    "run_model",
    "run_task",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "Command": "graphpass.batch._tasks",
})
