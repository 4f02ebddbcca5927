"""Ask onnxruntime-training itself whether it can build training artifacts for a model.

Runs in the onnxruntime-training venv (``.venv-ort-training``), never in the test
venv: that runtime ships its own ``onnxruntime`` module. Prints one JSON object:

    {"ok": true|false, "stage": "generate"|"train"|"load",
     "missing_gradient_op": "M" | null, "node": "M_1" | null, "error": "...",
     "losses": [..]}

Usage::

    python oracle.py MODEL [--requires-grad a,b] [--frozen c,d] [--loss mse|crossentropy|none]
                     [--artifacts DIR] [--train-steps N] [--inputs feeds.npz]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import traceback

_MISSING = re.compile(r"The gradient builder has not been registered: (\S+) for node (\S*)")


def _csv(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [item for item in text.split(",") if item]


def _fix_ir_versions(directory: str, max_ir: int = 10) -> None:
    import onnx

    for name in os.listdir(directory):
        if name.endswith(".onnx"):
            path = os.path.join(directory, name)
            model = onnx.load(path, load_external_data=False)
            if model.ir_version > max_ir:
                model.ir_version = max_ir
                onnx.save(model, path)


def generate(args: argparse.Namespace, artifacts: str) -> dict[str, object]:
    import onnx
    from onnxruntime.training import artifacts as ort_artifacts

    model = onnx.load(args.model)
    loss = {"mse": ort_artifacts.LossType.MSELoss,
            "crossentropy": ort_artifacts.LossType.CrossEntropyLoss,
            "none": None}[args.loss]
    requires_grad = _csv(args.requires_grad)
    if requires_grad is None:
        float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                       onnx.TensorProto.BFLOAT16}
        requires_grad = [t.name for t in model.graph.initializer if t.data_type in float_types]
    frozen = _csv(args.frozen) or []
    requires_grad = [name for name in requires_grad if name not in frozen]
    optimizer = ort_artifacts.OptimType.AdamW if args.train_steps else None
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        ort_artifacts.generate_artifacts(
            model, requires_grad=requires_grad, frozen_params=frozen, loss=loss,
            optimizer=optimizer, artifact_directory=artifacts)
    if optimizer is not None:
        _fix_ir_versions(artifacts)
    return {"requires_grad": requires_grad}


def train(args: argparse.Namespace, artifacts: str) -> list[float]:
    import numpy as np
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint(os.path.join(artifacts, "checkpoint"))
    module = api.Module(os.path.join(artifacts, "training_model.onnx"), state,
                        os.path.join(artifacts, "eval_model.onnx"))
    optimizer = api.Optimizer(os.path.join(artifacts, "optimizer_model.onnx"), module)
    feeds = dict(np.load(args.inputs)) if args.inputs else {}
    names = module.input_names()
    batch = [feeds[name] for name in names]
    losses = []
    module.train()
    for _ in range(args.train_steps):
        outputs = module(*batch)
        loss = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        losses.append(float(np.asarray(loss).reshape(-1)[0]))
        optimizer.step()
        module.lazy_reset_grad()
    return losses


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--requires-grad")
    parser.add_argument("--frozen")
    parser.add_argument("--loss", default="none", choices=["mse", "crossentropy", "none"])
    parser.add_argument("--artifacts")
    parser.add_argument("--train-steps", type=int, default=0)
    parser.add_argument("--inputs")
    args = parser.parse_args()
    result: dict[str, object] = {"ok": False, "stage": "generate", "missing_gradient_op": None,
                                 "node": None, "error": None}
    with tempfile.TemporaryDirectory() as scratch:
        artifacts = args.artifacts or scratch
        os.makedirs(artifacts, exist_ok=True)
        try:
            result.update(generate(args, artifacts))
            if args.train_steps:
                result["stage"] = "train"
                result["losses"] = train(args, artifacts)
            result["ok"] = True
        except Exception as error:  # report every failure as data, the caller decides
            text = f"{type(error).__name__}: {error}"
            result["error"] = text[-4000:]
            match = _MISSING.search(text)
            if match:
                result["missing_gradient_op"] = match.group(1)
                result["node"] = match.group(2)
            result["traceback"] = traceback.format_exc()[-4000:]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
