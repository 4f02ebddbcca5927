"""``DFT``'s gradient builder against finite differences and ``torch.autograd``.

* One-node float64 models (opset 17, axis an attribute; opset 20, axis an input): a real
  and a complex input, ``inverse``, ``onesided`` (RFFT), the inverse one-sided transform
  (IRFFT), a ``dft_length`` that crops or zero-pads, negative and default axes, an axis
  computed at run time, static and symbolic shapes. Each passes finite differences (the
  forward run in onnxruntime) and, with static shapes, its dX (onnxruntime) is
  ``torch.autograd``'s for the same ``torch.fft`` call.
* Two ``DFT`` nodes in a row (``fftn`` over two axes).
* torch's exports of ``fftn(...).real`` (FNet's token mixing), ``fft`` with ``n``,
  ``rfft``, ``irfft``, ``ifft`` and ``fft2(norm="ortho")``: the builders' dX (float32) is
  ``torch.autograd``'s and the float64 export passes finite differences; ``lint-gradients``
  with the ``graphpass`` rules refuses nothing in an FNet-like block.
* The one refusal (an IRFFT whose input may not hold exactly the ``dft_length // 2 + 1``
  bins it reads: onnxruntime then computes it otherwise than the ONNX reference), with
  its hint, in the builder and in ``lint-gradients``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from _gradcheck import check_gradients, to_double, vjp_model
from onnx import TensorProto, helper, numpy_helper

import graphpass

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from _torch_ops import Op, export_op  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


# ============================================================ one-node models
def _dft_model(shape: tuple[int, ...], *, opset: int, axis: int | None = None,
               inverse: int = 0, onesided: int = 0, length: int | None = None,
               dynamic: bool = False, axis_fed: bool = False,
               length_fed: bool = False) -> onnx.ModelProto:
    """A float64 model of one ``DFT`` node (``axis`` None: the opset's default).

    At opset 20 the axis is a constant input, or a graph input when ``axis_fed``;
    ``dft_length`` is a constant, or a graph input when ``length_fed``.
    """
    inputs = ["x", "length" if length is not None else ""]
    initializers, graph_inputs = [], []
    attributes: dict[str, Any] = {"inverse": inverse, "onesided": onesided}
    if length is not None and length_fed:
        graph_inputs.append(helper.make_tensor_value_info("length", TensorProto.INT64, []))
    elif length is not None:
        initializers.append(numpy_helper.from_array(np.array(length, np.int64), "length"))
    if opset >= 20 and axis is not None:
        inputs.append("axis")
        if axis_fed:
            graph_inputs.append(helper.make_tensor_value_info("axis", TensorProto.INT64, []))
        else:
            initializers.append(numpy_helper.from_array(np.array(axis, np.int64), "axis"))
    elif axis is not None:
        attributes["axis"] = axis
    while not inputs[-1]:
        inputs.pop()
    dims: list[Any] = [f"d{i}" for i in range(len(shape) - 1)] + [shape[-1]] if dynamic \
        else list(shape)
    graph = helper.make_graph(
        [helper.make_node("DFT", inputs, ["y"], **attributes)], "dft",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, dims), *graph_inputs],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def _torch_dft(x: Any, axis: int, inverse: int, onesided: int, length: int | None) -> Any:
    """What ``DFT`` computes, in torch (``x`` and the result end in 1 or 2: ``[re, im]``)."""
    signal = x[..., 0] if x.shape[-1] == 1 else torch.complex(x[..., 0], x[..., 1])
    axis = axis % x.dim()
    if inverse and onesided:
        return torch.fft.irfft(signal, n=length, dim=axis).unsqueeze(-1)
    if inverse:
        spectrum = torch.fft.ifft(signal, n=length, dim=axis)
    elif onesided:
        spectrum = torch.fft.rfft(signal, n=length, dim=axis)
    else:
        spectrum = torch.fft.fft(signal, n=length, dim=axis)
    return torch.view_as_real(spectrum.resolve_conj())


def _onnxruntime_gradient(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                          cotangent: np.ndarray) -> np.ndarray:
    """dX of ``sum(cotangent * y)`` from the builders' graph, run in onnxruntime."""
    vjp = vjp_model(model, ["x"])
    session = ort.InferenceSession(vjp.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    given = {**feeds, **{name: cotangent for name in vjp.cotangents.values()}}
    wanted = {i.name for i in session.get_inputs()}
    (grad,) = session.run(None, {k: v for k, v in given.items() if k in wanted})
    return np.asarray(grad)


def _torch_gradient(function: Callable[[Any], Any], x: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(cotangent, dX)`` of ``sum(cotangent * function(x))`` by ``torch.autograd``."""
    leaf = torch.tensor(x, requires_grad=True)
    y = function(leaf)
    cotangent = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(1))
    (y * cotangent).sum().backward()
    return cotangent.numpy(), leaf.grad.numpy()


def _check_case(shape: tuple[int, ...], axis: int, inverse: int = 0, onesided: int = 0,
                length: int | None = None, *, opset: int) -> None:
    """Finite differences (static and symbolic shapes) and torch.autograd (static).

    An IRFFT with a ``dft_length`` only with static shapes (symbolic ones are refused).
    """
    x = np.random.default_rng(len(shape) + axis).standard_normal(shape)
    for dynamic in (False,) if inverse and onesided and length else (False, True):
        model = _dft_model(shape, opset=opset, axis=axis, inverse=inverse,
                           onesided=onesided, length=length, dynamic=dynamic)
        outcome = check_gradients(model, {"x": x})
        assert outcome.ok, (dynamic, outcome.failures)
        assert outcome.max_error < 1e-6, (dynamic, outcome.max_error)
    cotangent, expected = _torch_gradient(
        lambda t: _torch_dft(t, axis, inverse, onesided, length), x)
    model = _dft_model(shape, opset=opset, axis=axis, inverse=inverse, onesided=onesided,
                       length=length)
    actual = _onnxruntime_gradient(model, {"x": x}, cotangent)
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


_CASES = {
    "real": dict(shape=(2, 6, 3, 1), axis=1),
    "complex": dict(shape=(2, 6, 3, 2), axis=1),
    "complex, negative axis": dict(shape=(2, 3, 5, 2), axis=-2),
    "real, inverse": dict(shape=(2, 5, 3, 1), axis=1, inverse=1),
    "complex, inverse": dict(shape=(3, 4, 6, 2), axis=2, inverse=1),
    "rfft, even": dict(shape=(2, 6, 3, 1), axis=1, onesided=1),
    "rfft, odd": dict(shape=(2, 3, 7, 1), axis=2, onesided=1),
    "irfft": dict(shape=(2, 4, 3, 2), axis=1, inverse=1, onesided=1),
    "dft_length pads": dict(shape=(2, 6, 3, 1), axis=1, length=8),
    "dft_length crops": dict(shape=(2, 6, 3, 2), axis=1, length=4),
    "dft_length pads, inverse": dict(shape=(2, 6, 3, 2), axis=1, inverse=1, length=9),
    "dft_length pads, rfft": dict(shape=(2, 6, 3, 1), axis=1, onesided=1, length=9),
    "dft_length crops, rfft": dict(shape=(2, 6, 3, 1), axis=1, onesided=1, length=4),
    "dft_length odd, irfft": dict(shape=(2, 4, 3, 2), axis=1, inverse=1, onesided=1,
                                  length=7),
    "dft_length even, irfft": dict(shape=(2, 4, 3, 2), axis=1, inverse=1, onesided=1,
                                   length=6),
}


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_dft_gradient_matches_finite_differences_and_torch(case: str, opset: int) -> None:
    _check_case(**_CASES[case], opset=opset)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", ["real", "complex, inverse", "rfft, odd", "irfft",
                                  "dft_length crops"])
def test_an_axis_computed_at_run_time(case: str) -> None:
    """Opset 20 with the axis a graph input: the backward DFT reads the same input."""
    spec = dict(_CASES[case])
    shape, axis = spec.pop("shape"), spec.pop("axis")
    x = np.random.default_rng(0).standard_normal(shape)
    if "length" in spec and spec.get("inverse") and spec.get("onesided"):
        pytest.skip("an IRFFT's dft_length needs a known axis (refused)")
    for dynamic in (False, True):
        model = _dft_model(shape, opset=20, axis=axis, dynamic=dynamic, axis_fed=True, **spec)
        outcome = check_gradients(model, {"x": x, "axis": np.array(axis, np.int64)}, ["x"])
        assert outcome.ok, (dynamic, outcome.failures)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("case", ["dft_length pads", "dft_length crops",
                                  "dft_length pads, inverse", "dft_length pads, rfft",
                                  "dft_length crops, rfft"])
def test_a_dft_length_computed_at_run_time(case: str, opset: int) -> None:
    """``dft_length`` a graph input: the scale, the crop and the padding are computed."""
    spec = dict(_CASES[case])
    shape, length = spec.pop("shape"), spec["length"]
    x = np.random.default_rng(3).standard_normal(shape)
    for dynamic in (False, True):
        model = _dft_model(shape, opset=opset, dynamic=dynamic, length_fed=True, **spec)
        outcome = check_gradients(model, {"x": x, "length": np.array(length, np.int64)},
                                  ["x"])
        assert outcome.ok, (dynamic, outcome.failures)


@pytest.mark.parametrize("opset", [17, 20])
def test_the_default_axis_of_each_opset(opset: int) -> None:
    """No axis: 1 at opset 17 (an attribute), -2 at opset 20 (an input)."""
    shape = (2, 3, 5, 2)
    axis = 1 if opset == 17 else -2
    x = np.random.default_rng(1).standard_normal(shape)
    model = _dft_model(shape, opset=opset)
    assert check_gradients(model, {"x": x}).ok
    cotangent, expected = _torch_gradient(lambda t: _torch_dft(t, axis, 0, 0, None), x)
    np.testing.assert_allclose(_onnxruntime_gradient(model, {"x": x}, cotangent), expected,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("opset", [17, 20])
def test_two_dfts_in_a_row_are_fftn(opset: int) -> None:
    """A real X through DFT along axis 1 then axis 2: ``fftn(x, dim=(1, 2))``."""
    shape = (2, 4, 6, 1)
    nodes, initializers = [], []
    for index, axis in enumerate((1, 2)):
        inputs, attributes = ["x" if index == 0 else "h", ""], {}
        if opset >= 20:
            inputs.append(f"axis{index}")
            initializers.append(numpy_helper.from_array(np.array(axis, np.int64),
                                                        f"axis{index}"))
        else:
            inputs.pop()
            attributes["axis"] = axis
        nodes.append(helper.make_node("DFT", inputs, ["h" if index == 0 else "y"],
                                      **attributes))
    graph = helper.make_graph(
        nodes, "fftn", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, shape)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model)
    x = np.random.default_rng(2).standard_normal(shape)
    outcome = check_gradients(model, {"x": x})
    assert outcome.ok, outcome.failures
    cotangent, expected = _torch_gradient(
        lambda t: torch.view_as_real(torch.fft.fftn(t[..., 0], dim=(1, 2))), x)
    np.testing.assert_allclose(_onnxruntime_gradient(model, {"x": x}, cotangent), expected,
                               rtol=1e-6, atol=1e-6)


# ================================================================ torch exports
_EXPORTS: dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]] = {
    "fftn real (FNet)": (lambda x: torch.fft.fftn(x, dim=(1, 2)).real, (2, 4, 6)),
    "fft n=8 imag": (lambda x: torch.fft.fft(x, n=8, dim=1).imag, (2, 6, 3)),
    "fft n=4 real": (lambda x: torch.fft.fft(x, n=4, dim=-1).real, (2, 3, 6)),
    "rfft": (lambda x: torch.view_as_real(torch.fft.rfft(x, dim=1)), (2, 7, 3)),
    "irfft of rfft, n=7": (lambda x: torch.fft.irfft(torch.fft.rfft(x, dim=1), n=7, dim=1),
                           (2, 6, 3)),
    "ifft real": (lambda x: torch.fft.ifft(x, dim=-1).real, (2, 3, 6)),
    "fft2 ortho": (lambda x: torch.fft.fft2(x, norm="ortho").real, (2, 4, 6)),
}


@pytest.mark.parametrize("case", sorted(_EXPORTS))
def test_torch_export_gradient_equals_torch(case: str) -> None:
    """The builders' dX (onnxruntime, float32) is torch.autograd's; float64 passes FD."""
    function, shape = _EXPORTS[case]
    torch.manual_seed(0)
    module = Op(function)
    x = torch.randn(*shape)
    proto = export_op(module, x)
    assert "DFT" in {n.op_type for n in proto.graph.node}
    name = proto.graph.input[0].name
    cotangent, expected = _torch_gradient(function, x.numpy())
    vjp = vjp_model(proto, [name])
    session = ort.InferenceSession(vjp.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {name: x.numpy(), **{c: cotangent for c in vjp.cotangents.values()}}
    wanted = {i.name for i in session.get_inputs()}
    (actual,) = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)
    outcome = check_gradients(to_double(proto), {name: x.double().numpy()})
    assert outcome.ok, outcome.failures


class _FourierMixing(torch.nn.Module):
    """FNet's mixing: a scaled input, Fourier mixing over tokens and hidden, a norm."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x: Any) -> Any:
        h = x * self.scale
        return self.norm(h + torch.fft.fftn(h, dim=(1, 2)).real)


def test_lint_gradients_with_graphpass_rules_refuses_nothing_in_fourier_mixing() -> None:
    torch.manual_seed(0)
    proto = export_op(_FourierMixing(), torch.randn(2, 5, 8))
    assert "DFT" in {n.op_type for n in proto.graph.node}
    model = graphpass.Model.from_proto(proto)
    result = graphpass.PassManager(["lint-gradients"], options={
        "lint-gradients": {"rules": "graphpass", "loss": [model.graph.output_names[0]]}}
    ).run(model)
    assert [f for f in result.findings if f.severity.name == "ERROR"] == []
    assert not [f for f in result.findings if f.code in ("GP401", "GP403")]


# ===================================================================== refusal
@pytest.mark.parametrize("bins, length", [(4, 12), (5, 4), (4, 5)])
def test_an_irfft_whose_input_does_not_fit_dft_length_is_refused(bins: int, length: int
                                                                  ) -> None:
    """Other than ``length // 2 + 1`` bins: onnxruntime does not crop or pad as ONNX says."""
    from graphpass.training import GradientError

    model = _dft_model((2, bins, 3, 2), opset=20, axis=1, inverse=1, onesided=1,
                       length=length)
    with pytest.raises(GradientError, match="IRFFT") as caught:
        vjp_model(model, ["x"])
    assert "dft_length // 2 + 1" in (caught.value.hint or "")


def test_an_irfft_with_unknown_bins_and_a_dft_length_is_refused() -> None:
    """A symbolic length along the axis, or an axis computed at run time: not provable."""
    from graphpass.training import GradientError

    for dynamic, fed in ((True, False), (False, True)):
        model = _dft_model((2, 4, 3, 2), opset=20, axis=1, inverse=1, onesided=1, length=7,
                           dynamic=dynamic, axis_fed=fed)
        with pytest.raises(GradientError, match="IRFFT"):
            vjp_model(model, ["x"])


def test_lint_gradients_reports_the_irfft_refusal_before_building() -> None:
    """A weight scales the spectrum of an IRFFT that would pad it: GP403, with the reason."""
    spectrum = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3, 2])
    weight = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    initializers = [weight, numpy_helper.from_array(np.array(12, np.int64), "length"),
                    numpy_helper.from_array(np.array(1, np.int64), "axis")]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["scaled"]),
         helper.make_node("DFT", ["scaled", "length", "axis"], ["y"], inverse=1, onesided=1)],
        "irfft", [spectrum], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    proto.ir_version = 10
    model = graphpass.Model.from_proto(onnx.shape_inference.infer_shapes(proto))
    result = graphpass.PassManager(["lint-gradients"], options={
        "lint-gradients": {"rules": "graphpass", "loss": ["y"]}}).run(model)
    refused = [f for f in result.findings if f.code == "GP403"]
    assert refused and "IRFFT" in refused[0].message, [
        (f.code, f.message) for f in result.findings]
