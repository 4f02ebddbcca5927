"""General recovery of folded constants: index selections, affine folds, weight norm.

Each mechanism is tested on its own, on synthetic folds no export of the zoo contains (a
chain of four shape ops, a gather and a concatenation, a per-channel affine fold, repeated
source values), its recipe run in onnxruntime; then on real ``torch.onnx.export(...,
dynamo=True)`` exports of small modules written as architectures outside the zoo write
them (``x @ W.T`` with a square ``W``, a Swin-like relative position bias gathered by an
index buffer then viewed, permuted and unsqueezed, Gemma's RMSNorm ``x * (1 + w)``,
``weight_norm`` on a Linear and a Conv1d): ``graphpass run -p train-ready`` with the
model's own ``state_dict()`` as checkpoint trains them, its training graph's gradients
equal ``torch.autograd``'s for every parameter, and without the checkpoint what the file
lacks is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphpass.cli import main
from graphpass.ir import Node
from graphpass.torch.folding import (
    Affine,
    Broadcast,
    Recipe,
    Reshape,
    Rows,
    Select,
    Transpose,
)
from graphpass.torch.folding._search import recipe_by_value

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(0)


def _run_recipe(recipe: Recipe, source: np.ndarray, **others: np.ndarray) -> np.ndarray:
    """The recipe's nodes run in onnxruntime on ``source`` (named ``w``)."""
    nodes: list[Node] = recipe.nodes("w", "out")
    protos = []
    for node in nodes:
        proto = helper.make_node(node.op_type, list(node.inputs), list(node.outputs))
        proto.attribute.extend(attribute.proto for attribute in node.attributes.values())
        protos.append(proto)
    graph = helper.make_graph(
        protos, "recipe", [], [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT,
                                                             None)],
        [numpy_helper.from_array(source, "w"),
         *(numpy_helper.from_array(v, k) for k, v in others.items())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {})[0])


