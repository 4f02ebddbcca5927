"""``Resize``'s gradient builder against finite differences, on one-node float64 models.

Each mode (nearest, linear, cubic) x coordinate mode x 1, 2 and 3 spatial axes, with
static and symbolic shapes; sizes instead of scales, ``axes``, ``antialias``,
``exclude_outside``, ``nearest_mode``; the one refusal (a crop) with its hint. torch's
exports are checked in ``tests/test_resize_pool_gradients_torch.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from _gradcheck import check_gradients, vjp_model
from onnx import TensorProto, helper, numpy_helper


# ============================================================ one-node models
def _resize_model(shape: tuple[int, ...], *, scales: list[float] | None = None,
                  sizes: list[int] | None = None, dynamic: bool = False, opset: int = 21,
                  **attributes: Any) -> onnx.ModelProto:
    """A float64 model of one ``Resize`` node."""
    if scales is not None:
        initializers = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
        inputs = ["x", "", "scales"]
    else:
        initializers = [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")]
        inputs = ["x", "", "", "sizes"]
    dims: list[Any] = [f"d{i}" for i in range(len(shape))] if dynamic else list(shape)
    graph = helper.make_graph(
        [helper.make_node("Resize", inputs, ["y"], **attributes)], "resize",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, dims)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


_SPATIAL = {1: ((2, 3, 5), [1, 1, 1.6]), 2: ((1, 2, 4, 5), [1, 1, 1.5, 0.6]),
            3: ((1, 1, 3, 4, 2), [1, 1, 2.0, 0.5, 1.5])}


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("coordinates", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                         "asymmetric", "half_pixel_symmetric"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_gradient_matches_finite_differences(mode: str, coordinates: str,
                                                    spatial: int) -> None:
    shape, scales = _SPATIAL[spatial]
    rng = np.random.default_rng(spatial)
    for dynamic in (False, True):
        model = _resize_model(shape, scales=scales, dynamic=dynamic, mode=mode,
                              coordinate_transformation_mode=coordinates)
        outcome = check_gradients(model, {"x": rng.standard_normal(shape)})
        assert outcome.ok, (dynamic, outcome.failures)
        assert outcome.max_error < 1e-6


@pytest.mark.parametrize("case", [
    {"sizes": [1, 2, 7, 3], "mode": "linear"},
    {"sizes": [1, 2, 9, 2], "mode": "cubic", "coordinate_transformation_mode": "align_corners"},
    {"scales": [1, 1, 0.5, 0.5], "mode": "linear", "antialias": 1},
    {"scales": [1, 1, 1.8, 0.6], "mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5},
    {"scales": [1, 1, 2.5, 1.5], "mode": "nearest", "nearest_mode": "round_prefer_ceil"},
    {"scales": [1.5, 1.25], "axes": [3, 2], "mode": "linear"},
    {"sizes": [3], "axes": [3], "mode": "cubic"},
    {"scales": [1, 1, 2.0, 1.5], "mode": "linear", "opset": 13},
    {"sizes": [1, 2, 3, 8], "mode": "nearest", "opset": 13},
], ids=lambda case: "-".join(f"{k}={v}" for k, v in case.items()))
def test_resize_gradient_with_sizes_axes_antialias_and_opset_13(case: dict[str, Any]
                                                                    ) -> None:
    shape = (1, 2, 4, 5)
    for dynamic in (False, True):
        model = _resize_model(shape, dynamic=dynamic, **case)
        outcome = check_gradients(model, {"x": np.random.default_rng(0).standard_normal(shape)})
        assert outcome.ok, (dynamic, outcome.failures)


def test_a_crop_is_refused_with_what_to_do_instead() -> None:
    from graphpass.training import GradientError

    model = _resize_model((1, 1, 4, 4), scales=[1, 1, 2, 2],
                          coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(GradientError, match="extrapolation value") as caught:
        vjp_model(model, ["x"])
    assert "Slice" in (caught.value.hint or "")
