"""The graphpass demo: a sequence of short stories on bundled example models.

``make demo`` runs this file. Each story is a function below, listed in ``STORIES``
in the order they are told; a story prints what a person needs to see and raises
if what it shows is not true, so the demo doubles as a smoke test. Files a story
writes go to ``demo-output/`` (or the folder given as the first argument).

To add a story: write ``def story_<name>(out: Path) -> None`` whose docstring's first
line is its title, and append it to ``STORIES``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from rich.console import Console

import graphpass
from graphpass.reporting import model_summary, render_summary

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE / "tiny_classifier.onnx"
console = Console(highlight=False)


# ===================================================================== stories
def story_inspect_and_round_trip(out: Path) -> None:
    """Load a model, look at it, and write it back unchanged.

    graphpass reads a model into a graph a pass can walk (networkx underneath),
    without reading external weights, and writes it back bit for bit: functions,
    subgraphs, metadata and doc strings included.
    """
    model = graphpass.load(EXAMPLE)
    render_summary(model_summary(model), console)

    graph = model.graph
    if_node = graph.nodes_by_op("If")[0]
    producer = graph.producer("logits")
    assert producer is not None and model.function_for(producer) is not None
    console.print(f"\nthe If node {if_node.name!r} reads {list(if_node.captured_names)} from the "
                  f"main graph inside its branches; node {producer.name!r} produces it, a call "
                  f"of the model-local function {model.function_for(producer).qualified_name}")
    console.print(f"the networkx view has {graph.nx.number_of_nodes()} nodes and "
                  f"{graph.nx.number_of_edges()} edges (one per use of a value)")

    original = onnx.load(EXAMPLE)
    assert model.to_proto() == original, "to_proto() changed the model"
    copy = out / "tiny_classifier.onnx"
    graphpass.save(model, copy)
    same_bytes = copy.read_bytes() == EXAMPLE.read_bytes()
    assert onnx.load(copy) == original, "the saved model differs"
    console.print(f"\nround trip: Model.to_proto() == the file's proto: [bold]yes[/]; saved to "
                  f"{copy.relative_to(out.parent) if out.parent in copy.parents else copy}: "
                  f"{'byte-identical' if same_bytes else 'equal as a protobuf'}")

    try:
        import onnxruntime
    except ImportError:
        console.print("(onnxruntime is not installed: outputs not compared)")
        return
    features = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    before = onnxruntime.InferenceSession(str(EXAMPLE)).run(None, {"features": features})
    after = onnxruntime.InferenceSession(str(copy)).run(None, {"features": features})
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    console.print("onnxruntime gives identical outputs for the original and the saved copy")


STORIES_DIR = HERE / "stories"
ORT_TRAINING_PYTHON = HERE.parent / ".venv-ort-training" / "bin" / "python"


def _graphpass(*args: str, expect: int, python: str = sys.executable) -> str:
    """Run a graphpass command as a user would, show it and its output, check its exit code."""
    shown = " ".join(_display(a) for a in args)
    console.print(f"[bold cyan]$ graphpass {shown}[/]", soft_wrap=True)
    done = subprocess.run([python, "-m", "graphpass", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, "COLUMNS": "110"})
    output = (done.stdout + done.stderr).rstrip()
    if output:
        # Already laid out by graphpass (110 columns): print it as it is.
        console.file.write(output + "\n")
        console.file.flush()
    console.print(f"[dim](exit code {done.returncode})[/]\n")
    assert done.returncode == expect, f"expected exit code {expect}, got {done.returncode}"
    return done.stdout


def _display(argument: str) -> str:
    path = Path(argument)
    if path.is_absolute():
        for base in (HERE.parent, Path.cwd()):
            if base in path.parents:
                return str(path.relative_to(base))
    return argument


def _matches_torch(model: Path, folder: Path) -> None:
    try:
        import onnxruntime
    except ImportError:
        console.print("(onnxruntime is not installed: outputs not compared with torch's)")
        return
    with np.load(folder / "batch.npz") as batch, np.load(folder / "expected.npz") as expected:
        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        feeds = {i.name: batch[i.name] for i in session.get_inputs()}
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds),
                           strict=True))
        for name in expected.files:
            difference = float(np.abs(outputs[name] - expected[name]).max())
            assert difference < 1e-4, f"{name} differs from torch's by {difference}"
            console.print(f"onnxruntime's {name!r} on the saved batch equals what torch computed "
                          f"when the example was made (max difference {difference:.1e})")


_SAID: set[str] = set()
"""Notes the demo has printed (each is printed once)."""


def _train_if_possible(model: Path, out: Path, *args: str) -> None:
    """With the onnxruntime-training venv (make ort-venv), emit artifacts and train 3 steps."""
    if not ORT_TRAINING_PYTHON.exists():
        if not _SAID:  # once per demo: every story that would train says the same
            console.print("(no onnxruntime-training venv: `make ort-venv` builds one, and the "
                          "demo then also writes training artifacts and trains three steps "
                          "where a story can)")
            _SAID.add("no ort-venv")
        return
    artifacts = out / f"{model.parent.name}-artifacts"
    _graphpass("run", str(model), "-o", str(out / f"{model.parent.name}-trainable.onnx"),
               "-p", "train-ready", *args, "--emit-training-artifacts", str(artifacts),
               expect=0, python=str(ORT_TRAINING_PYTHON))
    batch = out / f"{model.parent.name}-train-batch.npz"
    with np.load(model.parent / "batch.npz") as data, \
            np.load(model.parent / "expected.npz") as expected:
        feeds = {name: data[name] for name in data.files if name != "target"}
        feeds["target"] = np.zeros_like(next(iter(expected[name] for name in expected.files)))
        np.savez(batch, **feeds)
    trainer = HERE.parent / "tests" / "ort_training" / "train_artifacts.py"
    done = subprocess.run([str(ORT_TRAINING_PYTHON), str(trainer), str(artifacts), str(batch),
                           "--steps", "3"], capture_output=True, text=True, check=False)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    losses = ", ".join(f"{loss:.4f}" for loss in result["losses"])
    assert result["losses"][0] > result["losses"][-1], "the loss did not fall"
    console.print(f"onnxruntime-training: three AdamW steps on one batch, MSE loss {losses}")


def story_functions_for_training(out: Path) -> None:
    """A model ONNX Runtime training rejects: calls of model-local functions.

    torch.onnx.export(..., export_modules_as_functions={ResidualBlock}) turns each block
    into a call of a model-local function. onnxruntime-training has no gradient for a
    function call ("The gradient builder has not been registered: ResidualBlock for node
    ..."). lint-gradients says so before training; train-ready inlines the calls; the
    lint is silent after, and the outputs are verified unchanged.
    """
    folder = STORIES_DIR / "functions"
    model = folder / "model.onnx"
    _graphpass("lint", str(model), "-p", "lint-gradients", expect=1)
    ready = out / "functions-ready.onnx"
    _graphpass("run", str(model), "-o", str(ready), "-p", "train-ready", "--verify",
               "--verify-inputs", str(folder / "batch.npz"), "--time", expect=0)
    _graphpass("lint", str(ready), "-p", "lint-gradients", expect=0)
    _matches_torch(ready, folder)
    _train_if_possible(model, out)


def story_own_training_graph(out: Path) -> None:
    """The same model trained without onnxruntime-training: graphpass's own training graph.

    onnxruntime-training has had no release since 1.19.2 and installs on Python 3.10 and
    3.11 only; this venv does not have it. train-ready with --emit-training-graph writes
    the backward pass and the AdamW step in standard ONNX (gradient.onnx, step.onnx),
    which stock onnxruntime runs; graphpass train runs the steps and prints the loss of
    each.
    """
    folder = STORIES_DIR / "functions"
    model = folder / "model.onnx"
    installed = subprocess.run([sys.executable, "-c", "import onnxruntime.training"],
                               capture_output=True, check=False).returncode == 0
    console.print("onnxruntime-training in this venv: "
                  f"{'installed' if installed else 'not installed'}\n")
    train = out / "functions-train"
    _graphpass("run", str(model), "-o", str(out / "functions-ready.onnx"), "-p", "train-ready",
               "--emit-training-graph", str(train), "-O", "build-training-graph.lr=0.01",
               expect=0)
    produced = sorted(path.name for path in train.iterdir())
    console.print(f"{_display(str(train))}: {', '.join(produced)}\n")
    for name in ("gradient.onnx", "step.onnx"):
        proto = onnx.load(str(train / name), load_external_data=False)
        assert not proto.functions and {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}
    trained = out / "functions-trained.onnx"
    printed = _graphpass("train", str(train), "--data", str(folder / "batch.npz"), "--steps",
                         "8", "--save", str(trained), expect=0)
    losses = [float(word) for line in printed.splitlines() if line.lstrip().startswith("step")
              for word in line.split()[-1:]]
    assert len(losses) == 8 and losses[-1] < losses[0], f"the loss did not fall: {printed}"
    console.print(f"the loss fell from {losses[0]:.4f} to {losses[-1]:.4f}; the trained model "
                  f"is {_display(str(trained))}")


def story_checkpoint_and_lost_buffer(out: Path) -> None:
    """Weights from a checkpoint whose names don't match, and a buffer nobody saved.

    The model was exported with dynamo=True without its weights. The training code saved
    the wrapper's state_dict(): every key has a "transformer." prefix, and the attention's
    causal mask, a non-persistent buffer, is not there. train-ready fills what the
    checkpoint has and stops before writing anything, naming the buffer; given the full
    state (graphpass.torch.save_state), it fills, verifies and writes.
    """
    folder = STORIES_DIR / "checkpoint"
    model = folder / "model.onnx"
    ready = out / "checkpoint-ready.onnx"
    ready.unlink(missing_ok=True)
    _graphpass("plan", "-p", "train-ready", "--checkpoint", str(folder / "trained.safetensors"),
               expect=0)
    _graphpass("run", str(model), "-o", str(ready), "-p", "train-ready", "--checkpoint",
               str(folder / "trained.safetensors"), expect=1)
    assert not ready.exists(), "a failed run wrote a model"
    console.print(f"nothing was written: {_display(str(ready))} does not exist\n")
    _graphpass("run", str(model), "-o", str(ready), "-p", "train-ready", "--checkpoint",
               str(folder / "full_state.safetensors"), "--verify", "--verify-inputs",
               str(folder / "batch.npz"), "--time", expect=0)
    _matches_torch(ready, folder)
    _train_if_possible(model, out, "--checkpoint", str(folder / "full_state.safetensors"))


def story_torch_loop(out: Path) -> None:
    """The same model in your own torch loop: graphpass.torch.Module, ORTModule's successor.

    onnxruntime deprecated ORTModule, the seed user's way to train this model in their own
    loop. graphpass.torch.Module(model, export={...functions...}) exports it on the first
    call, makes it train-ready and runs forward and backward in stock onnxruntime; the
    loss, the optimizer, gradient clipping and the parameters stay torch's. Ten AdamW
    steps beside torch eager give torch's weights.
    """
    import copy

    import torch

    import graphpass.torch

    sys.path.insert(0, str(STORIES_DIR))
    try:
        from make_models import Regressor, ResidualBlock
    finally:
        sys.path.pop(0)
    torch.manual_seed(0)
    eager = Regressor()
    wrapped = graphpass.torch.Module(
        copy.deepcopy(eager),
        export={"dynamo": False, "export_modules_as_functions": {ResidualBlock}})
    optimizers = [torch.optim.AdamW(net.parameters(), lr=1e-2) for net in (eager, wrapped)]
    generator = torch.Generator().manual_seed(1)
    losses: dict[str, list[float]] = {"torch eager": [], "graphpass.torch.Module": []}
    for _ in range(10):
        x = torch.randn(16, 8, generator=generator)
        y = torch.randn(16, 4, generator=generator)
        for net, optimizer, name in zip((eager, wrapped), optimizers, losses, strict=True):
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            losses[name].append(loss.item())
    for name, values in losses.items():
        console.print(f"{name:>22}: {', '.join(f'{v:.4f}' for v in values[::3])} ...")
    largest = max(float((a - b).detach().abs().max())
                  for a, b in zip(eager.parameters(), wrapped.parameters(), strict=True))
    assert largest < 1e-4, f"the weights left torch's: {largest}"
    console.print(f"after 10 steps the weights are torch's within {largest:.1e} "
                  f"({wrapped.exports} export)")


STORIES: list[Callable[[Path], None]] = [
    story_inspect_and_round_trip,
    story_functions_for_training,
    story_own_training_graph,
    story_checkpoint_and_lost_buffer,
    story_torch_loop,
]


# ======================================================================= driver
def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path.cwd() / "demo-output"
    out.mkdir(parents=True, exist_ok=True)
    for number, story in enumerate(STORIES, start=1):
        title, _, explanation = (story.__doc__ or story.__name__).partition("\n")
        console.rule()  # a rule cuts a title longer than the line: the title goes below
        console.print(f"[bold]{number}. {title.strip()}[/]\n")
        if explanation.strip():
            console.print(" ".join(explanation.split()) + "\n")
        story(out)
    console.rule()
    console.print(f"{len(STORIES)} stor{'y' if len(STORIES) == 1 else 'ies'} told; files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
