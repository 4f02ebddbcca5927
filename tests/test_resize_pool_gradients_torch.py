"""Gradients of ``Resize`` and of pools with ``ceil_mode`` on torch's exports.

* ``F.interpolate`` exported by torch (bilinear, bicubic, trilinear, nearest,
  ``align_corners``, ``antialias``, sizes, fractional and shrinking scales, a dynamic
  batch): the builders' dX (onnxruntime, float32) is ``torch.autograd``'s, and the
  float64 export passes finite differences.
* ``AveragePool``/``MaxPool`` with ``ceil_mode``: torch's ``avg_pool``/``max_pool`` with
  ``ceil_mode=True`` (padding counted or not, a kernel as large as the input, a last
  window that would start in the padding) against the same two oracles.
* ``lint-gradients`` with the ``graphpass`` rules finds nothing to refuse in such an
  export, and ``graphpass.torch.Module`` trains a model with bilinear upsampling and
  ceil-mode pools as torch does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from _gradcheck import check_gradients, to_double, vjp_model
from _torch_beside import gradient_mismatches, step_both, wrapped_copy

import graphpass

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from _torch_ops import Op, export_op  # noqa: E402

import graphpass.torch  # noqa: E402

F = torch.nn.functional
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore")]


# =================================================================== torch
def _torch_and_builder_gradients(module: Any, proto: onnx.ModelProto, x: Any
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """dX of ``sum(cotangent * module(x))``: torch.autograd's, and the builders' (onnxruntime)."""
    name = proto.graph.input[0].name
    vjp = vjp_model(proto, [name])
    leaf = x.clone().requires_grad_(True)
    y = module(leaf)
    cotangent = torch.randn_like(y)
    (y * cotangent).sum().backward()
    session = ort.InferenceSession(vjp.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = {name: x.numpy(), **{c: cotangent.numpy() for c in vjp.cotangents.values()}}
    wanted = {i.name for i in session.get_inputs()}
    (grad,) = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    return leaf.grad.numpy(), grad


def _against_torch(function: Callable[[Any], Any], shape: tuple[int, ...], op_type: str
                   ) -> None:
    """The builder's dX (onnxruntime, float32) is torch.autograd's; float64 passes FD."""
    torch.manual_seed(0)
    module = Op(function)
    x = torch.randn(*shape)
    proto = export_op(module, x)
    assert op_type in {n.op_type for n in proto.graph.node}
    expected, actual = _torch_and_builder_gradients(module, proto, x)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    outcome = check_gradients(to_double(proto), {proto.graph.input[0].name: x.double().numpy()})
    assert outcome.ok, outcome.failures


_INTERPOLATE = {
    "bilinear x2": (dict(scale_factor=2.0, mode="bilinear"), (2, 3, 4, 5)),
    "bilinear x1.5 align_corners": (dict(scale_factor=1.5, mode="bilinear",
                                         align_corners=True), (1, 2, 4, 5)),
    "bilinear x0.6": (dict(scale_factor=0.6, mode="bilinear"), (1, 2, 7, 9)),
    "bilinear to a size": (dict(size=(7, 3), mode="bilinear"), (1, 2, 4, 5)),
    "bilinear antialias x0.5": (dict(scale_factor=0.5, mode="bilinear", antialias=True),
                                (1, 2, 8, 8)),
    "bicubic x1.7": (dict(scale_factor=1.7, mode="bicubic"), (1, 2, 4, 5)),
    "bicubic x2 align_corners": (dict(scale_factor=2, mode="bicubic", align_corners=True),
                                 (1, 2, 4, 5)),
    "nearest x2.5": (dict(scale_factor=2.5, mode="nearest"), (1, 2, 4, 5)),
    "nearest 1-D x3": (dict(scale_factor=3, mode="nearest"), (1, 2, 5)),
    "trilinear mixed": (dict(scale_factor=(2, 1.5, 0.5), mode="trilinear"), (1, 1, 3, 4, 6)),
    "trilinear size align_corners": (dict(size=(5, 5, 5), mode="trilinear",
                                          align_corners=True), (1, 1, 3, 4, 6)),
    "nearest 3-D x2": (dict(scale_factor=2, mode="nearest"), (1, 1, 2, 3, 2)),
}


@pytest.mark.parametrize("case", sorted(_INTERPOLATE))
def test_interpolate_gradient_equals_torch(case: str) -> None:
    options, shape = _INTERPOLATE[case]
    _against_torch(lambda x: F.interpolate(x, **options), shape, "Resize")


def test_interpolate_to_a_size_with_a_dynamic_batch_resizes_only_the_spatial_axes() -> None:
    """Sizes computed at run time (the batch is symbolic): N and C get no matrix."""
    module = Op(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = torch.onnx.export(module, (torch.randn(2, 3, 4, 5),), dynamo=True,
                                  verbose=False, dynamic_shapes=(
                                      {0: torch.export.Dim("batch", min=2)},)).model_proto
    resize = next(n for n in proto.graph.node if n.op_type == "Resize")
    assert resize.input[3] and not any(i.name == resize.input[3]
                                       for i in proto.graph.initializer)
    vjp = vjp_model(proto, [proto.graph.input[0].name])
    assert sum(n.op_type == "Resize" for n in vjp.model.graph.node) == 2
    expected, actual = _torch_and_builder_gradients(
        module, proto, torch.randn(5, 3, 4, 5))  # another batch than the export's
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


_POOLS = {
    # the case: a kernel as large as the input, ceil_mode (a global pool)
    "avg kernel >= input": (lambda x: F.avg_pool2d(x, 4, 4, 0, ceil_mode=True), (1, 2, 3, 3)),
    "avg kernel >= input, padded": (lambda x: F.avg_pool2d(x, 4, 4, 1, ceil_mode=True),
                                    (1, 2, 3, 3)),
    "avg kernel >= input, pad not counted": (
        lambda x: F.avg_pool2d(x, 4, 4, 1, ceil_mode=True, count_include_pad=False),
        (1, 2, 3, 3)),
    "avg 3/2/1": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 6, 6)),
    "avg 3/2/1 pad not counted": (
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        (2, 3, 6, 6)),
    "avg 2/2 odd input": (lambda x: F.avg_pool2d(x, 2, 2, 0, ceil_mode=True), (1, 1, 5, 7)),
    "avg 1-D": (lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), (1, 2, 8)),
    "avg 3-D": (lambda x: F.avg_pool3d(x, 2, 2, 0, ceil_mode=True), (1, 1, 3, 5, 4)),
    "max 3/2/1": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (1, 2, 6, 6)),
    "max kernel >= input": (lambda x: F.max_pool2d(x, 4, 4, 0, ceil_mode=True), (1, 2, 3, 3)),
}


@pytest.mark.parametrize("case", sorted(_POOLS))
def test_ceil_mode_pool_gradient_equals_torch(case: str) -> None:
    function, shape = _POOLS[case]
    _against_torch(function, shape, "AveragePool" if case.startswith("avg") else "MaxPool")


# ============================================================ model level
class _UpDown(torch.nn.Module):
    """Conv, bilinear upsampling, a ceil-mode average pool, a ceil-mode max pool, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.mix = torch.nn.Conv2d(3, 3, 1)
        self.head = torch.nn.Linear(3 * 2 * 2, 2)

    def forward(self, x: Any) -> Any:
        h = F.interpolate(torch.tanh(self.conv(x)), scale_factor=2.0, mode="bilinear")
        h = F.avg_pool2d(self.mix(h), 3, 2, 1, ceil_mode=True, count_include_pad=False)
        h = F.max_pool2d(h, 3, 3, 0, ceil_mode=True)
        return self.head(h.flatten(1))


