"""A model's forward and backward graphs: a vector-Jacobian product in standard ONNX.

:func:`build_forward_backward` differentiates a model's outputs, each seeded with its
own upstream gradient (a *cotangent*, an input of the backward graph), and splits the
result in two models, as a framework's autograd runs them:

* ``forward``: inputs are the model's inputs, then the ``bound`` weights (initializers
  that become inputs, so that a caller feeds its own tensors and nothing is copied);
  outputs are the model's outputs, then the new running statistics of the batch
  normalizations (with ``batch_norm="batch-statistics"``), then the *saved* values:
  the forward values the backward graph reads.
* ``backward``: inputs are the saved values, then the model inputs and bound weights
  it reads, then one cotangent ``<output>.grad`` per differentiable output; outputs
  are ``<name>.grad`` for each ``wrt`` value a gradient reaches.

The split follows the values, not the builders: the forward graph is every node the
model's outputs and running statistics depend on; everything else the gradients
need is the backward graph's. A value computed in the forward graph and read by the
backward graph is saved, unless no input changes it: values computed from the weights
and constants alone (a weight's transpose) are computed again in the backward graph,
rather than held between the runs. Random nodes (``Dropout``) are in the
forward graph when they feed an output, so the backward graph reads the mask the
forward run drew.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import onnx

from graphpass.ir import Graph, Model, Node, paused_gc
from graphpass.training._autodiff import differentiate, model_opset
from graphpass.training._batch_norm import (
    BatchNormMode,
    check_batch_norm_mode,
    finish_batch_statistics,
    use_batch_statistics,
)
from graphpass.training._builder import GradientError
from graphpass.training._emit import Emitter, NameScope, OutputNaming, names_in
from graphpass.training._graphs import training_copy
from graphpass.training._table import BuilderTable
from graphpass.training._value_types import ModelTypes, TypeInfo
from graphpass.training.rules import DIFFERENTIABLE_TYPES

__all__ = ["ForwardBackward", "build_forward_backward"]


@dataclass
class ForwardBackward:
    """The result of :func:`build_forward_backward`.

    Attributes:
        forward: The forward model (see the module docstring for its inputs and outputs).
        backward: The backward model.
        outputs: The model's outputs, in order (the first outputs of ``forward``).
        seeded: The outputs that take a cotangent (float outputs), in order, each with
            the name of its cotangent input of ``backward``.
        statistics: For each running statistic (an input of ``forward``), the output of
            ``forward`` that holds its new value.
        saved: The forward values ``backward`` reads (outputs of ``forward``).
        backward_inputs: The inputs of ``backward`` that are model inputs or bound
            weights (fed again by the caller).
        gradients: For each ``wrt`` value, the output of ``backward`` holding its
            gradient (``None``: no gradient reaches it).
    """

    forward: Model
    backward: Model
    outputs: list[str]
    seeded: dict[str, str]
    statistics: dict[str, str] = field(default_factory=dict)
    saved: list[str] = field(default_factory=list)
    backward_inputs: list[str] = field(default_factory=list)
    gradients: dict[str, str | None] = field(default_factory=dict)

    @property
    def forward_outputs(self) -> list[str]:
        """The outputs of ``forward``: model outputs, new statistics, then saved values.

        A saved value that is also an output is listed once.
        """
        return list(dict.fromkeys([*self.outputs, *self.statistics.values(), *self.saved]))


def build_forward_backward(model: Model, *, wrt: Sequence[str], bound: Sequence[str] = (),
                           batch_norm: BatchNormMode = "running-statistics",
                           builders: BuilderTable | None = None) -> ForwardBackward:
    """Build the forward and backward models of ``model`` (which is not changed).

    Args:
        model: The model (functions inlined).
        wrt: The values to differentiate with respect to: float initializers (weights)
            and graph inputs, in order.
        bound: Initializers that become graph inputs of both models (weights the caller
            feeds from its own memory); ``wrt`` initializers are bound too.
        batch_norm: ``running-statistics``: batch normalizations as exported (a torch
            module in ``eval()`` mode); ``batch-statistics``: as in ``train()`` mode, the
            new running statistics as outputs of ``forward``.
        builders: The gradient builders (default: the built-in ones).

    Raises:
        GradientError: A node on a gradient path cannot be differentiated (the message
            names it), or a ``wrt`` value is neither a float initializer nor an input.
    """
    check_batch_norm_mode(batch_norm)
    with paused_gc():
        return _build(model, list(wrt), list(bound), batch_norm, builders)


def _build(model: Model, wrt: list[str], bound: list[str], batch_norm: BatchNormMode,
           builders: BuilderTable | None) -> ForwardBackward:
    work = training_copy(model)
    graph = work.graph
    initializers = graph.initializers
    model_inputs = [name for name in graph.input_names if name not in initializers]
    for name in wrt:
        if name in initializers:
            if initializers[name].dtype not in DIFFERENTIABLE_TYPES:
                raise GradientError(f"{name!r} is not of a float type: it has no gradient")
        elif name not in model_inputs:
            raise GradientError(f"{name!r} is neither an initializer nor an input of the model")
    outputs = list(graph.output_names)
    names = NameScope(names_in(graph))
    types = ModelTypes(work)
    type_of = {name: types.of(graph, name) for name in outputs}
    seeded = {name: f"{name}.grad" for name in outputs
              if type_of[name].elem_type in DIFFERENTIABLE_TYPES}
    gradient_names = {name: f"{name}.grad" for name in wrt}
    for name in (*seeded.values(), *gradient_names.values()):
        if names.is_taken(name):
            raise GradientError(f"the model already has a value called {name!r}, a name the "
                                "backward graph reserves", hint="rename that value")
        names.reserve(name)
    for output, cotangent in seeded.items():
        graph.add_input(_declaration(cotangent, type_of[output]))
    opset = model_opset(work)
    emit = Emitter(graph, opset, names, lambda n: types.of(graph, n))
    statistics = (use_batch_statistics(graph, emit, opset, frozenset(wrt))
                  if batch_norm == "batch-statistics" else [])
    gradients = differentiate(work, wrt, dict(seeded), builders=builders, names=names)
    finish_batch_statistics(graph, statistics)
    emit.prefix = "grad"
    naming = OutputNaming(emit)
    produced: dict[str, str | None] = {}
    for name in wrt:
        value = gradients.values[name]
        if value is None:
            produced[name] = None
            continue
        naming.name(value, gradient_names[name])
        produced[name] = gradient_names[name]
    new_statistics: dict[str, str] = {}
    for found in statistics:
        for running, value in ((found.mean, found.new_mean),
                               (found.variance, found.new_variance)):
            new_statistics[running] = value
    return _split(work, model_inputs=model_inputs, bound=[*dict.fromkeys([*bound, *(
        w for w in wrt if w in initializers)])], outputs=outputs, seeded=seeded,
        statistics=new_statistics, gradients=produced, types=types)


def _declaration(name: str, info: TypeInfo) -> onnx.ValueInfoProto:
    if info.elem_type is None:
        return onnx.ValueInfoProto(name=name)
    dims = (None if info.shape is None else
            [d if isinstance(d, (int, str)) and d != "" else f"{name}_d{i}"
             for i, d in enumerate(info.shape)])
    return onnx.helper.make_tensor_value_info(name, info.elem_type, dims)


def _ancestors(nodes: Sequence[Node], targets: Iterable[str]) -> list[Node]:
    """The nodes ``targets`` depend on, in order (``nodes`` sorted)."""
    live = {name for name in targets if name}
    kept: list[Node] = []
    for node in reversed(nodes):
        if any(name and name in live for name in node.outputs):
            live.update(name for name in node.inputs if name)
            live.update(node.captured_names)
            kept.append(node)
    kept.reverse()
    return kept


def _reads(nodes: Iterable[Node]) -> list[str]:
    """The values ``nodes`` read that none of them computes, in order of first use."""
    computed: set[str] = set()
    read: dict[str, None] = {}
    for node in nodes:
        for name in (*node.inputs, *node.captured_names):
            if name and name not in computed:
                read.setdefault(name)
        computed.update(name for name in node.outputs if name)
    return list(read)


def _split(work: Model, *, model_inputs: list[str], bound: list[str], outputs: list[str],
           seeded: dict[str, str], statistics: dict[str, str],
           gradients: dict[str, str | None], types: ModelTypes) -> ForwardBackward:
    graph = work.graph
    ordered = graph.nodes
    position = {node: index for index, node in enumerate(ordered)}
    forward_nodes = _ancestors(ordered, [*outputs, *statistics.values()])
    in_forward = set(forward_nodes)
    gradient_outputs = [name for name in gradients.values() if name is not None]
    backward_nodes = [node for node in _ancestors(ordered, gradient_outputs)
                      if node not in in_forward]
    backward_nodes = _with_weight_values(backward_nodes, forward_nodes, model_inputs, position)
    forward_nodes, backward_nodes = _shapes_forward(forward_nodes, backward_nodes, position)
    computed_forward = {name for node in forward_nodes for name in node.outputs if name}
    fed = set(model_inputs) | set(bound)
    saved: list[str] = []
    backward_inputs: list[str] = []
    for name in _reads(backward_nodes):
        if name in computed_forward:
            saved.append(name)
        elif name in fed:
            backward_inputs.append(name)

    declarations = {name: _declaration(name, types.of(graph, name))
                    for name in [*saved, *statistics.values(), *outputs]}
    declarations.update({value.name: value.declaration() for value in graph.inputs})
    declarations.update({name: _weight_declaration(graph, name) for name in bound})

    forward = work.copy()
    _keep_nodes(forward.graph, {position[node] for node in forward_nodes})
    forward.graph.set_outputs([declarations[name] for name in
                               dict.fromkeys([*outputs, *statistics.values(), *saved])])
    forward_used = _used_names(forward.graph)
    _set_inputs(forward.graph, [declarations[name] for name in
                                [*model_inputs, *(w for w in bound if w in forward_used)]],
                bound)
    backward = work.copy()
    _keep_nodes(backward.graph, {position[node] for node in backward_nodes})
    backward.graph.set_outputs(gradient_outputs)
    _set_inputs(backward.graph, [declarations[name] for name in
                                 [*saved, *backward_inputs, *seeded.values()]], bound)
    return ForwardBackward(forward, backward, outputs, dict(seeded), dict(statistics),
                           saved, backward_inputs, dict(gradients))


_RANDOM = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
           "Bernoulli", "Multinomial", "Dropout")


def _with_weight_values(backward_nodes: list[Node], forward_nodes: list[Node],
                        model_inputs: Sequence[str], position: dict[Node, int]) -> list[Node]:
    """``backward_nodes`` plus the forward nodes of what it reads that no input changes.

    A weight's transpose (or any value computed from weights and constants alone) is
    computed again in the backward graph rather than kept from the forward run: keeping
    them would hold a copy of most weights between the two runs (BERT-base: 745 MB of
    saved values, 94 MB of it the transposed word embeddings alone).
    """
    dependent = set(model_inputs)
    weight_only: list[Node] = []
    for node in forward_nodes:
        reads = [name for name in (*node.inputs, *node.captured_names) if name]
        if node.op_type in _RANDOM or any(name in dependent for name in reads):
            dependent.update(name for name in node.outputs if name)
        else:
            weight_only.append(node)
    produced = {name: node for node in weight_only for name in node.outputs if name}
    wanted = [name for name in _reads(backward_nodes) if name in produced]
    extra = _ancestors(weight_only, wanted)
    return sorted({*backward_nodes, *extra}, key=position.__getitem__)


def _shapes_forward(forward_nodes: list[Node], backward_nodes: list[Node],
                    position: dict[Node, int]) -> tuple[list[Node], list[Node]]:
    """Move the backward graph's ``Shape`` and ``Size`` of forward values to the forward graph.

    The backward graph then reads a few integers, not the whole value (BERT's logits,
    30 MB, were kept only for their shape).
    """
    computed = {name for node in forward_nodes for name in node.outputs if name}
    moved = [node for node in backward_nodes
             if node.op_type in ("Shape", "Size") and not node.domain
             and all(name in computed for name in node.inputs if name)]
    if not moved:
        return forward_nodes, backward_nodes
    taken = set(moved)
    forward = sorted([*forward_nodes, *moved], key=position.__getitem__)
    return forward, [node for node in backward_nodes if node not in taken]


def _weight_declaration(graph: Graph, name: str) -> onnx.ValueInfoProto:
    tensor = graph.initializers[name]
    return onnx.helper.make_tensor_value_info(name, tensor.dtype, list(tensor.shape))


def _keep_nodes(graph: Graph, keep: set[int]) -> None:
    """Remove the nodes whose position (in the sorted order of the copied graph) is not kept."""
    for position, node in reversed(list(enumerate(graph.nodes))):
        if position not in keep:
            graph.remove(node, safe=False)


def _set_inputs(graph: Graph, inputs: Sequence[onnx.ValueInfoProto], bound: Sequence[str]) -> None:
    """Declare ``inputs`` as the graph's inputs; drop bound and unused initializers."""
    for name in list(graph.input_names):
        graph.remove_input(name)
    used = _used_names(graph)
    for name in list(graph.initializers):
        if name in bound or name not in used:
            graph.remove_initializer(name)
    for info in inputs:
        graph.add_input(info)


def _used_names(graph: Graph) -> set[str]:
    used = set(graph.output_names)
    for node in graph:
        used.update(name for name in node.inputs if name)
        used.update(node.captured_names)
    return used
