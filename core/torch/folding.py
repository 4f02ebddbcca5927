"""What torch's exporters computed from model state at export time, and how to compute it again.

Both exporters fold into constants whatever depends on model state alone:

* ``torch.onnx.export(..., dynamo=True)``'s default optimizer: ``val_37 =
  Transpose(query.weight)`` for every ``nn.Linear`` applied to a 3-D input, the rows of a
  position table a static export reads (``embedding_2 = position_embeddings.weight[:8]``),
  a class token broadcast to the batch (``expand``), tables computed from rotary
  frequencies, and every ``BatchNormalization`` after a ``Conv`` fused into the
  convolution (the conv's weight keeps the parameter's name but holds ``W * gamma /
  sigma``, a ``weight_bias`` appears). It records what it folded from in
  ``pkg.onnxscript.optimizer.folded_from``, and the fused ``Conv`` keeps the batch norm's
  FX record;
* the legacy exporter's constant folding (``dynamo=False``, also what Optimum runs):
  transposed linear weights and fused convolutions named ``onnx::MatMul_N`` and
  ``onnx::Conv_N``, with no record at all.

A folded constant holds the values the export was made from. Training needs more: the
parameter must be computed into the graph (a trainer given the constant trains an
anonymous copy and nothing of torch's moves), and a checkpoint that changes a source
makes the constant stale. This module is the one place that knows what was folded:
:func:`find_folds` reads the exporter's records, the file's own values and (when given)
a checkpoint's, and returns a :class:`Folding`: for every folded initializer its
:class:`Fold` (the one state tensor it came from, and the :class:`Recipe` that computes
it again, when one is known) and every fused convolution (:class:`FusedBatchNorm`).
:func:`recompute` and :func:`unfuse` put the computation back into the graph, so that
the parameter itself is an initializer and trains as torch trains it.

How a recipe is established, most certain first (:attr:`Fold.evidence` says which):

* torch's records: a ``MatMul`` recorded as ``aten.linear`` of the parameter reads the
  transpose; a fused ``Conv`` recorded as the batch norm names its parameters, buffers,
  momentum and epsilon;
* values: the constant equals a transpose, a row gather, a broadcast, a scaling or a
  copy of the source (the file's own initializer, or the checkpoint's tensor when the
  checkpoint holds the values the export was made from);
* the constant itself: a broadcast repeats one slice, which is the source; the rows of a
  position table are the indices the same export computed from the same values, kept
  as an integer constant beside it.

Staleness is decided, not assumed: a fold is stale when the checkpoint gives its source
values from which the recipe computes something else (:meth:`Fold.stale`).
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import onnx

from graphpass.ir import Graph, Node, Tensor
from graphpass.torch.export_record import (
    FOLDED_FROM,
    INPUT_KIND,
    LEGACY_CONSTANT_NAME,
    ORIGINAL_NAME,
    TIED_NAMES,
    TRAINABLE_TYPES,
    StateKind,
    folded_from,
    fx_arguments,
    fx_placeholders,
    fx_target,
    graph_signature,
    module_scope,
    signature_kinds,
)

__all__ = [
    "Broadcast",
    "Copy",
    "Fold",
    "Folding",
    "FusedBatchNorm",
    "Recipe",
    "Rows",
    "Scale",
    "StateValues",
    "Transpose",
    "find_folds",
    "find_ties",
    "mark_state",
    "mark_ties",
    "recompute",
    "unfuse",
]

_LINEAR: Final = "aten.linear.default"
_BATCH_NORM: Final = re.compile(r"aten\.(_native_batch_norm_legit_no_training|batch_norm|"
                                r"_native_batch_norm_legit|native_batch_norm)")
_WEIGHT_SLOTS: Final = {"MatMul": (1,), "Gemm": (1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2)}
_TAG: Final = "graphpass.folding"
_FUSION_RTOL: Final = 1e-4
"""Largest difference between a fused weight and the fusion of the checkpoint's tensors,
relative to the fused weight's largest magnitude: float32 rounding of the exporter's own
fusion (measured: 3e-7 on the zoo's convolutions)."""


# =================================================================== values
class StateValues:
    """Values of torch state by name, read on demand (the file's, or a checkpoint's).

    Args:
        shapes: Every name this source knows, with its shape and ONNX element type.
        load: Reads a name's values (called at most once a name).
    """

    def __init__(self, shapes: Mapping[str, tuple[tuple[int, ...], int]],
                 load: Callable[[str], np.ndarray[Any, Any]]) -> None:
        self._shapes = dict(shapes)
        self._load = load
        self._cache: dict[str, np.ndarray[Any, Any]] = {}
        self._by_shape: dict[tuple[int, ...], list[str]] | None = None
        self._digests: dict[tuple[int, ...], dict[bytes, list[str]]] = {}

    @classmethod
    def of_initializers(cls, graph: Graph, names: Iterable[str]) -> StateValues:
        """The values of ``graph``'s initializers called ``names``."""
        tensors = graph.initializers
        shapes = {n: (tuple(int(d) for d in tensors[n].shape), tensors[n].dtype)
                  for n in names if n in tensors}
        return cls(shapes, lambda name: tensors[name].numpy())

    @classmethod
    def empty(cls) -> StateValues:
        """A source that knows nothing."""
        return cls({}, lambda name: np.zeros(0))

    def __contains__(self, name: object) -> bool:
        return name in self._shapes

    def names(self) -> list[str]:
        """Every name this source knows."""
        return list(self._shapes)

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of ``name`` (``None``: unknown here)."""
        known = self._shapes.get(name)
        return known[0] if known is not None else None

    def dtype(self, name: str) -> int | None:
        """The ONNX element type of ``name`` (``None``: unknown here)."""
        known = self._shapes.get(name)
        return known[1] if known is not None else None

    def value(self, name: str) -> np.ndarray[Any, Any] | None:
        """The values of ``name`` (``None``: unknown here)."""
        if name not in self._shapes:
            return None
        if name not in self._cache:
            self._cache[name] = np.asarray(self._load(name))
        return self._cache[name]

    def with_shape(self, shape: tuple[int, ...]) -> list[str]:
        """The names of float tensors of ``shape``."""
        if self._by_shape is None:
            self._by_shape = {}
            for name, (dims, dtype) in self._shapes.items():
                if dtype in TRAINABLE_TYPES:
                    self._by_shape.setdefault(dims, []).append(name)
        return list(self._by_shape.get(shape, ()))

    def with_values(self, values: np.ndarray[Any, Any]) -> list[str]:
        """The names of float tensors holding exactly ``values`` (same shape and bytes).

        Each tensor of that shape is read and hashed once (and not kept), so that finding the
        sources of many folded copies takes one pass over the candidates.
        """
        shape = tuple(int(d) for d in values.shape)
        index = self._digests.get(shape)
        if index is None:
            index = {}
            for name in self.with_shape(shape):
                array = self._cache.get(name)
                index.setdefault(_digest(np.asarray(self._load(name)) if array is None
                                         else array), []).append(name)
            self._digests[shape] = index
        found = []
        for name in index.get(_digest(values), ()):
            candidate = self.value(name)
            if candidate is not None and candidate.dtype == values.dtype and \
                    np.array_equal(candidate, values):
                found.append(name)
        return found


def _digest(array: np.ndarray[Any, Any]) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).digest()


# ================================================================== recipes
class Recipe:
    """How a folded constant is computed from its one source (see the subclasses)."""

    kind: str = ""
    exact: bool = True
    """Whether :meth:`compute` gives the exporter's values bit for bit."""

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The constant, computed from the source's values."""
        raise NotImplementedError

    def source_of(self, constant: np.ndarray[Any, Any],
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        """The source's values recovered from the constant (``None``: not all are in it)."""
        return None

    def nodes(self, source: str, output: str) -> list[Node]:
        """Nodes computing ``output`` from ``source`` (small constants as ``Constant`` nodes).

        The indices, shapes and factors a recipe reads are ``Constant`` nodes, not
        initializers: whatever the exporter's records, no trainer takes them for weights.
        """
        raise NotImplementedError

    def describe(self, source: str) -> str:
        """``Transpose(W)``, ``Gather(W, rows 0..7)``, ..."""
        raise NotImplementedError

    def same_values(self, computed: np.ndarray[Any, Any],
                    constant: np.ndarray[Any, Any]) -> bool:
        """Whether a computed constant equals the folded one (exactly, for exact recipes)."""
        if computed.shape != constant.shape:
            return False
        if self.exact:
            return bool(np.array_equal(computed, constant))
        return _close(computed, constant)


@dataclass(frozen=True)
class Transpose(Recipe):
    """``constant = Transpose(source, perm)``."""

    perm: tuple[int, ...] = (1, 0)
    kind = "transpose"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.ascontiguousarray(np.transpose(source, self.perm))

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return np.ascontiguousarray(np.transpose(constant, np.argsort(self.perm)))

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        return [Node("Transpose", [source], [output], name=f"{output}__transpose",
                     attributes={"perm": list(self.perm)})]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Transpose({source})"


@dataclass(frozen=True)
class Copy(Recipe):
    """``constant = source`` (a copy the exporter kept under another name)."""

    kind = "copy"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return source

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return constant

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        return [Node("Identity", [source], [output], name=f"{output}__copy")]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Identity({source})"


@dataclass(frozen=True, eq=False)
class Rows(Recipe):
    """``constant = Gather(source, indices, axis=0)``: rows of a table (position embeddings)."""

    indices: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, np.int64))
    kind = "rows"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.take(source, self.indices, axis=0)

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        flat = self.indices.reshape(-1)
        if shape is None or sorted(flat.tolist()) != list(range(shape[0])):
            return None  # the constant holds only some rows of the table
        rows = constant.reshape((flat.size, *constant.shape[self.indices.ndim:]))
        return np.ascontiguousarray(rows[np.argsort(flat)])

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        indices = _constant(f"{output}__rows", self.indices.astype(np.int64))
        return [indices, Node("Gather", [source, indices.outputs[0]], [output],
                              name=f"{output}__gather", attributes={"axis": 0})]

    def describe(self, source: str) -> str:  # noqa: D102
        flat = self.indices.reshape(-1).tolist()
        if flat == list(range(flat[0], flat[0] + len(flat))) if flat else False:
            rows = f"rows {flat[0]}..{flat[-1]}"
        else:
            rows = f"{len(flat)} rows"
        return f"Gather({source}, {rows})"