def test_lint_gradients_with_graphpass_rules_refuses_nothing_in_theexport_op() -> None:
    torch.manual_seed(0)
    proto = export_op(_UpDown(), torch.randn(2, 2, 5, 5))
    ops = {n.op_type for n in proto.graph.node}
    assert {"Resize", "AveragePool", "MaxPool"} <= ops
    model = graphpass.Model.from_proto(proto)
    result = graphpass.PassManager(["lint-gradients"], options={
        "lint-gradients": {"rules": "graphpass", "loss": [model.graph.output_names[0]]}}
    ).run(model)
    errors = [f for f in result.findings if f.severity.name == "ERROR"]
    assert errors == []
    assert not [f for f in result.findings if f.code in ("GP401", "GP403")]


def test_torch_module_trains_bilinear_upsampling_and_ceil_pools_as_torch_does() -> None:
    torch.manual_seed(0)
    reference = _UpDown()
    model, wrapped = wrapped_copy(reference)
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for step in range(6):
        x = torch.randn(3, 2, 5, 5, generator=generator)
        target = torch.randn(3, 2, generator=generator)
        out_ref, out = reference(x), wrapped(x)
        assert torch.allclose(out, out_ref, atol=1e-5), step
        loss_ref = ((out_ref - target) ** 2).mean()
        loss = ((out - target) ** 2).mean()
        loss_ref.backward()
        loss.backward()
        if step == 0:
            assert gradient_mismatches(reference, model, rtol=1e-4, atol=1e-6) == []
        step_both((opt_ref, opt))
        assert loss.item() == pytest.approx(loss_ref.item(), rel=1e-5, abs=1e-6), step
    assert wrapped.exports == 1
    assert max((a - b).abs().max().item() for a, b in zip(
        reference.parameters(), model.parameters(), strict=True)) < 1e-4
