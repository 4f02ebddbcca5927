"""Operators that move data.

Reshapes, transposes, concatenation, splitting, slicing, gathering, scattering, padding,
tiling, ``Expand`` and ``Trilu``.

Their gradients move the gradient back: a reshape reshapes it back, a gather
scatters it (adding where an index repeats: ``ScatterND``/``ScatterElements`` with
``reduction="add"``, opset 16), a slice pads it (``Pad`` when the slice is static
with step 1, else a scatter through the flat indices of the sliced elements).
"""

from __future__ import annotations

import numpy as np

from graphpass.training._builder import BuilderResult, GradientContext, Refusal
from graphpass.training._builders._common import FIRST, builder, rank_known
from graphpass.training._emit import Emitter
from graphpass.training.rules import AttributeNotIn

__all__ = ["BUILDERS"]


def _reshape_back(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    return [ctx.emit.reshape_like(dy, ctx.input(0))]


_RESHAPES = [
    builder(op, FIRST, description="dX = reshape(dY, shape(X))")(_reshape_back)
    for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
]


@builder("Transpose", FIRST, description="dX = transpose(dY, inverse(perm))")
def _transpose(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    perm = ctx.attribute("perm")
    if perm is None:  # reversed axes: its own inverse
        return [ctx.emit.op("Transpose", dy)]
    inverse = [0] * len(perm)
    for position, axis in enumerate(perm):
        inverse[int(axis)] = position
    if [int(p) for p in perm] == [1, 0]:
        swapped = _transposed_product(ctx, dy)
        if swapped is not None:
            return [swapped]
    return [ctx.emit.transpose(dy, inverse)]


def _transposed_product(ctx: GradientContext, dy: str) -> str | None:
    """``(A B)^T`` as ``B^T A^T`` where ``dy`` is a 2-D product the builders emitted.

    A linear layer on a transposed weight (a tied embedding's ``lm_head``: ``X W^T``)
    gets its weight's gradient as ``(X^T dY)^T``: computed as ``dY^T X`` instead, with
    the transposes of the operands cancelled or left to onnxruntime to fuse into the
    product, no product of the weight's size is made and then transposed.
    """
    e = ctx.emit
    node = e.producer(dy)
    if node is None or node.op_type != "MatMul":
        return None
    operands = list(node.inputs)
    if not all(_is_2d(ctx, x) for x in operands):
        return None
    a, b = operands
    return e.op("MatMul", _swapped_2d(e, b) or e.transpose(b, [1, 0]),
                _swapped_2d(e, a) or e.transpose(a, [1, 0]))


def _swapped_2d(e: Emitter, x: str) -> str | None:
    """The input of a ``Transpose(perm=[1, 0])`` the builders emitted for ``x``, if one."""
    node = e.producer(x)
    if node is not None and node.op_type == "Transpose" and \
            [int(p) for p in (node.attribute("perm") or [])] == [1, 0]:
        return str(node.inputs[0])
    return None


def _is_2d(ctx: GradientContext, x: str) -> bool:
    rank = ctx.type_of(x).rank
    if rank is not None:
        return rank == 2
    source = _swapped_2d(ctx.emit, x)
    return source is not None and ctx.type_of(source).rank == 2


@builder("Expand", FIRST, description="dX = sum_to(dY, shape(X))")
def _expand(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    return [ctx.emit.sum_to(dy, ctx.input(0), ctx.output(0))]


@builder("Concat", None, refusals=(rank_known(0),),
         description="dX_i = the i-th piece of dY split along axis")
def _concat(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    inputs = list(ctx.node.inputs)
    rank = ctx.rank(inputs[0])
    axis = int(ctx.attribute("axis", 0)) % rank
    static = [ctx.static_shape(name) for name in inputs]
    if all(shape is not None for shape in static):
        sizes = e.ints([shape[axis] for shape in static if shape is not None])
    else:
        sizes = e.op("Concat", *(e.shape(name, axis, axis + 1) for name in inputs), axis=0)
    pieces = e.ops("Split", dy, sizes, axis=axis, count=len(inputs))
    return {i: pieces[i] for i in ctx.wanted}


@builder("Split", FIRST, refusals=(rank_known(0),),
         description="dX = concat(dY_i, axis), zeros for outputs no gradient reaches")
def _split(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    pieces = []
    for index, name in enumerate(ctx.node.outputs):
        grad = ctx.output_gradient(index)
        pieces.append(grad if grad is not None else e.zeros_like(name))
    axis = int(ctx.attribute("axis", 0))
    return [e.op("Concat", *pieces, axis=axis) if len(pieces) > 1 else pieces[0]]


# ===================================================================== slicing
def _static_pads(ctx: GradientContext) -> list[int] | None:
    """``Pad``'s pads undoing a static step-1 slice, or ``None``."""
    x = ctx.input(0)
    shape = ctx.type_of(x).shape
    if shape is None:
        return None
    rank = len(shape)
    values = [ctx.constant_value(ctx.input(i)) if ctx.has_input(i) else None for i in range(1, 5)]
    starts, ends, axes, steps = values
    if starts is None or ends is None or (ctx.has_input(3) and axes is None) \
            or (ctx.has_input(4) and steps is None):
        return None
    axes_list = [int(a) % rank for a in (axes if axes is not None else range(len(starts)))]
    steps_list = [int(s) for s in (steps if steps is not None else [1] * len(starts))]
    begin, end = [0] * rank, [0] * rank
    for axis, start, stop, step in zip(axes_list, starts, ends, steps_list, strict=True):
        dim = shape[axis]
        if step != 1 or not isinstance(dim, int):
            return None
        first, last, _ = slice(int(start), int(stop), 1).indices(dim)
        last = max(last, first)
        begin[axis], end[axis] = first, dim - last
    return begin + end


def _runtime_pads(ctx: GradientContext) -> str | None:
    """``Pad``'s pads undoing a step-1 slice of dimensions known only at run time, or ``None``.

    The pads follow ``Slice``'s own rules, computed on the shape: a negative start or end
    counts from the end, both are clamped to ``[0, dim]`` and the end to at least the start.
    Padding ``dY`` costs one copy, where scattering it at flat indices would build an index
    tensor of the input's size.
    """
    e = ctx.emit
    x = ctx.input(0)
    shape = ctx.type_of(x).shape
    if shape is None:
        return None
    rank = len(shape)
    axes = ctx.constant_value(ctx.input(3)) if ctx.has_input(3) else None
    steps = ctx.constant_value(ctx.input(4)) if ctx.has_input(4) else None
    if (ctx.has_input(3) and axes is None) or (ctx.has_input(4) and steps is None):
        return None
    if steps is not None and any(int(step) != 1 for step in np.ravel(steps)):
        return None
    count = len(np.ravel(axes)) if axes is not None else None
    if count is None:
        starts_shape = ctx.type_of(ctx.input(1)).shape
        if starts_shape is None or len(starts_shape) != 1 or not isinstance(starts_shape[0], int):
            return None
        count = starts_shape[0]
    axes_list = [int(a) % rank for a in (np.ravel(axes) if axes is not None else range(count))]
    if len(set(axes_list)) != len(axes_list):
        return None
    zero = e.ints([0])
    dims = e.op("Gather", e.dims(x), e.ints(axes_list), axis=0)

    def clamped(index: int) -> str:
        bound = e.cast_like(ctx.input(index), dims)
        negative = e.op("Less", bound, zero)
        counted = e.op("Where", negative, e.op("Add", bound, dims), bound)
        return e.op("Min", e.op("Max", counted, zero), dims)

    begin = clamped(1)
    end = e.op("Max", clamped(2), begin)
    after = e.op("Sub", dims, end)
    pieces = {"begin": begin, "after": after}
    parts = []
    for which in ("begin", "after"):
        for axis in range(rank):
            if axis in axes_list:
                at = axes_list.index(axis)
                parts.append(e.op("Slice", pieces[which], e.ints([at]), e.ints([at + 1])))
            else:
                parts.append(zero)
    return e.op("Concat", *parts, axis=0)


def _scatter_flat(ctx: GradientContext, dy: str, selected: str) -> str:
    """Scatter ``dy`` into zeros shaped like input 0 at the flat indices ``selected``."""
    e = ctx.emit
    x = ctx.input(0)
    zeros = e.filled(e.unsqueeze(e.op("Size", x), [0]), 0.0, like=x)
    flat = e.op("ScatterElements", zeros, e.reshape(selected, [-1]), e.reshape(dy, [-1]),
                axis=0)
    return e.reshape_like(flat, x)


def _flat_indices(ctx: GradientContext) -> str:
    """An ``int64`` tensor shaped like input 0 holding each element's flat index."""
    e = ctx.emit
    x = ctx.input(0)
    zero = e.constant(np.array(0, dtype=np.int64))
    one = e.constant(np.array(1, dtype=np.int64))
    return e.reshape(e.op("Range", zero, e.op("Size", x), one), e.dims(x))


@builder("Slice", FIRST,
         description="dX = pad(dY) for a static step-1 slice, else a scatter of dY")
def _slice(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    pads = _static_pads(ctx)
    if pads is not None:
        if not any(pads):
            return [dy]
        return [e.op("Pad", dy, e.ints(pads), mode="constant")]
    runtime = _runtime_pads(ctx)
    if runtime is not None:
        return [e.op("Pad", dy, runtime, mode="constant")]
    selected = e.op("Slice", _flat_indices(ctx), *ctx.node.inputs[1:])
    return [_scatter_flat(ctx, dy, selected)]


# ===================================================================== gathers
def _normalized_indices(ctx: GradientContext, indices: str, dim: str) -> str:
    e = ctx.emit
    indices = e.cast_like(indices, dim)
    negative = e.op("Less", indices, e.constant(np.array(0, dtype=np.int64)))
    return e.op("Where", negative, e.op("Add", indices, dim), indices)


@builder("Gather", FIRST, since=16, refusals=(rank_known(0, 1),),
         description="dX = scatter-add of dY at the indices (ScatterND)")
def _gather(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, indices = ctx.input(0), ctx.input(1)
    rank, index_rank = ctx.rank(x), ctx.rank(indices)
    axis = int(ctx.attribute("axis", 0)) % rank
    dim = e.dims(x, axis, axis + 1)
    flat_indices = e.reshape(_normalized_indices(ctx, indices, dim), [-1, 1])
    perm_x = [axis, *range(axis), *range(axis + 1, rank)]
    perm_g = [*range(axis, axis + index_rank), *range(axis),
              *range(axis + index_rank, axis + index_rank + rank - 1 - axis)]
    moved = e.transpose(dy, perm_g)
    x_dims = e.dims(x)
    moved_shape = x_dims if axis == 0 else e.op("Gather", x_dims, e.ints(perm_x), axis=0)
    rest = e.op("Slice", moved_shape, e.ints([1]), e.ints([rank]))
    updates = e.reshape(moved, e.op("Concat", e.ints([-1]), rest, axis=0))
    zeros = e.filled(moved_shape, 0.0, like=x)
    scattered = e.op("ScatterND", zeros, flat_indices, updates, reduction="add")
    inverse = [0] * rank
    for position, source in enumerate(perm_x):
        inverse[source] = position
    return [e.transpose(scattered, inverse)]


@builder("GatherElements", FIRST, since=16,
         description="dX = ScatterElements(zeros, indices, dY, axis, reduction=add)")
def _gather_elements(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x = ctx.input(0)
    zeros = e.zeros_like(x)
    return [e.op("ScatterElements", zeros, ctx.input(1), dy,
                 axis=int(ctx.attribute("axis", 0)), reduction="add")]


@builder("GatherND", FIRST, since=16, refusals=(Refusal(
    (AttributeNotIn("batch_dims", (0,), default=0),),
    "the builder handles batch_dims = 0 only", "gather with batch_dims = 0"),),
    description="dX = ScatterND(zeros, indices, dY, reduction=add)")
def _gather_nd(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    return [e.op("ScatterND", e.zeros_like(ctx.input(0)), ctx.input(1), dy, reduction="add")]


@builder("ScatterND", frozenset({0, 2}), since=11, refusals=(Refusal(
    (AttributeNotIn("reduction", ("none", "add"), default="none"),),
    "the builder handles reduction none and add only (mul, max and min make each update's "
    "gradient depend on the data it lands on)", "scatter with reduction none or add"),),
    description="dData = dY, zeroed where updates land unless they add; "
                "dUpdates = GatherND(dY, indices)")
def _scatter_nd(ctx: GradientContext) -> BuilderResult:
    """ScatterND (``x[idx] = u``, torch's ``index_put_``).

    Without a reduction the updates replace what they land on, so the data gets no
    gradient there; ONNX leaves repeated indices undefined then, so each update gets the
    output's gradient where it lands.
    """
    e = ctx.emit
    dy = ctx.output_gradient(0)
    assert dy is not None
    indices, updates = ctx.input(1), ctx.input(2)
    grads: dict[int, str | None] = {}
    if ctx.needs(0):
        adds = str(ctx.attribute("reduction", "none")) == "add"
        grads[0] = dy if adds else e.op("ScatterND", dy, indices, e.zeros_like(updates))
    if ctx.needs(2):
        grads[2] = e.op("GatherND", dy, indices)
    return grads


# ================================================================ pad and tile
@builder("Pad", FIRST, refusals=(Refusal(
    (AttributeNotIn("mode", ("constant",), default="constant"),),
    "only constant padding is differentiated (reflect, edge and wrap add the gradient "
    "of border elements twice)", "pad with mode constant"),),
    description="dX = dY with the padding cut off (a Pad by the negated pads)")
def _pad(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    pads = ctx.constant_value(ctx.input(1))
    negated = e.ints([-int(p) for p in pads]) if pads is not None else e.op("Neg", ctx.input(1))
    axes = ctx.input(3)
    if axes:
        return [e.op("Pad", dy, negated, "", axes, mode="constant")]
    return [e.op("Pad", dy, negated, mode="constant")]


@builder("Tile", FIRST, refusals=(rank_known(0),),
         description="dX = sum of dY's tiles (reshape to [r0, d0, r1, d1, ...], reduce)")
def _tile(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, repeats = ctx.input(0), ctx.input(1)
    rank = ctx.rank(x)
    pairs = e.op("Concat", e.unsqueeze(repeats, [1]), e.unsqueeze(e.dims(x), [1]), axis=1)
    split = e.reshape(dy, e.reshape(pairs, [-1]))
    return [e.reduce_sum(split, [2 * i for i in range(rank)], keepdims=False)]


@builder("Trilu", FIRST, since=14, description="dX = trilu(dY) with the same k and upper")
def _trilu(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    k = ctx.input(1)
    inputs = [dy, k] if k else [dy]
    return [ctx.emit.op("Trilu", *inputs, upper=int(ctx.attribute("upper", 1)))]


BUILDERS = [*_RESHAPES, _transpose, _expand, _concat, _split, _slice, _gather,
            _gather_elements, _gather_nd, _scatter_nd, _pad, _tile, _trilu]
"""The data-movement builders."""
