"""A model of Hugging Face Optimum's BERT position embeddings, in a few nodes.

``Gather(P, Slice(position_ids, 0, seq_len))`` with ``position_ids`` a constant
``[1, N]``: ONNX's shape inference cannot type a ``Slice`` with computed ends, so the rows
are ``[unk__0, unk__1, H]``, and onnxruntime-training 1.19.2 does not sum their gradient
over the batch of the ``Add`` (see ``core/training/rules/_broadcast_dims.py``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["position_embeddings"]


def position_embeddings(*, batch: int | str = "batch", seq: int | str = "seq",
                        op: str = "Add", rank: int = 2, fixed: bool = False
                        ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Optimum's BERT position embeddings, and a loss whose gradient differs by batch row.

    ``z = op(x, Gather(P, Slice(ids, 0, Shape(x)[1], axes=[rank - 1]))) * x``, with ``ids``
    a constant ``arange(16)`` and ``P`` a ``[16, 4]`` table (the weight to train).

    Args:
        batch: ``x``'s first dimension (a symbol, or a number).
        seq: ``x``'s second dimension (a number lets ORT fold the slice).
        op: The node combining ``x`` and the rows (``Add`` in BERT; ``Mul``, ``Sub``, ``Div``).
        rank: 2 for ``ids`` of shape ``[1, 16]`` (the legacy exporter's ``position_ids``),
            1 for ``[16]``.
        fixed: Return the model after ``fix-training-ops`` (its ``broadcast-dims`` Reshape).

    Returns:
        The model (output ``z``) and a batch of ``x`` (3 rows when the batch is a symbol).
    """
    rng = np.random.default_rng(7)
    ids = np.arange(16, dtype=np.int64).reshape((1, 16) if rank == 2 else (16,))
    constants = {"ids": ids, "one": np.array(1, np.int64), "zero": np.array([0], np.int64),
                 "axis": np.array([rank - 1], np.int64)}
    table = rng.standard_normal((16, 4)).astype(np.float32)
    if op == "Div":  # away from 0, where 1 / P is smooth at float32 precision
        table = (2.0 + np.abs(table)).astype(np.float32)
    nodes = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
             for name, value in constants.items()]
    nodes += [helper.make_node("Shape", ["x"], ["x_shape"]),
              helper.make_node("Gather", ["x_shape", "one"], ["length"], axis=0),
              helper.make_node("Unsqueeze", ["length", "zero"], ["end"]),
              helper.make_node("Slice", ["ids", "zero", "end", "axis"], ["positions"]),
              helper.make_node("Gather", ["P", "positions"], ["rows"], axis=0),
              helper.make_node(op, ["x", "rows"], ["y"], name="combine"),
              helper.make_node("Mul", ["y", "x"], ["z"])]
    graph = helper.make_graph(
        nodes, "positions", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                           [batch, seq, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "P")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.graph.output[0].CopyFrom(onnx.shape_inference.infer_shapes(model).graph.output[0])
    if fixed:
        import graphpass

        model = graphpass.PassManager(["fix-training-ops"]).run(
            graphpass.Model.from_proto(model)).model.to_proto()
    rows = 3 if isinstance(batch, str) else batch
    length = 5 if isinstance(seq, str) else seq
    return model, {"x": rng.standard_normal((rows, length, 4)).astype(np.float32)}
