"""Hypothesis strategies for random *valid* ONNX models (not a test module).

:func:`models` draws a model whose every value has a known shape, so that any op
can be chained after any other:

* a chain of ONNX ops over float tensors: unary and binary elementwise ops (with
  broadcasting against weights), ``MatMul`` with a weight of compatible shape,
  ``Reshape``, ``Transpose``, ``Concat``, ``ReduceSum``, ``Softmax``, ``Constant``;
* model-local functions (opt-in): elementwise bodies that call earlier functions
  (nesting), read attributes by reference (``alpha`` of ``LeakyRelu``/``Elu``) with
  or without a default, and are called with or without the attribute;
* control flow (opt-in): ``If`` whose branches read values of the enclosing graph
  (sometimes through a nested ``If``), and ``Loop`` whose body reads an outer weight;
* dead nodes (values nothing reads), ``value_info`` for some values, doc strings,
  metadata.

Every model passes ``onnx.checker.check_model(full_check=True)`` and runs in
onnxruntime; :func:`feeds` gives deterministic inputs for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

__all__ = ["DOMAIN", "feeds", "models"]

DOMAIN = "fuzz.local"
OPSET = 18
FLOAT = TensorProto.FLOAT

Shape = tuple[int, ...]


@dataclass
class _Scope:
    """The values a graph (or function body) can use, with their shapes."""

    prefix: str
    values: dict[str, Shape] = field(default_factory=dict)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    counter: int = 0
    allow_weights: bool = True

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{self.prefix}{stem}{self.counter}"

    def add(self, node: onnx.NodeProto, shape: Shape) -> str:
        node.name = node.name or self.fresh(f"{node.op_type.lower()}_")
        self.nodes.append(node)
        self.values[node.output[0]] = shape
        return str(node.output[0])

    def same_shape(self, shape: Shape) -> list[str]:
        """The values of ``shape``, sorted."""
        return sorted(name for name, other in self.values.items() if other == shape)

    def constant(self, tensor: onnx.TensorProto) -> str:
        """``tensor`` as an initializer, or a ``Constant`` where weights can't live."""
        if self.allow_weights:
            self.initializers.append(tensor)
        else:
            self.nodes.append(helper.make_node("Constant", [], [tensor.name], value=tensor,
                                               name=self.fresh("const_")))
        return tensor.name

    def weight(self, draw: st.DrawFn, shape: Shape, stem: str = "w") -> str:
        """A random weight of ``shape`` (see :meth:`constant`)."""
        name = self.fresh(stem)
        return self.constant(numpy_helper.from_array(draw(_arrays(shape)), name))


def _arrays(shape: Shape) -> st.SearchStrategy[np.ndarray[Any, Any]]:
    count = math.prod(shape)
    return st.lists(st.sampled_from([-1.0, -0.5, -0.25, 0.25, 0.5, 1.0]), min_size=count,
                    max_size=count).map(lambda v: np.array(v, np.float32).reshape(shape))


def _shapes(min_rank: int = 1) -> st.SearchStrategy[Shape]:
    return st.lists(st.integers(1, 4), min_size=min_rank, max_size=3).map(tuple)


def _pick(draw: st.DrawFn, scope: _Scope) -> tuple[str, Shape]:
    name = draw(st.sampled_from(sorted(scope.values)))
    return name, scope.values[name]


# ======================================================================== ops
_UNARY = ("Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Softsign", "Identity")
_ALPHA = ("LeakyRelu", "Elu")


def _unary(draw: st.DrawFn, scope: _Scope, alpha_ref: bool = False) -> str:
    source, shape = _pick(draw, scope)
    op = draw(st.sampled_from(_UNARY + _ALPHA))
    node = helper.make_node(op, [source], [scope.fresh("u")])
    if op in _ALPHA:
        if alpha_ref and draw(st.booleans()):
            node.attribute.append(onnx.AttributeProto(
                name="alpha", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT))
        elif draw(st.booleans()):
            node.attribute.append(helper.make_attribute(
                "alpha", draw(st.sampled_from([0.01, 0.2, 0.5]))))
    return scope.add(node, shape)


def _binary(draw: st.DrawFn, scope: _Scope) -> str:
    first, shape = _pick(draw, scope)
    kind = draw(st.sampled_from(["value", "weight", "scalar"]) if scope.allow_weights
                else st.sampled_from(["value", "weight"]))
    if kind == "value":
        second = draw(st.sampled_from(scope.same_shape(shape)))
    elif kind == "weight":
        # A weight broadcast along the leading axes.
        tail = shape[draw(st.integers(0, len(shape) - 1)):]
        second = scope.weight(draw, tail)
    else:
        second = scope.weight(draw, (), "s")
    op = draw(st.sampled_from(["Add", "Sub", "Mul"]))
    operands = [first, second] if draw(st.booleans()) else [second, first]
    return scope.add(helper.make_node(op, operands, [scope.fresh("b")]), shape)


