"""Activation recomputation (``build-training-graph``'s ``recompute`` option).

Small Hugging Face transformers (GPT-2, Llama; random init) and a two-block language
model, exported by torch: with ``recompute = "elementwise"`` onnxruntime's gradients
equal the gradients without recomputation and ``torch.autograd``'s; onnxruntime keeps
the copies (its common-subexpression elimination does not merge them with the forward
nodes) and runs each one after the gradient it waits for, in the backward pass; a bad
policy is refused with the choices.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import graphpass
from graphpass.errors import GraphpassError
from graphpass.training import AdamW, GradientError, build_training_graphs

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from _training_models import exported, recipes, torch_loss  # noqa: E402

MODELS = ["hf-gpt2", "hf-llama", "tinylm"]


def _build(name: str, directory: Path, recompute: str) -> tuple[dict[str, object], int]:
    recipe = recipes()[name]
    result = graphpass.PassManager(
        ["inline-functions", "build-training-graph"],
        options={"build-training-graph": {"directory": str(directory), "loss": recipe.loss,
                                          "recompute": recompute}}).run(
        graphpass.load(exported(name)))
    errors = [f for f in result.findings if f.severity.name == "ERROR"]
    assert not errors, errors
    stats = next(r.stats for r in result.records if r.name == "build-training-graph")
    return json.loads((directory / "manifest.json").read_text()), int(
        stats["recomputed values"])


def _options(**settings: object) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    for key, value in settings.items():
        setattr(options, key, value)
    return options


def _gradients(name: str, directory: Path, **settings: object) -> list[np.ndarray]:
    from safetensors.numpy import load_file

    recipe = recipes()[name]
    session = ort.InferenceSession(str(directory / "gradient.onnx"), _options(**settings),
                                   providers=["CPUExecutionProvider"])
    feeds = {**recipe.batch(), "target": recipe.target(),
             **load_file(str(directory / "weights.safetensors"))}
    outputs: list[np.ndarray] = session.run(None, feeds)
    if settings.get("enable_profiling"):
        session.end_profiling()
    return outputs


@pytest.mark.parametrize("name", MODELS)
def test_recomputed_gradients_equal_kept_ones_and_torch_autograd(name: str,
                                                                 tmp_path: Path) -> None:
    manifest, none = _build(name, tmp_path / "kept", "none")
    again, recomputed = _build(name, tmp_path / "recomputed", "elementwise")
    assert none == 0 and recomputed > 0
    assert again["trainable"] == manifest["trainable"]
    assert again["options"]["recompute"] == "elementwise"
    kept = _gradients(name, tmp_path / "kept")
    found = _gradients(name, tmp_path / "recomputed")
    for weight, a, b in zip(["loss", *manifest["trainable"]], kept, found, strict=True):
        # the same arithmetic; onnxruntime may fuse a copy differently (an ulp or so)
        scale = max(float(np.abs(a).max()), 1e-6)
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6 * scale, err_msg=weight)

    recipe = recipes()[name]
    module = recipe.make()
    expected = torch_loss(module, recipe)
    expected.backward()
    assert abs(float(found[0]) - expected.item()) <= 1e-5 * max(1.0, abs(expected.item()))
    state = module.state_dict(keep_vars=True)
    for weight, grad in zip(manifest["trainable"], found[1:], strict=True):
        reference = state[weight].grad.numpy()
        scale = max(float(np.abs(reference).max()), 1e-6)
        assert float(np.abs(grad - reference).max()) / scale < 1e-3, weight


def _trigger(node: onnx.NodeProto, producers: dict[str, onnx.NodeProto]) -> str | None:
    """The gradient a copy waits for: the one its ``Reshape``-``Slice`` dependency reads."""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        if current.op_type == "Slice" and ".recompute/" in current.name:
            flat = producers.get(current.input[0])
            if flat is not None and flat.op_type == "Reshape":
                return flat.input[0]
        stack.extend(producers[name] for name in current.input if name in producers)
    return None


def test_onnxruntime_keeps_the_copies_and_runs_them_in_the_backward_pass(
        tmp_path: Path) -> None:
    _build("hf-gpt2", tmp_path / "train", "elementwise")
    written = onnx.load(str(tmp_path / "train" / "gradient.onnx"))
    copies = {n.name for n in written.graph.node if n.name.endswith(".recompute")}
    optimized = tmp_path / "optimized.onnx"
    _gradients("hf-gpt2", tmp_path / "train", enable_profiling=True,
               profile_file_prefix=str(tmp_path / "profile"),
               optimized_model_filepath=str(optimized))
    graph = onnx.load(str(optimized)).graph
    producers = {name: node for node in graph.node for name in node.output}
    kept = [node for node in graph.node if node.name in copies]
    # onnxruntime's common-subexpression elimination would merge a copy that read the
    # same inputs as its original: every activation copy survives (Tanh: GPT-2's GELU)
    assert sum(node.op_type == "Tanh" for node in kept) == sum(
        node.op_type == "Tanh" and node.name in copies for node in written.graph.node) > 0
    (profile,) = tmp_path.glob("profile*.json")
    events = [e["name"].removesuffix("_kernel_time") for e in json.loads(profile.read_text())
              if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    position = {name: i for i, name in enumerate(events)}
    checked = 0
    for node in kept:
        trigger = _trigger(node, producers)
        assert trigger is not None, node.name
        producer = producers.get(trigger)
        if producer is None or node.name not in position or producer.name not in position:
            continue  # fused away or not a node of this run
        assert position[node.name] > position[producer.name], node.name
        original = node.name.removesuffix(".recompute")
        if original in position:
            assert position[node.name] > position[original], node.name
        checked += 1
    assert checked >= len(kept) // 2 > 0


def test_a_bad_policy_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(GraphpassError, match=r"none.*elementwise"):
        graphpass.PassManager(["inline-functions", "build-training-graph"], options={
            "build-training-graph": {"directory": str(tmp_path / "t"),
                                     "recompute": "everything"}}).run(
            graphpass.load(exported("mlp")))
    model = graphpass.load(exported("mlp"))
    weights = [name for name in model.graph.initializers][:1]
    with pytest.raises(GradientError, match="unknown recompute policy 'layers'") as caught:
        build_training_graphs(model, trainable=weights, optimizer=AdamW(),
                              recompute_policy="layers")  # type: ignore[arg-type]
    assert "elementwise" in (caught.value.hint or "")


def _mlp_after(activation: str) -> graphpass.Model:
    """x -> MatMul -> ``activation`` -> MatMul -> Tanh -> Sigmoid -> MatMul."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) / 8, name)
               for name, shape in (("w1", (64, 256)), ("w2", (256, 256)), ("w3", (256, 8)))]
    bounds = [numpy_helper.from_array(np.array(v, dtype=np.float32), n)
              for n, v in (("low", 0.0), ("high", 6.0))]
    first = (helper.make_node("Clip", ["h1", "low", "high"], ["a1"]) if activation == "Clip"
             else helper.make_node("Relu", ["h1"], ["a1"]))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]), first,
             helper.make_node("MatMul", ["a1", "w2"], ["h2"]),
             helper.make_node("Tanh", ["h2"], ["t"]), helper.make_node("Sigmoid", ["t"], ["s"]),
             helper.make_node("MatMul", ["s", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [32, 64])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [32, 8])], [*weights, *bounds])
    return graphpass.Model.from_proto(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9))


def test_a_clip_mask_computed_in_the_forward_pass_does_not_end_the_forward_pass() -> None:
    # Clip's gradient mask is moved next to the Clip (a backward node among the forward
    # ones); the values after it are recomputed as they are after a Relu.
    found = {}
    for activation in ("Relu", "Clip"):
        graphs = build_training_graphs(_mlp_after(activation), trainable=["w1", "w2", "w3"],
                                       loss_inputs=["y"], optimizer=AdamW(),
                                       recompute_policy="elementwise")
        found[activation] = sorted(graphs.recomputed.values)
    assert found["Relu"] and found["Clip"] == found["Relu"]
