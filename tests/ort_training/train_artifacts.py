"""Train a few steps on artifacts written by ``emit-training-artifacts``.

Runs in the onnxruntime-training venv. Prints one JSON line:
``{"ok": true, "losses": [...], "inputs": [...]}`` or ``{"ok": false, "error": "..."}``.

Usage::

    python train_artifacts.py ARTIFACTS_DIR BATCH.npz [--steps 3]

The batch file holds one array per training-model input (the model's inputs, then
the loss's, e.g. ``target`` for MSE), by name.
"""

from __future__ import annotations

import argparse
import json
import sys

from oracle import _quiet_runtime, train_steps


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifacts")
    parser.add_argument("batch")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    try:
        import numpy as np

        _quiet_runtime()
        with np.load(args.batch) as data:
            feeds = {name: data[name] for name in data.files}
        losses, names = train_steps(args.artifacts, feeds, args.steps)
    except Exception as error:  # report as data; the test decides
        print(json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"[-2000:]}))
        return 0
    print(json.dumps({"ok": True, "losses": losses, "inputs": names}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
