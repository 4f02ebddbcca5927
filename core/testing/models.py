"""Small models to test passes on, built in a line each.

Every builder returns a :class:`graphpass.Model` that passes :func:`graphpass.validate`
and the ONNX checker and runs in onnxruntime (float32 tensors, opset 18 unless said
otherwise)::

    from graphpass.testing import models

    models.chain("Relu", "Neg")              # x -> Relu -> Neg -> y
    models.mlp((4, 8, 3))                    # MatMul + Add + Relu layers, with weights
    models.with_function()                   # a call of the model-local function lib::Twice
    models.with_if()                         # an If whose branches read an outer value
    models.with_identity_output()            # an Identity that computes a graph output
    models.build([("Mul", ["x", "w"], ["y"])], inputs={"x": [2]}, outputs={"y": [2]},
                 initializers={"w": np.ones(2, np.float32)})
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphpass.ir import Model

__all__ = ["NodeSpec", "build", "chain", "mlp", "with_function", "with_identity_output",
           "with_if"]

NodeSpec: TypeAlias = "onnx.NodeProto | tuple[Any, ...]"
"""A node: an ``onnx.NodeProto``, or ``(op_type, inputs, outputs)`` with an optional
fourth item, a mapping of attributes (and ``name``/``domain`` keys)."""

Shape: TypeAlias = "Sequence[int | str | None]"
"""A tensor's shape: sizes, symbolic dimension names, or ``None`` for unknown."""

OPSET = 18


def build(nodes: Iterable[NodeSpec], inputs: Mapping[str, Shape | tuple[int, Shape]],
          outputs: Mapping[str, Shape | tuple[int, Shape]],
          initializers: Mapping[str, np.ndarray[Any, Any]] | None = None, *,
          functions: Sequence[onnx.FunctionProto] = (), opset: int = OPSET,
          opsets: Mapping[str, int] | None = None, name: str = "model") -> Model:
    """A model from its nodes, inputs, outputs and weights.

    Args:
        nodes: The nodes, in order (see :data:`NodeSpec`).
        inputs: Graph inputs: name to shape (float32), or to ``(element type, shape)``
            with an ``onnx.TensorProto`` element type.
        outputs: Graph outputs, written like ``inputs``.
        initializers: Weights by name (numpy arrays).
        functions: Model-local functions.
        opset: The default domain's opset version.
        opsets: Other domains' versions (``{"lib": 1}``).
        name: The graph's name.
    """
    protos = [_node(spec) for spec in nodes]
    graph = helper.make_graph(
        protos, name, [_value_info(n, t) for n, t in inputs.items()],
        [_value_info(n, t) for n, t in outputs.items()],
        [numpy_helper.from_array(np.asarray(array), n)
         for n, array in (initializers or {}).items()])
    imports = [helper.make_opsetid("", opset),
               *(helper.make_opsetid(d, v) for d, v in (opsets or {}).items())]
    return Model.from_proto(helper.make_model(graph, opset_imports=imports,
                                              functions=list(functions)))


def chain(*ops: str, shape: Shape = (2, 3)) -> Model:
    """``x -> ops[0] -> ops[1] -> ... -> y``, unary operators one after the other.

    Nodes are named after their operator and position (``relu_0``, ``neg_1``); the
    values between them are ``h0``, ``h1``, ...
    """
    if not ops:
        raise ValueError("chain needs at least one operator, e.g. chain('Relu')")
    names = ["x", *(f"h{i}" for i in range(len(ops) - 1)), "y"]
    nodes = [(op, [names[i]], [names[i + 1]], {"name": f"{op.lower()}_{i}"})
             for i, op in enumerate(ops)]
    return build(nodes, {"x": shape}, {"y": shape})