@dataclass(frozen=True)
class Broadcast(Recipe):
    """``constant = Expand(source, shape)``: one tensor repeated (a class token per example)."""

    shape: tuple[int, ...] = ()
    kind = "broadcast"

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.ascontiguousarray(np.broadcast_to(source, self.shape))

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        if shape is None:
            return None
        return np.ascontiguousarray(_first_slice(constant, shape))

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        shape = _constant(f"{output}__shape", np.array(self.shape, dtype=np.int64))
        return [shape, Node("Expand", [source, shape.outputs[0]], [output],
                            name=f"{output}__expand")]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Expand({source}, {list(self.shape)})"


@dataclass(frozen=True)
class Scale(Recipe):
    """``constant = source * factor`` (a scaling folded into a weight)."""

    factor: float = 1.0
    kind = "scale"
    exact = False

    def compute(self, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:  # noqa: D102
        return np.asarray(source * source.dtype.type(self.factor))

    def source_of(self, constant: np.ndarray[Any, Any],  # noqa: D102
                  shape: tuple[int, ...] | None) -> np.ndarray[Any, Any] | None:
        return None  # dividing back is not exact

    def nodes(self, source: str, output: str) -> list[Node]:  # noqa: D102
        factor = _constant(f"{output}__factor", np.array(self.factor, np.float32))
        return [factor, Node("Mul", [source, factor.outputs[0]], [output],
                             name=f"{output}__scale")]

    def describe(self, source: str) -> str:  # noqa: D102
        return f"Mul({source}, {self.factor:g})"


def _constant(name: str, value: np.ndarray[Any, Any]) -> Node:
    return Node("Constant", [], [name], name=name,
                attributes={"value": onnx.numpy_helper.from_array(value, name)})


# ==================================================================== folds
@dataclass
class Fold:
    """An initializer the exporter computed from one state tensor.

    Attributes:
        name: The folded initializer (``val_37``, ``embedding_2``, ``onnx::MatMul_303``).
        source: The state tensor it was computed from, by its name in the model
            (``model.bert.encoder.layer.0.attention.self.query.weight``); it may have no
            initializer in the graph any more.
        kind: What torch's record says the source is (``parameter``, ``buffer``,
            ``constant``), or ``None`` when nothing is recorded (legacy exports).
        recorded: Every value the exporter recorded it was folded from (dynamo), else ``()``.
        recipe: How to compute it again from the source, when known.
        evidence: How the recipe (or the source) was established, for the report.
        problem: Why no recipe is known (when ``recipe`` is ``None``).
        others: Further state it was computed from (a fold of several tensors has no
            recipe; of a parameter and buffers, only the parameter is the source).
        inferred: Whether the recipe rests on nearness rather than equality: the rows of a
            table a checkpoint changed, matched to their nearest rows there (worth a warning).
    """

    name: str
    source: str
    kind: StateKind | None
    recorded: tuple[str, ...] = ()
    recipe: Recipe | None = None
    evidence: str = ""
    problem: str | None = None
    others: tuple[str, ...] = ()
    inferred: bool = False

    @property
    def is_parameter(self) -> bool:
        """Whether torch trains the source (a parameter, or unrecorded: it may be one)."""
        return self.kind in ("parameter", None)

    def describe(self) -> str:
        """``val_37 = Transpose(query.weight)``; the recorded sources when no recipe is known."""
        if self.recipe is not None:
            return f"{self.name} = {self.recipe.describe(self.source)}"
        return f"{self.name} (from {self.source})"

    def stale(self, source: np.ndarray[Any, Any], constant: np.ndarray[Any, Any]) -> bool:
        """Whether ``source`` (a checkpoint's values) makes the constant differ from the file's.

        Raises:
            ValueError: No recipe is known (staleness cannot be decided from the constant).
        """
        if self.recipe is None:
            raise ValueError(f"no recipe is known for {self.name!r}")
        return not self.recipe.same_values(self.recipe.compute(source), constant)


@dataclass
class FusedBatchNorm:
    """A ``Conv`` into which the exporter fused the ``BatchNormalization`` after it.

    Attributes:
        node: The fused ``Conv``.
        weight: Its weight initializer (holding ``W * gamma / sigma``); in a dynamo export
            it keeps the conv parameter's name.
        bias: Its bias initializer (``beta + (b - mean) * gamma / sigma``), if any.
        conv_weight: The conv's own weight parameter, by its name in the model.
        conv_bias: The conv's own bias parameter, if torch's conv has one.
        scale: The batch norm's weight (gamma).
        shift: The batch norm's bias (beta).
        mean: Its running mean.
        variance: Its running variance.
        epsilon: Its epsilon.
        momentum: torch's momentum (``0.1``: ONNX's is ``1 - momentum``).
        evidence: How it was found.
        inferred: Whether it rests on nearness rather than records or equal values (a
            legacy export filled from a checkpoint changed since: worth a warning).
    """

    node: Node
    weight: str
    bias: str | None
    conv_weight: str
    conv_bias: str | None
    scale: str
    shift: str
    mean: str
    variance: str
    epsilon: float
    momentum: float
    evidence: str
    inferred: bool = False

    @property
    def sources(self) -> tuple[str, ...]:
        """Every state tensor the fused weights were computed from."""
        conv = (self.conv_weight, *([self.conv_bias] if self.conv_bias else []))
        return (*conv, self.scale, self.shift, self.mean, self.variance)

    @property
    def parameters(self) -> tuple[str, ...]:
        """The sources torch trains."""
        conv = (self.conv_weight, *([self.conv_bias] if self.conv_bias else []))
        return (*conv, self.scale, self.shift)

    def compute(self, values: Mapping[str, np.ndarray[Any, Any]]
                ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The fused weight and bias from the sources' values (in float64, then cast)."""
        weight = values[self.conv_weight].astype(np.float64)
        factor = values[self.scale].astype(np.float64) / np.sqrt(
            values[self.variance].astype(np.float64) + self.epsilon)
        bias = values[self.conv_bias].astype(np.float64) if self.conv_bias else 0.0
        fused_weight = weight * factor.reshape((-1,) + (1,) * (weight.ndim - 1))
        fused_bias = values[self.shift] + (bias - values[self.mean]) * factor
        dtype = values[self.conv_weight].dtype
        return fused_weight.astype(dtype), np.asarray(fused_bias).astype(dtype)

    def matches(self, values: Mapping[str, np.ndarray[Any, Any]], graph: Graph) -> bool:
        """Whether fusing ``values`` gives the fused weights in ``graph`` (float32 rounding)."""
        try:
            weight, bias = self.compute(values)
        except (ValueError, KeyError):
            return False
        if not _close(weight, graph.initializers[self.weight].numpy()):
            return False
        return self.bias is None or _close(bias, graph.initializers[self.bias].numpy())

    def describe(self) -> str:
        """``node_Conv_95 = Conv(x, W) + BatchNormalization(gamma, beta, mean, var)``."""
        return (f"{self.node.name or 'Conv'} = BatchNormalization(Conv(x, {self.conv_weight}), "
                f"{self.scale}, ...)")


@dataclass
class Folding:
    """What the exporter folded in one graph (:func:`find_folds`).

    Attributes:
        folds: The folded initializers, by name, in graph order.
        fused: The convolutions with a batch norm fused in, by their weight initializer.
        ties: Names torch gives one tensor that the model keeps under one initializer:
            initializer -> its other torch names (GPT-2's ``lm_head.weight`` ->
            ``transformer.wte.weight``).
    """

    folds: dict[str, Fold] = field(default_factory=dict)
    fused: dict[str, FusedBatchNorm] = field(default_factory=dict)
    ties: dict[str, list[str]] = field(default_factory=dict)

    def parameter_folds(self) -> list[Fold]:
        """The folds whose source torch trains (or may train: unrecorded)."""
        return [fold for fold in self.folds.values() if fold.is_parameter]

    def sources(self) -> set[str]:
        """Every state name some fold or fusion was computed from."""
        found = {fold.source for fold in self.folds.values()}
        for fused in self.fused.values():
            found.update(fused.sources)
        return found


def find_ties(graph: Graph) -> dict[str, list[str]]:
    """The tied parameters of ``graph``: initializer -> its other torch names.

    What earlier passes recorded (:data:`~graphpass.torch.export_record.TIED_NAMES`), and
    torch's record (see :class:`Folding`); without the values a checkpoint adds.
    """
    finder = _Finder(graph, StateValues.empty())
    if finder.kinds:
        finder._ties()
    else:
        for name in graph.initializers:
            for alias in _listed_names(graph.values[name].metadata.get(TIED_NAMES)):
                finder._tie(name, alias)
    return finder.folding.ties


def find_folds(graph: Graph, *, checkpoint: StateValues | None = None) -> Folding:
    """What the exporter folded into ``graph``'s initializers (see the module documentation).

    Args:
        graph: The main graph (functions already inlined).
        checkpoint: A checkpoint's values by model name (the names the graph's records
            use), when the weights come from one: it establishes recipes by value where
            the file lacks the source, and finds the batch norms a legacy export fused.
    """
    return _Finder(graph, checkpoint or StateValues.empty()).run()


class _Finder:
    def __init__(self, graph: Graph, checkpoint: StateValues) -> None:
        self.graph = graph
        self.checkpoint = checkpoint
        self.kinds = signature_kinds(graph)
        self.placeholders = {target: placeholder for placeholder, target
                             in graph_signature(graph).items()}
        self.folding = Folding()
        self.initializers = graph.initializers

    def run(self) -> Folding:
        if self.kinds:
            self._fused_batch_norms()
        self._recorded_folds()
        if self.kinds:
            self._ties()
        else:
            self._legacy_folds()
        return self.folding

    def _is_state(self, name: str) -> bool:
        """Whether a recorded source is model state (torch's record, a weight, a key)."""
        return name in self.kinds or name in self.checkpoint or (
            not self.kinds and name in self.initializers)

    # -------------------------------------------------------------- the file's values
    def _file_value(self, name: str) -> np.ndarray[Any, Any] | None:
        """The export's own value of state ``name``, if an initializer still holds it."""
        tensor = self.initializers.get(name)
        if tensor is None or name in self.folding.fused or name in self.folding.folds:
            return None
        return tensor.numpy()

    def _source_shape(self, name: str) -> tuple[int, ...] | None:
        tensor = self.initializers.get(name)
        if tensor is not None and name not in self.folding.fused:
            return tuple(int(d) for d in tensor.shape)
        return self.checkpoint.shape(name)

    # ------------------------------------------------------------- dynamo: records
    def _recorded_folds(self) -> None:
        for name, shape, tensor in self._candidates():
            recorded = folded_from(self.graph.values[name].metadata)
            state = [s for s in recorded if self._is_state(s)]
            if recorded and not state:
                continue  # computed from the exporter's own constants
            if not recorded:  # no record of its own: the aten.linear it is read by
                if tensor is not None and tensor.dtype not in TRAINABLE_TYPES:
                    continue
                source = self._linear_source(name)
                if source is None:
                    continue
                state = [source]
            parameters = [s for s in state if self.kinds.get(s) == "parameter"]
            floats = parameters or [s for s in state if self._is_float_state(s)]
            if len(floats) != 1:
                main = (floats or state)[0]
                self._add(Fold(name, main, self.kinds.get(main), recorded, others=tuple(
                    s for s in state if s != main),
                    problem=f"it was computed from {len(floats) or len(state)} state tensors "
                            f"({_names(floats or state)})"))
                continue
            source = floats[0]
            fold = Fold(name, source, self.kinds.get(source), recorded,
                        others=tuple(s for s in state if s != source))
            self._establish(fold, shape, tensor)
            self._add(fold)

    def _candidates(self) -> list[tuple[str, tuple[int, ...] | None, Tensor | None]]:
        """Float initializers, and names used but undefined (weights saved apart)."""
        found: list[tuple[str, tuple[int, ...] | None, Tensor | None]] = [
            (name, tuple(int(d) for d in tensor.shape), tensor)
            for name, tensor in self.initializers.items() if name not in self.folding.fused]
        for name in self.graph.free_names:
            value = self.graph.value(name)
            shape = value.shape
            known = tuple(d for d in shape if isinstance(d, int)) if shape is not None else None
            found.append((name, known if shape is not None and known is not None
                          and len(known) == len(shape) else None, None))
        return found

    def _linear_source(self, name: str) -> str | None:
        """The parameter whose ``aten.linear`` every reader of ``name`` records, if not name."""
        if self.kinds.get(name) is not None:
            return None
        sources = set()
        for node, slot in self.graph.uses(name):
            arguments = fx_arguments(node) if node is not None else ()
            if node is None or node.op_type != "MatMul" or slot != 1 or \
                    fx_target(node) != _LINEAR or len(arguments) < 2:
                return None
            sources.add(arguments[1])
        target = self._target_of(sources.pop()) if len(sources) == 1 else None
        if target is None or self.kinds.get(target) != "parameter" or \
                target in self.initializers:
            return None
        return target

    def _is_float_state(self, name: str) -> bool:
        dtype = self.checkpoint.dtype(name)
        tensor = self.initializers.get(name)
        if tensor is not None:
            dtype = tensor.dtype
        return dtype is None or dtype in TRAINABLE_TYPES

    def _establish(self, fold: Fold, shape: tuple[int, ...] | None,
                   tensor: Tensor | None) -> None:
        """Find ``fold``'s recipe: records, then values, then the constant itself."""
        source_shape = self._source_shape(fold.source)
        if self._recorded_linear(fold.name, fold.source) and (shape is None or len(shape) == 2) \
                and (source_shape is None or shape is None or source_shape == shape[::-1]):
            fold.recipe, fold.evidence = Transpose((1, 0)), "torch's record: aten.linear"
            return
        if tensor is None:
            if shape is not None and self._transposed_weight(fold.name, shape, source_shape):
                fold.recipe = Transpose((1, 0))
                fold.evidence = ("its shape is the source's transposed, and only MatMul reads "
                                 "it, as its weight")
                return
            fold.problem = ("the file does not hold it (the export was saved without its "
                            "weights), so it cannot be compared with the source")
            return
        constant = tensor.numpy()
        for where, values in (("the file", self._file_value(fold.source)),
                              ("the checkpoint", self.checkpoint.value(fold.source))):
            if values is None:
                continue
            recipe = _recipe_by_value(constant, values)
            if recipe is not None:
                fold.recipe = recipe
                fold.evidence = f"values: equals {recipe.describe(fold.source)} of {where}"
                return
        recipe, evidence = self._recipe_from_constant(fold, constant, source_shape)
        if recipe is not None:
            fold.recipe, fold.evidence = recipe, evidence
            return
        changed = self.checkpoint.value(fold.source)
        indices = _nearest_rows(constant, changed) if changed is not None else None
        if indices is not None:
            fold.recipe, fold.inferred = Rows(indices=indices), True
            fold.evidence = (f"nearness: each row of it is far nearer one row of the "
                             f"checkpoint's {fold.source!r} than any other (a table the "
                             "checkpoint changed a little, as fine-tuning does)")
            return
        fold.problem = self._unknown(fold, constant, source_shape)

    def _recorded_linear(self, name: str, source: str) -> bool:
        """Whether every use of ``name`` is a MatMul weight recorded as aten.linear of source."""
        placeholder = self.placeholders.get(source)
        uses = self.graph.uses(name)
        if not uses or placeholder is None:
            return False
        for node, slot in uses:
            if node is None or node.op_type != "MatMul" or slot != 1:
                return False
            arguments = fx_arguments(node)
            if fx_target(node) != _LINEAR or len(arguments) < 2 or arguments[1] != placeholder:
                return False
        return True

    def _recipe_from_constant(self, fold: Fold, constant: np.ndarray[Any, Any],
                              source_shape: tuple[int, ...] | None
                              ) -> tuple[Recipe | None, str]:
        """A recipe the constant shows by itself (a broadcast), or sibling records (rows)."""
        if source_shape is not None and _broadcasts(source_shape, constant.shape) and \
                constant.shape != source_shape:
            first = _first_slice(constant, source_shape)
            if np.array_equal(np.broadcast_to(first, constant.shape), constant):
                return (Broadcast(tuple(constant.shape)),
                        "the constant repeats one slice of the source's shape")
        if self._transposed_weight(fold.name, constant.shape, source_shape):
            return (Transpose((1, 0)), "its shape is the source's transposed, and only MatMul "
                                       "reads it, as its weight")
        indices = self._sibling_indices(fold, constant, source_shape)
        if indices is not None:
            name, values = indices
            return (Rows(indices=values),
                    f"the rows {name!r} lists: the export computed those positions from the "
                    f"same values")
        return None, ""

    def _transposed_weight(self, name: str, shape: Sequence[int],
                           source_shape: tuple[int, ...] | None) -> bool:
        """A matrix read only as MatMul weights whose shape is the source's transposed.

        A square one needs torch's ``aten.linear`` record: its shape tells nothing.
        """
        if source_shape is None or len(shape) != 2 or tuple(shape) != source_shape[::-1] \
                or shape[0] == shape[1]:
            return False
        uses = self.graph.uses(name)
        return bool(uses) and all(node is not None and node.op_type == "MatMul" and slot == 1
                                  and node.domain in ("", "ai.onnx") for node, slot in uses)

    def _sibling_indices(self, fold: Fold, constant: np.ndarray[Any, Any],
                         source_shape: tuple[int, ...] | None
                         ) -> tuple[str, np.ndarray[Any, Any]] | None:
        """An integer constant folded from exactly the fold's other values: its row numbers.

        BERT's ``embedding_2 = position_embeddings.weight[position_ids[:, :8]]`` is folded
        from the table and the values that computed ``position_ids[:, :8]``; the same
        slice, folded from those values alone, is kept as ``val_17`` for the token-type
        lookup.
        """
        if source_shape is None or len(source_shape) < 1:
            return None
        others = set(fold.recorded) - {fold.source}
        lead = constant.ndim - (len(source_shape) - 1)
        if lead < 1 or tuple(constant.shape[lead:]) != tuple(source_shape[1:]):
            return None
        for name, tensor in self.initializers.items():
            if tensor.dtype not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
                continue
            if set(folded_from(self.graph.values[name].metadata)) != others or \
                    tuple(int(d) for d in tensor.shape) != tuple(constant.shape[:lead]):
                continue
            values = tensor.numpy()
            if values.size and values.min() >= 0 and values.max() < source_shape[0]:
                return name, values.astype(np.int64)
        return None

    def _unknown(self, fold: Fold, constant: np.ndarray[Any, Any],
                 source_shape: tuple[int, ...] | None) -> str:
        if source_shape is None:
            return f"neither the file nor the checkpoint holds {fold.source!r}"
        computed = f"{fold.source!r}" + (f" and {_names(fold.others)}" if fold.others else "")
        return (f"no transpose, row gather, broadcast or scaling of {computed} that graphpass "
                f"knows gives its values ({list(constant.shape)} from {list(source_shape)})")

    def _add(self, fold: Fold) -> None:
        self.folding.folds[fold.name] = fold

    # ---------------------------------------------------- dynamo: fused batch norms
    def _fused_batch_norms(self) -> None:
        for node in self.graph:
            if node.op_type != "Conv" or len(node.inputs) < 2 or \
                    not _BATCH_NORM.match(fx_target(node) or ""):
                continue
            placeholders = fx_placeholders(node)
            names = [self._target_of(p.name) for p in placeholders]
            arguments = _literal_arguments(node)
            weight = node.inputs[1]
            bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
            if len(names) != 4 or None in names or weight not in self.initializers or \
                    len(arguments) < 2:
                continue
            scale, shift, mean, variance = (n for n in names if n is not None)
            module = weight.rpartition(".")[0]
            conv_bias = f"{module}.bias" if f"{module}.bias" in self.kinds else None
            momentum, epsilon = arguments[-2], arguments[-1]
            self.folding.fused[weight] = FusedBatchNorm(
                node, weight, bias, weight, conv_bias, scale, shift, mean, variance,
                epsilon=float(epsilon), momentum=float(momentum),
                evidence="torch's record: the Conv is recorded as the batch norm fused into it")

    def _target_of(self, placeholder: str) -> str | None:
        for target, name in self.placeholders.items():
            if name == placeholder:
                return target
        return None

    # ------------------------------------------------------------------- dynamo: ties
    def _ties(self) -> None:
        """Parameters torch.export lists that share another parameter's initializer.

        torch.export lists tied parameters under each name but reads one placeholder for
        both uses (GPT-2's token embedding and its head are ``lm_head.weight``). A listed
        parameter that no node reads is that tensor when a module reading another
        parameter's initializer owns it under the same attribute name (the embedding module
        ``transformer.wte`` reads ``lm_head.weight`` as its ``weight``), or when the
        checkpoint gives both names the same values (BERT's ``cls.predictions.bias`` is its
        decoder's bias). Any other such parameter is unused by the export's forward.
        """
        for name in self.initializers:  # ties an earlier pass recorded
            for alias in _listed_names(self.graph.values[name].metadata.get(TIED_NAMES)):
                self._tie(name, alias)
        known = {alias for aliases in self.folding.ties.values() for alias in aliases}
        read = {p.name for node in self.graph for p in fx_placeholders(node)}
        unread = {target for target, kind in self.kinds.items() if kind == "parameter"
                  and self.placeholders.get(target) not in read
                  and target not in self.initializers and target not in known}
        if not unread:
            return
        parameters = [n for n in self.initializers if self.kinds.get(n) == "parameter"]
        for name in parameters:
            attribute = name.rpartition(".")[2]
            for node in self.graph.consumers(name):
                scope = module_scope(node)
                alias = f"{scope}.{attribute}" if scope else ""
                if alias in unread and alias != name:
                    self._tie(name, alias)
                    unread.discard(alias)
        for alias in sorted(unread):
            values = self.checkpoint.value(alias)
            if values is None:
                continue
            for name in parameters:
                tensor = self.initializers[name]
                own = self.checkpoint.value(name) if name in self.checkpoint else tensor.numpy()
                if tuple(int(d) for d in tensor.shape) == values.shape and own is not None \
                        and np.array_equal(own, values):
                    self._tie(name, alias)
                    break

    def _tie(self, name: str, alias: str) -> None:
        aliases = self.folding.ties.setdefault(name, [])
        if alias not in aliases:
            aliases.append(alias)

    # ------------------------------------------------------------------- legacy exports
    def _legacy_folds(self) -> None:
        """``onnx::MatMul_N`` / ``onnx::Conv_N`` copies: matched by value to known state."""
        named = [n for n, t in self.initializers.items()
                 if not LEGACY_CONSTANT_NAME.fullmatch(n) and t.dtype in TRAINABLE_TYPES]
        file = StateValues.of_initializers(self.graph, named)
        biases = self._legacy_biases()
        for name, tensor in self.initializers.items():
            if not LEGACY_CONSTANT_NAME.fullmatch(name) or tensor.dtype not in TRAINABLE_TYPES \
                    or name in biases:
                continue
            weight_uses = [(node, slot) for node, slot in self.graph.uses(name)
                           if node is not None and slot in _WEIGHT_SLOTS.get(node.op_type, ())]
            if not weight_uses:
                continue
            conv = next((node for node, slot in weight_uses
                         if node.op_type == "Conv" and slot == 1), None)
            if conv is not None and self._legacy_fused(conv, name):
                continue
            self._legacy_copy(name, tensor, file)
        for value in self.graph.inputs:  # export_params=False: the folded copies are inputs
            if LEGACY_CONSTANT_NAME.fullmatch(value.name) and \
                    value.name not in self.initializers and any(
                        node is not None and slot in _WEIGHT_SLOTS.get(node.op_type, ())
                        for node, slot in self.graph.uses(value.name)):
                self._add(Fold(value.name, value.name, None, problem=(
                    "the file does not hold it (the export was saved without its weights)")))

    def _legacy_biases(self) -> set[str]:
        """Legacy constants read as a Conv's bias (found with the conv's weight)."""
        return {node.inputs[2] for node in self.graph
                if node.op_type == "Conv" and len(node.inputs) > 2 and node.inputs[2]
                and LEGACY_CONSTANT_NAME.fullmatch(node.inputs[1])
                and LEGACY_CONSTANT_NAME.fullmatch(node.inputs[2])}

    def _legacy_copy(self, name: str, tensor: Tensor, file: StateValues) -> None:
        constant = tensor.numpy()
        for where, values in (("the file", file), ("the checkpoint", self.checkpoint)):
            found = _matching_source(constant, values)
            if found is not None:
                source, recipe = found
                self._add(Fold(name, source, None, recipe=recipe,
                               evidence=f"values: equals {recipe.describe(source)} of {where}"))
                return
        self._add(Fold(name, name, None, problem=(
            "no tensor of the file" + (" or the checkpoint" if self.checkpoint.names() else "")
            + " transposed or copied gives it")))

    def _legacy_fused(self, node: Node, weight: str) -> bool:
        """Find the conv weight and batch norm whose fusion the checkpoint says ``weight`` is."""
        if not self.checkpoint.names():
            return False
        bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        shape = tuple(int(d) for d in self.initializers[weight].shape)
        if bias is None or len(shape) < 3:
            return False
        scope = module_scope(node) or ""
        candidates = sorted(self.checkpoint.with_shape(shape),
                            key=lambda n: -_shared_prefix(n, scope))
        groups = _batch_norm_groups(self.checkpoint, shape[0])
        groups.sort(key=lambda group: -_shared_prefix(group[0], scope))
        fused_weight = self.initializers[weight].numpy().astype(np.float64)
        near: list[tuple[float, FusedBatchNorm]] = []
        for conv_weight in candidates:
            module = conv_weight.rpartition(".")[0]
            conv_bias = f"{module}.bias" if f"{module}.bias" in self.checkpoint else None
            for prefix, epsilon in itertools.product([g[0] for g in groups], (1e-5, 1e-3)):
                fused = FusedBatchNorm(
                    node, weight, bias, conv_weight, conv_bias, f"{prefix}.weight",
                    f"{prefix}.bias", f"{prefix}.running_mean", f"{prefix}.running_var",
                    epsilon=epsilon, momentum=0.1,
                    evidence="values: the fusion of the checkpoint's conv weight and batch norm")
                values = {n: v for n in fused.sources
                          if (v := self.checkpoint.value(n)) is not None}
                if len(values) != len(fused.sources):
                    continue
                if fused.matches(values, self.graph):
                    self.folding.fused[weight] = fused
                    return True
                computed = fused.compute(values)[0].astype(np.float64)
                distance = float(np.linalg.norm(computed - fused_weight)) / max(
                    float(np.linalg.norm(fused_weight)), 1e-30)
                near.append((distance, fused))
        return self._nearest_fusion(weight, near)

    def _nearest_fusion(self, weight: str, near: list[tuple[float, FusedBatchNorm]]) -> bool:
        """The fusion decisively nearest the file's weights (a checkpoint changed since).

        Its relative distance must be under 1/2, and a quarter of the next nearest fusion's
        of other tensors (an epsilon of 1e-3 instead of 1e-5 is the same tensors).
        """
        near.sort(key=lambda item: item[0])
        if not near or near[0][0] >= 0.5:
            return False
        best = near[0][1]
        rivals = [d for d, f in near[1:] if (f.conv_weight, f.scale) != (best.conv_weight,
                                                                         best.scale)]
        if rivals and near[0][0] > 0.25 * rivals[0]:
            return False
        best.inferred = True
        best.evidence = ("nearness: the fusion of these checkpoint tensors is far nearer the "
                         "file's fused weights than any other (tensors changed a little since "
                         "the export, as fine-tuning does)")
        self.folding.fused[weight] = best
        return True


# ================================================================== matching
def _recipe_by_value(constant: np.ndarray[Any, Any],
                     source: np.ndarray[Any, Any]) -> Recipe | None:
    """The recipe that computes ``constant`` from ``source``'s values, if any is known."""
    if constant.dtype != source.dtype:
        return None
    if constant.shape == source.shape:
        if np.array_equal(constant, source):
            return Copy()
        return _scale(constant, source)
    if constant.ndim == source.ndim >= 2:
        for perm in _permutations(source.shape, constant.shape):
            if np.array_equal(np.transpose(source, perm), constant):
                return Transpose(perm)
    if _broadcasts(source.shape, constant.shape) and \
            np.array_equal(np.broadcast_to(source, constant.shape), constant):
        return Broadcast(tuple(constant.shape))
    indices = _row_indices(constant, source)
    return Rows(indices=indices) if indices is not None else None


def _matching_source(constant: np.ndarray[Any, Any],
                     values: StateValues) -> tuple[str, Recipe] | None:
    """The one tensor of ``values`` that a transpose or copy turns into ``constant``."""
    found: list[tuple[str, Recipe]] = []
    if constant.ndim == 2:
        found = [(name, Transpose((1, 0))) for name in values.with_values(constant.T)]
    if not found:
        found = [(name, Copy()) for name in values.with_values(constant)]
    return found[0] if len(found) == 1 else None


def _scale(constant: np.ndarray[Any, Any], source: np.ndarray[Any, Any]) -> Recipe | None:
    if source.size == 0 or source.dtype.kind != "f":
        return None
    largest = int(np.argmax(np.abs(source)))
    pivot = float(source.reshape(-1)[largest])
    if pivot == 0.0:
        return None
    recipe = Scale(float(constant.reshape(-1)[largest]) / pivot)
    return recipe if recipe.factor != 1.0 and _close(recipe.compute(source), constant) else None


def _row_indices(constant: np.ndarray[Any, Any],
                 source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Indices ``i`` with ``constant == source[i]``, each row found exactly once in source."""
    if source.ndim < 1 or source.shape[0] == 0:
        return None
    row_shape = source.shape[1:]
    lead = constant.ndim - len(row_shape)
    if lead < 1 or tuple(constant.shape[lead:]) != tuple(row_shape):
        return None
    rows = np.ascontiguousarray(source).reshape(source.shape[0], -1)
    index: dict[bytes, int] = {}
    repeated: set[bytes] = set()
    for number, row in enumerate(rows):
        digest = hashlib.blake2b(row.tobytes(), digest_size=16).digest()
        if digest in index:
            repeated.add(digest)
        index[digest] = number
    wanted = np.ascontiguousarray(constant).reshape(-1, rows.shape[1])
    found = np.empty(len(wanted), dtype=np.int64)
    for number, row in enumerate(wanted):
        digest = hashlib.blake2b(row.tobytes(), digest_size=16).digest()
        if digest not in index or digest in repeated:
            return None
        found[number] = index[digest]
    return found.reshape(constant.shape[:lead])


_NEAR: Final = 0.25
"""A row matches its nearest row only when the next nearest is four times as far."""


def _nearest_rows(constant: np.ndarray[Any, Any],
                  source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Indices of the rows of ``source`` nearest each row of ``constant``, if each is decisive.

    The rows a fold took from a table that the checkpoint changed since (fine-tuned
    position embeddings) are no longer equal to any row, but each is still far nearer its
    own row than any other. Decisive means: the nearest row is at most :data:`_NEAR` of the
    distance to the second nearest, and no two rows of the constant share their nearest row.
    """
    if source.ndim < 2 or source.shape[0] < 2 or source.dtype.kind != "f":
        return None
    row_shape = source.shape[1:]
    lead = constant.ndim - len(row_shape)
    if lead < 1 or tuple(constant.shape[lead:]) != tuple(row_shape):
        return None
    table = source.reshape(source.shape[0], -1).astype(np.float64)
    wanted = constant.reshape(-1, table.shape[1]).astype(np.float64)
    distances = (np.square(wanted).sum(1)[:, None] - 2 * wanted @ table.T
                 + np.square(table).sum(1)[None, :])
    order = np.argsort(distances, axis=1)[:, :2]
    nearest = np.take_along_axis(distances, order, axis=1).clip(min=0)
    if not bool((np.sqrt(nearest[:, 0]) <= _NEAR * np.sqrt(nearest[:, 1])).all()):
        return None
    found = order[:, 0].astype(np.int64)
    if len(set(found.tolist())) != len(found):
        return None
    return found.reshape(constant.shape[:lead])


def _permutations(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[int, ...]]:
    if len(source) > 4:
        return [tuple(reversed(range(len(source))))] if source[::-1] == target else []
    return [perm for perm in itertools.permutations(range(len(source)))
            if perm != tuple(range(len(source)))
            and tuple(source[p] for p in perm) == tuple(target)]


def _broadcasts(source: Sequence[int], target: Sequence[int]) -> bool:
    if len(source) > len(target):
        return False
    padded = (1,) * (len(target) - len(source)) + tuple(source)
    return all(s in (1, t) for s, t in zip(padded, target, strict=True))


def _first_slice(constant: np.ndarray[Any, Any], shape: Sequence[int]) -> np.ndarray[Any, Any]:
    padded = (1,) * (constant.ndim - len(shape)) + tuple(shape)
    index = tuple(slice(0, 1) if s == 1 else slice(None) for s in padded)
    return constant[index].reshape(tuple(shape))


def _close(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    if a.shape != b.shape:
        return False
    scale = max(float(np.abs(b).max(initial=0.0)), 1e-30)
    return float(np.abs(a.astype(np.float64) - b).max(initial=0.0)) <= _FUSION_RTOL * scale


def _batch_norm_groups(values: StateValues, channels: int) -> list[tuple[str]]:
    groups = []
    for name in values.names():
        if not name.endswith(".running_mean") or values.shape(name) != (channels,):
            continue
        prefix = name[: -len(".running_mean")]
        if all(f"{prefix}.{leaf}" in values for leaf in ("weight", "bias", "running_var")):
            groups.append((prefix,))
    return groups


def _shared_prefix(name: str, scope: str) -> int:
    count = 0
    for a, b in zip(name.split("."), scope.split("."), strict=False):
        if a != b:
            break
        count += 1
    return count


def _listed_names(text: str | None) -> list[str]:
    """The names of a ``"['a', 'b']"`` metadata value (``[]`` for none or a bad one)."""
    if not text:
        return []
    try:
        names = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def mark_ties(graph: Graph, ties: Mapping[str, Sequence[str]]) -> None:
    """Record on each tied initializer its other torch names (:data:`TIED_NAMES`)."""
    for name, aliases in ties.items():
        if name in graph.values:
            graph.values[name].set_metadata(TIED_NAMES, repr(sorted(aliases)))


def _literal_arguments(node: Node) -> list[float]:
    """The number literals of the node's FX call (``..., 0.1, 1e-05)``)."""
    text = node.metadata.get("pkg.torch.onnx.fx_node", "")
    _, found, arguments = text.partition("](args = (")
    if not found:
        return []
    arguments = arguments.partition("), kwargs")[0]
    numbers = []
    for part in arguments.split(","):
        try:
            value = ast.literal_eval(part.strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers.append(float(value))
    return numbers


def _names(names: Iterable[str]) -> str:
    listed = [repr(n) for n in names]
    return ", ".join(listed[:4]) + (f" and {len(listed) - 4} more" if len(listed) > 4 else "")


# ============================================================ putting it back
def recompute(graph: Graph, fold: Fold, source: str | None = None) -> list[Node]:
    """Replace ``fold``'s initializer by nodes computing it from its source initializer.

    Args:
        graph: The graph holding the fold (as an initializer, or a name used but undefined).
        fold: A fold with a recipe.
        source: The initializer to compute from (default: ``fold.source``); it must exist.

    Returns:
        The nodes inserted (before the constant's first reader).

    Raises:
        ValueError: The fold has no recipe, or the source is no initializer.
    """
    if fold.recipe is None:
        raise ValueError(f"no recipe is known for {fold.name!r}")
    source = source or fold.source
    if source not in graph.initializers:
        raise ValueError(f"{source!r} is no initializer of the graph")
    nodes = fold.recipe.nodes(source, fold.name)
    for node in nodes:  # the small constants' names must be free
        if node.op_type == "Constant":
            node.set_outputs([_fresh(graph, node.outputs[0])])
    for node, reader in itertools.pairwise(nodes):
        if node.op_type == "Constant":
            reader.set_inputs([reader.inputs[0], node.outputs[0], *reader.inputs[2:]])
    if fold.name in graph.initializers:  # else undefined: the export was saved without it
        graph.remove_initializer(fold.name)
    value = graph.values[fold.name]
    value.set_metadata(FOLDED_FROM, None)
    for node in nodes:
        node.set_metadata(_TAG, f"computes the exporter's folded {fold.name!r} again "
                                f"({fold.evidence})")
    _insert_before_first_use(graph, fold.name, nodes)
    return nodes


def unfuse(graph: Graph, fused: FusedBatchNorm, names: Mapping[str, str] | None = None
           ) -> Node:
    """Turn the fused ``Conv`` back into ``Conv`` + ``BatchNormalization`` (torch's layers).

    The caller has set the initializers the layers read: the conv's weight (and bias) and
    the batch norm's scale, shift, mean and variance, under ``names`` (source -> initializer;
    default: the sources' own names). The fused weight's initializer, if named otherwise,
    and the fused bias are removed.

    Returns:
        The inserted ``BatchNormalization`` node.
    """
    names = dict(names or {})

    def name(source: str) -> str:
        return names.get(source, source)

    conv = fused.node
    output = conv.outputs[0]
    hidden = _fresh(graph, f"{output}__conv")
    conv_inputs = [conv.inputs[0], name(fused.conv_weight)]
    if fused.conv_bias is not None:
        conv_inputs.append(name(fused.conv_bias))
    batch_norm_metadata = dict(conv.metadata)
    conv.set_outputs([hidden, *conv.outputs[1:]])
    conv.set_inputs(conv_inputs)
    batch_norm = Node(
        "BatchNormalization",
        [hidden, name(fused.scale), name(fused.shift), name(fused.mean), name(fused.variance)],
        [output], name=f"{conv.name or 'conv'}__batch_norm",
        attributes={"epsilon": fused.epsilon, "momentum": 1.0 - fused.momentum},
        metadata={**batch_norm_metadata,
                  _TAG: f"the batch norm the exporter fused into {conv.name!r} ({fused.evidence})"})
    conv.set_metadata(_TAG, f"the convolution the exporter fused {batch_norm.name!r} into")
    graph.insert_after(conv, batch_norm)
    for leftover in (fused.weight, fused.bias):
        if leftover and leftover not in conv_inputs and leftover in graph.initializers \
                and not graph.is_used(leftover):
            graph.remove_initializer(leftover)
    return batch_norm


def mark_state(graph: Graph, name: str, kind: StateKind, placeholder: str | None) -> None:
    """Record on initializer ``name`` what torch says it is, as the exporter does."""
    value = graph.values[name]
    value.set_metadata(INPUT_KIND, {"parameter": "PARAMETER", "buffer": "BUFFER",
                                    "constant": "CONSTANT_TENSOR"}[kind])
    if placeholder:
        value.set_metadata(ORIGINAL_NAME, placeholder)


def _insert_before_first_use(graph: Graph, name: str, nodes: list[Node]) -> None:
    readers = {id(node) for node, _ in graph.uses(name) if node is not None}
    for node in graph:
        if id(node) in readers:
            graph.insert_before(node, nodes)
            return
    first = next(iter(graph), None)
    if first is None:
        graph.extend(nodes)
    else:
        graph.insert_before(first, nodes)


def _fresh(graph: Graph, name: str) -> str:
    candidate, number = name, 1
    while graph.is_defined(candidate) or graph.is_used(candidate):
        number += 1
        candidate = f"{name}{number}"
    return candidate
