"""reconcile-initializers on bad input: each a clear error, and no output file written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import save_file

import graphpass
from graphpass import PassContext
from graphpass.cli import main
from graphpass.framework import default_registry
from graphpass.passes.reconcile_initializers import ReconcileInitializers

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
B = np.array([1.0, -1.0, 0.5, 2.0], np.float32)


def _model(tmp_path: Path, *, metadata: dict[str, str] | None = None,
           weight_name: str = "encoder.weight", consumer: str = "MatMul") -> Path:
    """y = x @ W + b, with placeholder (zero) weights."""
    nodes = [helper.make_node(consumer, ["x", weight_name], ["h"], name="mm"),
             helper.make_node("Add", ["h", "encoder.bias"], ["y"], name="add")]
    if consumer != "MatMul":
        nodes[0] = helper.make_node("Mul", ["x", weight_name], ["h"], name="mm")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(np.zeros((3, 4), np.float32), weight_name),
         numpy_helper.from_array(np.zeros(4, np.float32), "encoder.bias")])
    if metadata:
        info = helper.make_tensor_value_info(weight_name, TensorProto.FLOAT, [3, 4])
        for key, value in metadata.items():
            info.metadata_props.add(key=key, value=value)
        graph.value_info.append(info)
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _checkpoint(tmp_path: Path, tensors: dict[str, np.ndarray], name: str = "w.safetensors"
                ) -> Path:
    path = tmp_path / name
    save_file(tensors, str(path))
    return path


def _run_pass(model_path: Path, checkpoint: Path | None = None, **options):
    model = graphpass.load(model_path)
    context = PassContext(registry=default_registry(),
                          checkpoints=(checkpoint,) if checkpoint else ())
    result = ReconcileInitializers(options).run(model, context)
    return model, result


def _cli_fails(capsys, *argv: str) -> str:
    code = main(["run", *argv])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert "Traceback" not in captured.err
    return captured.err


# ================================================================ good input
def test_fills_from_file_regions_and_saves_external_data(tmp_path):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"module.encoder.weight": W, "module.encoder.bias": B,
                                        "optimizer.step": np.ones(1, np.float32)})
    model, result = _run_pass(model_path, checkpoint)
    weight = model.graph.initializers["encoder.weight"]
    assert weight.is_external and weight.external_path == checkpoint  # not held in memory
    assert result.stats["matched by"] == {"wrapper-prefix": 2}
    assert result.stats["unused checkpoint keys"] == ["optimizer.step"]
    assert str(result.stats["table"]) == "2 entries (in JSON reports)"
    out = graphpass.save(model, tmp_path / "out" / "filled.onnx")
    assert (out.parent / "filled.onnx.data").is_file()
    x = np.ones((2, 3), np.float32)
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, x @ W + B, rtol=1e-6)
    codes = [f.code for f in result.findings]
    assert codes == ["GP200", "GP202"]


def test_several_checkpoints_are_joined(tmp_path):
    model_path = _model(tmp_path)
    first = _checkpoint(tmp_path, {"encoder.weight": W}, "a.safetensors")
    second = _checkpoint(tmp_path, {"encoder.bias": B}, "b.safetensors")
    _, result = _run_pass(model_path, checkpoints=[str(first), str(second)])
    assert result.stats["filled"] == 2
    assert result.stats["table"]["encoder.bias"]["file"] == str(second)


def test_options_paths_are_relative_to_the_base_dir(tmp_path):
    model_path = _model(tmp_path)
    _checkpoint(tmp_path, {"encoder.weight": W, "encoder.bias": B})
    model = graphpass.load(model_path)
    result = ReconcileInitializers({"checkpoint": "w.safetensors"}).run(
        model, PassContext(registry=default_registry(), base_dir=tmp_path))
    assert result.stats["filled"] == 2


def test_unmatched_weight_is_a_warning_and_keeps_its_value(tmp_path):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W})
    model, result = _run_pass(model_path, checkpoint)
    warning = next(f for f in result.findings if f.code == "GP201")
    assert warning.severity.value == "warning" and warning.value == "encoder.bias"
    assert result.stats["unmatched initializers"] == ["encoder.bias"]
    assert not model.graph.initializers["encoder.bias"].is_external


def test_renames_and_rules_options(tmp_path):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"W": W, "enc.b": B})
    _, result = _run_pass(model_path, checkpoint, renames={"W": "encoder.weight"},
                              rules={r"^enc\.b$": "encoder.bias"})
    assert result.stats["matched by"] == {"rename": 1, "rule": 1}


# ================================================================= bad input
def test_shape_mismatch_names_both_shapes_and_types(tmp_path, capsys):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W.T.copy(), "encoder.bias": B})
    with pytest.raises(graphpass.CheckpointError) as caught:
        _run_pass(model_path, checkpoint)
    message = str(caught.value)
    assert "'encoder.weight' is FLOAT[3, 4] in the model" in message
    assert "key 'encoder.weight' is FLOAT[4, 3]" in message
    assert "never reshapes or casts" in message
    out = tmp_path / "out.onnx"
    error = _cli_fails(capsys, str(model_path), "-o", str(out), "-p", "reconcile-initializers",
                       "--checkpoint", str(checkpoint))
    assert "FLOAT[4, 3]" in error
    assert not out.exists() and not Path(f"{out}.data").exists()


def test_dtype_mismatch_is_an_error_not_a_cast(tmp_path):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W.astype(np.float16),
                                        "encoder.bias": B})
    with pytest.raises(graphpass.CheckpointError, match=r"FLOAT16\[3, 4\].*element type "
                                                        r"mismatch"):
        _run_pass(model_path, checkpoint)


def test_ambiguous_match_lists_the_candidates(tmp_path, capsys):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"module.encoder.weight": W,
                                        "_orig_mod.encoder.weight": W + 1,
                                        "encoder.bias": B})
    with pytest.raises(graphpass.CheckpointError) as caught:
        _run_pass(model_path, checkpoint)
    message = str(caught.value)
    assert "'encoder.weight' is fitted by several checkpoint keys" in message
    assert "'_orig_mod.encoder.weight'" in message and "'module.encoder.weight'" in message
    assert "renames" in caught.value.hint
    out = tmp_path / "out.onnx"
    _cli_fails(capsys, str(model_path), "-o", str(out), "--checkpoint", str(checkpoint),
               "-p", "reconcile-initializers")
    assert not out.exists()


def test_strict_makes_unmatched_weights_an_error(tmp_path, capsys):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W})
    with pytest.raises(graphpass.CheckpointError, match=r"no key fills 'encoder\.bias'"):
        _run_pass(model_path, checkpoint, strict=True)
    config = tmp_path / "strict.toml"
    config.write_text('[pipeline]\npasses = ["reconcile-initializers"]\n'
                      '[passes.reconcile-initializers]\ncheckpoint = "w.safetensors"\n'
                      'strict = true\n')
    out = tmp_path / "out.onnx"
    _cli_fails(capsys, str(model_path), "-o", str(out), "-c", str(config))
    assert not out.exists()


def test_truncated_checkpoint_through_the_cli(tmp_path, capsys):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W, "encoder.bias": B})
    checkpoint.write_bytes(checkpoint.read_bytes()[:-10])
    out = tmp_path / "out.onnx"
    error = _cli_fails(capsys, str(model_path), "-o", str(out), "--checkpoint", str(checkpoint),
                       "-p", "reconcile-initializers")
    assert "not a valid safetensors file" in error and "truncated or corrupt" in error
    assert not out.exists()


def test_refused_pickle_through_the_cli(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    model_path = _model(tmp_path)
    checkpoint = tmp_path / "trainer.pt"
    torch.save({"model": {"encoder.weight": torch.from_numpy(W)},
                "config": _Config()}, checkpoint)
    out = tmp_path / "out.onnx"
    error = _cli_fails(capsys, str(model_path), "-o", str(out), "--checkpoint", str(checkpoint),
                       "-p", "reconcile-initializers")
    assert "weights_only" in error and "_Config" in error
    assert not out.exists()


class _Config:
    """A custom object a training script pickled next to its weights."""

    hidden = 4


def test_no_checkpoint_given(tmp_path):
    with pytest.raises(graphpass.CheckpointError, match="no checkpoint given") as caught:
        _run_pass(_model(tmp_path))
    assert "--checkpoint" in caught.value.hint


def test_invalid_regex_rule_fails_before_running():
    with pytest.raises(graphpass.PipelineError, match="not a valid regex"):
        ReconcileInitializers({"rules": {"(unclosed": "x"}})


def test_unknown_option_is_a_pipeline_error():
    with pytest.raises(graphpass.PipelineError, match="did you mean 'renames'"):
        ReconcileInitializers({"renamez": {}})


def test_fold_that_cannot_be_computed_again_is_refused_with_reexport_advice(tmp_path, capsys):
    """A recorded fold of placeholder values that no known computation gives is refused.

    The constant holds zeros (a placeholder export) and a Mul reads it: neither its values
    nor its reader say how it came from the checkpoint's weight, so filling by name would
    keep the zeros and train a copy. It is an error finding naming the constant, its
    source and the key, with the re-export advice; nothing is written.
    """
    model_path = _model(tmp_path, weight_name="val_2", consumer="Mul", metadata={
        "pkg.onnxscript.optimizer.folded_from": "['encoder.weight']"})
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W.T.copy(), "encoder.bias": B})
    _, result = _run_pass(model_path, checkpoint)
    [refused] = [f for f in result.findings if f.code == "GP211"]
    assert refused.severity.value == "error" and refused.value == "val_2"
    assert "'val_2' was computed at export time from 'encoder.weight'" in refused.message
    assert "key 'encoder.weight'" in refused.message and "optimize=False" in refused.hint
    out = tmp_path / "out.onnx"
    assert main(["run", str(model_path), "-o", str(out), "--checkpoint", str(checkpoint),
                 "-p", "reconcile-initializers"]) == 1
    assert "GP211" in capsys.readouterr().out
    assert not out.exists()


def test_recorded_fold_is_replayed_as_a_transpose(tmp_path):
    model_path = _model(tmp_path, weight_name="val_2", metadata={
        "pkg.onnxscript.optimizer.folded_from": "['encoder.weight']"})
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W.T.copy(), "encoder.bias": B})
    model, result = _run_pass(model_path, checkpoint)
    assert result.stats["table"]["encoder.weight"]["computes"] == ["val_2"]
    out = graphpass.save(model, tmp_path / "filled.onnx")
    x = np.ones((2, 3), np.float32)
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, x @ W + B, rtol=1e-6)


def test_pass_manager_leaves_the_model_untouched_on_error(tmp_path):
    model_path = _model(tmp_path)
    checkpoint = _checkpoint(tmp_path, {"encoder.weight": W.T.copy(), "encoder.bias": B})
    model = graphpass.load(model_path)
    before = model.to_proto().SerializeToString()
    with pytest.raises(graphpass.PassError, match="FLOAT\\[4, 3\\]"):
        graphpass.PassManager(["reconcile-initializers"], checkpoints=[checkpoint]).run(model)
    assert model.to_proto().SerializeToString() == before


def test_npz_checkpoint_with_underscore_keys(tmp_path):
    model_path = _model(tmp_path)
    checkpoint = tmp_path / "weights.npz"
    np.savez(checkpoint, encoder_weight=W, encoder_bias=B)
    model, result = _run_pass(model_path, checkpoint)
    assert result.stats["matched by"] == {"separator": 2}
    assert model.graph.initializers["encoder.weight"].external_path == checkpoint


def test_a_key_in_two_checkpoints_with_equal_values_is_no_conflict(tmp_path):
    model_path = _model(tmp_path)
    first = _checkpoint(tmp_path, {"encoder.weight": W, "encoder.bias": B}, "a.safetensors")
    second = _checkpoint(tmp_path, {"encoder.bias": B}, "b.safetensors")
    model, _ = _run_pass(model_path, checkpoints=[str(first), str(second)])
    np.testing.assert_array_equal(model.graph.initializers["encoder.bias"].numpy(), B)


def test_a_key_in_two_checkpoints_with_different_values_is_an_error(tmp_path):
    model_path = _model(tmp_path)
    first = _checkpoint(tmp_path, {"encoder.weight": W, "encoder.bias": B}, "a.safetensors")
    second = _checkpoint(tmp_path, {"encoder.bias": B + 1}, "b.safetensors")
    with pytest.raises(graphpass.CheckpointError,
                       match=r"different values under the same key: 'encoder\.bias' .*"
                             r"a\.safetensors.*b\.safetensors"):
        _run_pass(model_path, checkpoints=[str(first), str(second)])