def _matmul(draw: st.DrawFn, scope: _Scope) -> str:
    source, shape = _pick(draw, scope)
    columns = draw(st.integers(1, 4))
    weight = scope.weight(draw, (shape[-1], columns))
    out = (*shape[:-1], columns)
    return scope.add(helper.make_node("MatMul", [source, weight], [scope.fresh("mm")]), out)


def _reshape(draw: st.DrawFn, scope: _Scope) -> str:
    source, shape = _pick(draw, scope)
    count = math.prod(shape)
    first = draw(st.sampled_from([d for d in range(1, count + 1) if count % d == 0]))
    target: Shape = (first, count // first) if draw(st.booleans()) else (count,)
    spec = list(target)
    if len(spec) == 2 and draw(st.booleans()):
        spec[1] = -1
    name = scope.constant(numpy_helper.from_array(np.array(spec, np.int64), scope.fresh("shape")))
    return scope.add(helper.make_node("Reshape", [source, name], [scope.fresh("r")]), target)


def _transpose(draw: st.DrawFn, scope: _Scope) -> str:
    source, shape = _pick(draw, scope)
    perm = draw(st.permutations(range(len(shape))))
    out = tuple(shape[p] for p in perm)
    return scope.add(helper.make_node("Transpose", [source], [scope.fresh("t")], perm=perm), out)


def _concat(draw: st.DrawFn, scope: _Scope) -> str:
    source, shape = _pick(draw, scope)
    axis = draw(st.integers(0, len(shape) - 1))
    other = draw(st.sampled_from(scope.same_shape(shape)))
    out = tuple(d * 2 if k == axis else d for k, d in enumerate(shape))
    node = helper.make_node("Concat", [source, other], [scope.fresh("c")],
                            axis=axis - len(shape) if draw(st.booleans()) else axis)
    return scope.add(node, out)


def _reduce(draw: st.DrawFn, scope: _Scope) -> str:
    source, shape = _pick(draw, scope)
    if len(shape) < 2:
        return _unary(draw, scope)
    axis = draw(st.integers(0, len(shape) - 1))
    keep = draw(st.booleans())
    name = scope.fresh("axes")
    tensor = numpy_helper.from_array(np.array([axis], np.int64), name)
    scope.nodes.append(helper.make_node("Constant", [], [name], value=tensor,
                                        name=scope.fresh("const_")))
    out = tuple(1 if k == axis else d for k, d in enumerate(shape)) if keep else \
        tuple(d for k, d in enumerate(shape) if k != axis)
    node = helper.make_node("ReduceSum", [source, name], [scope.fresh("rs")], keepdims=int(keep))
    return scope.add(node, out)


def _softmax(draw: st.DrawFn, scope: _Scope) -> str:
    source, shape = _pick(draw, scope)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return scope.add(helper.make_node("Softmax", [source], [scope.fresh("sm")], axis=axis), shape)


_SHAPE_OPS = (_unary, _binary, _matmul, _reshape, _transpose, _concat, _reduce, _softmax)


# ================================================================== functions
@dataclass
class _FunctionInfo:
    proto: onnx.FunctionProto
    inputs: int
    outputs: int
    has_alpha: bool
    alpha_default: bool


def _function(draw: st.DrawFn, index: int, earlier: list[_FunctionInfo]) -> _FunctionInfo:
    """An elementwise function of one or two same-shape inputs (shape-polymorphic)."""
    inputs = draw(st.integers(1, 2))
    scope = _Scope(prefix="", allow_weights=False)
    for k in range(inputs):
        scope.values[f"x{k}"] = (0,)  # any shape: bodies are elementwise
    for _step in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "call"] if earlier
                                    else ["unary", "unary", "binary"]))
        if kind == "unary":
            _unary(draw, scope, alpha_ref=True)
        elif kind == "binary":
            names = sorted(scope.values)
            node = helper.make_node(draw(st.sampled_from(["Add", "Mul", "Sub"])),
                                    [draw(st.sampled_from(names)), draw(st.sampled_from(names))],
                                    [scope.fresh("b")])
            scope.add(node, (0,))
        else:
            callee = draw(st.sampled_from(earlier))
            names = sorted(scope.values)
            arguments = [draw(st.sampled_from(names)) for _ in range(callee.inputs)]
            results = [scope.fresh("f") for _ in range(callee.outputs)]
            node = helper.make_node(callee.proto.name, arguments, results, domain=DOMAIN)
            for extra in results[1:]:
                scope.values[extra] = (0,)
            if callee.has_alpha:
                choice = draw(st.sampled_from(["reference", "value", "none"]
                                              if callee.alpha_default else
                                              ["reference", "value"]))
                if choice == "reference":
                    node.attribute.append(onnx.AttributeProto(
                        name="alpha", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT))
                elif choice == "value":
                    node.attribute.append(helper.make_attribute("alpha", 0.3))
            scope.add(node, (0,))
    uses_alpha = any(a.ref_attr_name == "alpha" for n in scope.nodes for a in n.attribute)
    has_alpha = uses_alpha or draw(st.booleans())
    alpha_default = has_alpha and draw(st.booleans())
    outputs = [scope.nodes[-1].output[0]]
    computed = [n.output[0] for n in scope.nodes[:-1] if n.op_type != "Constant"]
    if computed and draw(st.booleans()):  # a second output, which callers may leave unused
        outputs.append(draw(st.sampled_from(computed)))
    proto = helper.make_function(
        DOMAIN, f"F{index}", [f"x{k}" for k in range(inputs)], outputs, scope.nodes,
        [helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
        attributes=["alpha"] if has_alpha and not alpha_default else [],
        attribute_protos=[helper.make_attribute("alpha", 0.1)] if alpha_default else [])
    if draw(st.booleans()):
        proto.doc_string = f"function {index}"
    return _FunctionInfo(proto, inputs, len(outputs), has_alpha, alpha_default)


def _call(draw: st.DrawFn, scope: _Scope, functions: list[_FunctionInfo]) -> str:
    callee = draw(st.sampled_from(functions))
    first, shape = _pick(draw, scope)
    same = scope.same_shape(shape)
    arguments = [first] + [draw(st.sampled_from(same)) for _ in range(callee.inputs - 1)]
    results = [scope.fresh("call") for _ in range(callee.outputs)]
    node = helper.make_node(callee.proto.name, arguments, results, domain=DOMAIN)
    for extra in results[1:]:
        scope.values[extra] = shape
    if callee.has_alpha and (not callee.alpha_default or draw(st.booleans())):
        node.attribute.append(helper.make_attribute("alpha", draw(st.sampled_from([0.05, 0.7]))))
    return scope.add(node, shape)


# =============================================================== control flow
def _branch(draw: st.DrawFn, scope: _Scope, shape: Shape, label: str,
            depth: int) -> onnx.GraphProto:
    """A branch computing a value of ``shape`` from outer values of that shape."""
    outer = scope.same_shape(shape)
    inner = _Scope(prefix=scope.fresh(f"{label}_"), allow_weights=False)
    inner.values = {name: scope.values[name] for name in outer}
    result = draw(st.sampled_from(outer))
    for _step in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["unary", "binary", "if"] if depth < 2
                                    else ["unary", "binary"]))
        source = draw(st.sampled_from(inner.same_shape(shape)))
        if kind == "unary":
            op = draw(st.sampled_from(_UNARY))
            result = inner.add(helper.make_node(op, [source], [inner.fresh("u")]), shape)
        elif kind == "binary":
            other = draw(st.sampled_from(inner.same_shape(shape)))
            op = draw(st.sampled_from(["Add", "Mul"]))
            result = inner.add(helper.make_node(op, [source, other], [inner.fresh("b")]), shape)
        else:
            result = _if(draw, inner, shape, depth + 1)
    if result in outer:  # a branch must compute its output
        result = inner.add(helper.make_node("Identity", [result], [inner.fresh("id")]), shape)
    return helper.make_graph(inner.nodes, f"{inner.prefix}graph", [],
                             [helper.make_tensor_value_info(result, FLOAT, list(shape))])


