"""The minimal reproducer of onnxruntime-training 1.19.2's MaxPool crash, without graphpass.

A Conv and a MaxPool over ``x: [2, 2, 8, WIDTH]``, the Conv's weight trained, an MSE
loss: ``generate_artifacts`` builds the artifacts, the runtime loads them, and the first
training step dies with a segmentation fault. The cause (``orttraining/training_ops/cpu/
nn/pool_gradient_op.cc``): ``MaxPoolGrad`` takes dX's shape from the shape inferred for
MaxPool's input when the kernel is created (``dim_value()``: 0 for a named dimension),
replaces only dimension 0 by the incoming gradient's batch size, allocates that (0
elements), and then adds ``dY[i]`` at ``dX + indices[i]``: out of bounds.
``AveragePoolGrad`` takes the whole shape from inference, the batch dimension included.

Run in the onnxruntime-training venv::

    python pool_crash.py [--width 8] [--op MaxPool|AveragePool] [--batch N]

``--width 8`` (a number) makes the width static, and the step runs; ``--batch N`` makes
the batch dimension named. It prints the loss when the step runs (and exits 0); a crash
ends the process with the signal (exit -11 / 139 from a shell).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(width: int | str, op: str = "MaxPool", batch: int | str = 2) -> onnx.ModelProto:
    """``x -> Conv(w) -> <op> 2x2 -> y`` over ``[batch, 2, 8, width]``."""
    weight = np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node(op, ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        "pool_crash", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     [batch, 2, 8, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    proto.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(proto)
    proto.graph.output[0].CopyFrom(inferred.graph.output[0])
    return proto


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", default="W", help="a number, or a name (dynamic)")
    parser.add_argument("--batch", default="2", help="a number, or a name (dynamic)")
    parser.add_argument("--op", default="MaxPool", choices=["MaxPool", "AveragePool"])
    args = parser.parse_args()

    import onnxruntime
    from onnxruntime.training import api, artifacts

    onnxruntime.set_default_logger_severity(3)
    width = int(args.width) if args.width.isdigit() else args.width
    batch = int(args.batch) if args.batch.isdigit() else args.batch
    folder = Path(tempfile.mkdtemp(prefix="pool-crash-"))
    artifacts.generate_artifacts(model(width, args.op, batch), requires_grad=["w"],
                                 loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(folder))
    for path in folder.glob("*.onnx"):  # onnx 1.23 writes IR 11; the runtime reads <= 10
        written = onnx.load(str(path))
        written.ir_version = min(written.ir_version, 10)
        onnx.save(written, str(path))
    state = api.CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    module = api.Module(str(folder / "training_model.onnx"), state,
                        str(folder / "eval_model.onnx"))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 2, 8, 8)).astype(np.float32)
    target = rng.standard_normal((2, 2, 4, 4)).astype(np.float32)
    module.train()
    print("first step", flush=True)
    loss = module(x, target)
    print(f"loss {float(np.asarray(loss).reshape(-1)[0]):.6g}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
