"""Every built-in gradient builder against finite differences, and training graphs against torch.

Three sweeps, the full versions of what ``make test`` samples:

* **node tests**: every one-node case of ONNX's backend tests whose operator has a
  built-in builder (all sizes), in float64, against central differences;
* **random models**: ``--examples`` hypothesis examples per operator (broadcasting,
  attributes, static and symbolic shapes), the same check;
* **torch models**: ``gradient.onnx``'s loss and gradients against ``torch.autograd``
  and ten ``step.onnx`` runs against ``torch.optim.AdamW``, on the models of
  ``tests/_training_models.py``;
* **Hugging Face models**: tiny BERT, DistilBERT, GPT-2, Llama, ViT, ResNet, ConvNeXt and
  MobileNetV2 (built offline from configs, exported by torch 2.13 with ``dynamo=True``),
  ``gradient.onnx`` against ``torch.autograd`` for the MSE of ``last_hidden_state``;
* **scaling**: the CPU time of building the training graphs of residual
  MatMul/Gelu/LayerNorm stacks of 100 to 800 blocks (ratios per doubling).

It prints a table per sweep and writes the counts into ``docs/benchmarks.md``.

Usage::

    .venv/bin/python benchmarks/gradient_builders.py [--examples 100] [--only Conv,Gather]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ.setdefault("GRAPHPASS_FULL_SWEEP", "1")

from _bench import write_docs_section  # noqa: E402


def node_sweep(only: set[str]) -> dict[str, Counter[str]]:
    from _gradcheck import CaseResult, check_node_case, node_cases

    counts: dict[str, Counter[str]] = defaultdict(Counter)
    errors: dict[str, float] = defaultdict(float)
    for case in node_cases(only or None):
        op_type = case.model.graph.node[0].op_type
        try:
            result = check_node_case(case)
        except Exception as error:  # a crash is a failure to count, not to hide
            result = CaseResult(case.name, op_type, "failed", f"{type(error).__name__}: {error}")
        counts[op_type][result.status] += 1
        counts[op_type]["directions"] += result.directions
        errors[op_type] = max(errors[op_type], result.max_error)
        if result.status == "failed":
            print(f"  FAILED {case.name}: {result.detail[:300]}", flush=True)
    for op_type, error in errors.items():
        counts[op_type]["max_error_e12"] = int(error * 1e12)
    return counts


def random_sweep(only: set[str], examples: int) -> dict[str, dict[str, object]]:
    from _gradient_cases import CASES, run_random

    found: dict[str, dict[str, object]] = {}
    for op_type in sorted(CASES):
        if only and op_type not in only:
            continue
        try:
            tally = run_random(op_type, examples)
            found[op_type] = {"examples": tally.examples, "passed": tally.passed,
                              "directions": tally.directions, "kinks": tally.kinks,
                              "max_error": tally.max_error}
        except Exception as error:  # hypothesis re-raises the shrunk failure
            found[op_type] = {"examples": 0, "passed": 0, "failed": str(error)[:300]}
            print(f"  FAILED {op_type}: {str(error)[:300]}", flush=True)
    return found


def torch_sweep() -> dict[str, dict[str, Any]]:
    import onnxruntime
    from _training_models import batch_norms_in_train_mode, exported, recipes, torch_loss
    from safetensors.numpy import load_file

    import graphpass

    found: dict[str, dict[str, float]] = {}
    for name, recipe in recipes().items():
        with tempfile.TemporaryDirectory() as folder:
            train = Path(folder) / "train"
            graphpass.PassManager(["inline-functions", "build-training-graph"], options={
                "build-training-graph": {"directory": str(train), "loss": recipe.loss}}
            ).run(graphpass.load(exported(name)))
            manifest = json.loads((train / "manifest.json").read_text())
            weights = {**load_file(str(train / "weights.safetensors")),
                       **load_file(str(train / "buffers.safetensors"))}
            feeds = {**recipe.batch(), "target": recipe.target(), **weights}
            session = onnxruntime.InferenceSession(str(train / "gradient.onnx"))
            loss, *grads = session.run(None, feeds)[:1 + len(manifest["trainable"])]
            module = batch_norms_in_train_mode(recipe.make())  # as build-training-graph
            expected = torch_loss(module, recipe)
            expected.backward()
            state = module.state_dict(keep_vars=True)
            worst = max(float(np.abs(g - state[w].grad.numpy()).max()
                              / max(float(np.abs(state[w].grad.numpy()).max()), 1e-6))
                        for w, g in zip(manifest["trainable"], grads, strict=True))
            difference, weight = _adamw(train, recipe, manifest)
            found[name] = {"weights": len(grads),
                           "loss_error": abs(float(loss) - float(expected.detach())),
                           "max_relative_gradient_error": worst,
                           "adamw_10_steps_max_difference": difference,
                           "adamw_10_steps_weight": weight}

    return found


def _adamw(train: Path, recipe: object, manifest: dict[str, object]) -> tuple[float, str]:
    """Ten AdamW steps of ``step.onnx`` against ``torch.optim.AdamW``'s: the largest
    difference of a weight, and that weight."""
    import onnxruntime
    import torch
    from _training_models import batch_norms_in_train_mode, torch_loss

    from graphpass.training import initial_values

    session = onnxruntime.InferenceSession(str(train / "step.onnx"))
    values = initial_values(train)
    step = manifest["step"]
    assert isinstance(step, dict)
    for _ in range(10):
        feeds = {**recipe.batch(), "target": recipe.target(),  # type: ignore[attr-defined]
                 "lr": np.array(1e-2, np.float32),
                 **{n: values[n] for n in step["inputs"] if n in values}}
        outputs = dict(zip(step["outputs"], session.run(None, feeds), strict=True))
        for source, updated in step["carry"]:
            values[source] = outputs[updated]
    module = batch_norms_in_train_mode(recipe.make())  # type: ignore[attr-defined]
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2)
    for _ in range(10):
        optimizer.zero_grad()
        torch_loss(module, recipe).backward()
        optimizer.step()
    state = module.state_dict()
    trainable = manifest["trainable"]
    assert isinstance(trainable, list)
    return max((float(np.abs(values[w] - state[w].numpy()).max()), w) for w in trainable)


def hugging_face_sweep() -> dict[str, dict[str, float]]:
    """Tiny Hugging Face models' gradients against ``torch.autograd``'s in float64, beside
    torch's own float32 gradients' error (batch norms on batch statistics)."""
    import onnxruntime
    import torch
    import transformers as tf
    from _training_models import batch_norms_in_train_mode
    from safetensors.numpy import load_file

    import graphpass

    ids = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(1))
    image = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    text = {"vocab_size": 97}
    models = {
        "bert": (lambda: tf.BertModel(tf.BertConfig(
            **text, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64), add_pooling_layer=False), ids),
        "distilbert": (lambda: tf.DistilBertModel(tf.DistilBertConfig(
            **text, dim=32, n_layers=2, n_heads=4, hidden_dim=64)), ids),
        "gpt2": (lambda: tf.GPT2Model(tf.GPT2Config(
            **text, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False)), ids),
        "llama": (lambda: tf.LlamaModel(tf.LlamaConfig(
            **text, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
            use_cache=False)), ids),
        "vit": (lambda: tf.ViTModel(tf.ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64), add_pooling_layer=False), image),
        "resnet": (lambda: tf.ResNetModel(tf.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])), image),
        "convnext": (lambda: tf.ConvNextModel(tf.ConvNextConfig(
            hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)), image),
        "mobilenet_v2": (lambda: tf.MobileNetV2Model(tf.MobileNetV2Config(
            image_size=32, depth_multiplier=0.25)), image),
    }

    class LastHidden(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x).last_hidden_state

    found: dict[str, dict[str, float]] = {}
    for name, (make, x) in models.items():
        torch.manual_seed(0)
        module = LastHidden(make())
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.02)
            for sub in module.modules():
                if isinstance(sub, torch.nn.BatchNorm2d):
                    sub.running_mean.uniform_(-0.1, 0.1)
                    sub.running_var.uniform_(0.5, 1.5)
        module.eval()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "model.onnx"
            with contextlib.redirect_stdout(io.StringIO()):
                torch.onnx.export(module, (x,), str(path), dynamo=True, optimize=False,
                                  input_names=["x"])
            started = time.process_time()
            graphpass.PassManager(["inline-functions", "fix-training-ops",
                                   "build-training-graph"],
                                  options={"build-training-graph": {"directory": f"{folder}/t"}}
                                  ).run(graphpass.load(path))
            build_seconds = time.process_time() - started
            manifest = json.loads(Path(f"{folder}/t/manifest.json").read_text())
            with torch.no_grad():
                target = torch.randn_like(module(x)) * 0.1
            session = onnxruntime.InferenceSession(f"{folder}/t/gradient.onnx")
            loss, *grads = session.run(None, {"x": x.numpy(), "target": target.numpy(),
                                              **load_file(f"{folder}/t/weights.safetensors"),
                                              **load_file(f"{folder}/t/buffers.safetensors")}
                                       )[:1 + len(manifest["trainable"])]
        batch_norms_in_train_mode(module)  # as build-training-graph trains them
        exact = _float64_gradients(module, x, target)
        module.zero_grad()
        expected = torch.nn.functional.mse_loss(module(x), target)
        expected.backward()
        float32 = {name: parameter.grad for name, parameter in module.named_parameters()}
        largest = max(float(np.abs(g).max()) for g in exact.values())
        ours, theirs, zeros = 0.0, 0.0, []
        for weight, grad in zip(manifest["trainable"], grads, strict=True):
            truth = exact[weight]
            if float(np.abs(truth).max()) <= 1e-12 * largest:  # no gradient in exact arithmetic
                zeros.append(float(np.abs(grad).max()) / largest)
                continue
            scale = float(np.abs(truth).max())
            torch32 = float32[weight]
            torch32 = np.zeros_like(truth) if torch32 is None else torch32.numpy()
            ours = max(ours, float(np.abs(grad - truth).max()) / scale)
            theirs = max(theirs, float(np.abs(torch32 - truth).max()) / scale)
        found[name] = {"weights": len(grads),
                       "parameters": sum(1 for _ in module.parameters()),
                       "loss_error": abs(float(loss) - float(expected.detach())),
                       "gradient_error": ours, "torch_float32_gradient_error": theirs,
                       "exact_zeros": len(zeros), "largest_zero": max(zeros, default=0.0),
                       "build_seconds": build_seconds}
    return found


def _float64_gradients(module: Any, x: Any, target: Any) -> dict[str, np.ndarray[Any, Any]]:
    """Each parameter's gradient of the MSE loss, by ``torch.autograd`` in float64."""
    import copy

    import torch

    exact = copy.deepcopy(module).double()
    inputs = x.double() if x.is_floating_point() else x
    torch.nn.functional.mse_loss(exact(inputs), target.double()).backward()
    return {name: (np.zeros(tuple(p.shape)) if p.grad is None else p.grad.numpy())
            for name, p in exact.named_parameters()}


