"""GP425 ("a wrong gradient") is true: it is given exactly where ORT's gradient is wrong.

* Every ONNX node test case that onnxruntime-training 1.19.2 builds artifacts for, against
  the golden verdicts on its gradient (``tests/ort_training/gradient_truth.json``, written
  by ``benchmarks/gradient_truth.py --write-golden``: ORT's gradient in one training step
  against finite differences, at the test's data and at random points): ``GP425`` where
  the gradient is wrong, nowhere else. Fast, no ORT.
* Live with ORT (one batch process): the FlexAttention case of the issue (the causal
  mask's ``Where``, the query trainable: right, no ``GP425``), a few wrong cases, and
  small models on both sides of each rule's boundary, among them Optimum's position
  embeddings (``Gather(P, Slice(position_ids, 0, seq_len)) + x``: a 1 that ONNX's
  inference hides, so ORT does not sum the gradient over the batch) and the form
  ``fix-training-ops`` rewrites them to.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from _position_embeddings import position_embeddings as _positions
from onnx import TensorProto, helper, numpy_helper
from ort_training import gradient_corpus as corpus

HERE = Path(__file__).resolve().parent
TRUTH = json.loads((HERE / "ort_training" / "gradient_truth.json").read_text())["cases"]
BUILDS = json.loads((HERE / "ort_training" / "gradient_golden.json").read_text())["cases"]
CACHE = HERE / ".cache" / "gradient_corpus"
FLEX = "test_flexattention_causal_mask_expanded_ver26"


@pytest.fixture(scope="module")
def cases() -> dict[str, corpus.Case]:
    node_cases, _ = corpus.node_test_cases(cache=CACHE)
    return {case.name: case for case in node_cases}


def _flagged(case: corpus.Case) -> list[str]:
    return [str(f.node) for f in corpus.lint_findings(case) if f.code == "GP425"]


def test_the_verdicts_cover_every_case_ort_builds(cases):
    built = {name for name, verdict in BUILDS.items() if verdict == "ok" and name in cases}
    assert set(TRUTH) == built, "run `benchmarks/gradient_truth.py --write-golden`"
    assert sum(v == "wrong" for v in TRUTH.values()) >= 30


def test_gp425_is_given_exactly_where_ort_s_gradient_is_wrong(cases):
    flagged = {name for name in TRUTH if _flagged(cases[name])}
    wrong = {name for name, verdict in TRUTH.items() if verdict == "wrong"}
    assert flagged - wrong == set()  # every GP425 is a wrong gradient
    assert wrong - flagged == set()  # every wrong gradient gets GP425


def test_the_causal_mask_where_of_flexattention_is_not_called_wrong(cases):
    for weight in ("Q", "K", "V"):
        name = f"{FLEX}[{weight}]"
        assert TRUTH[name] == "right"
        assert _flagged(cases[name]) == []


# ------------------------------------------------------------------ live with ORT
def _model(nodes: list[onnx.NodeProto], initializers: dict[str, np.ndarray],
           output: str, opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "probe", [], [helper.make_tensor_value_info(
        output, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(value, name) for name, value in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    return model


def _floats(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape) + len(shape)).standard_normal(shape).astype(
        np.float32)


def _where(x: tuple[int, ...], condition: tuple[int, ...]) -> onnx.ModelProto:
    out = np.broadcast_shapes(x, condition)
    return _model([helper.make_node("Where", ["c", "x", "y"], ["o"])],
                  {"c": _floats(*condition) > 0, "x": _floats(*x), "y": _floats(*out)}, "o")


def _conv(auto_pad: str, kernel: int, stride: int) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto_pad,
                            kernel_shape=[kernel, kernel], strides=[stride, stride])
    return _model([node], {"x": _floats(1, 1, 5, 5), "w": _floats(1, 1, kernel, kernel)}, "y")


def _matmul(b: tuple[int, ...]) -> onnx.ModelProto:
    return _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                  {"a": _floats(4), "b": _floats(*b)}, "y")


def _split(shape: tuple[int, ...], axis: int, used: int) -> onnx.ModelProto:
    node = helper.make_node("Split", ["x"], ["y0", "y1"], axis=axis, num_outputs=2)
    return _model([node], {"x": _floats(*shape)}, f"y{used}")


# name: (model and feeds, trainable, ORT's verdict, the lint's code or None)
POSITION_PROBES = {
    "positions: [1, T] rows + [batch, T, H], batch symbolic": (
        _positions, "P", "wrong", "GP425"),
    "positions: [1, T] rows + [3, T, H], batch fixed": (
        lambda: _positions(batch=3), "P", "wrong", "GP425"),
    "positions: [1, T] rows * [batch, T, H]": (
        lambda: _positions(op="Mul"), "P", "wrong", "GP425"),
    "positions: [batch, T, H] - [1, T] rows": (
        lambda: _positions(op="Sub"), "P", "fails", "GP403"),
    "positions: [T] rows (1-D position ids)": (
        lambda: _positions(rank=1), "P", "right", None),
    "positions: T fixed (ORT folds the slice)": (
        lambda: _positions(seq=5), "P", "right", None),
    "positions: Div (its gradient sums at run time)": (
        lambda: _positions(op="Div"), "P", "right", None),
    "positions: batch 1": (lambda: _positions(batch=1), "P", "right", None),
    "positions: after fix-training-ops": (lambda: _positions(fixed=True), "P", "right", None),
    "positions: Mul after fix-training-ops": (
        lambda: _positions(op="Mul", fixed=True), "P", "right", None),
}


# name: (model, trainable, ORT's gradient is wrong)
PROBES = {
    "where: a [4] input of a [3, 4] Where": (lambda: _where((4,), (3, 4)), "x", True),
    "where: a [1, 4] input of a [3, 4] Where": (lambda: _where((1, 4), (3, 4)), "x", True),
    "where: a [3, 4] input of a [1, 3, 4] Where": (lambda: _where((3, 4), (1, 3, 4)), "x",
                                                   False),
    "conv: SAME_UPPER, 3x3": (lambda: _conv("SAME_UPPER", 3, 1), "w", True),
    "conv: SAME_LOWER, 3x3, stride 2": (lambda: _conv("SAME_LOWER", 3, 2), "x", True),
    "conv: SAME_UPPER, 1x1": (lambda: _conv("SAME_UPPER", 1, 1), "x", False),
    "conv: VALID, 3x3": (lambda: _conv("VALID", 3, 1), "w", False),
    "matmul: [4] x [2, 4, 3]": (lambda: _matmul((2, 4, 3)), "a", True),
    "matmul: [4] x [1, 4, 3]": (lambda: _matmul((1, 4, 3)), "a", False),
    "split: [2, 6] along 1, first part used": (lambda: _split((2, 6), 1, 0), "x", True),
    "split: [6, 2] along 0, second part used": (lambda: _split((6, 2), 0, 1), "x", True),
    "split: [6, 2] along 0, first part used": (lambda: _split((6, 2), 0, 0), "x", False),
}


@pytest.fixture(scope="module")
def live(cases, ort_training_python, tmp_path_factory) -> dict[str, tuple[str, list[str]]]:
    """ORT's verdict on each gradient, and the lint's GP425 nodes, by case name."""
    chosen = [cases[f"{FLEX}[Q]"], cases["test_clip_expanded[min]"],
              cases["test_scatternd_multiply[updates]"], cases["test_matmul_1d_3d[a]"],
              cases["test_conv_with_autopad_same[W]"]]
    for name, (make, weight, _) in PROBES.items():
        model = make()
        chosen.append(corpus.Case(name, model, [weight], [corpus.add_scalar_loss(model)]))
    for name, (make_fed, weight, _, _) in POSITION_PROBES.items():
        model, feeds = make_fed()
        chosen.append(corpus.Case(name, model, [weight], [corpus.add_scalar_loss(model)],
                                  feeds=feeds))
    folder = tmp_path_factory.mktemp("gradient-truth")
    results = corpus.run_oracle(ort_training_python,
                                corpus.iter_jobs(chosen, str(folder), check_gradient=True),
                                folder, timeout=600)
    return {case.name: ((results[case.name].get("gradient") or {}).get("verdict", "none"),
                        _flagged(case), _codes(case)) for case in chosen}


def _codes(case: corpus.Case) -> list[str]:
    return sorted({f.code for f in corpus.lint_findings(case) if f.code in ("GP403", "GP425")})


@pytest.mark.ort_training
def test_ort_s_gradient_of_the_flexattention_mask_agrees_with_finite_differences(live):
    assert live[f"{FLEX}[Q]"][:2] == ("right", [])


@pytest.mark.ort_training
@pytest.mark.parametrize("name", ["test_clip_expanded[min]", "test_scatternd_multiply[updates]",
                                  "test_matmul_1d_3d[a]", "test_conv_with_autopad_same[W]"])
def test_a_wrong_gradient_of_ort_is_called_wrong(live, name):
    verdict, flagged, _ = live[name]
    assert verdict == "wrong" and flagged


@pytest.mark.ort_training
@pytest.mark.parametrize("name", list(PROBES))
def test_each_rule_holds_on_both_sides_of_its_boundary(live, name):
    verdict, flagged, _ = live[name]
    wrong = PROBES[name][2]
    assert verdict == ("wrong" if wrong else "right")
    assert bool(flagged) == wrong, flagged


@pytest.mark.ort_training
@pytest.mark.parametrize("name", list(POSITION_PROBES))
def test_a_one_that_onnx_inference_hides_is_found_where_ort_gets_it_wrong(live, name):
    """Optimum's position embeddings: wrong in ORT exactly where the lint says so."""
    verdict, _, codes = live[name]
    _, _, expected, code = POSITION_PROBES[name]
    assert verdict == expected
    assert codes == ([code] if code else [])


def test_the_position_embeddings_rule_names_the_add_and_its_advice() -> None:
    model, _ = _positions()
    loss = corpus.add_scalar_loss(model)
    findings = corpus.lint_findings(corpus.Case("positions", model, ["P"], [loss]))
    [wrong] = [f for f in findings if f.code == "GP425"]
    assert str(wrong.node) == "combine"
    assert "symbol" in wrong.message and "batch" in wrong.message
    assert "fix-training-ops" in (wrong.hint or "") and "graphpass train" in (wrong.hint or "")
