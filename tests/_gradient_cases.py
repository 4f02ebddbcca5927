"""Random one-node models for every built-in gradient builder (hypothesis strategies).

Each entry of :data:`CASES` draws a float64 model of one operator (shapes with
broadcasting, attributes, axes given as attributes or inputs, constant or run-time
index inputs) and its inputs. With ``dynamic`` drawn true, the inputs are declared
with symbolic dimensions, so the builders cannot read static shapes and take their
run-time paths (``Shape``, ``ReduceSum`` over axes computed at run time ...).

``tests/test_gradient_random.py`` checks a few examples of each against finite
differences; ``benchmarks/gradient_builders.py`` runs many more and counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

D = TensorProto.DOUBLE
I64 = TensorProto.INT64
B = TensorProto.BOOL

Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]
Draw = Callable[[st.SearchStrategy[Any]], Any]


# ================================================================ building
class _Builder:
    """Collects the inputs and initializers of a one-node model."""

    def __init__(self, draw: Draw, opset: int = 21):
        self.draw = draw
        self.opset = opset
        self.dynamic = draw(st.booleans())
        self.rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        self.inputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.feeds: dict[str, np.ndarray] = {}

    def _declared(self, name: str, elem_type: int, shape: Sequence[int]) -> None:
        dims: list[Any] = [f"{name}_d{i}" if self.dynamic else d for i, d in enumerate(shape)]
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, dims))

    def tensor(self, name: str, shape: Sequence[int], low: float | None = None,
               high: float | None = None, away_from_zero: bool = False) -> str:
        """A float64 graph input of random values."""
        if low is not None and high is not None:
            value = self.rng.uniform(low, high, size=shape)
        else:
            value = self.rng.standard_normal(size=shape)
        if away_from_zero:
            value = np.sign(value) * (np.abs(value) + 0.5)
        self._declared(name, D, shape)
        self.feeds[name] = np.asarray(value, dtype=np.float64)
        return name

    def ints(self, name: str, values: Sequence[int] | np.ndarray, *,
             as_input: bool = False) -> str:
        """An int64 tensor: an initializer (a constant) or, with ``as_input``, a graph input."""
        array = np.asarray(values, dtype=np.int64)
        if as_input:
            self._declared(name, I64, array.shape)
            self.feeds[name] = array
        else:
            self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def bools(self, name: str, shape: Sequence[int]) -> str:
        self._declared(name, B, shape)
        self.feeds[name] = self.rng.random(size=shape) > 0.5
        return name

    def model(self, op_type: str, inputs: Sequence[str], outputs: int = 1,
              output_types: Sequence[int] = (), **attributes: Any) -> Case:
        names = [f"y{i}" for i in range(outputs)]
        types = [*output_types, *[D] * (outputs - len(output_types))]
        node = helper.make_node(op_type, list(inputs), names, **attributes)
        graph = helper.make_graph(
            [node], op_type, self.inputs,
            [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types,
                                                                        strict=True)],
            self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        return model, self.feeds


def _shape(draw: Draw, min_rank: int = 0, max_rank: int = 4, max_dim: int = 4) -> list[int]:
    return draw(st.lists(st.integers(1, max_dim), min_size=min_rank, max_size=max_rank))


def _broadcast_from(draw: Draw, shape: Sequence[int]) -> list[int]:
    """A shape that broadcasts to ``shape``: a suffix, some dimensions set to 1."""
    rank = draw(st.integers(0, len(shape)))
    suffix = list(shape[len(shape) - rank:])
    return [1 if draw(st.booleans()) else d for d in suffix]


# ============================================================ elementwise
def _binary(op_type: str, **value: Any) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw)
        out = _shape(draw)
        first, second = _broadcast_from(draw, out), _broadcast_from(draw, out)
        if draw(st.booleans()):
            first = out  # at least one operand usually has the full shape
        a = b.tensor("a", first, **value.get("a", {}))
        c = b.tensor("b", second, **value.get("b", {}))
        return b.model(op_type, [a, c])
    return case


def _variadic(op_type: str) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw)
        out = _shape(draw)
        count = draw(st.integers(1, 3))
        names = [b.tensor(f"x{i}", out if i == 0 else _broadcast_from(draw, out))
                 for i in range(count)]
        return b.model(op_type, names)
    return case


def _unary(op_type: str, low: float | None = None, high: float | None = None,
           away_from_zero: bool = False, opset: int = 21,
           attributes: Callable[[Draw], dict[str, Any]] | None = None) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw, opset)
        x = b.tensor("x", _shape(draw), low, high, away_from_zero)
        return b.model(op_type, [x], **(attributes(draw) if attributes else {}))
    return case


def _alpha(low: float, high: float, name: str = "alpha") -> Callable[[Draw], dict[str, Any]]:
    return lambda draw: {name: draw(st.floats(low, high))}


def _where(draw: Draw) -> Case:
    b = _Builder(draw)
    out = _shape(draw)
    condition = b.bools("c", _broadcast_from(draw, out))
    return b.model("Where", [condition, b.tensor("x", out),
                             b.tensor("y", _broadcast_from(draw, out))])


def _prelu(draw: Draw) -> Case:
    b = _Builder(draw)
    out = _shape(draw, 1)
    return b.model("PRelu", [b.tensor("x", out), b.tensor("slope", _broadcast_from(draw, out))])


def _clip(draw: Draw) -> Case:
    b = _Builder(draw)
    x = b.tensor("x", _shape(draw))
    low = b.tensor("low", []) if draw(st.booleans()) else ""
    high = b.tensor("high", []) if draw(st.booleans()) else ""
    if low and high:
        b.feeds[low], b.feeds[high] = np.float64(-0.5), np.float64(0.7)
    inputs = [x, low, high]
    while inputs and not inputs[-1]:
        inputs.pop()
    return b.model("Clip", inputs)


def _gelu(draw: Draw) -> Case:
    b = _Builder(draw)
    approximate = draw(st.sampled_from(["none", "tanh"]))
    return b.model("Gelu", [b.tensor("x", _shape(draw))], approximate=approximate)


def _cast(op_type: str) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw)
        x = b.tensor("x", _shape(draw))
        if op_type == "Cast":
            return b.model("Cast", [x], to=D)
        return b.model("CastLike", [x, b.tensor("like", [1])])
    return case


def _dropout(draw: Draw) -> Case:
    b = _Builder(draw)
    x = b.tensor("x", _shape(draw))
    mode = draw(st.sampled_from(["absent", "false", "true-ratio-0"]))
    if mode == "absent":
        return b.model("Dropout", [x])
    ratio = b.tensor("ratio", [])
    b.feeds[ratio] = np.float64(0.0 if mode == "true-ratio-0" else 0.5)
    training = b.bools("training", [])
    b.feeds[training] = np.array(mode != "false")
    return b.model("Dropout", [x, ratio, training], outputs=2, output_types=[D, B])


# ==================================================================== linear
def _matmul(draw: Draw) -> Case:
    b = _Builder(draw)
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    batch = _shape(draw, 0, 2, 3)
    a_shape = [*_broadcast_from(draw, batch), m, k]
    b_shape = [*_broadcast_from(draw, batch), k, n]
    if draw(st.integers(0, 5)) == 0:
        a_shape = [k]
    if draw(st.integers(0, 5)) == 0:
        b_shape = [k]
    return b.model("MatMul", [b.tensor("a", a_shape), b.tensor("b", b_shape)])


def _gemm(draw: Draw) -> Case:
    b = _Builder(draw)
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
    a = b.tensor("a", [k, m] if trans_a else [m, k])
    c = b.tensor("b", [n, k] if trans_b else [k, n])
    inputs = [a, c]
    if draw(st.booleans()):
        inputs.append(b.tensor("c", draw(st.sampled_from([[], [n], [1, n], [m, 1], [m, n]]))))
    return b.model("Gemm", inputs, transA=int(trans_a), transB=int(trans_b),
                   alpha=draw(st.floats(0.5, 2.0)), beta=draw(st.floats(0.5, 2.0)))


_EINSUMS = ["ij,jk->ik", "bij,bjk->bik", "...ij,...jk->...ik", "ij->i", "i,i->", "ij,kj->ik",
            "bhqd,bhkd->bhqk", "ij,j->i", "ij,jk", "ijk->", "ij,ij->ij", "i,j->ij", "ij->ji"]


def _einsum(draw: Draw) -> Case:
    b = _Builder(draw)
    equation = draw(st.sampled_from(_EINSUMS))
    left = equation.split("->")[0]
    sizes = {ch: draw(st.integers(1, 4)) for ch in "bhqdkijn"}
    batch = _shape(draw, 0, 2, 3)  # what "..." stands for (every operand, broadcasting)
    inputs = []
    for index, operand in enumerate(left.split(",")):
        shape = []
        letters = operand
        if operand.startswith("..."):
            shape.extend(batch if index == 0 else [d if draw(st.booleans()) else 1
                                                   for d in batch])
            letters = operand[3:]
        shape.extend(sizes[ch] for ch in letters)
        inputs.append(b.tensor(f"x{index}", shape))
    return b.model("Einsum", inputs, equation=equation)


# ============================================================= normalization
def _softmax(op_type: str) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw)
        shape = _shape(draw, 1)
        axis = draw(st.integers(-len(shape), len(shape) - 1))
        return b.model(op_type, [b.tensor("x", shape)], axis=axis)
    return case


def _layer_norm(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1, 4)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    normalized = shape[axis:]
    inputs = [b.tensor("x", shape), b.tensor("scale", normalized)]
    if draw(st.booleans()):
        inputs.append(b.tensor("bias", normalized))
    return b.model("LayerNormalization", inputs, axis=axis,
                   epsilon=draw(st.sampled_from([1e-5, 1e-3, 0.1])))


def _batch_norm(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = [draw(st.integers(2, 4)), draw(st.integers(1, 3)), *_shape(draw, 0, 2, 3)]
    channels = [shape[1]]
    training = draw(st.booleans())
    inputs = [b.tensor("x", shape), b.tensor("scale", channels), b.tensor("bias", channels),
              b.tensor("mean", channels), b.tensor("var", channels, 0.5, 2.0)]
    return b.model("BatchNormalization", inputs, training_mode=int(training), epsilon=1e-3)


def _instance_norm(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = [draw(st.integers(1, 3)), draw(st.integers(1, 3)), *_shape(draw, 1, 2, 4)]
    return b.model("InstanceNormalization", [b.tensor("x", shape), b.tensor("s", [shape[1]]),
                                             b.tensor("b", [shape[1]])], epsilon=1e-3)


# ===================================================================== shapes
def _reshape(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1)
    target = list(np.random.default_rng(draw(st.integers(0, 99))).permutation(shape))
    if target and draw(st.booleans()):
        target[0] = -1
    return b.model("Reshape", [b.tensor("x", shape), b.ints("shape", target)])


def _flatten(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1)
    return b.model("Flatten", [b.tensor("x", shape)],
                   axis=draw(st.integers(-len(shape), len(shape))))


def _squeeze(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = [1 if draw(st.booleans()) else d for d in _shape(draw, 1)]
    ones = [i for i, d in enumerate(shape) if d == 1]
    axes = draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    inputs = [b.tensor("x", shape)]
    if axes:
        inputs.append(b.ints("axes", axes))
    return b.model("Squeeze", inputs)


def _unsqueeze(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw)
    count = draw(st.integers(1, 2))
    axes = draw(st.lists(st.integers(0, len(shape) + count - 1), min_size=count,
                         max_size=count, unique=True))
    return b.model("Unsqueeze", [b.tensor("x", shape), b.ints("axes", axes)])


def _transpose(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1)
    if draw(st.booleans()):
        return b.model("Transpose", [b.tensor("x", shape)])
    perm = draw(st.permutations(range(len(shape))))
    return b.model("Transpose", [b.tensor("x", shape)], perm=list(perm))


def _expand(draw: Draw) -> Case:
    b = _Builder(draw)
    out = _shape(draw, 1)
    source = _broadcast_from(draw, out)
    return b.model("Expand", [b.tensor("x", source), b.ints("shape", out)])


def _concat(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    names = []
    for index in range(draw(st.integers(1, 3))):
        piece = list(shape)
        piece[axis] = draw(st.integers(1, 3))
        names.append(b.tensor(f"x{index}", piece))
    return b.model("Concat", names, axis=axis)


def _split(draw: Draw) -> Case:
    opset = draw(st.sampled_from([13, 18, 21]))
    b = _Builder(draw, opset)
    shape = _shape(draw, 1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis]
    x = b.tensor("x", shape)
    if opset >= 18 and draw(st.booleans()):
        count = draw(st.integers(1, size))
        return b.model("Split", [x], outputs=count, axis=axis, num_outputs=count)
    cuts = sorted(draw(st.lists(st.integers(0, size), max_size=2)))
    sizes = np.diff([0, *cuts, size]).tolist()
    return b.model("Split", [x, b.ints("split", sizes)], outputs=len(sizes), axis=axis)


def _slice(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1, 4, 5)
    rank = len(shape)
    axes = draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                         unique_by=lambda a: a % rank))
    starts, ends, steps = [], [], []
    for axis in axes:
        dim = shape[axis]
        step = draw(st.sampled_from([1, 1, 2, -1, -2]))
        starts.append(draw(st.integers(-dim - 1, dim + 1)))
        ends.append(draw(st.sampled_from([draw(st.integers(-dim - 1, dim + 1)), 2**62, -2**62])))
        steps.append(step)
    as_input = draw(st.booleans())
    inputs = [b.tensor("x", shape), b.ints("starts", starts, as_input=as_input),
              b.ints("ends", ends, as_input=as_input), b.ints("axes", axes)]
    if draw(st.booleans()) or any(s != 1 for s in steps):
        inputs.append(b.ints("steps", steps))
    return b.model("Slice", inputs)


def _gather(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    index_shape = _shape(draw, 0, 2, 4)
    indices = b.rng.integers(-dim, dim, size=index_shape)  # repeats and negatives
    return b.model("Gather", [b.tensor("x", shape), b.ints("i", indices, as_input=True)],
                   axis=axis)


def _gather_elements(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    index_shape = list(shape)
    index_shape[axis] = draw(st.integers(1, 4))
    indices = b.rng.integers(-shape[axis], shape[axis], size=index_shape)
    return b.model("GatherElements", [b.tensor("x", shape),
                                      b.ints("i", indices, as_input=True)], axis=axis)


def _gather_nd(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1)
    depth = draw(st.integers(1, len(shape)))
    batch = _shape(draw, 0, 2, 3)
    indices = np.stack([b.rng.integers(0, shape[i], size=batch) for i in range(depth)], -1)
    return b.model("GatherND", [b.tensor("x", shape), b.ints("i", indices, as_input=True)])


def _scatter_nd(draw: Draw) -> Case:
    """Distinct indices (ONNX leaves repeated ones undefined without a reduction)."""
    b = _Builder(draw)
    shape = _shape(draw, 1)
    depth = draw(st.integers(1, len(shape)))
    cells = int(np.prod(shape[:depth]))
    count = draw(st.integers(1, cells))
    chosen = b.rng.choice(cells, size=count, replace=False)
    indices = np.stack(np.unravel_index(chosen, shape[:depth]), -1).astype(np.int64)
    reduction = draw(st.sampled_from(["none", "add"]))
    return b.model("ScatterND", [b.tensor("x", shape), b.ints("i", indices, as_input=True),
                                 b.tensor("u", (count, *shape[depth:]))],
                   reduction=reduction)


def _pad(draw: Draw) -> Case:
    opset = draw(st.sampled_from([13, 18, 21]))
    b = _Builder(draw, opset)
    shape = _shape(draw, 1, 3, 4)
    rank = len(shape)
    if opset >= 18 and draw(st.booleans()):
        axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, unique=True))
    else:
        axes = None
    count = len(axes) if axes is not None else rank
    chosen = [*axes] if axes is not None else list(range(rank))
    pads = [draw(st.integers(-(shape[a] - 1) // 2, 2)) for a in chosen] + \
           [draw(st.integers(-(shape[a] - 1) // 2, 2)) for a in chosen]
    inputs = [b.tensor("x", shape), b.ints("pads", pads, as_input=draw(st.booleans()))]
    if axes is not None:
        inputs += ["", b.ints("axes", axes)]
    del count
    return b.model("Pad", inputs, mode="constant")


def _tile(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 1, 3, 3)
    repeats = [draw(st.integers(1, 3)) for _ in shape]
    return b.model("Tile", [b.tensor("x", shape), b.ints("r", repeats)])


def _trilu(draw: Draw) -> Case:
    b = _Builder(draw)
    shape = _shape(draw, 2, 4, 4)
    inputs = [b.tensor("x", shape)]
    if draw(st.booleans()):
        inputs.append(b.ints("k", np.array(draw(st.integers(-3, 3)))))
    return b.model("Trilu", inputs, upper=int(draw(st.booleans())))


# ================================================================ reductions
def _reduction(op_type: str, low: float | None = None) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        opset = draw(st.sampled_from([13, 18, 21]))
        b = _Builder(draw, opset)
        shape = _shape(draw, 1)
        rank = len(shape)
        axes = draw(st.none() | st.lists(st.integers(-rank, rank - 1), min_size=1,
                                          unique_by=lambda a: a % rank))
        keepdims = int(draw(st.booleans()))
        x = b.tensor("x", shape, low, None if low is None else 2.0)
        as_input = opset >= (13 if op_type == "ReduceSum" else 18)
        if axes is None:
            return b.model(op_type, [x], keepdims=keepdims)
        if as_input:
            return b.model(op_type, [x, b.ints("axes", axes, as_input=draw(st.booleans()))],
                           keepdims=keepdims)
        return b.model(op_type, [x], axes=axes, keepdims=keepdims)
    return case


# ==================================================================== conv
def _conv(draw: Draw) -> Case:
    b = _Builder(draw)
    n = draw(st.integers(1, 3))
    group = draw(st.sampled_from([1, 1, 2, 3]))
    per_group_in = draw(st.integers(1, 2))
    per_group_out = draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(n)]
    strides = [draw(st.integers(1, 3)) for _ in range(n)]
    dilations = [draw(st.integers(1, 2)) for _ in range(n)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * n)]
    spatial = []
    for i in range(n):
        reach = (kernel[i] - 1) * dilations[i] + 1
        low = max(1, reach - pads[i] - pads[n + i])
        spatial.append(draw(st.integers(low, low + (4 if n < 3 else 2))))
    x = b.tensor("x", [draw(st.integers(1, 2)), group * per_group_in, *spatial])
    w = b.tensor("w", [group * per_group_out, per_group_in, *kernel])
    inputs = [x, w]
    if draw(st.booleans()):
        inputs.append(b.tensor("b", [group * per_group_out]))
    return b.model("Conv", inputs, group=group, kernel_shape=kernel, strides=strides,
                   dilations=dilations, pads=pads)


def _pool(op_type: str) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw)
        n = draw(st.integers(1, 2))
        kernel = [draw(st.integers(1, 3)) for _ in range(n)]
        strides = [draw(st.integers(1, 2)) for _ in range(n)]
        pads = [draw(st.integers(0, k - 1)) for k in kernel] * 2
        spatial = [draw(st.integers(k, k + 3)) for k in kernel]
        x = b.tensor("x", [draw(st.integers(1, 2)), draw(st.integers(1, 2)), *spatial])
        attributes: dict[str, Any] = {"kernel_shape": kernel, "strides": strides, "pads": pads}
        attributes["ceil_mode"] = int(draw(st.booleans()))
        if op_type == "AveragePool":
            attributes["count_include_pad"] = int(draw(st.booleans()))
        else:
            attributes["dilations"] = [draw(st.integers(1, 2)) for _ in range(n)]
            reach = [(k - 1) * d + 1 for k, d in zip(kernel, attributes["dilations"],
                                                     strict=True)]
            if any(r > s + 2 * p for r, s, p in zip(reach, spatial, pads[:n], strict=True)):
                attributes["dilations"] = [1] * n
        return b.model(op_type, [x], **attributes)
    return case


def _global_pool(op_type: str) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw)
        shape = [draw(st.integers(1, 2)), draw(st.integers(1, 3)), *_shape(draw, 1, 2, 4)]
        return b.model(op_type, [b.tensor("x", shape)])
    return case


# ================================================================= resizing
def _resize(draw: Draw) -> Case:
    b = _Builder(draw)
    spatial = _shape(draw, 1, 2, 4)
    x = b.tensor("x", [draw(st.integers(1, 2)), draw(st.integers(1, 2)), *spatial])
    mode = draw(st.sampled_from(["nearest", "linear", "cubic"]))
    attributes: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": draw(
        st.sampled_from(["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                         "half_pixel_symmetric"]))}
    if mode == "nearest":
        attributes["nearest_mode"] = draw(st.sampled_from(
            ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
    else:
        attributes["antialias"] = int(draw(st.booleans()))
    if mode == "cubic":
        attributes["exclude_outside"] = int(draw(st.booleans()))
        attributes["cubic_coeff_a"] = draw(st.sampled_from([-0.75, -0.5]))
    axes = list(range(2, 2 + len(spatial)))
    if draw(st.booleans()):  # scales (and sizes) for the spatial axes only
        attributes["axes"] = axes
        sizes_of = spatial
    else:
        axes = list(range(2 + len(spatial)))
        sizes_of = [1] * 2 + spatial
    if draw(st.booleans()):
        factors = [draw(st.sampled_from([0.5, 0.75, 1.0, 1.5, 2.0, 2.5])) if a >= 2 else 1.0
                   for a in axes]
        factors = [f if int(d * f) >= 1 else 1.0 for d, f in zip(sizes_of[-len(axes):],
                                                                 factors, strict=True)]
        b.initializers.append(numpy_helper.from_array(np.array(factors, np.float32), "scales"))
        inputs = [x, "", "scales"]
    else:
        sizes = [draw(st.integers(1, 6)) if a >= 2 else d
                 for a, d in zip(axes, sizes_of[-len(axes):], strict=True)]
        inputs = [x, "", "", b.ints("sizes", sizes)]
    return b.model("Resize", inputs, **attributes)


# =================================================================== losses
def _cross_entropy(op_type: str) -> Callable[[Draw], Case]:
    def case(draw: Draw) -> Case:
        b = _Builder(draw)
        n, c = draw(st.integers(1, 4)), draw(st.integers(2, 5))
        extra = _shape(draw, 0, 2, 3)
        scores = b.tensor("scores", [n, c, *extra])
        labels = b.rng.integers(0, c, size=[n, *extra])
        attributes: dict[str, Any] = {"reduction": draw(st.sampled_from(["mean", "sum",
                                                                          "none"]))}
        if draw(st.booleans()):
            attributes["ignore_index"] = int(draw(st.integers(0, c - 1)))
            labels.reshape(-1)[0] = attributes["ignore_index"]
        inputs = [scores, b.ints("labels", labels, as_input=True)]
        if draw(st.booleans()):
            inputs.append(b.tensor("weights", [c], 0.5, 2.0))
        outputs = 1
        if op_type == "SoftmaxCrossEntropyLoss" and draw(st.booleans()):
            outputs = 2
        return b.model(op_type, inputs, outputs=outputs, **attributes)
    return case


# ================================================================= spectral
def _dft(draw: Draw) -> Case:
    opset = draw(st.sampled_from([17, 20]))
    b = _Builder(draw, opset=opset)
    inverse, onesided = int(draw(st.booleans())), int(draw(st.booleans()))
    signal = _shape(draw, 1, 3, 5)
    rank = len(signal) + 1
    axis = draw(st.integers(0, rank - 2))
    position = axis
    if draw(st.booleans()):
        axis -= rank
    complex_input = (inverse and onesided) or (not onesided and draw(st.booleans()))
    length = draw(st.sampled_from([None, 1, 2, 3, 4, 5, 6, 7, 8]))
    if inverse and onesided:  # IRFFT: its input holds length // 2 + 1 bins, a known number
        if length is None:
            length = None if signal[position] >= 2 else 2
        if length is not None:
            signal[position] = length // 2 + 1
            b.dynamic = False
    x = b.tensor("x", [*signal, 2 if complex_input else 1])
    attributes: dict[str, Any] = {"inverse": inverse, "onesided": onesided}
    inputs = [x, ""]
    if length is not None:
        fed = not (inverse and onesided) and draw(st.booleans())
        inputs[1] = b.ints("dft_length", np.array(length), as_input=fed)
    if opset >= 20:
        fed = not (inverse and onesided and length is not None) and draw(st.booleans())
        inputs.append(b.ints("axis", np.array(axis), as_input=fed))
    else:
        attributes["axis"] = axis
    while not inputs[-1]:
        inputs.pop()
    return b.model("DFT", inputs, **attributes)


CASES: dict[str, Callable[[Draw], Case]] = {
    "Add": _binary("Add"), "Sub": _binary("Sub"), "Mul": _binary("Mul"),
    "Div": _binary("Div", b={"away_from_zero": True}),
    "Pow": _binary("Pow", a={"low": 0.5, "high": 2.0}),
    "Max": _variadic("Max"), "Min": _variadic("Min"), "Sum": _variadic("Sum"),
    "Mean": _variadic("Mean"), "Where": _where, "PRelu": _prelu,
    "Neg": _unary("Neg"), "Sqrt": _unary("Sqrt", 0.2, 3.0),
    "Reciprocal": _unary("Reciprocal", away_from_zero=True), "Exp": _unary("Exp"),
    "Log": _unary("Log", 0.2, 3.0), "Tanh": _unary("Tanh"), "Sigmoid": _unary("Sigmoid"),
    "Erf": _unary("Erf"), "Relu": _unary("Relu"),
    "LeakyRelu": _unary("LeakyRelu", attributes=_alpha(0.01, 0.5)),
    "Elu": _unary("Elu", attributes=_alpha(0.5, 2.0)),
    "Selu": _unary("Selu", attributes=_alpha(1.0, 2.0)),
    "Celu": _unary("Celu", attributes=_alpha(0.5, 2.0)), "Softplus": _unary("Softplus"),
    "Softsign": _unary("Softsign"), "Abs": _unary("Abs"), "Sin": _unary("Sin"),
    "Cos": _unary("Cos"), "HardSigmoid": _unary("HardSigmoid", attributes=_alpha(0.1, 0.3)),
    "HardSwish": _unary("HardSwish", -5.0, 5.0),
    "ThresholdedRelu": _unary("ThresholdedRelu", attributes=_alpha(0.1, 1.0)),
    "Gelu": _gelu, "Clip": _clip, "Identity": _unary("Identity"), "Cast": _cast("Cast"),
    "CastLike": _cast("CastLike"), "Dropout": _dropout,
    "MatMul": _matmul, "Gemm": _gemm, "Einsum": _einsum,
    "Softmax": _softmax("Softmax"), "LogSoftmax": _softmax("LogSoftmax"),
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Transpose": _transpose, "Expand": _expand, "Concat": _concat, "Split": _split,
    "Slice": _slice, "Gather": _gather, "GatherElements": _gather_elements,
    "GatherND": _gather_nd, "ScatterND": _scatter_nd, "Pad": _pad, "Tile": _tile, "Trilu": _trilu,
    "ReduceSum": _reduction("ReduceSum"), "ReduceMean": _reduction("ReduceMean"),
    "ReduceMax": _reduction("ReduceMax"), "ReduceMin": _reduction("ReduceMin"),
    "ReduceSumSquare": _reduction("ReduceSumSquare"), "ReduceL1": _reduction("ReduceL1"),
    "ReduceL2": _reduction("ReduceL2"), "ReduceLogSumExp": _reduction("ReduceLogSumExp"),
    "Conv": _conv, "MaxPool": _pool("MaxPool"), "AveragePool": _pool("AveragePool"),
    "GlobalAveragePool": _global_pool("GlobalAveragePool"),
    "GlobalMaxPool": _global_pool("GlobalMaxPool"), "Resize": _resize, "DFT": _dft,
    "SoftmaxCrossEntropyLoss": _cross_entropy("SoftmaxCrossEntropyLoss"),
    "NegativeLogLikelihoodLoss": _cross_entropy("NegativeLogLikelihoodLoss"),
}
"""A strategy body per operator: ``CASES[op](draw) -> (model, feeds)``."""


def case_strategy(op_type: str) -> st.SearchStrategy[Case]:
    """The hypothesis strategy of ``op_type``'s cases."""
    return st.composite(CASES[op_type])()


