"""Convolutions and pooling.

``Conv`` (groups, strides, dilations, pads, depthwise), ``MaxPool``, ``AveragePool``,
``GlobalAveragePool``, ``GlobalMaxPool``:

* ``Conv``: dX is the transposed convolution of dY with the same weights; dW of an
  ungrouped convolution (with a static weight shape) is one batched ``MatMul`` of dY
  by X's window positions per kernel tap; of a grouped one, or one with many taps over
  few channels (a 7 x 7 stem over 3 colours, :data:`_TAPS_PER_CHANNEL`), a convolution
  of X (batch and channel axes swapped, per group) with dY as the kernel, strides and
  dilations exchanged; dB sums dY. Input positions no window
  covers (the remainder of a stride) get zeros: ``output_padding`` when the shapes
  are static, a ``Pad`` computed at run time otherwise.
* ``MaxPool``: the forward node also outputs its ``Indices`` (flat positions in X);
  dX scatter-adds dY there.
* ``AveragePool``: a transposed convolution of dY with a constant kernel, divided by
  each window's element count (with or without padding, as the node counts; with
  ``ceil_mode``, the last windows' taps past the padded input never count).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from graphpass.training._builder import BuilderResult, GradientContext, Refusal
from graphpass.training._builders._common import FIRST, builder, rank_known
from graphpass.training.rules import AttributeIn, Check, NodeSite

__all__ = ["BUILDERS"]

_TAPS_PER_CHANNEL = 4
"""An ungrouped weight gradient goes by taps up to this many kernel taps per input channel.

