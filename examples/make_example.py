"""Generate ``examples/tiny_classifier.onnx``, the small model the demo starts from.

It is built with ``onnx.helper`` only (no torch needed) and is small (a few KB),
yet it has what graphpass must carry through untouched: a model-local function
with an attribute default, called twice (once overriding it); an ``If`` whose
branches read a value from the enclosing graph; initializers; ``value_info``;
metadata and doc strings. The output is deterministic: running this script again
gives the same bytes.

Usage::

    .venv/bin/python examples/make_example.py [OUTPUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "tiny_classifier.onnx"
DOMAIN = "example.layers"


def _dense_function() -> onnx.FunctionProto:
    """``Dense(x, w, b) = LeakyRelu(x @ w + b, alpha)`` with ``alpha`` defaulting to 0.1."""
    alpha = onnx.AttributeProto(name="alpha", ref_attr_name="alpha",
                                type=onnx.AttributeProto.FLOAT)
    activation = helper.make_node("LeakyRelu", ["z"], ["y"], name="act")
    activation.attribute.append(alpha)
    function = helper.make_function(
        DOMAIN, "Dense", ["x", "w", "b"], ["y"],
        [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
         helper.make_node("Add", ["xw", "b"], ["z"], name="bias"),
         activation],
        [helper.make_opsetid("", 18)])
    function.attribute_proto.append(helper.make_attribute("alpha", 0.1))
    function.doc_string = "A dense layer with a leaky ReLU."
    return function


def make_model() -> onnx.ModelProto:
    """Build the example model."""
    rng = np.random.default_rng(0)
    weights = {
        "layer1.weight": rng.standard_normal((8, 16)).astype(np.float32),
        "layer1.bias": rng.standard_normal(16).astype(np.float32),
        "layer2.weight": rng.standard_normal((16, 4)).astype(np.float32),
        "layer2.bias": rng.standard_normal(4).astype(np.float32),
    }
    layer2 = helper.make_node("Dense", ["hidden", "layer2.weight", "layer2.bias"], ["logits"],
                              name="layer2", domain=DOMAIN, alpha=0.2)
    then_branch = helper.make_graph(
        [helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1)],
        "normalize", [], [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                                        ["batch", 4])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["logits"], ["raw"], name="keep")],
        "keep_logits", [], [helper.make_tensor_value_info("raw", TensorProto.FLOAT,
                                                          ["batch", 4])])
    nodes = [
        helper.make_node("Dense", ["features", "layer1.weight", "layer1.bias"], ["hidden"],
                         name="layer1", domain=DOMAIN),
        layer2,
        helper.make_node("ReduceSum", ["logits"], ["total"], name="sum", keepdims=0),
        helper.make_node("Constant", [], ["zero"], name="zero",
                         value=numpy_helper.from_array(np.array(0.0, np.float32))),
        helper.make_node("Greater", ["total", "zero"], ["positive"], name="is_positive"),
        helper.make_node("If", ["positive"], ["scores"], name="maybe_softmax",
                         then_branch=then_branch, else_branch=else_branch),
    ]
    nodes[0].doc_string = "the first dense layer"
    graph = helper.make_graph(
        nodes, "tiny_classifier",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
        doc_string="Two dense layers and a data-dependent softmax.",
        value_info=[helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", 16])])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)],
        functions=[_dense_function()], producer_name="graphpass examples",
        producer_version="1", doc_string="The model of the graphpass demo.", ir_version=10)
    helper.set_model_props(model, {"purpose": "graphpass demo", "license": "Apache-2.0"})
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    output = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT
    onnx.save(make_model(), output)
    print(f"wrote {output} ({output.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