def mlp(sizes: Sequence[int] = (4, 8, 3), *, seed: int = 0, batch: str = "batch") -> Model:
    """A multilayer perceptron: ``MatMul`` + ``Add`` per layer, ``Relu`` between layers.

    The input ``x`` is ``[batch, sizes[0]]`` (``batch`` symbolic), the output ``y`` is
    ``[batch, sizes[-1]]``; the weights ``layer<i>.weight`` and ``layer<i>.bias`` are
    random (``seed``).
    """
    if len(sizes) < 2:
        raise ValueError("mlp needs an input and an output size, e.g. mlp((4, 3))")
    rng = np.random.default_rng(seed)
    nodes: list[NodeSpec] = []
    weights: dict[str, np.ndarray[Any, Any]] = {}
    current = "x"
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        weight, bias = f"layer{layer}.weight", f"layer{layer}.bias"
        weights[weight] = rng.standard_normal((fan_in, fan_out)).astype(np.float32)
        weights[bias] = rng.standard_normal(fan_out).astype(np.float32)
        last = layer == len(sizes) - 2
        product, total = f"layer{layer}.matmul", "y" if last else f"layer{layer}.out"
        nodes.append(("MatMul", [current, weight], [product], {"name": f"matmul_{layer}"}))
        nodes.append(("Add", [product, bias], [total], {"name": f"add_{layer}"}))
        current = total
        if not last:
            nodes.append(("Relu", [total], [f"layer{layer}.relu"], {"name": f"relu_{layer}"}))
            current = f"layer{layer}.relu"
    return build(nodes, {"x": (batch, sizes[0])}, {"y": (batch, sizes[-1])}, weights)


def with_function() -> Model:
    """``y = Relu(lib::Twice(x))``, where the model-local function ``Twice`` adds x to x."""
    twice = helper.make_function("lib", "Twice", ["a"], ["b"],
                                 [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", OPSET)])
    nodes = [("Twice", ["x"], ["doubled"], {"domain": "lib", "name": "call_twice"}),
             ("Relu", ["doubled"], ["y"], {"name": "relu"})]
    return build(nodes, {"x": (2, 3)}, {"y": (2, 3)}, functions=[twice], opsets={"lib": 1})


def with_if() -> Model:
    """``h = Relu(x)``; ``y = If(c, then: Neg(h), else: Abs(x))``: both branches capture."""
    then_branch = helper.make_graph([helper.make_node("Neg", ["h"], ["t"], name="then_neg")],
                                    "then", [], [_value_info("t", (2, 3))])
    else_branch = helper.make_graph([helper.make_node("Abs", ["x"], ["e"], name="else_abs")],
                                    "else", [], [_value_info("e", (2, 3))])
    nodes = [("Relu", ["x"], ["h"], {"name": "relu"}),
             ("If", ["c"], ["y"], {"name": "if", "then_branch": then_branch,
                                   "else_branch": else_branch})]
    return build(nodes, {"x": (2, 3), "c": (TensorProto.BOOL, ())}, {"y": (2, 3)})


def with_identity_output() -> Model:
    """``h = Relu(x)``; ``y = Identity(h)``, the graph output; ``z = Neg(h)``, another."""
    nodes = [("Relu", ["x"], ["h"], {"name": "relu"}),
             ("Identity", ["h"], ["y"], {"name": "identity"}),
             ("Neg", ["h"], ["z"], {"name": "neg"})]
    return build(nodes, {"x": (2, 3)}, {"y": (2, 3), "z": (2, 3)})


def _node(spec: NodeSpec) -> onnx.NodeProto:
    if isinstance(spec, onnx.NodeProto):
        return spec
    op_type, inputs, outputs, *rest = spec
    attributes = dict(rest[0]) if rest else {}
    name = attributes.pop("name", "")
    domain = attributes.pop("domain", "")
    return helper.make_node(op_type, list(inputs), list(outputs), name=name, domain=domain,
                            **attributes)


def _value_info(name: str, typed: Shape | tuple[int, Shape]) -> onnx.ValueInfoProto:
    if (isinstance(typed, tuple) and len(typed) == 2 and isinstance(typed[0], int)
            and isinstance(typed[1], (tuple, list))):
        elem_type, shape = typed
    else:
        elem_type, shape = TensorProto.FLOAT, typed
    return helper.make_tensor_value_info(name, elem_type, list(shape))