def _source(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ index selections
def test_a_chain_of_four_shape_ops_is_one_gather_over_the_flattened_source():
    """Slice, transpose, reshape, unsqueeze: each element located, one Gather emitted."""
    source = _source(6, 4)
    constant = np.ascontiguousarray(source[1:5].T.reshape(2, 8)[None])  # [1, 2, 8]
    found = recipe_by_value(constant, source)
    assert isinstance(found.recipe, Select) and found.problem is None
    np.testing.assert_array_equal(found.recipe.compute(source), constant)
    np.testing.assert_array_equal(_run_recipe(found.recipe, source), constant)
    # it holds only rows 1..4 of the source: the source cannot be read back from it
    assert found.recipe.source_of(constant, None) is None


def test_a_selection_of_every_element_gives_the_source_back():
    source = _source(3, 4)
    constant = np.ascontiguousarray(np.flip(source, 1).T.reshape(2, 6))
    found = recipe_by_value(constant, source)
    assert isinstance(found.recipe, Select)
    np.testing.assert_array_equal(found.recipe.source_of(constant, None), source)


def test_a_gather_and_a_concatenation_of_rows_is_a_row_gather():
    source = _source(5, 3)
    constant = np.concatenate([source[[4, 0]], source[[2]], source[[2]]])
    found = recipe_by_value(constant, source)
    assert isinstance(found.recipe, Rows)
    assert found.recipe.indices.tolist() == [4, 0, 2, 2]
    np.testing.assert_array_equal(_run_recipe(found.recipe, source), constant)


@pytest.mark.parametrize(("make", "kind"), [
    (lambda w: np.ascontiguousarray(w.T), Transpose),          # a square transpose
    (lambda w: w.reshape(4, 2, 2)[:, None], Reshape),          # reshape and unsqueeze
    (lambda w: np.broadcast_to(w, (3, 4, 4)).copy(), Broadcast),
])
def test_the_smallest_equivalent_is_a_known_shape_op_when_the_map_is_one(make, kind):
    source = _source(4, 4)
    constant = make(source)
    found = recipe_by_value(constant, source)
    assert isinstance(found.recipe, kind), found
    np.testing.assert_array_equal(_run_recipe(found.recipe, source), constant)


# ----------------------------------------------------------------------- affine folds
def test_a_per_channel_affine_fold_of_a_transpose():
    """``a[c] * W.T[c] + b[c]``: a scale and an offset per output channel."""
    source = _source(5, 3)
    scale = np.array([0.5, -2.0, 3.0], np.float32)[:, None]
    offset = np.array([1.0, 0.0, -0.25], np.float32)[:, None]
    constant = (source.T * scale + offset).astype(np.float32)
    found = recipe_by_value(constant, source)
    recipe = found.recipe
    assert isinstance(recipe, Affine) and isinstance(recipe.inner, Transpose)
    assert recipe.scale.shape == (3, 1) and not found.inferred
    np.testing.assert_allclose(recipe.scale, scale, rtol=1e-5)
    np.testing.assert_allclose(_run_recipe(recipe, source), constant, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(recipe.compute(recipe.source_of(constant, None)), constant,
                               rtol=1e-5, atol=1e-6)


def test_an_offset_is_one_plus_w_and_an_assumption_where_the_source_is_constant():
    trained = _source(8)
    found = recipe_by_value((1 + trained).astype(np.float32), trained)
    assert isinstance(found.recipe, Affine) and not found.inferred
    assert found.recipe.describe("w") == "w + 1"
    fresh = np.zeros(8, np.float32)  # Gemma's RMSNorm weight before training
    found = recipe_by_value(np.ones(8, np.float32), fresh)
    assert isinstance(found.recipe, Affine) and found.inferred
    assert "scale cannot be read" in found.how
    np.testing.assert_array_equal(_run_recipe(found.recipe, fresh), np.ones(8, np.float32))


def test_a_scaling_is_an_affine_fold_without_offset():
    source = _source(4, 6)
    found = recipe_by_value((source * 0.125).astype(np.float32), source)
    assert isinstance(found.recipe, Affine)
    assert found.recipe.describe("w") == "w * 0.125"


# ------------------------------------------------------------------- repeated values
def test_repeated_source_values_are_decided_by_the_recorded_index_tensor_or_refused():
    table = _source(6, 2)
    table[5] = table[2]  # two rows hold the same values
    constant = np.ascontiguousarray(table[[0, 2, 1, 2]].T[None])
    refused = recipe_by_value(constant, table)
    assert refused.recipe is None and refused.problem is not None
    assert "4 of its 8 elements" in refused.problem and "[4, 10]" in refused.problem
    # an index tensor recorded with the fold that reads row 2 and never row 5 decides
    decided = recipe_by_value(constant, table, rows_read=np.array([0, 1, 2, 3, 4]))
    assert isinstance(decided.recipe, Select) and "index tensor" in decided.how
    assert set((decided.recipe.indices // 2).reshape(-1).tolist()) == {0, 1, 2}
    # one that reads both does not
    both = recipe_by_value(constant, table, rows_read=np.array([0, 1, 2, 5]))
    assert both.recipe is None and both.problem is not None


def test_repeated_values_are_decided_by_the_one_strided_map_the_others_determine():
    """A sinusoidal table repeats values across rows and columns (sin(0.1 * 1) is
    sin(0.01 * 10)); its first rows, sliced, transposed and unsqueezed, are located by the
    one map affine in the constant's coordinates that the unrepeated elements fit."""
    positions = np.arange(12, dtype=np.float32)[:, None]
    table = np.concatenate([np.sin(positions * [1.0, 0.1, 0.01]),
                            np.cos(positions * [1.0, 0.1, 0.01])], 1).astype(np.float32)
    constant = np.ascontiguousarray(table[1:6].T[None, :, None])  # [1, 6, 1, 5]
    assert np.unique(table).size < table.size  # repeated values: locating alone is ambiguous
    found = recipe_by_value(constant, table)
    assert found.recipe is not None
    assert "affine in the constant's coordinates" in found.how
    np.testing.assert_array_equal(_run_recipe(found.recipe, table), constant)
    positions_read = found.recipe.compute(np.arange(table.size).reshape(table.shape))
    np.testing.assert_array_equal(positions_read, np.arange(table.size).reshape(
        table.shape)[1:6].T[None, :, None])
    # rows gathered out of order follow no strided map: still refused
    shuffled = np.ascontiguousarray(table[[3, 0, 4, 1]][None])
    assert recipe_by_value(shuffled, table).recipe is None


def test_a_symmetric_weight_is_both_a_copy_and_a_transpose_and_is_refused():
    half = _source(4, 4)
    symmetric = (half + half.T).astype(np.float32)
    found = recipe_by_value(symmetric.copy(), symmetric)
    assert found.recipe is None and "ambiguous" in (found.problem or "")


def test_a_computation_over_parameters_is_what_the_record_allows_and_the_values_confirm():
    """A linear of a table by a weight and its bias, scaled and permuted (DeBERTa's), is
    found over exactly the recorded parameters; noise beyond float32 rounding, or an FX
    node of another operator, leaves it unfound."""
    from graphpass.torch.folding._computed import computed_recipe

    table, weight, bias = _source(6, 4), _source(8, 4), _source(8)
    value = (table.astype(np.float64) @ weight.T.astype(np.float64) + bias) / 3
    constant = np.ascontiguousarray(value.reshape(6, 2, 4).transpose(1, 2, 0), np.float32)
    parameters = {"rel": table, "proj.weight": weight, "proj.bias": bias}
    steps = ["transpose_1", "linear_2", "view_3", "permute_4", "div_2"]
    found = computed_recipe(constant, parameters, steps)
    assert found is not None
    source, recipe = found
    assert source == "proj.weight" and recipe.reads == ("rel", "proj.bias")
    assert abs(recipe.scale - 1 / 3) < 1e-7
    np.testing.assert_allclose(_run_recipe(recipe, weight, rel=table, **{"proj.bias": bias}),
                               constant, rtol=1e-6, atol=1e-7)
    noisy = constant + np.float32(1e-4) * _source(*constant.shape)
    assert computed_recipe(noisy, parameters, steps) is None
    assert computed_recipe(constant, parameters, [*steps, "tanh"]) is None
    assert computed_recipe(constant, parameters, steps[:-1]) is None  # no div: no factor


def _sinusoid(rows: int, width: int, start: float = 0.0) -> np.ndarray:
    positions = start + np.arange(rows, dtype=np.float64)[:, None]
    angles = positions / 10000 ** (np.arange(0, width, 2) / width)
    return np.concatenate([np.sin(angles), np.cos(angles)], 1).astype(np.float32)


def _contracted(table: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """``einsum("td,dnh->tnh", table, kernel)`` computed in float32, as the exporter does."""
    return np.einsum("td,dnh->tnh", table, kernel).astype(np.float32)


def test_a_table_several_layers_contract_their_kernels_with_is_read_back_jointly():
    """Funnel's and XLNet's relative positions: each layer folds ``table @ r_kernel``; the
    table is computed from no parameter. Solved together, two layers determine it to float32
    rounding although each kernel alone is square; a third layer that reads another table
    is not grouped with them."""
    from graphpass.torch.folding._computed import ContractionFold, contraction_recipes

    table = _sinusoid(6, 8)
    rng = np.random.default_rng(1)  # each kernel alone: condition number 22 to 28
    kernels = [rng.standard_normal((8, 2, 4)).astype(np.float32) / 3 for _ in range(3)]
    other = _sinusoid(6, 8, start=40.0)
    folds = {"einsum_1": ContractionFold(_contracted(table, kernels[0]), kernels[0]),
             "einsum_2": ContractionFold(_contracted(table, kernels[1]), kernels[1]),
             "einsum_3": ContractionFold(_contracted(other, kernels[2]), kernels[2])}
    found = contraction_recipes(folds)
    assert set(found.recipes) == set(folds), found.problems
    tables = {name: recipe.table for name, recipe in found.recipes.items()}
    assert tables["einsum_1"] is tables["einsum_2"]  # one joint solve
    np.testing.assert_allclose(tables["einsum_1"], table, atol=1e-6)
    np.testing.assert_allclose(tables["einsum_3"], other, atol=1e-4)  # alone: less exact
    for name, fold in folds.items():
        np.testing.assert_allclose(_run_recipe(found.recipes[name], fold.weight),
                                   fold.constant, rtol=1e-5, atol=1e-6)


def _ill_conditioned_kernel(condition: float) -> np.ndarray:
    """An ``[8, 2, 4]`` kernel whose ``8 x 8`` matrix has ``condition`` as condition number
    (random ``32 x 32`` kernels have 200 to 8000: Funnel's have 230, 1400 and 7600)."""
    u, _, v = np.linalg.svd(RNG.standard_normal((8, 8)))
    matrix = u @ np.diag(np.geomspace(1, 1 / condition, 8)) @ v
    return matrix.astype(np.float32).reshape(8, 2, 4)


def test_a_table_one_ill_conditioned_kernel_alone_determines_is_refused_saying_why():
    from graphpass.torch.folding._computed import (
        MAX_CONDITION,
        ContractionFold,
        contraction_recipes,
    )

    kernel = _ill_conditioned_kernel(1000.0)
    found = contraction_recipes({"einsum": ContractionFold(_contracted(_sinusoid(6, 8), kernel),
                                                           kernel)})
    assert not found.recipes
    problem = found.problems["einsum"]
    assert f"more than {MAX_CONDITION:.0f}" in problem and "no other fold" in problem, problem


def test_a_table_an_ill_conditioned_kernel_determines_takes_its_rows_from_other_tables():
    """Funnel's pooled attention: two layers read the relative positions -5 .. 6, which
    their kernels determine together; a third reads -6 .. 5 with a kernel of condition
    number 1000, which alone gives its table only to 1000 times float32 rounding. Its rows
    are the others' (row -6: row 6 with the sine half negated, a sinusoid's odd half), so
    it is taken from them, as exact as theirs."""
    from graphpass.torch.folding._computed import ContractionFold, contraction_recipes

    shared, shifted = _sinusoid(12, 8, start=-5.0), _sinusoid(12, 8, start=-6.0)
    rng = np.random.default_rng(1)
    kernels = [rng.standard_normal((8, 2, 4)).astype(np.float32) / 3 for _ in range(2)]
    poor = _ill_conditioned_kernel(1000.0)
    folds = {"einsum_1": ContractionFold(_contracted(shared, kernels[0]), kernels[0]),
             "einsum_2": ContractionFold(_contracted(shared, kernels[1]), kernels[1]),
             "einsum_3": ContractionFold(_contracted(shifted, poor), poor)}
    found = contraction_recipes(folds)
    assert set(found.recipes) == set(folds), found.problems
    table = found.recipes["einsum_3"].table
    rough = np.linalg.lstsq(poor.reshape(8, 8).T.astype(np.float64),
                            folds["einsum_3"].constant.reshape(12, 8).T, rcond=None)[0].T
    assert np.abs(rough - shifted).max() > 1e-5  # what the kernel alone gives
    np.testing.assert_allclose(table, shifted, atol=1e-6)
    np.testing.assert_array_equal(table[0, :4], -found.recipes["einsum_1"].table[-1, :4])
    np.testing.assert_allclose(_run_recipe(found.recipes["einsum_3"], poor),
                               folds["einsum_3"].constant, rtol=1e-5, atol=1e-6)


def test_a_row_no_other_table_holds_leaves_an_ill_conditioned_table_refused():
    """The same, but the third layer reads -4 .. 7: position 7 (and -7) is in no other
    table, so one row is known only to 1000 times rounding, and the table is refused."""
    from graphpass.torch.folding._computed import ContractionFold, contraction_recipes

    rng = np.random.default_rng(1)
    kernels = [rng.standard_normal((8, 2, 4)).astype(np.float32) / 3 for _ in range(2)]
    poor = _ill_conditioned_kernel(1000.0)
    shared = _sinusoid(12, 8, start=-5.0)
    folds = {"einsum_1": ContractionFold(_contracted(shared, kernels[0]), kernels[0]),
             "einsum_2": ContractionFold(_contracted(shared, kernels[1]), kernels[1]),
             "einsum_3": ContractionFold(_contracted(_sinusoid(12, 8, start=-4.0), poor),
                                         poor)}
    found = contraction_recipes(folds)
    assert set(found.recipes) == {"einsum_1", "einsum_2"}
    assert "not every row of the table is one other folds' tables determine" in \
        found.problems["einsum_3"], found.problems


def test_a_square_contraction_alone_whose_axes_the_values_cannot_tell_is_refused():
    """``table @ W`` or ``table @ W.T``: with a square ``W`` and one fold, both give the
    constant exactly; a ``linear`` contracts the weight's trailing axes, which decides."""
    from graphpass.torch.folding._computed import ContractionFold, contraction_recipes

    weight = np.linalg.qr(RNG.standard_normal((8, 8)))[0].astype(np.float32)  # condition 1
    constant = (_sinusoid(5, 8) @ weight.T).astype(np.float32)
    ambiguous = contraction_recipes({"matmul": ContractionFold(constant, weight)})
    assert not ambiguous.recipes and "2 ways" in ambiguous.problems["matmul"]
    linear = contraction_recipes({"linear": ContractionFold(constant, weight, linear=True)})
    recipe = linear.recipes["linear"]
    assert recipe.transposed
    np.testing.assert_allclose(_run_recipe(recipe, weight), constant, rtol=1e-5, atol=1e-6)


def test_a_table_broadcast_to_the_batch_repeats_rows_and_is_read_back_all_the_same():
    """XLNet's positions: the table is expanded to the batch before the contraction, so the
    constant's rows repeat; the map from the contraction's output is known from its form,
    not located by value (which repeated rows would make ambiguous)."""
    from graphpass.torch.folding._computed import ContractionFold, contraction_recipes

    table = np.repeat(_sinusoid(5, 8)[:, None], 2, axis=1)            # [5, batch 2, 8]
    rng = np.random.default_rng(3)
    kernels = [rng.standard_normal((8, 2, 4)).astype(np.float32) / 3 for _ in range(2)]
    folds = {f"einsum_{i}": ContractionFold(
        np.einsum("ibh,hnd->ibnd", table, k).astype(np.float32), k) for i, k in
        enumerate(kernels)}
    found = contraction_recipes(folds)
    assert set(found.recipes) == set(folds), found.problems
    for name, fold in folds.items():
        np.testing.assert_allclose(_run_recipe(found.recipes[name], fold.weight),
                                   fold.constant, rtol=1e-5, atol=1e-6)


def test_a_contraction_permuted_after_is_read_back_only_where_the_values_check_it():
    """``permute(einsum(...))`` folded into one constant named after the permute: every
    order of its axes is tried; two layers reading one table check the order and the
    table, one square kernel alone cannot and is refused saying so."""
    from graphpass.torch.folding._computed import ContractionFold, contraction_recipes

    table = _sinusoid(6, 8)
    rng = np.random.default_rng(2)
    kernels = [rng.standard_normal((8, 2, 4)).astype(np.float32) / 3 for _ in range(2)]
    permuted = [np.ascontiguousarray(_contracted(table, k).transpose(1, 2, 0))
                for k in kernels]                                    # [2, 4, 6]
    folds = {f"permute_{i}": ContractionFold(c, k, direct=False)
             for i, (c, k) in enumerate(zip(permuted, kernels, strict=True))}
    found = contraction_recipes(folds)
    assert set(found.recipes) == set(folds), found.problems
    for name, fold in folds.items():
        np.testing.assert_allclose(_run_recipe(found.recipes[name], fold.weight),
                                   fold.constant, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(found.recipes["permute_0"].table, table, atol=1e-6)
    alone = contraction_recipes({"permute_0": folds["permute_0"]})
    assert not alone.recipes
    assert "cannot check the contraction" in alone.problems["permute_0"]


def test_a_constant_of_one_repeated_value_is_no_selection():
    """Placeholder zeros say nothing about where they came from, even from a unique zero."""
    source = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    assert recipe_by_value(np.zeros((4, 3), np.float32), source).recipe is None


# --------------------------------------------------------------- real torch exports
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn.utils.parametrizations import weight_norm  # noqa: E402


class SquareTranspose(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.randn(8, 8) / 3)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(x @ self.W.T))


class WindowAttention(nn.Module):
    """Swin's relative position bias: a table gathered by an index buffer, then viewed."""

    def __init__(self, extra_rows: int = 0, direct: bool = False) -> None:
        super().__init__()
        window, heads = 3, 2
        self.heads, self.direct = heads, direct
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2 + extra_rows, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                            indexing="ij")).flatten(1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        index = relative[..., 0] * (2 * window - 1) + relative[..., 1]
        self.register_buffer("index", index)
        self.qkv = nn.Linear(8, 24)
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
        attention = torch.softmax(q @ k.transpose(-2, -1) + bias.unsqueeze(0), dim=-1)
        out = self.proj((attention @ v).transpose(1, 2).reshape(b, n, c))
        if self.direct:  # a use that depends on the input: the file keeps the table itself
            out = out + (self.table * x.mean()).sum()
        return out


class GemmaNorm(nn.Module):
    def __init__(self, trained: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8) / 4 if trained else torch.zeros(8))
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.out(normed * (1 + self.weight))


class WeightNormed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = weight_norm(nn.Linear(8, 6))
        self.conv = weight_norm(nn.Conv1d(6, 4, 3, padding=1))
        self.point = weight_norm(nn.Conv1d(4, 4, 1))             # v: [4, 4, 1]
        self.whole = weight_norm(nn.Linear(4, 4), dim=None)      # one g for the whole weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.lin(x))                       # [B, T, 6]
        hidden = torch.relu(self.conv(hidden.transpose(1, 2)))
        return self.whole(self.point(hidden).transpose(1, 2))


class ConcatWeights(nn.Module):
    """One weight made of two parameters: ``Concat`` of a transposed one and another."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(5, 8) / 3)
        self.b = nn.Parameter(torch.randn(8, 3) / 3)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(x @ torch.cat([self.a.t(), self.b], dim=1)))


class ClassToken(nn.Module):
    """A class token expanded to the batch and put before the sequence (ViT, DeiT, AST).

    Exported with a static batch, the optimizer folds ``cls_token.expand(2, -1, -1)`` into a
    constant ``expand`` of shape [2, 1, 8], records it as folded from ``cls_token`` (and its
    own size constants), and keeps no ``cls_token``: the constant holds every element of it.
    """

    def __init__(self, zeros: bool = False) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 8) if zeros else torch.randn(1, 1, 8))
        self.proj = nn.Linear(8, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), self.proj(x)], dim=1)
        return self.out(torch.tanh(tokens))


class MaskedClassToken(ClassToken):
    """DINOv2's embeddings: a mask token used only where a mask is given (none here)."""

    def __init__(self) -> None:
        super().__init__()
        self.mask_token = nn.Parameter(torch.randn(1, 8))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            x = torch.where(mask.unsqueeze(-1), self.mask_token.to(x.dtype), x)
        return super().forward(x)


class StandardizedConv(nn.Module):
    """BiT's weight-standardized convolution: ``batch_norm(w.reshape(1, O, -1), None, None,
    training=True)`` per output channel; the optimizer folds it into one constant."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight.reshape(1, self.conv.out_channels, -1)
        w = nn.functional.batch_norm(w, None, None, training=True, momentum=0.0,
                                     eps=1e-8).reshape_as(self.conv.weight)
        hidden = nn.functional.conv2d(x, w, None, 1, 1)
        return self.head(torch.relu(hidden).mean((2, 3)))


class RelativeProjection(nn.Module):
    """DeBERTa's disentangled attention: a relative position table projected by linear
    layers (one with a bias, scaled), viewed per head and permuted; all folded."""

    def __init__(self) -> None:
        super().__init__()
        self.rel_embeddings = nn.Embedding(10, 8)
        self.pos_proj = nn.Linear(8, 8, bias=False)
        self.pos_q_proj = nn.Linear(8, 8)
        self.query = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        rel = self.rel_embeddings.weight[2:2 + 2 * n - 2]           # the span this length reads
        pos_key = self.pos_proj(rel).view(1, -1, 2, 4).permute(0, 2, 3, 1)
        pos_query = self.pos_q_proj(rel).view(1, -1, 2, 4).permute(0, 2, 1, 3) / 12 ** 0.5
        query = self.query(x).view(b, n, 2, 4).permute(0, 2, 1, 3)
        c2p = query @ pos_key                                        # [b, 2, n, 2n - 2]
        p2c = (pos_query @ query.transpose(-1, -2)).transpose(-1, -2)
        return (c2p + p2c).sum(-1).transpose(1, 2).reshape(b, n, 2)


def _sinusoid_table(rows: int, start: int = 0) -> torch.Tensor:
    """A sinusoidal position table of width 8 from position ``start``, built in ``forward``
    as the models build it."""
    angles = torch.arange(start, start + rows, dtype=torch.float32)[:, None] / 10000 ** (
        torch.arange(0, 8, 2, dtype=torch.float32) / 8)
    return torch.cat([angles.sin(), angles.cos()], -1)


class SinusoidalRelative(nn.Module):
    """Funnel's relative attention: a sinusoidal table built in ``forward`` from ``arange``
    and contracted with each layer's ``r_kernel`` (``einsum("td,dnh->tnh")``), which the
    optimizer folds into one constant a layer."""

    def __init__(self, layers: int = 2, permuted: bool = False) -> None:
        super().__init__()
        self.r_kernel = nn.ParameterList(nn.Parameter(torch.randn(8, 2, 4) / 3)
                                         for _ in range(layers))
        self.query = nn.Linear(8, 8)
        self.permuted = permuted

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        table = _sinusoid_table(n)                                       # [n, 8]
        hidden = x
        for kernel in self.r_kernel:
            positions = torch.einsum("td,dnh->tnh", table, kernel)      # [n, 2, 4]
            query = self.query(hidden).view(b, n, 2, 4)
            if self.permuted:  # the optimizer folds the permute too: named after it
                scores = query.transpose(1, 2) @ positions.permute(1, 2, 0)
            else:
                scores = torch.einsum("binh,tnh->bnit", query, positions)
            hidden = hidden + torch.softmax(scores, -1).mean(1) @ hidden
        return hidden


class ShiftedSinusoid(nn.Module):
    """Funnel's pooled attention, reduced: two layers contract the relative positions
    ``-(n-1) .. n`` with their ``r_kernel``; a third contracts ``-n .. n-1``, one position
    further left, with a kernel as ill-conditioned as random ``32 x 32`` ones are."""

    def __init__(self) -> None:
        super().__init__()
        kernels = [torch.randn(8, 2, 4) / 3, torch.randn(8, 2, 4) / 3,
                   torch.from_numpy(_ill_conditioned_kernel(1000.0))]
        self.r_kernel = nn.ParameterList(nn.Parameter(k) for k in kernels)
        self.query = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        tables = [_sinusoid_table(2 * n, 1 - n)] * 2 + [_sinusoid_table(2 * n, -n)]
        hidden = x
        for table, kernel in zip(tables, self.r_kernel, strict=True):
            positions = torch.einsum("td,dnh->tnh", table, kernel)      # [2n, 2, 4]
            query = self.query(hidden).view(b, n, 2, 4)
            scores = torch.einsum("binh,tnh->bnit", query, positions)   # [b, 2, n, 2n]
            hidden = hidden + torch.tanh(scores.mean((1, 3)))[..., None] * hidden
        return hidden


class ProjectedSinusoid(nn.Module):
    """Transformer-XL's relative attention: each layer projects a sinusoidal table built in
    ``forward`` by a Linear without bias, then views it per head; the optimizer folds
    ``view(linear(table, r_net.weight))`` into one constant named after the view."""

    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.r_net = nn.ModuleList(nn.Linear(8, 8, bias=False) for _ in range(layers))
        self.query = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        table = _sinusoid_table(n)                                       # [n, 8]
        hidden = x
        for r_net in self.r_net:
            positions = r_net(table).view(n, 2, 4)
            scores = (self.query(hidden).view(b, n, 2, 4) * positions).sum(-1)
            hidden = hidden + torch.softmax(scores, 1).mean(-1, keepdim=True) * hidden
        return hidden


class _Decay(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.A_log = nn.Parameter(torch.log(torch.arange(1, 5.0)).repeat(8, 1))  # [8, 4]
        self.gate = nn.Parameter(torch.randn(8))
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        decay = -torch.exp(self.A_log)                                   # [8, 4]
        mixed = (torch.sigmoid(x).unsqueeze(-1) * decay[None, None]).sum(-1)  # [b, n, 8]
        return self.proj(mixed * torch.sigmoid(self.gate)) + x


class StateDecay(nn.Module):
    """A state-space layer's ``A = -exp(A_log)`` and a gate ``sigmoid(g)``, folded by the
    optimizer into constants. A fresh ``A_log`` repeats its values (``log 1 .. log 4`` in
    every row, as Mamba initializes it) and is equal in both layers, so the optimizer keeps
    one constant for the two layers' ``A``."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Decay() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class RotaryBuffer(nn.Module):
    """RoPE's tables: ``cos`` and ``sin`` of the positions times a persistent ``inv_freq``
    buffer (ESM's), folded by the optimizer into constants from the buffer alone."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        angles = torch.arange(x.shape[1], dtype=torch.float32)[:, None] * self.inv_freq
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
        rotated = torch.cat([-x[..., 4:], x[..., :4]], -1)
        return self.proj(x * cos + rotated * sin)


class PositionSlice(nn.Module):
    """BLIP's vision embeddings: ``x + position[:, :n]`` over every position, which torch
    traces as an ``alias`` of the whole parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.randn(1, 5, 8))
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x + self.position[:, : x.shape[1]])


class InterpolatedPosition(nn.Module):
    """ViTDet's absolute positions: a class token's and a 2 x 2 grid's embeddings, the grid
    resized in ``forward`` to the input's 4 x 4 patches (bicubic or bilinear), which the
    optimizer folds into one constant."""

    def __init__(self, mode: str = "bicubic") -> None:
        super().__init__()
        self.position = nn.Parameter(torch.randn(1, 5, 8))
        self.proj = nn.Linear(8, 8)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = self.position[:, 1:].reshape(1, 2, 2, 8).permute(0, 3, 1, 2)
        grid = nn.functional.interpolate(grid, size=(4, 4), mode=self.mode,
                                         align_corners=False)
        return self.proj(x + grid.permute(0, 2, 3, 1).reshape(1, 16, 8))


INPUTS = {"square": (2, 5, 8), "concat": (2, 5, 8), "cls-token": (2, 5, 8),
          "cls-token-zeros": (2, 5, 8), "cls-token-mask": (2, 5, 8),
          "cls-token-batch-1": (1, 5, 8), "window": (2, 9, 8),
          "window-extra": (2, 9, 8), "window-direct": (2, 9, 8),
          "gemma": (2, 5, 8), "gemma-trained": (2, 5, 8), "weight-norm": (2, 5, 8),
          "standardized-conv": (2, 3, 8, 8), "relative-projection": (2, 5, 8),
          "sinusoidal-relative": (2, 6, 8), "sinusoidal-permuted": (2, 6, 8),
          "projected-sinusoid": (2, 6, 8), "shifted-sinusoid": (2, 6, 8),
          "state-decay": (2, 5, 8),
          "rotary-buffer": (2, 5, 8), "position-slice": (2, 5, 8),
          "interpolated-bicubic": (2, 16, 8), "interpolated-bilinear": (2, 16, 8)}


def _module(name: str) -> nn.Module:
    torch.manual_seed(0)
    module: nn.Module = {
        "square": SquareTranspose, "concat": ConcatWeights, "window": WindowAttention,
        "cls-token": ClassToken, "cls-token-zeros": lambda: ClassToken(zeros=True),
        "cls-token-mask": MaskedClassToken, "cls-token-batch-1": ClassToken,
        "window-extra": lambda: WindowAttention(extra_rows=1),
        "window-direct": lambda: WindowAttention(direct=True),
        "gemma": lambda: GemmaNorm(False), "gemma-trained": lambda: GemmaNorm(True),
        "weight-norm": WeightNormed, "standardized-conv": StandardizedConv,
        "relative-projection": RelativeProjection,
        "sinusoidal-relative": SinusoidalRelative,
        "sinusoidal-permuted": lambda: SinusoidalRelative(permuted=True),
        "projected-sinusoid": ProjectedSinusoid, "shifted-sinusoid": ShiftedSinusoid,
        "state-decay": StateDecay,
        "rotary-buffer": RotaryBuffer, "position-slice": PositionSlice,
        "interpolated-bicubic": InterpolatedPosition,
        "interpolated-bilinear": lambda: InterpolatedPosition("bilinear")}[name]()
    if name == "window-extra":  # its unused last row repeats row 4, which the index reads
        with torch.no_grad():
            module.table[-1] = module.table[4]
    return module.eval()


def _export(name: str, directory: Path) -> tuple[nn.Module, Path, Path, np.ndarray]:
    from safetensors.torch import save_model

    module = _module(name)
    x = torch.from_numpy(RNG.standard_normal(INPUTS[name]).astype(np.float32))
    path = directory / f"{name}.onnx"
    torch.onnx.export(module, (x,), dynamo=True, input_names=["x"],
                      output_names=["y"]).save(str(path))
    checkpoint = directory / f"{name}.safetensors"
    save_model(module, str(checkpoint))
    return module, path, checkpoint, x.numpy()


def _gradients(directory: Path, x: np.ndarray, target: np.ndarray
               ) -> tuple[list[str], dict[str, np.ndarray]]:
    from safetensors.numpy import load_file

    manifest = json.loads((directory / "manifest.json").read_text())
    session = ort.InferenceSession(str(directory / "gradient.onnx"),
                                   providers=["CPUExecutionProvider"])
    feeds = {"x": x, "target": target, **load_file(str(directory / "weights.safetensors"))}
    names = {i.name for i in session.get_inputs()}
    outputs = session.run(None, {k: v for k, v in feeds.items() if k in names})
    trainable = list(manifest["trainable"])
    return trainable, dict(zip(trainable, outputs[1:1 + len(trainable)], strict=True))


def _torch_gradients(module: nn.Module, x: np.ndarray, target: np.ndarray
                     ) -> dict[str, np.ndarray]:
    module.zero_grad()
    loss = nn.functional.mse_loss(module(torch.from_numpy(x)), torch.from_numpy(target))
    loss.backward()
    return {name: p.grad.numpy() for name, p in module.named_parameters()
            if p.grad is not None}  # torch gives a parameter its forward does not use none


@pytest.mark.torch
@pytest.mark.parametrize("name", list(INPUTS))
def test_train_ready_with_the_models_state_dict_trains_every_parameter_as_torch(
        name: str, tmp_path: Path, capsys: Any) -> None:
    module, path, checkpoint, x = _export(name, tmp_path)
    capsys.readouterr()  # the exporter's own messages
    code = main(["run", str(path), "-o", str(tmp_path / "ready.onnx"), "-p", "train-ready",
                 "--checkpoint", str(checkpoint), "--emit-training-graph",
                 str(tmp_path / "train"), "--format", "json"])
    report = capsys.readouterr().out
    assert code == 0, report
    evidence = {name: fold["evidence"] for finding in json.loads(report)["findings"]
                if finding["code"] == "GP204" for name, fold in finding["data"]["folds"].items()}
    with torch.no_grad():
        target = (module(torch.from_numpy(x)) + 0.1).numpy()
    trainable, got = _gradients(tmp_path / "train", x, target)
    expected = _torch_gradients(module, x, target)
    assert sorted(trainable) == sorted(expected)  # every parameter, under torch's name
    for weight, grad in got.items():
        reference = expected[weight]
        scale = max(float(np.abs(reference).max()), 1e-6)
        assert float(np.abs(grad - reference).max()) / scale < 1e-4, weight
    if name == "gemma":  # a zero weight cannot show its scale: said, as a warning
        [warning] = [f for f in json.loads(report)["findings"]
                     if f["code"] == "GP204" and f["severity"] == "warning"]
        assert "scale cannot be read" in warning["message"]
    if name == "window-extra":
        assert any("index tensor recorded with it" in text for text in evidence.values())
    if name == "concat":  # two sources: a selection over both, laid end to end
        assert any(text.startswith("values: equals Gather(Concat of a, b flattened")
                   for text in evidence.values()), evidence
    if name.startswith("window"):
        assert any(text.startswith("values: equals Gather(Reshape(table, [-1])")
                   for text in evidence.values()), evidence
    if name == "standardized-conv":  # the statistics computed from the weight, in the graph
        assert any("standardize(conv.weight per output channel, eps=1e-08)" in text
                   for text in evidence.values()), evidence
    if name == "relative-projection":  # both projections, the second with its bias, scaled
        computed = [text for text in evidence.values() if "linear(rel_embeddings.weight" in text]
        assert len(computed) == 2, evidence
        assert any("pos_q_proj.bias) * 0.2886751" in text for text in computed), computed
    if name == "state-decay":  # each layer's A from its own A_log, the merged one split
        for layer in (0, 1):
            assert any(f"from 'layers.{layer}.A_log'; values: equals Reshape(neg(exp("
                       f"layers.{layer}.A_log))" in text for text in evidence.values()), evidence
        assert sum("sigmoid(layers." in text for text in evidence.values()) == 2, evidence
    if name.startswith("interpolated"):  # the interpolation's weights, read back
        assert not got["position"][0, 0].any()  # the class token's: exactly 0, as torch's
        assert any("a [16, 5] table (computed from no parameter, read back from the "
                   "constant) @ position as a matrix of 5 rows" in text
                   for text in evidence.values()), evidence
    if "sinusoid" in name:  # every layer's table, read back (the first two together)
        read_back = [text for text in evidence.values() if "read back from the constant" in text]
        assert len(read_back) == len(module.state_dict()) - 2, evidence


def _refused_with_a_tuned_checkpoint(name: str, tune: Any, tmp_path: Path,
                                     capsys: Any) -> str:
    """The report of ``train-ready`` on ``name``'s export with a checkpoint ``tune`` changed
    after the export (under ``no_grad``): refused, writing nothing."""
    from safetensors.torch import save_model

    module, path, _, _ = _export(name, tmp_path)
    with torch.no_grad():
        tune(module)
    save_model(module, str(tmp_path / "tuned.safetensors"))
    capsys.readouterr()
    out = tmp_path / "ready.onnx"
    code = main(["run", str(path), "-o", str(out), "-p", "train-ready", "--checkpoint",
                 str(tmp_path / "tuned.safetensors")])
    report = " ".join(capsys.readouterr().out.split())
    assert code == 1 and not out.exists()
    return report


@pytest.mark.torch
def test_a_table_is_not_read_back_with_a_checkpoint_changed_since_the_export(
        tmp_path: Path, capsys: Any) -> None:
    """The table is what the export's own kernels give the constant: a fine-tuned
    checkpoint's kernels would give another, so the fold is refused, saying why."""
    def tune(module: nn.Module) -> None:
        for parameter in module.parameters():
            parameter.add_(0.01)

    report = _refused_with_a_tuned_checkpoint("sinusoidal-relative", tune, tmp_path, capsys)
    assert "GP211" in report and "the checkpoint differs from the weights the file holds" \
        in report, report


@pytest.mark.torch
def test_constants_folded_from_a_buffer_are_kept_only_with_the_exports_own_checkpoint(
        tmp_path: Path, capsys: Any) -> None:
    """RoPE's cos and sin tables folded from a persistent ``inv_freq`` buffer: nothing trains
    the buffer, and the file does not hold it, so its constants stand as exported with the
    model's own state_dict (every parameter the file holds equal, bit for bit); with a
    checkpoint changed since (fine-tuned, the rotary base changed) they are refused."""
    def tune(module: nn.Module) -> None:
        module.proj.weight.add_(0.01)
        module.inv_freq.mul_(0.5)

    report = _refused_with_a_tuned_checkpoint("rotary-buffer", tune, tmp_path, capsys)
    assert "GP211" in report and "from 'inv_freq'" in report, report
    assert "torch's record says it was computed (cos)" in report, report


@pytest.mark.torch
def test_repeated_rows_the_index_reads_both_of_are_refused_naming_the_ambiguity(
        tmp_path: Path, capsys: Any) -> None:
    from safetensors.torch import save_model

    module, path, _, _ = _export("window", tmp_path)
    with torch.no_grad():
        module.table[7] = module.table[4]  # both rows are read by the index
    torch.onnx.export(module, (torch.zeros(INPUTS["window"]),), dynamo=True,
                      input_names=["x"], output_names=["y"]).save(str(path))
    save_model(module, str(tmp_path / "repeated.safetensors"))
    out = tmp_path / "ready.onnx"
    code = main(["run", str(path), "-o", str(out), "-p", "train-ready", "--checkpoint",
                 str(tmp_path / "repeated.safetensors")])
    report = capsys.readouterr().out
    assert code == 1 and not out.exists()
    assert "GP211" in report and "several places" in " ".join(report.split())


@pytest.mark.torch
@pytest.mark.parametrize(("name", "trains"), [
    ("square", True), ("window-direct", True), ("cls-token", True),
    ("cls-token-batch-1", True), ("position-slice", True), ("rotary-buffer", True),
    ("window", False), ("gemma", False), ("weight-norm", False), ("cls-token-zeros", False),
    ("state-decay", False), ("interpolated-bicubic", False)])
def test_without_a_checkpoint_only_what_the_file_lacks_is_refused(
        name: str, trains: bool, tmp_path: Path, capsys: Any) -> None:
    """The square transpose is torch's record (a permute of W alone); a selection of a table
    the file still holds (another use keeps it) is found from its values and checked in
    onnxruntime; a class token the file holds only as its expand to the batch is read back
    from it (the copies are equal), unless it is one repeated value (zeros), which does not
    show which axes were broadcast; the others' sources are not in the file at all."""
    module, path, _, x = _export(name, tmp_path)
    capsys.readouterr()
    code = main(["run", str(path), "-o", str(tmp_path / "ready.onnx"), "-p", "train-ready",
                 "--emit-training-graph", str(tmp_path / "train")])
    report = " ".join(capsys.readouterr().out.split())
    if not trains:
        assert code == 1 and "GP251" in report, report
        assert "no checkpoint is given" in report
        if name == "cls-token-zeros":
            assert "holds one value 16 times, which does not show the parameter's shape" \
                in report, report
        if name == "state-decay":  # the layer whose constant was merged is named too
            assert "'layers.1.A_log'" in report and "'layers.0.A_log'" in report, report
        return
    assert code == 0, report
    if name == "window-direct":
        assert "unsqueeze = Gather(Reshape(table, [-1])" in report
    if name.startswith("cls-token"):  # batch 1: nothing repeats, the fold is the token
        assert ("expand = Identity(cls_token)" if name.endswith("1") else
                "expand = Expand(cls_token, [2, 1, 8])") in report, report
        restored = onnx.load(str(tmp_path / "ready.onnx")).graph.initializer
        [token] = [tensor for tensor in restored if tensor.name == "cls_token"]
        assert list(token.dims) == [1, 1, 8]
    with torch.no_grad():
        target = (module(torch.from_numpy(x)) + 0.1).numpy()
    trainable, got = _gradients(tmp_path / "train", x, target)
    expected = _torch_gradients(module, x, target)
    assert sorted(trainable) == sorted(expected)
    for weight, grad in got.items():
        np.testing.assert_allclose(grad, expected[weight], rtol=1e-4, atol=1e-6)


@pytest.mark.torch
def test_a_parameter_the_exported_forward_does_not_use_is_named_as_what_it_is(
        tmp_path: Path, capsys: Any) -> None:
    """A mask token used only with a mask (DINOv2's): the export's forward reads it nowhere,
    the optimizer drops it, and torch gives it no gradient. The run trains the rest as torch
    does, says the file does not hold it (GP253), and a torch checkpoint written after
    training is refused saying why the model lacks it, not that constants were computed
    from it."""
    module, path, _, x = _export("cls-token-mask", tmp_path)
    capsys.readouterr()
    train = tmp_path / "train"
    code = main(["run", str(path), "-o", str(tmp_path / "ready.onnx"), "-p", "train-ready",
                 "--emit-training-graph", str(train), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert code == 0, findings
    [unused] = [f for f in findings if f["code"] == "GP253"]
    assert unused["data"] == {"parameters": ["mask_token"], "not_held": ["mask_token"]}
    assert "does not hold the values of 'mask_token'" in unused["message"]
    assert "--checkpoint" in unused["hint"]
    with torch.no_grad():
        target = (module(torch.from_numpy(x)) + 0.1).numpy()
    trainable, got = _gradients(train, x, target)
    expected = _torch_gradients(module, x, target)
    assert module.mask_token.grad is None and sorted(trainable) == sorted(expected)
    for weight, grad in got.items():
        np.testing.assert_allclose(grad, expected[weight], rtol=1e-4, atol=1e-6)
    np.savez(tmp_path / "batch.npz", x=x, target=target)
    code = main(["train", str(train), "--data", str(tmp_path / "batch.npz"), "--steps", "1",
                 "--checkpoint-out", str(tmp_path / "trained.safetensors")])
    captured = capsys.readouterr()
    said = " ".join((captured.err + captured.out).split())
    assert code == 2 and not (tmp_path / "trained.safetensors").exists()
    assert "'mask_token'" in said and "unused by the exported forward" in said, said


class StandardizedLinear(nn.Module):
    """A weight standardized in forward (BiT's convolutions): ``(W - mean) / std`` per row."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 8))
        self.out = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.weight.mean(1, keepdim=True)
        std = self.weight.std(1, keepdim=True)
        return self.out(torch.tanh(x @ ((self.weight - mean) / std).t()))


@pytest.mark.torch
def test_a_weight_standardized_in_forward_is_refused_not_trained_as_a_constant_affine(
        tmp_path: Path, capsys: Any) -> None:
    """Its folded copy is a per-channel affine image of it by value, but the scale and shift
    are computed from the weight: recomputed as constants they give other gradients."""
    from safetensors.torch import save_model

    torch.manual_seed(0)
    module = StandardizedLinear().eval()
    path, checkpoint = tmp_path / "standardized.onnx", tmp_path / "standardized.safetensors"
    torch.onnx.export(module, (torch.zeros(2, 5, 8),), dynamo=True, input_names=["x"],
                      output_names=["y"]).save(str(path))
    save_model(module, str(checkpoint))
    capsys.readouterr()
    out = tmp_path / "ready.onnx"
    code = main(["run", str(path), "-o", str(out), "-p", "train-ready", "--checkpoint",
                 str(checkpoint), "--emit-training-graph", str(tmp_path / "train")])
    report = " ".join(capsys.readouterr().out.split())
    assert code == 1 and not out.exists(), report
    assert "GP211" in report and "weight standardization" in report
