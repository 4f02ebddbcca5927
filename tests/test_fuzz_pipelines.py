"""Random valid models through the built-in pipelines: valid, same outputs, idempotent, stable.

For every model drawn by ``tests/_model_strategies.py`` (op chains with known shapes,
local functions with nesting and attribute references, ``If``/``Loop`` bodies that
read outer values) and every pipeline below:

* the result passes ``onnx.checker.check_model(full_check=True)``;
* onnxruntime computes the same outputs from it as from the input;
* running the pipeline again changes nothing (``changed`` is false and the proto is
  equal): the pipelines are idempotent;
* a second, independent run from the same input gives the same bytes, and saving the
  result twice (embedded, and with external data) gives byte-identical files whose
  external data locations are plain relative names: names, orders and metadata are
  deterministic.

Examples are derandomized and bounded, so the suite is deterministic and fast.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from _model_strategies import DOMAIN, feeds, models
from hypothesis import HealthCheck, given, settings

import graphpass

PIPELINES = (
    "train-ready",
    "inline-functions,remove-unused,topological-sort",
    "infer-shapes,check",
    "remove-unused,topological-sort,infer-shapes",
)

SCALE = float(os.environ.get("GRAPHPASS_FUZZ_SCALE", "1"))
"""Multiplies the number of examples; a value other than 1 also draws fresh random ones
(``GRAPHPASS_FUZZ_SCALE=20 pytest tests/test_fuzz_pipelines.py`` for a long run)."""


def _settings(examples: int) -> settings:
    return settings(max_examples=max(1, round(examples * SCALE)), deadline=None,
                    derandomize=SCALE == 1, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _run_ort(proto: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    return list(session.run(None, inputs))


def _run(proto: onnx.ModelProto, pipeline: str) -> graphpass.RunResult:
    model = graphpass.Model.from_proto(_copy(proto))
    return graphpass.PassManager(pipeline.split(","), stop_on_error=False).run(model)


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    clone = onnx.ModelProto()
    clone.CopyFrom(proto)
    return clone


def _saved_bytes(model: graphpass.Model, folder: Path, **options: object) -> dict[str, bytes]:
    graphpass.save(model, folder / "model.onnx", **options)  # type: ignore[arg-type]
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _check(original: onnx.ModelProto) -> None:
    onnx.checker.check_model(original, full_check=True)  # the strategy's own promise
    inputs = feeds(original)
    expected = _run_ort(original, inputs)
    for pipeline in PIPELINES:
        result = _run(original, pipeline)
        assert not [f for f in result.findings if f.code in ("GP501", "GP502", "GP510")], (
            pipeline, result.findings)
        out = result.model.to_proto()
        onnx.checker.check_model(out, full_check=True)
        if pipeline.startswith(("train-ready", "inline-functions")):
            assert not out.functions and DOMAIN not in {n.domain for n in out.graph.node}
        actual = _run_ort(out, inputs)
        assert len(actual) == len(expected), pipeline
        for got, want in zip(actual, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=pipeline)

        again = graphpass.PassManager(pipeline.split(","), stop_on_error=False).run(
            result.model)
        assert not again.changed, (pipeline, [r.name for r in again.records if r.changed])
        assert again.model.to_proto() == out, pipeline

        independent = _run(original, pipeline).model.to_proto()
        assert independent.SerializeToString() == out.SerializeToString(), pipeline

        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            first = _saved_bytes(result.model, root / "a")
            second = _saved_bytes(result.model, root / "b")
            assert first == second, pipeline
            external = _saved_bytes(result.model, root / "c", external_data=True,
                                    size_threshold=0)
            assert external == _saved_bytes(result.model, root / "d", external_data=True,
                                            size_threshold=0)
            written = onnx.load(root / "c" / "model.onnx", load_external_data=False)
            locations = {e.value for t in written.graph.initializer for e in t.external_data
                         if e.key == "location"}
            assert locations <= {"model.onnx.data"}, locations
            assert graphpass.load(root / "a" / "model.onnx").to_proto() == out


@_settings(60)
@given(models(max_steps=12))
def test_op_chains(original: onnx.ModelProto) -> None:
    _check(original)


@_settings(60)
@given(models(functions=True, max_steps=8))
def test_local_functions_with_nesting_and_attribute_references(
        original: onnx.ModelProto) -> None:
    _check(original)


@_settings(50)
@given(models(control_flow=True, max_steps=8))
def test_control_flow_reading_outer_values(original: onnx.ModelProto) -> None:
    _check(original)


@_settings(30)
@given(models(functions=True, control_flow=True, max_steps=10))
def test_everything_together(original: onnx.ModelProto) -> None:
    _check(original)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_the_example_model_through_every_pipeline(pipeline: str) -> None:
    """The bundled example (functions with defaults, an If reading outer values)."""
    example = Path(__file__).resolve().parent.parent / "examples" / "tiny_classifier.onnx"
    original = onnx.load(example)
    result = _run(original, pipeline)
    again = graphpass.PassManager(pipeline.split(","), stop_on_error=False).run(result.model)
    assert not again.changed
    assert again.model.to_proto() == result.model.to_proto()
    batch = {"features": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)}
    for got, want in zip(_run_ort(result.model.to_proto(), batch), _run_ort(original, batch),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