def scaling_sweep(blocks: tuple[int, ...] = (100, 200, 400, 800)) -> list[tuple[int, int, float]]:
    from onnx import TensorProto, helper, numpy_helper

    import graphpass
    from graphpass.training import AdamW, build_training_graphs

    rng = np.random.default_rng(0)
    found = []
    for count in blocks:
        nodes, weights, x = [], [], "x"
        for i in range(count):
            weights += [numpy_helper.from_array(rng.standard_normal((16, 16), np.float32), f"w{i}"),
                        numpy_helper.from_array(np.zeros(16, np.float32), f"b{i}"),
                        numpy_helper.from_array(np.ones(16, np.float32), f"g{i}")]
            nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                      helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                      helper.make_node("Gelu", [f"a{i}"], [f"e{i}"]),
                      helper.make_node("LayerNormalization", [f"e{i}", f"g{i}", f"b{i}"],
                                       [f"l{i}"]),
                      helper.make_node("Add", [f"l{i}", x], [f"r{i}"])]
            x = f"r{i}"
        graph = helper.make_graph(
            nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["n", 16])], weights)
        model = graphpass.Model.from_proto(helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10))
        started = time.process_time()
        graphs = build_training_graphs(model, trainable=list(model.graph.initializers),
                                       optimizer=AdamW())
        found.append((len(model.graph), len(graphs.step.graph), time.process_time() - started))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100,
                        help="random examples per operator (default 100)")
    parser.add_argument("--only", default="", help="comma-separated operators")
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    warnings.filterwarnings("ignore")
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        nodes = node_sweep(only)
    print(f"node tests ({time.perf_counter() - started:.0f} s)")
    print(f"{'operator':28} {'cases':>5} {'passed':>6} {'kinks':>5} {'refused':>7} "
          f"{'no grad':>7} {'failed':>6} {'dirs':>5} {'max err':>8}")
    for op_type in sorted(nodes):
        c = nodes[op_type]
        total = sum(c[k] for k in ("passed", "kinks", "refused", "no-gradient", "failed"))
        print(f"{op_type:28} {total:5} {c['passed']:6} {c['kinks']:5} {c['refused']:7} "
              f"{c['no-gradient']:7} {c['failed']:6} {c['directions']:5} "
              f"{c['max_error_e12'] / 1e12:8.1e}")
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        random = random_sweep(only, args.examples)
    print(f"\nrandom models, {args.examples} examples each ({time.perf_counter() - started:.0f} s)")
    for op_type, tally in random.items():
        print(f"{op_type:28} {tally}")
    torch_results = {} if args.skip_torch or only else torch_sweep()
    if torch_results:
        print("\ntorch models")
        for name, values in torch_results.items():
            print(f"{name:18} {values}")
    hugging = {} if args.skip_torch or only else hugging_face_sweep()
    if hugging:
        print("\nHugging Face models (MSE of last_hidden_state)")
        for name, values in hugging.items():
            print(f"{name:18} {values}")
    scaling = [] if only else scaling_sweep()
    if scaling:
        print("\nscaling: forward nodes, step-graph nodes, CPU seconds, ratio to the previous")
        for index, (forward, step_nodes, seconds) in enumerate(scaling):
            ratio = seconds / scaling[index - 1][2] if index else float("nan")
            print(f"{forward:6} {step_nodes:7} {seconds:7.2f} {ratio:5.2f}")
    failed = sum(c["failed"] for c in nodes.values()) + sum(
        1 for t in random.values() if "failed" in t)
    if not only:
        _write_docs(nodes, random, torch_results, args.examples, scaling, hugging)
    return 1 if failed else 0


