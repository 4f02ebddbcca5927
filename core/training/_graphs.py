"""From a model to its training graphs: ``gradient``, ``step`` and ``eval`` models.

:func:`build_training_graphs` copies the model, appends the loss, differentiates it
with respect to the trainable weights (:func:`~graphpass.training.differentiate`)
and appends the optimizer step. The three models share one forward graph:

* ``gradient`` (**contract**): inputs are the model's inputs, then ``target`` (for a
  loss that takes one), then every trainable weight under its initializer name, then
  the running statistics of the batch normalizations (with
  ``batch_norm="batch-statistics"``); outputs are ``loss``, then ``<weight>.grad`` for
  every trainable weight, in the same order, then the new running statistics
  (``<name>.new``). Frozen weights stay initializers. This is what
  :class:`~graphpass.training.Trainer` runs (it applies the optimizer itself).
* ``step``: the inputs of ``gradient``, then the optimizer state (``<weight>.<kind>``,
  by kind then weight), the running statistics of the batch normalizations (with
  ``batch_norm="batch-statistics"``), ``step`` (``int64``, steps taken so far) and
  ``lr``; outputs ``loss``, then ``<weight>.new`` per weight, the new state
  (``<weight>.<kind>.new``), the new running statistics (``<name>.new``) and
  ``step.new``. One session run is one training step.
* ``eval``: the inputs of ``gradient``, then the running statistics; outputs ``loss``,
  then the model's outputs (batch normalizations in inference mode, as
  ``model.eval()``).

The models only reference the weights' tensors (nothing is copied); the initial
values of the trainable weights, the running statistics and the optimizer state are
returned alongside, and so is the model itself (a runner saves it with the trained
weights).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphpass.checkpoint import ReconcileResult
from graphpass.ir import Graph, Model, Tensor, paused_gc
from graphpass.training._autodiff import differentiate, model_opset, prune
from graphpass.training._batch_norm import (
    BatchNormMode,
    RunningStatistics,
    check_batch_norm_mode,
    finish_batch_statistics,
    use_batch_statistics,
)
from graphpass.training._builder import GradientError
from graphpass.training._conv_pads import fold_conv_pads
from graphpass.training._emit import Emitter, NameScope, OutputNaming, names_in
from graphpass.training._losses import LOSS, TARGET, LossKind, add_loss
from graphpass.training._optimizers import LR, STEP, Optimizer, add_update
from graphpass.training._recompute import (
    RECOMPUTE_POLICIES,
    Recomputation,
    RecomputePolicy,
    recompute,
)
from graphpass.training._sequences import split_sequences
from graphpass.training._table import BuilderTable
from graphpass.training._torch_state import record_torch_state
from graphpass.training._value_types import ModelTypes
from graphpass.training.rules import DIFFERENTIABLE_TYPES, normalize_domain

__all__ = ["FORMAT", "TrainingGraphs", "build_training_graphs", "training_copy"]

FORMAT = "graphpass-training-graph"
"""The ``format`` of the manifest (``manifest.json``)."""

FORMAT_VERSION = 3
"""The manifest's ``version`` (2: the forward model and the running statistics; 3: no
file of zero optimizer state, and ``gradient.onnx`` carries the running statistics)."""


@dataclass
class TrainingGraphs:
    """The result of :func:`build_training_graphs`.

    Attributes:
        gradient: The gradient model (loss and gradients).
        step: The step model (loss, updated weights and state).
        eval: The evaluation model (loss and the model's outputs).
        weights: The initial values of the trainable weights, in order.
        manifest: Names, order and options, for the runner (JSON-ready).
        frozen_unreached: Trainable weights no gradient reaches (left frozen).
        forward: The model the graphs were built from (unchanged; what a runner saves
            with the trained weights).
        buffers: The initial running statistics of the batch normalizations that train
            with batch statistics (state of ``step.onnx``, inputs of ``eval.onnx``).
        torch_extra: Values of torch ``state_dict`` keys no initializer holds (the
            manifest's ``torch_state``; written as ``files["torch_extra"]``).
        recomputed: What activation recomputation changed (nothing with ``none``).
    """

    gradient: Model
    step: Model
    eval: Model
    weights: dict[str, Tensor]
    manifest: dict[str, Any]
    frozen_unreached: list[str] = field(default_factory=list)
    forward: Model | None = None
    buffers: dict[str, Tensor] = field(default_factory=dict)
    torch_extra: dict[str, np.ndarray] = field(default_factory=dict)
    recomputed: Recomputation = field(default_factory=Recomputation)


def _free_reserved(model: Model, reserved: Sequence[str]) -> dict[str, str]:
    """Rename forward values that use a name the contract reserves; return the renames."""
    graph = model.graph
    names = NameScope(names_in(graph))
    renamed: dict[str, str] = {}
    for name in reserved:
        if name in graph.input_names and name not in graph.initializers:
            raise GradientError(f"the model has an input called {name!r}, a name the "
                                "training graph reserves", hint="rename that input")
        if name in graph.values and (graph.is_defined(name) or graph.is_used(name)):
            renamed[name] = names.fresh(f"{name}.forward")
            graph.rename_value(name, renamed[name])
    return renamed


def _weight_input(model: Model, name: str) -> onnx.ValueInfoProto:
    tensor = model.graph.initializers[name]
    return onnx.helper.make_tensor_value_info(name, tensor.dtype, list(tensor.shape))


def _renamed(declaration: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    info = onnx.ValueInfoProto()
    info.CopyFrom(declaration)
    info.name = name
    return info


def _set_inputs(model: Model, names: Sequence[str],
                declarations: Mapping[str, onnx.ValueInfoProto]) -> None:
    graph = model.graph
    current = list(graph.input_names)
    for name in current:
        graph.remove_input(name)
    for name in names:
        graph.add_input(declarations.get(name, name))


def build_training_graphs(model: Model, *, trainable: Sequence[str],
                          frozen: Sequence[str] = (), loss: LossKind = "mse",
                          loss_inputs: Sequence[str] = (), optimizer: Optimizer,
                          batch_norm: BatchNormMode = "batch-statistics",
                          recompute_policy: RecomputePolicy = "none",
                          builders: BuilderTable | None = None,
                          torch_names: Mapping[str, str] | None = None,
                          reconciled: ReconcileResult | None = None,
                          options: Mapping[str, Any] | None = None) -> TrainingGraphs:
    """Build the gradient, step and eval models of ``model`` (which is not changed).

    What ``build-training-graph`` writes, from Python: fill the model with
    ``reconcile-initializers`` and hand its analysis over, and
    :func:`~graphpass.training._directory.write_training_directory` writes the same
    directory the pass does::

        result = graphpass.PassManager(["inline-functions", "reconcile-initializers"],
                                       checkpoints=["model.safetensors"]).run(model)
        graphs = build_training_graphs(result.model, trainable=[...], optimizer=AdamW(),
                                       reconciled=result.analysis(ReconcileResult))
        write_training_directory(graphs, "train/")

    Args:
        model: The model (functions inlined).
        trainable: The weights to train (float initializers), in order.
        frozen: Weights kept fixed (recorded in the manifest).
        loss: The loss appended after the model's outputs.
        loss_inputs: The output the loss reads (default: the first).
        optimizer: The optimizer of the step model.
        batch_norm: ``batch-statistics``: batch normalizations train as in torch's
            ``train()`` mode, their running statistics carried through ``step.onnx``
            (:mod:`graphpass.training._batch_norm`); ``running-statistics``: as exported.
        recompute_policy: Which forward values the backward pass computes again instead
            of keeping them (:mod:`graphpass.training._recompute`): ``none`` or
            ``elementwise``.
        builders: The gradient builders (default: the built-in ones).
        torch_names: For each weight, its name in the torch ``state_dict``, if known
            (default: the keys ``reconciled`` filled them from).
        reconciled: What ``reconcile-initializers`` filled the model from: the manifest's
            ``torch_names``, the tied keys (``torch_aliases``) and the checkpoint's keys
            no initializer holds (``torch_state``, ``torch_extra.safetensors``) come
            from it.
        options: Options to record in the manifest.

    Raises:
        GradientError: The model cannot be differentiated (the message names the
            node), or the loss cannot be built.
    """
    # Building allocates millions of small objects that all stay alive: with the
    # collector running, each burst rescans the growing heap (quadratic in the model).
    if torch_names is None and reconciled is not None:
        torch_names = reconciled.keys
    with paused_gc():
        graphs = _build(model, trainable=trainable, frozen=frozen, loss=loss,
                        loss_inputs=loss_inputs, optimizer=optimizer, batch_norm=batch_norm,
                        recompute_policy=recompute_policy,
                        builders=builders, torch_names=torch_names, options=options)
    graphs.torch_extra = record_torch_state(
        graphs.manifest, model, reconciled.checkpoint if reconciled is not None else None)
    return graphs


def _build(model: Model, *, trainable: Sequence[str], frozen: Sequence[str], loss: LossKind,
           loss_inputs: Sequence[str], optimizer: Optimizer, batch_norm: BatchNormMode,
           recompute_policy: RecomputePolicy,
           builders: BuilderTable | None, torch_names: Mapping[str, str] | None,
           options: Mapping[str, Any] | None) -> TrainingGraphs:
    work = training_copy(model)
    graph = work.graph
    initializers = graph.initializers
    for name in trainable:
        if name not in initializers:
            raise GradientError(f"trainable weight {name!r} is not an initializer")
        if initializers[name].dtype not in DIFFERENTIABLE_TYPES:
            raise GradientError(f"trainable weight {name!r} is not of a float type")
    check_batch_norm_mode(batch_norm)
    if recompute_policy not in RECOMPUTE_POLICIES:
        raise GradientError(f"unknown recompute policy {recompute_policy!r}",
                            hint=f"choose one of {', '.join(RECOMPUTE_POLICIES)}")
    model_inputs = [name for name in graph.input_names if name not in initializers]
    statistics_names = _running_statistics(graph) if batch_norm == "batch-statistics" else []
    carried = [*trainable, *statistics_names]
    reserved = [LOSS, TARGET, STEP, LR, f"{STEP}.new",
                *(f"{w}.grad" for w in trainable), *(f"{w}.new" for w in carried),
                *(f"{w}.{kind}" for w in trainable for kind in optimizer.state),
                *(f"{w}.{kind}.new" for w in trainable for kind in optimizer.state)]
    renamed = _free_reserved(work, reserved)  # a model output called "loss", say
    loss_inputs = [renamed.get(name, name) for name in loss_inputs]
    original_outputs = list(graph.output_names)
    names = NameScope(names_in(graph))
    for name in reserved:
        names.reserve(name)
    types = ModelTypes(work)
    opset = model_opset(work)
    emit = Emitter(graph, opset, names, lambda n: types.of(graph, n))
    # The loss gets its own emitter: constants it caches live at the end of the graph,
    # where nodes moved before a forward node (batch statistics) could not read them.
    added = add_loss(work, loss, loss_inputs,
                     Emitter(graph, opset, names, lambda n: types.of(graph, n)), types)
    inputs = [*model_inputs, *([added.target] if added.target else [])]

    evaluation = work.copy()  # the forward graph and the loss, before any backward node
    statistics = (use_batch_statistics(graph, emit, opset, frozenset(trainable))
                  if batch_norm == "batch-statistics" else [])
    buffers = [name for s in statistics for name in (s.mean, s.variance)]
    gradients = differentiate(work, trainable, {added.differentiated: None}, builders=builders,
                             names=names)
    finish_batch_statistics(graph, statistics)
    recomputed = recompute(graph, gradients.nodes, gradients.triggers, recompute_policy,
                           gradients.types, names, trainable=frozenset(trainable),
                           seeds=gradients.seeds)
    reached = [w for w in trainable if gradients.values[w] is not None]
    unreached = [w for w in trainable if gradients.values[w] is None]
    declarations = {w: _weight_input(work, w) for w in (*reached, *buffers)}
    _make_inputs(evaluation, [*reached, *buffers])
    evaluation.graph.set_outputs([added.declaration, *original_outputs])
    _set_inputs(evaluation, [*inputs, *reached, *buffers], declarations)
    prune(evaluation.graph, evaluation.graph.output_names)
    emit.prefix = "grad"
    naming = OutputNaming(emit)
    grad_outputs = []
    for weight in reached:
        grad = gradients.values[weight]
        assert grad is not None
        naming.name(grad, f"{weight}.grad")
        grad_outputs.append(_renamed(declarations[weight], f"{weight}.grad"))
    statistics_outputs: list[str | onnx.ValueInfoProto] = []
    for found in statistics:
        for name, value in ((found.mean, found.new_mean), (found.variance, found.new_variance)):
            naming.name(value, f"{name}.new")
            statistics_outputs.append(_renamed(declarations[name], f"{name}.new"))
    _make_inputs(work, [*reached, *buffers])

    gradient_model = work.copy()
    gradient_model.graph.set_outputs([added.declaration, *grad_outputs, *statistics_outputs])
    _set_inputs(gradient_model, [*inputs, *reached, *buffers], declarations)
    prune(gradient_model.graph, gradient_model.graph.output_names)

    state_inputs = {(w, kind): f"{w}.{kind}" for kind in optimizer.state for w in reached}
    for (weight, _), name in state_inputs.items():
        declarations[name] = _renamed(declarations[weight], name)
    declarations[STEP] = onnx.helper.make_tensor_value_info(STEP, onnx.TensorProto.INT64, [])
    declarations[LR] = onnx.helper.make_tensor_value_info(LR, onnx.TensorProto.FLOAT, [])
    for name in (*state_inputs.values(), STEP, LR):
        graph.add_input(declarations[name])
    elem_types = [declarations[w].type.tensor_type.elem_type for w in reached]
    update = add_update(emit, optimizer, reached, [f"{w}.grad" for w in reached], elem_types,
                        state_inputs)
    emit.prefix = "step"
    step_outputs: list[str | onnx.ValueInfoProto] = [added.declaration]
    for weight in reached:
        naming.name(update.weights[weight], f"{weight}.new")
        step_outputs.append(_renamed(declarations[weight], f"{weight}.new"))
    for slot in update.state:
        naming.name(slot.output, f"{slot.input}.new")
        step_outputs.append(_renamed(declarations[slot.weight], f"{slot.input}.new"))
    step_outputs.extend(statistics_outputs)
    naming.name(update.step_output, f"{STEP}.new")
    step_outputs.append(onnx.helper.make_tensor_value_info(f"{STEP}.new",
                                                           onnx.TensorProto.INT64, []))
    graph.set_outputs(step_outputs)
    step_inputs = [*inputs, *reached, *state_inputs.values(), *buffers, STEP, LR]
    _set_inputs(work, step_inputs, declarations)
    prune(graph, graph.output_names)

    weights = {w: model.graph.initializers[w] for w in reached}
    manifest = _manifest(
        inputs, added.target, loss, added.inputs, reached, list(frozen), unreached, optimizer,
        original_outputs, update, step_inputs,
        [o.name if isinstance(o, onnx.ValueInfoProto) else o for o in step_outputs],
        torch_names, options, batch_norm, statistics)
    return TrainingGraphs(gradient_model, work, evaluation, weights, manifest,
                          unreached, forward=model, recomputed=recomputed,
                          buffers={b: model.graph.initializers[b] for b in buffers})


def training_copy(model: Model) -> Model:
    """A copy of ``model`` in the form gradients are built on.

    Sorted, sequences split into tensors, zero ``Pad``s folded into the convolutions that
    read them.
    """
    work = model.copy()
    graph = work.graph
    if not graph.is_sorted():
        graph.sort()
    split_sequences(graph)
    fold_conv_pads(graph)
    return work


def _running_statistics(graph: Graph) -> list[str]:
    """The inputs batch normalizations read their running statistics from (reserved names)."""
    return [name for node in graph if node.op_type == "BatchNormalization"
            and not normalize_domain(node.domain) for name in node.inputs[3:5] if name]


def _make_inputs(model: Model, weights: Sequence[str]) -> None:
    """Turn trainable initializers into graph inputs (declared with their type)."""
    graph = model.graph
    listed = set(graph.input_names)
    for name in weights:
        declaration = _weight_input(model, name)
        graph.remove_initializer(name)
        if name not in listed:
            graph.add_input(declaration)


def _manifest(inputs: list[str], target: str | None, loss: str, loss_inputs: Sequence[str],
              trainable: list[str], frozen: list[str], unreached: list[str],
              optimizer: Optimizer, outputs: list[str], update: Any, step_inputs: list[str],
              step_outputs: list[str], torch_names: Mapping[str, str] | None,
              options: Mapping[str, Any] | None, batch_norm: str,
              statistics: Sequence[RunningStatistics]) -> dict[str, Any]:
    hyper = {key: value for key, value in vars(optimizer).items() if key != "kind"}
    buffers = [name for s in statistics for name in (s.mean, s.variance)]
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "files": {"gradient": "gradient.onnx", "step": "step.onnx", "eval": "eval.onnx",
                  "model": "model.onnx", "weights": "weights.safetensors",
                  "buffers": "buffers.safetensors"},
        "inputs": inputs[:len(inputs) - (1 if target else 0)],
        "target": target,
        "loss": {"kind": loss, "inputs": list(loss_inputs), "output": LOSS},
        "outputs": outputs,
        "trainable": trainable,
        "gradients": [f"{w}.grad" for w in trainable],
        "frozen": frozen,
        "unreached": unreached,
        "batch_norm": batch_norm,
        "buffers": buffers,
        "running_statistics": [{"node": s.node, "mean": s.mean, "variance": s.variance}
                               for s in statistics],
        "torch_names": dict(torch_names or {}),
        "optimizer": {"kind": optimizer.kind, **hyper, "state": list(optimizer.state)},
        "step": {
            "inputs": step_inputs,
            "outputs": step_outputs,
            "carry": [[f"{w}", f"{w}.new"] for w in trainable]
            + [[slot.input, f"{slot.input}.new"] for slot in update.state]
            + [[name, f"{name}.new"] for name in buffers]
            + [[STEP, f"{STEP}.new"]],
            "lr": LR,
            "step": STEP,
        },
        "options": dict(options or {}),
    }
