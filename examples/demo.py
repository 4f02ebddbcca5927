"""The graphpass demo: a sequence of short stories on bundled example models.

``make demo`` runs this file. Each story is a function below, listed in ``STORIES``
in the order they are told; a story prints what a person needs to see and raises
if what it shows is not true, so the demo doubles as a smoke test. Files a story
writes go to ``demo-output/`` (or the folder given as the first argument).

To add a story: write ``def story_<name>(out: Path) -> None`` whose docstring's first
line is its title, and append it to ``STORIES``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from rich.console import Console

import graphpass
from graphpass.summary import model_summary, render_summary

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


STORIES: list[Callable[[Path], None]] = [
    story_inspect_and_round_trip,
]


# ======================================================================= driver
def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path.cwd() / "demo-output"
    out.mkdir(parents=True, exist_ok=True)
    for number, story in enumerate(STORIES, start=1):
        title, _, explanation = (story.__doc__ or story.__name__).partition("\n")
        console.rule(f"[bold]{number}. {title.strip()}")
        if explanation.strip():
            console.print(" ".join(explanation.split()) + "\n")
        story(out)
    console.rule()
    console.print(f"{len(STORIES)} stor{'y' if len(STORIES) == 1 else 'ies'} told; files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