def _if(draw: st.DrawFn, scope: _Scope, shape: Shape, depth: int = 0) -> str:
    then_branch = _branch(draw, scope, shape, "then", depth)
    else_branch = _branch(draw, scope, shape, "else", depth)
    node = helper.make_node("If", ["cond"], [scope.fresh("if")], then_branch=then_branch,
                            else_branch=else_branch)
    return scope.add(node, shape)


def _control(draw: st.DrawFn, scope: _Scope) -> str:
    _name, shape = _pick(draw, scope)
    if draw(st.booleans()):
        return _if(draw, scope, shape)
    return _loop(draw, scope, shape)


def _loop(draw: st.DrawFn, scope: _Scope, shape: Shape) -> str:
    start = draw(st.sampled_from(scope.same_shape(shape)))
    captured = scope.weight(draw, shape, "loopw")
    trips = scope.fresh("trips")
    keep = scope.fresh("keep")
    scope.initializers.append(numpy_helper.from_array(
        np.array(draw(st.integers(1, 3)), np.int64), trips))
    scope.initializers.append(numpy_helper.from_array(np.array(True), keep))
    prefix = scope.fresh("body_")
    op = draw(st.sampled_from(["Add", "Mul", "Sub"]))
    body = helper.make_graph(
        [helper.make_node("Identity", [f"{prefix}cond"], [f"{prefix}cond_out"],
                          name=f"{prefix}keep"),
         helper.make_node(op, [f"{prefix}v", captured], [f"{prefix}v_mid"], name=f"{prefix}op"),
         helper.make_node("Tanh", [f"{prefix}v_mid"], [f"{prefix}v_out"], name=f"{prefix}tanh")],
        f"{prefix}graph",
        [helper.make_tensor_value_info(f"{prefix}i", TensorProto.INT64, []),
         helper.make_tensor_value_info(f"{prefix}cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info(f"{prefix}v", FLOAT, list(shape))],
        [helper.make_tensor_value_info(f"{prefix}cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info(f"{prefix}v_out", FLOAT, list(shape))])
    node = helper.make_node("Loop", [trips, keep, start], [scope.fresh("loop")], body=body)
    return scope.add(node, shape)


# ===================================================================== models
@st.composite
def models(draw: st.DrawFn, *, functions: bool = False, control_flow: bool = False,
           min_steps: int = 3, max_steps: int = 8) -> onnx.ModelProto:
    """A random valid model (see the module docstring)."""
    scope = _Scope(prefix="")
    inputs = []
    for k in range(draw(st.integers(1, 2))):
        shape = draw(_shapes()) if k == 0 else scope.values["x0"]
        scope.values[f"x{k}"] = shape
        inputs.append(helper.make_tensor_value_info(f"x{k}", FLOAT, list(shape)))
    if control_flow:
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    defined: list[_FunctionInfo] = []
    if functions:
        for index in range(draw(st.integers(1, 4))):
            defined.append(_function(draw, index, list(defined)))
    steps = list(_SHAPE_OPS)
    if defined:
        steps += [lambda d, s: _call(d, s, defined)] * 6
    if control_flow:
        steps += [_control] * 3
    for _step in range(draw(st.integers(min_steps, max_steps))):
        draw(st.sampled_from(steps))(draw, scope)
    produced = [n.output[0] for n in scope.nodes if n.op_type != "Constant"]
    outputs = [produced[-1]] if produced else ["x0"]
    if produced and draw(st.booleans()):
        extra = draw(st.sampled_from(produced))
        if extra not in outputs:
            outputs.append(extra)
    if outputs == ["x0"]:
        scope.add(helper.make_node("Identity", ["x0"], ["y"]), scope.values["x0"])
        outputs = ["y"]
    declared = [name for name in produced if name not in outputs and draw(st.booleans())]
    for node in scope.nodes:
        if draw(st.integers(0, 4)) == 0:
            node.doc_string = f"made by step {node.name}"
    graph = helper.make_graph(
        scope.nodes, "fuzz", inputs,
        [helper.make_tensor_value_info(name, FLOAT, list(scope.values[name]))
         for name in outputs],
        scope.initializers,
        value_info=[helper.make_tensor_value_info(n, FLOAT, list(scope.values[n]))
                    for n in declared])
    for tensor in scope.initializers:
        if tensor.data_type == FLOAT and draw(st.integers(0, 5)) == 0:  # an overridable weight
            graph.input.append(helper.make_tensor_value_info(tensor.name, FLOAT,
                                                             list(tensor.dims)))
    opsets = [helper.make_opsetid("", OPSET)]
    if defined:
        opsets.append(helper.make_opsetid(DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10,
                              functions=[f.proto for f in defined], producer_name="fuzz",
                              producer_version="1")
    if draw(st.booleans()):
        helper.set_model_props(model, {"origin": "hypothesis", "step count": str(len(produced))})
    return model


def feeds(model: onnx.ModelProto) -> dict[str, np.ndarray[Any, Any]]:
    """Deterministic inputs for a model drawn by :func:`models`."""
    result: dict[str, np.ndarray[Any, Any]] = {}
    rng = np.random.default_rng(7)
    weights = {tensor.name for tensor in model.graph.initializer}
    for info in model.graph.input:
        if info.name in weights:
            continue
        dims = [d.dim_value for d in info.type.tensor_type.shape.dim]
        if info.type.tensor_type.elem_type == TensorProto.BOOL:
            result[info.name] = np.array(True)
        else:
            result[info.name] = rng.uniform(-2, 2, dims).astype(np.float32)
    return result
