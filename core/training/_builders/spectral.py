"""Fourier transforms: ``DFT`` (opsets 17 and 20; forward, inverse, one-sided, ``dft_length``).

``DFT`` is linear in X. Complex values are a trailing dimension of 2 (``[re, im]``); a
real X has a trailing 1. Along its axis, of length N, with ``L = dft_length`` (N when
omitted), the forward node computes

    Y = T ∘ F ∘ P ∘ E (X)

where ``E`` embeds a real X into the complex numbers, ``P`` crops or zero-pads N values
to L, ``F`` is the L-point transform (unnormalised for ``inverse=0``, ``conj(F_L) / L``
for ``inverse=1``) and ``T`` keeps the first ``L // 2 + 1`` values when ``onesided=1``.
Read as a real-linear map on ``[re, im]`` pairs, its adjoint is the conjugate transpose:

    dX = E^T ∘ P^T ∘ F^H ∘ T^T (dY)

``T^T`` zero-pads dY back to L, which the backward ``DFT`` does itself when given
``dft_length = L``; ``F^H`` is the opposite transform with the other normalisation
(``L * IDFT`` for a forward node, ``DFT / L`` for an inverse one); ``P^T`` crops or
zero-pads L values back to N; ``E^T`` keeps the real part (``[..., 0:1]``) when X was
real.

The inverse one-sided transform (IRFFT, ``inverse=1, onesided=1``) reads the
``K' = L // 2 + 1`` first bins of its complex input (L defaults to ``2 * (K - 1)`` for K
bins) and returns a real signal of length L:
``x = Re(IDFT_L(w * Z))`` with ``w`` 1 at bin 0 and, for an even L, at bin L / 2, and 2
between (the conjugate half the input leaves out). Its adjoint is
``dZ = w / L * DFT_L(dx)``, cropped or zero-padded to K bins (``w`` is 0 past ``K'``).
With a ``dft_length``, onnxruntime reads an input of other than ``K'`` bins otherwise than
the ONNX reference (which crops or zero-pads it): the builder refuses an IRFFT whose
input is not known to hold exactly ``K'`` bins.

The axis may be an attribute (opset 17) or an input (opset 20), a constant or computed
at run time; lengths may be static or dynamic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from graphpass.training._builder import BuilderResult, GradientContext, Refusal
from graphpass.training._builders._common import FIRST, builder, rank_known
from graphpass.training._constants import constant_value
from graphpass.training.rules import AttributeIn, Check, NodeSite

__all__ = ["BUILDERS"]

Length = int | str
"""A length along the transformed axis: a number, or a 1-D ``int64`` tensor of one element."""

Axis = int | str
"""The transformed axis: a non-negative number, or the node's scalar axis input."""

_INT64 = onnx.TensorProto.INT64


def _site_axis(site: NodeSite) -> int | None:
    """The node's axis when it is known before running (``None``: computed, or unknown)."""
    node = site.node
    if "axis" in node.attributes:
        value = node.attribute("axis")  # None: a function's attribute reference
        return None if value is None else int(value)
    name = node.inputs[2] if len(node.inputs) > 2 else ""
    graph = node.graph
    if name:
        value = None if graph is None else constant_value(graph, name)
        return None if value is None else int(np.ravel(value)[0])
    model = None if graph is None else graph.model
    if model is None:
        return None
    opset = next((int(v) for k, v in model.opset_imports.items() if k in ("", "ai.onnx")), 0)
    return -2 if opset >= 20 else 1


def _irfft_input_may_not_fit(site: NodeSite) -> bool:
    """Whether an IRFFT's input may hold other than the ``dft_length // 2 + 1`` bins it reads.

    A site without shapes (the engine's) passes: the builder checks again while building,
    with the types it knows.
    """
    node = site.node
    name = node.inputs[1] if len(node.inputs) > 1 else ""
    if not name:
        return False  # L = 2 (K - 1): exactly the K bins given
    if not site.input_shapes:
        return False
    graph = node.graph
    length = None if graph is None else constant_value(graph, name)
    shape, axis = site.input_shape(0), _site_axis(site)
    if length is None or shape is None or axis is None or not -len(shape) <= axis < len(shape):
        return True
    bins = shape[axis % len(shape)]
    return not isinstance(bins, int) or bins != int(np.ravel(length)[0]) // 2 + 1


_IRFFT_MISFIT = ("an inverse one-sided DFT (IRFFT) whose input may not hold exactly the "
                 "dft_length // 2 + 1 bins it reads is computed differently by onnxruntime "
                 "and by the ONNX reference (which crops or zero-pads the input), so no "
                 "gradient matches both")