# ==================================================================== running
class Tally:
    """What the random checks of one operator found."""

    def __init__(self) -> None:
        self.examples = 0
        self.passed = 0  # examples whose every checked direction agreed
        self.directions = 0
        self.kinks = 0
        self.max_error = 0.0
        self.backends: set[str] = set()


def run_random(op_type: str, max_examples: int) -> Tally:
    """Check ``max_examples`` random cases of ``op_type``; raise on the first mismatch.

    Examples are derandomized (the same ones every run); hypothesis shrinks a
    failing one before it is reported.
    """
    from _gradcheck import check_gradients
    from hypothesis import HealthCheck, given, settings

    tally = Tally()

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case_strategy(op_type))
    def check(case: Case) -> None:
        model, feeds = case
        outcome = check_gradients(model, feeds)
        assert not outcome.failures, (
            f"{op_type}: {outcome.failures[:3]}\n{onnx.printer.to_text(model)}\n"
            f"inputs: { {k: v.tolist() for k, v in feeds.items()} }")
        tally.examples += 1
        tally.passed += bool(outcome.passed)
        tally.directions += outcome.passed
        tally.kinks += outcome.skipped
        tally.max_error = max(tally.max_error, outcome.max_error)
        tally.backends.add(outcome.backend)

    check()
    return tally
