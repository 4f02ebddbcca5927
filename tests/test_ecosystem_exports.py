"""A pipeline mixing graphpass's passes and the ecosystem's, on real torch 2.13 exports.

``inline-functions``, an ``onnx-ir-*`` pass, ``onnxscript-optimize``, ``fix-training-ops``
and ``lint-gradients``, run with ``--verify`` by the command line on tiny Hugging Face
models (BertModel and GPT2Model through the dynamo exporter, BertModel through the
legacy one) and on a custom module exported as functions. Oracles: ``--verify``'s
verdict, and onnxruntime run here on the input and the output file with the same feeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

PIPELINE = """\
[pipeline]
passes = ["inline-functions", "onnx-ir-lift-constants-to-initializers", "onnxscript-optimize",
          "fix-training-ops", "lint-gradients"]

[passes.onnx-ir-lift-constants-to-initializers]
lift-all-constants = true
size-limit = 0

[passes.onnxscript-optimize]
num-iterations = 2

# The parameters: lifted constants (and the exporters' own, val_*) are float initializers too.
[passes.lint-gradients]
trainable = ["*.weight", "*.bias"]
"""


@pytest.fixture(scope="module")
def exports() -> dict[str, Path]:
    from _ecosystem_exports import exported_models

    return exported_models()


def _feeds(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in onnx.load(path, load_external_data=False).graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value for d in tensor.shape.dim]
        if tensor.elem_type == onnx.TensorProto.INT64:
            ids = rng.integers(0, 96, shape) if value.name == "input_ids" else np.ones(shape)
            feeds[value.name] = ids.astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("export", ["bert", "bert_legacy", "gpt2", "legacy_functions"])
def test_the_mixed_pipeline_keeps_what_the_export_computes(
        export: str, exports: dict[str, Path], tmp_path: Path, graphpass_process) -> None:
    source = exports[export]
    (tmp_path / "pipeline.toml").write_text(PIPELINE)
    out = tmp_path / "out.onnx"
    done = graphpass_process("run", source, "-o", out, "-c", "pipeline.toml", "--verify",
                             "--format", "json", cwd=tmp_path)
    report = json.loads(done.stdout)
    records = {r["name"]: r for r in report["passes"]}
    assert list(records) == ["inline-functions", "onnx-ir-lift-constants-to-initializers",
                             "onnxscript-optimize", "fix-training-ops", "lint-gradients"]
    assert records["onnxscript-optimize"]["plugin"] == "ecosystem"
    codes = {f["code"] for f in report["findings"]}
    assert "GP600" in codes and not codes & {"GP601", "GP602"}, report["findings"]
    assert done.returncode == 0, (done.stderr, report["findings"])
    feeds = _feeds(source)
    for want, got in zip(_run(source, feeds), _run(out, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    optimize = records["onnxscript-optimize"]["stats"]
    if export == "bert_legacy":  # the legacy exporter leaves work for the optimizer
        lifted = records["onnx-ir-lift-constants-to-initializers"]["stats"]
        assert lifted["nodes after"] < lifted["nodes before"]
        assert optimize["nodes after"] < optimize["nodes before"] - 20
    if export == "legacy_functions":
        assert records["inline-functions"]["stats"]["calls inlined"] == 2
        assert not onnx.load(out, load_external_data=False).functions
