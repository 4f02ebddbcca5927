"""Matrix products: ``MatMul`` (numpy semantics, batch broadcasting), ``Gemm``, ``Einsum``."""

from __future__ import annotations

from typing import Any

from graphpass.training._builder import BuilderResult, GradientContext, Refusal
from graphpass.training._builders._common import builder, rank_known
from graphpass.training._value_types import TypeInfo
from graphpass.training.rules import Check, NodeSite

__all__ = ["BUILDERS"]

_BOTH = frozenset({0, 1})


def _swap_last(ctx: GradientContext, x: str, rank: int) -> str:
    perm = [*range(rank - 2), rank - 1, rank - 2]
    return ctx.emit.transpose(x, perm)


@builder("MatMul", _BOTH, refusals=(rank_known(0, 1),),
         description="dA = sum_to(dY B^T), dB = sum_to(A^T dY) (1-D operands promoted)")
def _matmul(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    a, b, y = ctx.input(0), ctx.input(1), ctx.output(0)
    rank_a, rank_b = ctx.rank(a), ctx.rank(b)
    grads: dict[int, str | None] = {}
    if rank_a == 1 and rank_b == 1:  # a dot product: dY is a scalar
        if ctx.needs(0):
            grads[0] = e.op("Mul", dy, b)
        if ctx.needs(1):
            grads[1] = e.op("Mul", dy, a)
        return grads
    shape_a = _shape(ctx, a)
    shape_b = _shape(ctx, b)
    a2, b2, dy2 = a, b, dy
    if rank_a == 1:
        a2, dy2 = e.unsqueeze(a, [0]), e.unsqueeze(dy, [-2])
        shape_a = [1, *shape_a]
    if rank_b == 1:
        b2, dy2 = e.unsqueeze(b, [1]), e.unsqueeze(dy, [-1])
        shape_b = [*shape_b, 1]
    rank_out = max(len(shape_a), len(shape_b))
    batch = _batch_shape(ctx, y, rank_out, rank_a == 1, rank_b == 1)
    if ctx.needs(0):
        grad = e.op("MatMul", dy2, _swap_last(ctx, b2, len(shape_b)))
        grad = e.sum_to(grad, a2 if rank_a > 1 else a, target_shape=shape_a,
                        source_shape=[*batch, *shape_a[-2:]] if batch is not None else None)
        grads[0] = grad if rank_a > 1 else e.reshape(grad, [-1])
    if ctx.needs(1):
        if rank_b == 2 and rank_a >= 3:
            # A linear layer: fold the batch into one GEMM instead of a batched product.
            k = e.dims(b, 0, 1)
            n = e.dims(b, 1, 2)
            flat_a = e.reshape(a, e.op("Concat", e.ints([-1]), k, axis=0))
            flat_dy = e.reshape(dy, e.op("Concat", e.ints([-1]), n, axis=0))
            for flat, like in ((flat_a, a), (flat_dy, dy)):  # 2-D, for the Transpose's builder
                e.note_type(flat, TypeInfo(e.elem_type(like), (None, None)))
            grads[1] = e.op("MatMul", e.transpose(flat_a, [1, 0]), flat_dy)
        else:
            grad = e.op("MatMul", _swap_last(ctx, a2, len(shape_a)), dy2)
            grad = e.sum_to(grad, b2 if rank_b > 1 else b, target_shape=shape_b,
                            source_shape=[*batch, *shape_b[-2:]] if batch is not None else None)
            grads[1] = grad if rank_b > 1 else e.reshape(grad, [-1])
    return grads


def _shape(ctx: GradientContext, name: str) -> list[Any]:
    shape = ctx.type_of(name).shape
    assert shape is not None
    return list(shape)


def _batch_shape(ctx: GradientContext, y: str, rank_out: int, a_vector: bool,
                 b_vector: bool) -> list[Any] | None:
    """The broadcast batch dimensions of a product, from the output's shape."""
    shape = ctx.type_of(y).shape
    if shape is None:
        return None
    dims = list(shape)
    dims = dims[:len(dims) - (0 if a_vector else 1) - (0 if b_vector else 1)]
    return dims if len(dims) == rank_out - 2 else None


@builder("Gemm", frozenset({0, 1, 2}),
         description="dA = alpha dY B'^T, dB = alpha A'^T dY (transposes as set), "
                     "dC = sum_to(beta dY)")
def _gemm(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    a, b, c, y = ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0)
    alpha = float(ctx.attribute("alpha", 1.0))
    beta = float(ctx.attribute("beta", 1.0))
    trans_a = int(ctx.attribute("transA", 0))
    trans_b = int(ctx.attribute("transB", 0))
    grads: dict[int, str | None] = {}
    if ctx.needs(0):
        if trans_a:
            grads[0] = e.op("Gemm", b, dy, alpha=alpha, transA=trans_b, transB=1)
        else:
            grads[0] = e.op("Gemm", dy, b, alpha=alpha, transA=0, transB=1 - trans_b)
    if ctx.needs(1):
        if trans_b:
            grads[1] = e.op("Gemm", dy, a, alpha=alpha, transA=1, transB=trans_a)
        else:
            grads[1] = e.op("Gemm", a, dy, alpha=alpha, transA=1 - trans_a, transB=0)
    if ctx.needs(2) and c:
        scaled = dy if beta == 1.0 else e.op("Mul", dy, e.scalar(beta, like=dy))
        grads[2] = e.sum_to(scaled, c, y)
    return grads


# ===================================================================== einsum
def _parse(equation: str, count: int) -> tuple[list[str], str]:
    """The operand subscripts and the output subscript (implicit mode made explicit)."""
    text = equation.replace(" ", "")
    if "->" in text:
        left, right = text.split("->", 1)
    else:
        left = text
        letters = [ch for ch in left.replace("...", "") if ch.isalpha()]
        right = ("..." if "..." in left else "") + "".join(
            sorted(ch for ch in set(letters) if letters.count(ch) == 1))
    operands = left.split(",")
    if len(operands) != count:
        raise ValueError(f"the equation names {len(operands)} operands, the node has {count}")
    return operands, right


def _einsum_problem(node_equation: str, count: int, wanted: frozenset[int],
                    ranks: tuple[int | None, ...] = ()) -> str | None:
    try:
        operands, output = _parse(node_equation, count)
    except ValueError as error:
        return str(error)
    ellipses = {(ranks[i] if i < len(ranks) else None, operand)
                for i, operand in enumerate(operands) if "..." in operand}
    spans = {None if rank is None else rank - len(operand.replace("...", ""))
             for rank, operand in ellipses}
    if len(spans) > 1:
        return "operands whose ellipses span different ranks (or unknown ones)"
    for index in sorted(wanted):
        subscripts = operands[index]
        letters = subscripts.replace("...", "")
        if len(set(letters)) != len(letters):
            return f"operand {index} repeats a subscript (a diagonal)"
        if "..." in subscripts and (not subscripts.startswith("...")
                                    or not output.startswith("...")):
            return "an ellipsis that is not leading in the operand and the output"
    return None


def _einsum_refused(site: NodeSite) -> bool:
    equation = site.node.attribute("equation", "")
    return _einsum_problem(str(equation), len(site.node.inputs),
                           site.inputs_needing_gradient, site.input_ranks) is not None


@builder("Einsum", None, refusals=(Refusal(
    (Check("einsum-unsupported", "an operand that needs a gradient repeats a subscript, an "
           "ellipsis is not leading, or ellipses span different ranks", _einsum_refused),),
    "the builder handles einsums without diagonals whose ellipses (if any) lead and span "
    "one rank",
    "write the product with MatMul, Transpose and ReduceSum"),),
    description="dA_i = einsum(dY, other operands -> A_i's subscripts), broadcast back")
def _einsum(ctx: GradientContext) -> BuilderResult:
    e = ctx.emit
    dy = ctx.required_output_gradient(0)
    inputs = list(ctx.node.inputs)
    operands, output = _parse(str(ctx.attribute("equation", "")), len(inputs))
    grads: dict[int, str | None] = {}
    for index in sorted(ctx.wanted):
        subscripts = operands[index]
        others = [operands[j] for j in range(len(inputs)) if j != index]
        seen = set(output.replace("...", "")).union(*(set(o.replace("...", "")) for o in others))
        letters = subscripts.replace("...", "")
        kept = "".join(ch for ch in letters if ch in seen)
        prefix = "..." if subscripts.startswith("...") else ""
        equation = ",".join([output, *others]) + "->" + prefix + kept
        grad = e.op("Einsum", dy, *(inputs[j] for j in range(len(inputs)) if j != index),
                    equation=equation)
        if kept != letters:  # letters summed away in the forward pass: broadcast back
            # Counted from the end: the letters follow the ellipsis, whatever its rank.
            lost = [position - len(letters) for position, ch in enumerate(letters)
                    if ch not in seen]
            grad = e.op("Expand", e.unsqueeze(grad, lost), e.shape(inputs[index]))
        if prefix:
            grad = e.sum_to(grad, inputs[index])
        grads[index] = grad
    return grads


BUILDERS = [_matmul, _gemm, _einsum]
"""The matrix-product builders."""