Both forms are matrix products of dY by X's windows: per tap (C wide) or per input
channel (K wide). In onnxruntime (CPU, one gradient run, interleaved): the 7 x 7 stem over
3 colours of the zoo's ResNet at batch 16 (16 taps a channel) took the run from 28 to
19 ms as a convolution; MobileNetV2's 3 x 3 stem at 224 px (3 taps a channel) measured
the same either way (0.574 and 0.579 s); the ungrouped layers past the stems have fewer
taps than channels. 4 lies between the two measured stems.
"""

_SAME = ("SAME_UPPER", "SAME_LOWER")


def _auto_pad_needs_shape(index: int) -> Refusal:
    def unknown(site: NodeSite) -> bool:
        auto_pad = site.node.attribute("auto_pad", "NOTSET")
        return auto_pad in _SAME and _declared_spatial(site.node, index) is None

    return Refusal((Check("same-padding-unknown", "auto_pad is SAME_* and the input's "
                          "spatial shape is not static", unknown),),
                   "SAME padding depends on the input size", "use explicit pads, or give the "
                   "input a static spatial shape")


def _declared_spatial(node: Any, index: int) -> list[int] | None:
    """The static spatial dimensions the model declares for input ``index``, if any.

    Only declarations count (not inference), so that ``lint-gradients`` decides the
    same way (run ``infer-shapes`` to declare them).
    """
    graph = node.graph
    value = graph.values.get(node.inputs[index]) if graph is not None else None
    shape = value.shape if value is not None else None
    if shape is None or not all(isinstance(d, int) for d in shape[2:]):
        return None
    return [int(d) for d in shape[2:]]


def _geometry(ctx: GradientContext, x: str, kernel: list[int]) -> dict[str, list[int]]:
    """Strides, dilations and explicit pads of a convolution or pooling node."""
    n = len(kernel)
    strides = [int(s) for s in ctx.attribute("strides", [1] * n)]
    dilations = [int(d) for d in ctx.attribute("dilations", [1] * n)]
    auto_pad = str(ctx.attribute("auto_pad", "NOTSET"))
    if auto_pad == "VALID":
        pads = [0] * (2 * n)
    elif auto_pad in _SAME:
        spatial = _declared_spatial(ctx.node, 0)
        if spatial is None:  # pragma: no cover - refused before
            raise ctx.error("SAME padding needs a static input shape", "use explicit pads")
        begin, end = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        pads = begin + end
    else:
        pads = [int(p) for p in ctx.attribute("pads", [0] * (2 * n))]
    return {"strides": strides, "dilations": dilations, "pads": pads}


def _output_padding(ctx: GradientContext, x: str, y: str, kernel: list[int],
                    geometry: dict[str, list[int]]) -> list[int] | None:
    """The ``output_padding`` that gives a transposed convolution X's shape, if static.

    ``None`` also when a window-free border is so wide that the padded transposed
    convolution would be empty.
    """
    x_shape, y_shape = ctx.static_shape(x), ctx.static_shape(y)
    if x_shape is None or y_shape is None:
        return None
    n = len(kernel)
    padding = []
    for i in range(n):
        s, d = geometry["strides"][i], geometry["dilations"][i]
        covered = (s * (y_shape[2 + i] - 1) + (kernel[i] - 1) * d + 1
                   - geometry["pads"][i] - geometry["pads"][n + i])
        if covered < 1:
            return None
        padding.append(x_shape[2 + i] - covered)
    return padding


def _transposed(ctx: GradientContext, dy: str, weight: str, x: str, y: str, kernel: list[int],
                geometry: dict[str, list[int]], group: int, *,
                output_shape_known: bool = True) -> str:
    """``ConvTranspose(dy, weight)`` shaped like ``x`` (zeros where no window reached).

    ``output_shape_known=False``: ``y``'s declared shape is not trusted (a pool with
    ``ceil_mode``, whose windows may reach past the padded input).
    """
    e = ctx.emit
    n = len(kernel)
    padding = _output_padding(ctx, x, y, kernel, geometry) if output_shape_known else None
    attributes: dict[str, Any] = {
        "strides": geometry["strides"], "dilations": geometry["dilations"],
        "pads": geometry["pads"], "group": group, "kernel_shape": kernel}
    if padding is not None:
        if any(padding):
            attributes["output_padding"] = padding
        return e.op("ConvTranspose", dy, weight, **attributes)
    # Otherwise: the whole transposed convolution over the padded input, X's part of it
    # cut out, and zeros for the end positions no window covered.
    attributes["pads"] = [0] * (2 * n)
    full = e.op("ConvTranspose", dy, weight, **attributes)
    begin = e.ints(geometry["pads"][:n])
    sizes = e.shape(x, 2)
    cut = e.op("Slice", full, begin, e.op("Add", begin, sizes), e.ints(range(2, n + 2)))
    missing = e.op("Sub", sizes, e.shape(cut, 2))
    pads = e.op("Concat", e.ints([0] * (n + 4)), missing, axis=0)  # begins, then N and C
    return e.op("Pad", cut, pads, mode="constant")


@builder("Conv", frozenset({0, 1, 2}), refusals=(rank_known(1), _auto_pad_needs_shape(0)),
         description="dX = ConvTranspose(dY, W); dW = sum_n dY X(tap)^T per tap (depthwise: "
                     "sum(dY X(tap))), or Conv(X^T, dY^T) per group; dB = sum(dY)")
def _conv(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, w, b, y = ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0)
    rank = ctx.rank(w)
    n = rank - 2
    w_shape = ctx.static_shape(w)
    kernel = [int(k) for k in ctx.attribute("kernel_shape", w_shape[2:] if w_shape else [])]
    if len(kernel) != n:
        raise ctx.error("the kernel shape is unknown", "give the weight a static shape")
    geometry = _geometry(ctx, x, kernel)
    group = int(ctx.attribute("group", 1))
    grads: dict[int, str | None] = {}
    if ctx.needs(0):
        grads[0] = _transposed(ctx, dy, w, x, y, kernel, geometry, group)
    if ctx.needs(1):
        grads[1] = _weight_gradient(ctx, x, w, dy, n, geometry, group)
    if ctx.needs(2) and b:
        grads[2] = e.reduce_sum(dy, [0, *range(2, rank)], keepdims=False)
    return grads


def _weight_gradient(ctx: GradientContext, x: str, w: str, dy: str, n: int,
                     geometry: dict[str, list[int]], group: int) -> str:
    e = ctx.emit
    spatial = list(range(2, n + 2))
    w_shape = ctx.static_shape(w)
    if group == 1 and w_shape is not None and (
            math.prod(w_shape[2:]) <= _TAPS_PER_CHANNEL * int(w_shape[1])):
        return _weight_gradient_by_taps(ctx, x, dy, [int(d) for d in w_shape], geometry)
    if (w_shape is not None and w_shape[0] == group and w_shape[1] == 1
            and all(s == 1 for s in geometry["strides"])):
        return _depthwise_weight_gradient(ctx, x, dy, [int(d) for d in w_shape], geometry)
    if group == 1:
        x_t = e.transpose(x, [1, 0, *spatial])  # [C, N, S]
    else:
        x_dims, w_dims = e.dims(x), e.dims(w)
        per_group = e.op("Slice", w_dims, e.ints([1]), e.ints([2]))  # C / group
        grouped = e.reshape(x, e.op("Concat", e.op("Slice", x_dims, e.ints([0]), e.ints([1])),
                                    e.ints([group]), per_group,
                                    e.op("Slice", x_dims, e.ints([2]), e.ints([n + 2])), axis=0))
        swapped = e.transpose(grouped, [2, 1, 0, *range(3, n + 3)])  # [C/g, g, N, S]
        x_t = e.reshape(swapped, e.op("Concat", per_group, e.ints([-1]),
                                      e.op("Slice", x_dims, e.ints([2]), e.ints([n + 2])),
                                      axis=0))
    kernel_t = e.transpose(dy, [1, 0, *spatial])  # [M, N, O]
    full = e.op("Conv", x_t, kernel_t, strides=geometry["dilations"],
                dilations=geometry["strides"], pads=geometry["pads"], group=group)
    ends = e.ints(w_shape[2:]) if w_shape is not None else e.shape(w, 2)
    cut = e.op("Slice", full, e.ints([0] * n), ends, e.ints(spatial))
    return e.transpose(cut, [1, 0, *spatial])  # [M, C/g, K]


def _tap_windows(ctx: GradientContext, x: str, dy: str, kernel: list[int],
                 geometry: dict[str, list[int]]) -> Iterator[str]:
    """Per kernel tap, the positions of the (padded) input that tap reads.

    Each is shaped like dY's spatial axes: a strided ``Slice``, or the input itself for
    a 1 x 1 kernel without pads or strides. A generator, so that each window's
    ``Slice`` is emitted next to the product that reads it: emitted all first, every
    window of a layer (each as large as its input) is held at once, 23 MB more at the
    peak of MobileNetV2 at 224 px.
    """
    e = ctx.emit
    n = len(kernel)
    strides, dilations, pads = geometry["strides"], geometry["dilations"], geometry["pads"]
    if all(k == 1 for k in kernel) and all(s == 1 for s in strides) and not any(pads):
        yield x
        return
    padded = x
    if any(pads):
        padded = e.op("Pad", x, e.ints([0, 0, *pads[:n], 0, 0, *pads[n:]]), mode="constant")
    spatial = list(range(2, n + 2))
    # the last window start: (out - 1) * stride; a tap at offset o reads o*d up to that + 1
    last = e.op("Mul", e.op("Sub", e.shape(dy, 2), e.ints([1] * n)), e.ints(strides))
    for offset in itertools.product(*(range(k) for k in kernel)):
        begin = [o * d for o, d in zip(offset, dilations, strict=True)]
        yield e.op("Slice", padded, e.ints(begin),
                   e.op("Add", last, e.ints([b + 1 for b in begin])),
                   e.ints(spatial), e.ints(strides))


def _stacked_taps(ctx: GradientContext, taps: list[str], axis: int, w_shape: list[int]) -> str:
    """The per-tap gradients stacked on ``axis`` and shaped as the weight."""
    e = ctx.emit
    stacked = taps[0] if len(taps) == 1 else e.op(
        "Concat", *(e.unsqueeze(t, [axis]) for t in taps), axis=axis)
    return e.reshape(stacked, w_shape)


def _weight_gradient_by_taps(ctx: GradientContext, x: str, dy: str, w_shape: list[int],
                             geometry: dict[str, list[int]]) -> str:
    """DW of an ungrouped convolution as one matrix product per kernel tap.

    For the tap at offset ``k``, ``dW[:, :, k] = sum_n dY_n X_n(k)^T`` where ``X_n(k)``
    is what :func:`_tap_windows` gives. Each product is a batched ``MatMul`` of
    ``[N, M, P]`` by ``[N, P, C]``: onnxruntime runs the convolution with a kernel as large
    as the output (the textbook formulation) as C matrix-vector products, ten to forty
    times slower on MobileNetV2's and ResNet's layers.
    """
    e = ctx.emit
    grad_rows = e.reshape(dy, [0, 0, -1])  # [N, M, P]
    taps = [e.reduce_sum(e.op("MatMul", grad_rows, e.transpose(
        e.reshape(window, [0, 0, -1]), [0, 2, 1])), [0], keepdims=False)  # [M, C]
        for window in _tap_windows(ctx, x, dy, w_shape[2:], geometry)]
    return _stacked_taps(ctx, taps, 2, w_shape)


def _depthwise_weight_gradient(ctx: GradientContext, x: str, dy: str, w_shape: list[int],
                               geometry: dict[str, list[int]]) -> str:
    """DW of a stride-1 depthwise convolution: per tap, ``sum(dY * X(tap))`` over N and S.

    About 1.5x faster in onnxruntime than the grouped convolution with dY as its kernel;
    with strides the window ``Slice`` is the slower one, so those keep the convolution.
    """
    e = ctx.emit
    spatial = list(range(2, len(w_shape)))
    taps = [e.reduce_sum(e.op("Mul", dy, window), [0, *spatial], keepdims=False)  # [C]
            for window in _tap_windows(ctx, x, dy, w_shape[2:], geometry)]
    return _stacked_taps(ctx, taps, 1, w_shape)


# ==================================================================== pooling
@builder("MaxPool", FIRST, since=16, refusals=(Refusal(
    (AttributeIn("storage_order", (1,)),),
    "the indices of a column-major MaxPool are not flat positions of X",
    "use storage_order 0"),),
    description="dX = scatter-add of dY at the forward node's Indices output")
def _max_pool(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x = ctx.input(0)
    indices = ctx.require_output(1)
    zeros = e.filled(e.unsqueeze(e.op("Size", x), [0]), 0.0, like=x)
    flat = e.op("ScatterElements", zeros, e.reshape(indices, [-1]), e.reshape(dy, [-1]),
                axis=0, reduction="add")
    return [e.reshape_like(flat, x)]


@builder("AveragePool", FIRST, refusals=(rank_known(0), _auto_pad_needs_shape(0)),
         description="dX = ConvTranspose(dY / count, ones) over N*C single-channel maps")
def _average_pool(ctx: GradientContext) -> BuilderResult:
    """DX spreads each ``dY / count`` over its window.

    ``count`` is the number of elements the window averages: all its taps with
    ``count_include_pad``, else the taps that read X. With ``ceil_mode`` the last
    windows may reach past the padded input: those taps are never counted (as torch
    and onnxruntime count), and the output sizes are read at run time, since
    ``onnx``'s shape inference keeps a last window that starts in the end padding,
    which torch and the runtimes drop.
    """
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, y = ctx.input(0), ctx.output(0)
    rank = ctx.rank(x)
    n = rank - 2
    kernel = [int(k) for k in ctx.attribute("kernel_shape")]
    geometry = _geometry(ctx, x, kernel)
    include_pad = bool(ctx.attribute("count_include_pad", 0))
    ceil = bool(ctx.attribute("ceil_mode", 0))
    ones_kernel = e.constant(np.ones([1, 1, *kernel]), ctx.type_of(x).elem_type or 1)
    x_dims = e.dims(x)
    spatial = e.op("Slice", x_dims, e.ints([2]), e.ints([rank]))
    maps = e.reshape(dy, e.op("Concat", e.ints([-1, 1]), e.shape(dy, 2), axis=0))
    pads = geometry["pads"]
    if not ceil and (include_pad or not any(pads)):
        scaled = e.op("Div", maps, e.scalar(float(np.prod(kernel)), like=x))
    else:
        counted = e.filled(e.op("Concat", e.ints([1, 1]), spatial, axis=0), 1.0, like=x)
        conv_pads = pads
        if include_pad:  # the padding counts: ones there too
            counted = e.op("Pad", counted, e.ints([0, 0, *pads[:n], 0, 0, *pads[n:]]),
                           e.scalar(1.0, like=x), mode="constant")
            conv_pads = [0] * (2 * n)
        if ceil:  # zeros past the padded input, as far as the last window reaches
            reach = [(k - 1) * d + 1 for k, d in zip(kernel, geometry["dilations"], strict=True)]
            last_end = e.op("Add", e.op("Mul", e.op("Sub", e.shape(dy, 2), e.ints([1] * n)),
                                        e.ints(geometry["strides"])), e.ints(reach))
            padded = e.op("Add", spatial, e.ints([b + a for b, a in zip(pads[:n], pads[n:],
                                                                        strict=True)]))
            beyond = e.op("Max", e.op("Sub", last_end, padded), e.ints([0] * n))
            counted = e.op("Pad", counted, e.op("Concat", e.ints([0] * (n + 4)), beyond,
                                                axis=0), mode="constant")
        counts = e.op("Conv", counted, ones_kernel, strides=geometry["strides"],
                      dilations=geometry["dilations"], pads=conv_pads)
        scaled = e.op("Div", maps, counts)
    spread = _transposed(ctx, scaled, ones_kernel, x, y, kernel, geometry, 1,
                         output_shape_known=not ceil)
    return [e.reshape(spread, x_dims)]


@builder("GlobalAveragePool", FIRST, description="dX = expand(dY) / (spatial size)")
def _global_average_pool(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, y = ctx.input(0), ctx.output(0)
    count = e.op("Div", e.cast_like(e.op("Size", x), x), e.cast_like(e.op("Size", y), x))
    return [e.op("Div", e.op("Expand", dy, e.dims(x)), count)]


@builder("GlobalMaxPool", FIRST, refusals=(rank_known(0),),
         description="dX = dY where X equals the max, split between ties")
def _global_max_pool(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    x, y = ctx.input(0), ctx.output(0)
    rank = ctx.rank(x)
    mask = e.cast_like(e.op("Equal", x, y), x)
    ties = e.reduce_sum(mask, list(range(2, rank)), keepdims=True)
    return [e.op("Mul", mask, e.op("Div", dy, ties))]


BUILDERS = [_conv, _max_pool, _average_pool, _global_average_pool, _global_max_pool]
"""The convolution and pooling builders."""