def _ratio(value: float) -> str:
    """``value`` to one digit, ``0`` when it is 0."""
    return f"{value:.0e}" if value else "0"


def _write_docs(nodes: dict[str, Counter[str]], random: dict[str, dict[str, object]],
                torch_results: dict[str, dict[str, Any]], examples: int,
                scaling: list[tuple[int, int, float]],
                hugging: dict[str, dict[str, float]]) -> None:
    cases = sum(sum(c[k] for k in ("passed", "kinks", "refused", "no-gradient", "failed"))
                for c in nodes.values())
    passed = sum(c["passed"] for c in nodes.values())
    refused = sum(c["refused"] for c in nodes.values())
    random_passed = sum(int(t["passed"]) for t in random.values())  # type: ignore[call-overload]
    random_examples = sum(int(t["examples"]) for t in random.values())  # type: ignore[call-overload]
    worst = max(float(t.get("max_error", 0.0)) for t in random.values())  # type: ignore[arg-type]
    lines = [
        "## Gradient builders: finite differences and torch",
        "",
        f"`benchmarks/gradient_builders.py`: {len(random)} operators with built-in builders. "
        f"ONNX node tests: {passed} of {cases} cases pass in float64 against central "
        f"differences, {refused} are declared refusals (`Resize` with `tf_crop_and_resize` or "
        "`keep_aspect_ratio_policy`, "
        "`MaxPool` with `storage_order`, an `Einsum` diagonal, models below opset 13), the "
        "rest have no float input and output or sit on a kink. Random models: "
        f"{random_passed} of {random_examples} examples ({examples} per operator) pass, "
        f"largest relative error {worst:.1e}.",
        "",
        "| torch model | weights | loss error | max relative gradient error | "
        "AdamW, 10 steps: max difference (weight) |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {name} | {int(v['weights'])} | {v['loss_error']:.1e} | "
          f"{v['max_relative_gradient_error']:.1e} | {v['adamw_10_steps_max_difference']:.1e} "
          f"(`{v['adamw_10_steps_weight']}`) |" for name, v in torch_results.items()),
        "",
        "Batch norms train on batch statistics, as `build-training-graph` does by default. "
        "GPT-2's `c_attn.bias` holds the key bias, whose exact gradient is 0 (softmax ignores "
        "a constant per query; torch's float32 gradient there is 1e-10): AdamW makes a step of "
        "any rounding there, in torch as in graphpass, so its difference after ten steps "
        "measures rounding, not a wrong step.",
        "",
        "| Hugging Face model | weights trained / parameters | loss error | max relative "
        "gradient error against float64: graphpass / torch float32 | gradients 0 in exact "
        "arithmetic (graphpass's largest, of the largest gradient) | build (CPU s) |",
        "| --- | --- | --- | --- | --- | --- |",
        *(f"| {name} | {int(v['weights'])} / {int(v['parameters'])} | {v['loss_error']:.1e} | "
          f"{v['gradient_error']:.1e} / {v['torch_float32_gradient_error']:.1e} | "
          f"{int(v['exact_zeros'])} ({_ratio(v['largest_zero'])}) | {v['build_seconds']:.2f} |"
          for name, v in hugging.items()),
        "",
        "Gradients are judged against torch's in float64, beside torch's own float32 "
        "gradients' error: where a batch norm sees two samples of one pixel (MobileNetV2's "
        "last layers at 32 x 32), float32 cannot follow, in torch as in graphpass. A "
        "parameter whose gradient is 0 in exact arithmetic (an attention's key bias, which "
        "softmax ignores; a batch norm's bias before another batch norm on batch "
        "statistics) is counted apart: any float32 gradient there is rounding.",
        "",
        "Building the training graphs (gradient, AdamW step, eval) of residual "
        "MatMul/Gelu/LayerNorm stacks, CPU seconds: "
        + ", ".join(f"{forward} forward nodes {seconds:.2f} s" for forward, _, seconds
                    in scaling) + ".",
    ]
    write_docs_section("gradient-builders", lines)


if __name__ == "__main__":
    sys.exit(main())