_IRFFT_MISFIT_HINT = ("Slice or Pad the spectrum to dft_length // 2 + 1 bins before the DFT "
                      "(with a constant dft_length and a static length along the axis), or "
                      "omit dft_length")


@builder("DFT", FIRST, since=17, refusals=(
    rank_known(0),
    Refusal((AttributeIn("inverse", (1,), 0), AttributeIn("onesided", (1,), 0),
             Check("irfft-input-misfit", "the input may not hold exactly dft_length // 2 + 1 "
                   "bins along the axis", _irfft_input_may_not_fit)),
            _IRFFT_MISFIT, _IRFFT_MISFIT_HINT)),
    description="dX = E^T P^T F^H T^T dY: the opposite DFT of dY (times L forward, over L "
                "inverse), cropped or padded back to X's length, real part for a real X; "
                "IRFFT: w / L * DFT(dx) with the one-sided weights w")
def _dft(ctx: GradientContext) -> BuilderResult:
    dy = ctx.required_output_gradient(0)
    x = ctx.input(0)
    rank = ctx.rank(x)
    inverse = bool(ctx.attribute("inverse", 0))
    onesided = bool(ctx.attribute("onesided", 0))
    axis = _axis(ctx, rank)
    given = _given_length(ctx)
    size = _dim(ctx, x, axis)  # N, or K for an IRFFT
    if inverse and onesided:
        if given is not None and not (isinstance(given, int) and isinstance(size, int)
                                      and size == given // 2 + 1):
            raise ctx.error(_IRFFT_MISFIT, _IRFFT_MISFIT_HINT)
        grad = _irfft_adjoint(ctx, dy, size, given, axis, rank)
    else:
        length = size if given is None else given
        grad = _transform(ctx, dy, length if onesided else None, axis, inverse=not inverse)
        grad = _scaled(ctx, grad, length, divide=inverse)
        if given is not None:
            grad = _fit(ctx, grad, length, size, axis, rank)
    return [_like_input(ctx, grad, x)]


def _irfft_adjoint(ctx: GradientContext, dx: str, bins: Length, given: Length | None,
                   axis: Axis, rank: int) -> str:
    """``w / L * DFT_L(dx)``, with ``K`` bins along the axis."""
    e = ctx.emit
    if given is not None:
        length = given
    elif isinstance(bins, int):
        length = 2 * (bins - 1)
    else:
        length = e.op("Mul", e.op("Sub", bins, e.ints([1])), e.ints([2]))
    spectrum = _fit(ctx, _transform(ctx, dx, None, axis, inverse=False), length, bins,
                    axis, rank)
    return e.op("Mul", spectrum, _half_weights(ctx, bins, length, axis, rank, spectrum))


def _half_weights(ctx: GradientContext, bins: Length, length: Length, axis: Axis,
                  rank: int, like: str) -> str:
    """``w_k / L`` for the ``K`` bins, shaped to broadcast along the axis.

    ``w_k`` is 1 at ``k = 0`` and ``2k = L``, 2 between, 0 past ``L // 2``.
    """
    e = ctx.emit
    elem_type = e.elem_type(like)
    if isinstance(bins, int) and isinstance(length, int):
        index = np.arange(bins)
        weights = np.where(2 * index <= length,
                           2.0 - (index == 0) - (2 * index == length), 0.0) / length
        if isinstance(axis, int):
            weights = weights.reshape([bins] + [1] * (rank - axis - 1))
        found = e.constant(weights, elem_type) if elem_type is not None else \
            e.op("CastLike", e.constant(weights), like)
    else:
        k = e.op("Range", e.constant(np.array(0, np.int64)), _scalar(ctx, bins),
                 e.constant(np.array(1, np.int64)))
        twice, total = e.op("Mul", k, e.ints([2])), _tensor(ctx, length)
        at_ends = e.op("Add", e.op("Cast", e.op("Equal", k, e.ints([0])), to=_INT64),
                       e.op("Cast", e.op("Equal", twice, total), to=_INT64))
        kept = e.op("Cast", e.op("LessOrEqual", twice, total), to=_INT64)
        counts = e.op("Mul", e.op("Sub", e.ints([2]), at_ends), kept)
        found = e.op("Div", e.op("CastLike", counts, like), e.op("CastLike", total, like))
        if isinstance(axis, int):
            found = e.unsqueeze(found, list(range(1, rank - axis)))
    if isinstance(axis, int):
        return found
    shape = e.op("ScatterElements", e.ints([1] * rank), e.reshape(axis, [1]),
                 _tensor(ctx, bins), axis=0)
    return e.reshape(found, shape)


# ================================================================ pieces
def _axis(ctx: GradientContext, rank: int) -> Axis:
    """The axis: a non-negative number when known, else the node's axis input."""
    if ctx.opset < 20:
        return int(ctx.attribute("axis", 1)) % rank
    name = ctx.input(2)
    if not name:
        return -2 % rank
    known = ctx.constant_value(name)
    return name if known is None else int(np.ravel(known)[0]) % rank


def _given_length(ctx: GradientContext) -> Length | None:
    """The ``dft_length`` input (``None`` when omitted)."""
    name = ctx.input(1)
    if not name:
        return None
    known = ctx.constant_value(name)
    if known is not None:
        return int(np.ravel(known)[0])
    e = ctx.emit
    return e.reshape(e.op("Cast", name, to=_INT64), [1])


def _dim(ctx: GradientContext, value: str, axis: Axis) -> Length:
    """The length of ``value`` along the axis."""
    e = ctx.emit
    if isinstance(axis, int):
        shape = ctx.type_of(value).shape
        known = None if shape is None else shape[axis]
        if isinstance(known, int):
            return known
        return e.shape(value, axis, axis + 1)
    return e.op("Gather", e.shape(value), e.reshape(axis, [1]), axis=0)


def _tensor(ctx: GradientContext, length: Length) -> str:
    return ctx.emit.ints([length]) if isinstance(length, int) else length


def _scalar(ctx: GradientContext, length: Length) -> str:
    e = ctx.emit
    return e.constant(np.array(length, np.int64)) if isinstance(length, int) else \
        e.squeeze(length, [0])


def _axes(ctx: GradientContext, axis: Axis) -> str:
    return ctx.emit.ints([axis]) if isinstance(axis, int) else ctx.emit.reshape(axis, [1])


def _transform(ctx: GradientContext, value: str, length: Length | None, axis: Axis, *,
               inverse: bool) -> str:
    """``DFT(value)`` along the axis (two-sided), of ``length`` points when given."""
    e = ctx.emit
    inputs = [value, "" if length is None else _scalar(ctx, length)]
    attributes: dict[str, Any] = {"inverse": int(inverse)}
    if ctx.opset >= 20:
        inputs.append(e.constant(np.array(axis, np.int64)) if isinstance(axis, int) else axis)
    else:
        attributes["axis"] = axis
    while inputs[-1] == "":
        inputs.pop()
    return e.op("DFT", *inputs, **attributes)


def _scaled(ctx: GradientContext, value: str, length: Length, *, divide: bool) -> str:
    """``value`` times ``length``, or divided by it."""
    e = ctx.emit
    if isinstance(length, int):
        return e.op("Mul", value, e.scalar(1.0 / length if divide else float(length),
                                             like=value))
    return e.op("Div" if divide else "Mul", value, e.op("CastLike", length, value))


def _fit(ctx: GradientContext, value: str, have: Length, want: Length, axis: Axis,
         rank: int) -> str:
    """``value`` (``have`` long on the axis) cropped or zero-padded to ``want``."""
    e = ctx.emit
    if isinstance(have, int) and isinstance(want, int):
        if have == want:
            return value
        if have > want:
            return e.op("Slice", value, e.ints([0]), e.ints([want]), _axes(ctx, axis))
        return _pad_end(ctx, value, e.ints([want - have]), axis, rank)
    missing = e.op("Max", e.op("Sub", _tensor(ctx, want), _tensor(ctx, have)), e.ints([0]))
    padded = _pad_end(ctx, value, missing, axis, rank)
    return e.op("Slice", padded, e.ints([0]), _tensor(ctx, want), _axes(ctx, axis))


def _pad_end(ctx: GradientContext, value: str, amount: str, axis: Axis, rank: int) -> str:
    """``value`` with ``amount`` (1-D ``int64``) zeros appended along the axis."""
    e = ctx.emit
    if ctx.opset >= 18:
        pads = e.op("Concat", e.ints([0]), amount, axis=0)
        return e.op("Pad", value, pads, "", _axes(ctx, axis))
    assert isinstance(axis, int)  # an attribute below opset 20
    parts = [e.ints([0] * (rank + axis)), amount]
    if rank - axis - 1:
        parts.append(e.ints([0] * (rank - axis - 1)))
    return e.op("Pad", value, e.op("Concat", *parts, axis=0))


def _like_input(ctx: GradientContext, grad: str, x: str) -> str:
    """``grad`` (complex) with X's trailing dimension: its real part when X is real."""
    e = ctx.emit
    shape = ctx.type_of(x).shape
    last = shape[-1] if shape else None
    if last == 2:
        return grad
    end = e.ints([1]) if last == 1 else e.shape(x, -1)
    return e.op("Slice", grad, e.ints([0]), end, e.ints([-1]))


BUILDERS = [_dft]
"""The Fourier transform builders."""
