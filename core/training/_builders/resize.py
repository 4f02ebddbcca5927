"""Resizing: ``Resize`` (nearest, linear and cubic, every coordinate mode but cropping).

``Resize`` is linear in X and separable: along each resized axis ``a`` it multiplies by
an ``out x in`` interpolation matrix ``M_a``, whatever the mode (``nearest``,
``linear``, ``cubic`` with its ``cubic_coeff_a`` and ``exclude_outside``, ``antialias``)
and coordinate mode (``half_pixel``, ``pytorch_half_pixel``, ``align_corners``,
``asymmetric`` ...). So dX is dY multiplied by ``M_a^T`` along each resized axis.

The builder does not re-derive the interpolation formulas: it asks ``Resize`` itself
for ``M_a^T``, by resizing an ``in x in`` identity matrix along its second axis with
the node's attributes and that axis's scale (or output size). The matrix is exactly
what the forward node computes, for every mode the runtime implements, and it is
built at run time from the shapes, so dynamic sizes need nothing more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from graphpass.training._builder import BuilderResult, GradientContext, Refusal
from graphpass.training._builders._common import FIRST, builder, rank_known
from graphpass.training.rules import AttributeIn, Check, NodeSite

__all__ = ["BUILDERS"]

_SCALE_ONE_IS_IDENTITY = frozenset({"half_pixel", "pytorch_half_pixel", "align_corners",
                                    "asymmetric", "half_pixel_symmetric"})
"""Coordinate modes that map each output position to itself when the scale is 1."""

_COPIED = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
           "exclude_outside", "antialias")
"""The attributes that decide the interpolation matrix (copied onto the matrix's ``Resize``)."""


def _keeps_aspect_ratio(site: NodeSite) -> bool:
    node = site.node
    policy = node.attribute("keep_aspect_ratio_policy", "stretch")
    sizes = node.inputs[3] if len(node.inputs) > 3 else ""
    return bool(sizes) and policy != "stretch"


@builder("Resize", FIRST, since=13, refusals=(
    rank_known(0),
    Refusal((AttributeIn("coordinate_transformation_mode", ("tf_crop_and_resize",)),),
            "a crop's positions outside the region read the extrapolation value, not X",
            "crop with Slice, then Resize with another coordinate_transformation_mode"),
    Refusal((Check("keep-aspect-ratio", "sizes are given with keep_aspect_ratio_policy "
                   "not_larger or not_smaller", _keeps_aspect_ratio),),
            "the scale shared by every axis is not the one each axis's size gives",
            "give scales instead of sizes, or keep_aspect_ratio_policy stretch")),
    description="dX = dY times M_a^T along each resized axis a, M_a^T = Resize(I) of an "
                "identity along that axis")
def _resize(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    x, y = ctx.input(0), ctx.output(0)
    rank = ctx.rank(x)
    scales = ctx.input(2)
    scale_values = ctx.constant_value(scales) if scales else None
    if scale_values is not None and np.size(scale_values) == 0:  # an empty tensor: sizes
        scales, scale_values = "", None
    axes = [int(a) % rank for a in ctx.attribute("axes", range(rank))]
    coordinates = str(ctx.attribute("coordinate_transformation_mode", "half_pixel"))
    x_shape, y_shape = ctx.type_of(x).shape, ctx.type_of(y).shape
    grad = dy
    for position, axis in reversed(list(enumerate(axes))):
        if coordinates in _SCALE_ONE_IS_IDENTITY and (
                (scale_values is not None and float(np.ravel(scale_values)[position]) == 1.0)
                or (not scales and _same_dimension(x_shape, y_shape, axis))):
            continue
        matrix = _interpolation_matrix(ctx, x, y, dy, axis, position, scales)  # [in, out]
        grad = _apply_along(ctx, grad, matrix, axis, rank)
    return [grad]


def _same_dimension(first: tuple[Any, ...] | None, second: tuple[Any, ...] | None,
                    axis: int) -> bool:
    """Whether both shapes declare ``axis`` as one number or one symbolic name."""
    if first is None or second is None or axis >= min(len(first), len(second)):
        return False
    return first[axis] is not None and first[axis] == second[axis]


def _interpolation_matrix(ctx: GradientContext, x: str, y: str, dy: str, axis: int,
                          position: int, scales: str) -> str:
    """``M^T`` of ``axis`` (``in x out``): ``Resize`` of an identity along its axis 1."""
    e = ctx.emit
    size = e.dims(x, axis, axis + 1)  # [in]
    steps = e.op("Range", e.constant(np.array(0, dtype=np.int64)), e.squeeze(size, [0]),
                 e.constant(np.array(1, dtype=np.int64)))
    identity = e.cast_like(e.op("Equal", e.unsqueeze(steps, [1]), e.unsqueeze(steps, [0])), x)
    attributes: dict[str, Any] = {}
    for name in _COPIED:
        value = ctx.attribute(name)
        if value is not None and (name != "antialias" or ctx.opset >= 18):
            attributes[name] = value
    if scales:  # scales are float32, whatever X is
        known = ctx.constant_value(scales)
        if known is not None:
            pair = e.constant(np.array([1.0, float(np.ravel(known)[position])], np.float32))
        else:
            scale = e.op("Slice", scales, e.ints([position]), e.ints([position + 1]))
            if ctx.type_of(scales).elem_type != onnx.TensorProto.FLOAT:
                scale = e.op("Cast", scale, to=onnx.TensorProto.FLOAT)
            pair = e.op("Concat", e.constant(np.array([1.0], np.float32)), scale, axis=0)
        return e.op("Resize", identity, "", pair, **attributes)
    y_shape = ctx.static_shape(y)  # else dY's: the backward pass need not keep Y
    out = e.ints(y_shape[axis:axis + 1]) if y_shape is not None else e.shape(dy, axis, axis + 1)
    pair = e.op("Concat", size, out, axis=0)
    return e.op("Resize", identity, "", "", pair, **attributes)


def _apply_along(ctx: GradientContext, grad: str, matrix: str, axis: int, rank: int) -> str:
    """``grad`` (``out`` long on ``axis``) times ``matrix`` (``in x out``): ``in`` long there."""
    e = ctx.emit
    if axis == rank - 1:
        return e.op("MatMul", grad, e.transpose(matrix, [1, 0]))
    if axis == rank - 2:
        return e.op("MatMul", matrix, grad)
    swap = list(range(rank))
    swap[axis], swap[rank - 2] = rank - 2, axis
    return e.transpose(e.op("MatMul", matrix, e.transpose(grad, swap)), swap)


BUILDERS = [_resize]
"""The resizing builders."""
