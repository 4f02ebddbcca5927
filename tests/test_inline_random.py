"""inline-functions on random call structures: onnxruntime gives the same outputs after.

Hypothesis draws models whose functions call each other (a random DAG), pass their
attributes on by reference, leave attributes to defaults or to nothing, call the
same function several times and return several outputs; onnxruntime runs the
original (it inlines local functions itself) and the inlined model. (Outputs that
are inputs and calls that leave outputs off, which onnxruntime cannot load, are
tested in test_inline_semantics.py.)
"""

from __future__ import annotations

import numpy as np
import onnx
from _inline_support import assert_close, calls_left, check, inline, run_ort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

FLOAT = onnx.AttributeProto.FLOAT
X = np.array([-1.5, -0.25, 2.0], dtype=np.float32)


def _attribute(draw: st.DrawFn, name: str, in_function: bool) -> onnx.AttributeProto | None:
    """A value, a reference to the enclosing function's ``a`` (in functions), or nothing."""
    choices = ["value", "none", "reference"] if in_function else ["value", "none"]
    kind = draw(st.sampled_from(choices))
    if kind == "value":
        return helper.make_attribute(name, draw(st.sampled_from([0.05, 0.3, 0.7])))
    if kind == "reference":
        return onnx.AttributeProto(name=name, ref_attr_name="a", type=FLOAT)
    return None


def _steps(draw: st.DrawFn, values: list[str], callable_functions: list[int],
           in_function: bool, prefix: str, arity: dict[int, int]) -> list[onnx.NodeProto]:
    nodes = []
    for step in range(draw(st.integers(1, 4))):
        out = f"{prefix}{step}"
        kind = draw(st.sampled_from(["unary", "binary", "call", "call"]
                                    if callable_functions else ["unary", "binary"]))
        if kind == "unary":
            op = draw(st.sampled_from(["Neg", "Relu", "LeakyRelu", "Elu"]))
            node = helper.make_node(op, [draw(st.sampled_from(values))], [out])
            if op in ("LeakyRelu", "Elu"):
                attribute = _attribute(draw, "alpha", in_function)
                if attribute is not None:
                    node.attribute.append(attribute)
        elif kind == "binary":
            op = draw(st.sampled_from(["Add", "Mul", "Sub"]))
            node = helper.make_node(op, [draw(st.sampled_from(values)),
                                         draw(st.sampled_from(values))], [out])
        else:
            callee = draw(st.sampled_from(callable_functions))
            # onnxruntime cannot load a call with fewer outputs than its function: give all.
            extra = [f"{out}_{k}" for k in range(1, arity[callee])]
            node = helper.make_node(f"F{callee}", [draw(st.sampled_from(values))],
                                    [out, *extra], domain="local")
            attribute = _attribute(draw, "a", in_function)
            if attribute is not None:
                node.attribute.append(attribute)
        node.name = f"{prefix}n{step}"
        nodes.append(node)
        values.append(out)
    return nodes


@st.composite
def models(draw: st.DrawFn) -> onnx.ModelProto:
    functions = []
    arity: dict[int, int] = {}
    for index in range(draw(st.integers(1, 5))):
        values = ["x"]
        nodes = _steps(draw, values, list(range(index)), True, "v", arity)
        outputs = [values[-1]]
        if len(values) > 2 and draw(st.booleans()):
            outputs.append(draw(st.sampled_from(values[1:-1])))  # a second output
        has_default = draw(st.booleans())
        function = helper.make_function(
            "local", f"F{index}", ["x"], outputs, nodes,
            [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
            attributes=[] if has_default else ["a"],
            attribute_protos=[helper.make_attribute("a", 0.2)] if has_default else [])
        functions.append(function)
        arity[index] = len(outputs)
    values = ["X"]
    nodes = _steps(draw, values, list(range(len(functions))), False, "m", arity)
    graph = helper.make_graph(nodes, "main", [helper.make_tensor_value_info("X", 1, [3])],
                              [helper.make_tensor_value_info(values[-1], 1, [3])])
    return helper.make_model(graph, functions=functions, ir_version=10,
                             opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid("local", 1)])


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(models())
def test_random_call_structures_keep_their_outputs(original: onnx.ModelProto) -> None:
    inlined, _ = inline(original)
    check(inlined)
    assert calls_left(inlined, original.functions) == []
    assert not inlined.functions
    assert_close(run_ort(inlined, {"X": X}), run_ort(original, {"X": X}))
