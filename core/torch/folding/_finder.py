"""Finding what the exporter folded: torch's records first, then values, then the constants.

:func:`find_folds` is the analysis (see :mod:`graphpass.torch.folding` for the order of
evidence); :func:`find_ties` runs only its tie step; :func:`find_merges` finds the legacy
exporter's merges of distinct parameters that held equal values.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

import numpy as np
import onnx

from graphpass.ir import Graph, Node, Tensor
from graphpass.torch._export_record import (
    LEGACY_CONSTANT_NAME,
    TIED_NAMES,
    TRAINABLE_TYPES,
    folded_from,
    fx_arguments,
    fx_operator,
    fx_placeholders,
    fx_target,
    graph_signature,
    module_scope,
    records_state,
    signature_kinds,
)
from graphpass.torch.folding._computed import (
    FLOAT_COMPUTATIONS,
    IDENTITIES,
    ContractionFold,
    computed_recipe,
    contraction_output,
    contraction_recipes,
)
from graphpass.torch.folding._folds import Fold, Folding, FusedBatchNorm, MergedConstant
from graphpass.torch.folding._recipes import (
    Affine,
    Broadcast,
    Copy,
    Recipe,
    Reshape,
    Rows,
    SelectSeveral,
    Transpose,
    WeightNorm,
    broadcasts,
    close,
    first_slice,
    matching_source,
    nearest_rows,
)
from graphpass.torch.folding._search import locate, recipe_by_value, shape_ops
from graphpass.torch.folding._values import StateValues

__all__ = ["find_folds", "find_merges", "find_ties", "listed_names"]

_LINEAR: Final = "aten.linear.default"
_BATCH_NORM: Final = re.compile(r"aten\.(_native_batch_norm_legit_no_training|batch_norm|"
                                r"_native_batch_norm_legit|native_batch_norm)")
_WEIGHT_SLOTS: Final = {"MatMul": (1,), "Gemm": (1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2)}
_PERMUTES: Final = frozenset({"permute", "t", "transpose", "numpy_T"})
_PER_CHANNEL_OPS: Final = frozenset({"aten.group_norm.default", "aten.native_group_norm.default",
                                     "aten.instance_norm.default"})
"""aten operators whose every state argument (weight, bias, statistics) is 1-D, one value
per channel, by their schema."""
_PERMUTE_EVIDENCE: Final = ("torch's record: the constant is the FX node of a permute, folded "
                            "from the parameter alone")
_BROADCASTS: Final = frozenset({"expand", "expand_as", "broadcast_to"})
"""FX operators that copy their one input whole, repeating it only along axes of size 1 (and
new leading axes): a constant named so and folded from one tensor holds every element of
it. (``repeat`` is not one: it also tiles axes longer than 1, which the values cannot tell
from the parameter's own.)"""


def find_ties(graph: Graph) -> dict[str, list[str]]:
    """The tied parameters of ``graph``: initializer -> its other torch names.

    What earlier passes recorded (:data:`~graphpass.torch._export_record.TIED_NAMES`), and
    torch's record (see :class:`Folding`); without the values a checkpoint adds.
    """
    finder = _Finder(graph, StateValues.empty())
    if finder.kinds:
        finder._ties()
    else:
        for name in graph.initializers:
            for alias in listed_names(graph.values[name].metadata.get(TIED_NAMES)):
                finder._tie(name, alias)
    return finder.folding.ties


def find_merged_constants(graph: Graph) -> list[MergedConstant]:
    """Folded constants the exporter's optimizer merged because their values were equal.

    torch.export records, on each node, the FX node it came from and the FX values that
    reads; the optimizer names a folded constant after the FX node that computed it and
    records the parameters it was computed from. A node that reads a folded constant
    whose name is none of its FX arguments, while one FX argument of the same operator
    names no value of the graph, reads a constant merged into another of equal values:
    the one its record names is gone. Its parameter is then the one no record names: in
    the reader's module (or the nearest enclosing one), under the name the kept constant's
    parameter has in its own module (``layers.1.mixer.A_log`` for
    ``layers.0.mixer.A_log``), a parameter of the signature without an initializer or a
    record of its own.

    Returns:
        The merges found, one per FX value and parameter, in graph order; empty for a
        model without torch's record.
    """
    kinds = signature_kinds(graph)
    if not kinds:
        return []
    recorded: set[str] = set()
    for name in graph.initializers:
        recorded.update(folded_from(graph.values[name].metadata))
    orphans = {name for name, kind in kinds.items() if kind == "parameter"
               and name not in graph.initializers and name not in recorded}
    found: dict[tuple[str, str], MergedConstant] = {}
    for constant in graph.initializers:
        parameters = [s for s in folded_from(graph.values[constant].metadata)
                      if kinds.get(s) == "parameter"]
        if len(parameters) != 1 or fx_operator(constant) is None:
            continue
        replaces = parameters[0]
        module, _, attribute = replaces.rpartition(".")
        for node, slot in graph.uses(constant):
            arguments = fx_arguments(node) if node is not None else ()
            if not arguments or constant in arguments:
                continue
            absent = [a for a in arguments if not graph.is_defined(a)
                      and fx_operator(a) == fx_operator(constant)]
            scope = module_scope(node) if node is not None else None
            if len(absent) != 1 or scope is None or node is None:
                continue
            source = next((f"{m}.{attribute}" for m in _enclosing(scope)
                           if f"{m}.{attribute}" in orphans), None)
            if source is None or source == replaces or module in _enclosing(scope):
                continue
            key = (absent[0], source)
            merge = found.get(key)
            readers = (*(merge.readers if merge else ()), (node, slot))
            found[key] = MergedConstant(absent[0], constant, source, replaces, readers)
    return list(found.values())


def _enclosing(scope: str) -> list[str]:
    """``scope`` and the modules that enclose it, innermost first (``a.b.c``, ``a.b``, ``a``)."""
    parts = scope.split(".")
    return [".".join(parts[:end]) for end in range(len(parts), 0, -1)]


def find_merges(graph: Graph) -> dict[str, str]:
    """Distinct torch state the legacy exporter merged because it held equal values.

    Exporting in eval mode (its default), the legacy exporter (``dynamo=False``)
    deduplicates initializers *by value*: one initializer stays, and every other state
    tensor of equal values is written as ``Identity`` of it under its own ``state_dict()``
    key (a fresh model's LayerNorm weights are all ones and its biases all zeros, so
    ``block2.ln.weight = Identity(block1.ln.weight)``). A real tie never looks so: one
    ``Parameter`` object is exported once, under one name, and every use reads that
    initializer (a head tied to an embedding: no ``Identity``; exported in training mode
    the exporter deduplicates by storage, which gives no ``Identity`` either). So a named
    ``Identity`` from one torch name to another in a model without torch's record is
    two tensors torch trains apart.

    Returns:
        Each merged name (the ``Identity``'s output) -> the initializer it reads, in graph
        order; empty for a model with torch's record (:func:`records_state`).
    """
    if records_state(graph):
        return {}
    merges: dict[str, str] = {}
    for node in graph:
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or \
                len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        source, name = node.inputs[0], node.outputs[0]
        tensor = graph.initializers.get(source)
        if tensor is None or tensor.dtype not in TRAINABLE_TYPES or \
                name in graph.initializers or name.startswith("/") or "." not in name or \
                LEGACY_CONSTANT_NAME.fullmatch(name) or LEGACY_CONSTANT_NAME.fullmatch(source):
            continue
        merges[name] = source
    return merges


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
        self.folding.checkpoint_is_exported = self._checkpoint_is_exported
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

    @functools.cached_property
    def _checkpoint_is_exported(self) -> bool:
        """Whether the checkpoint holds the export's values.

        It does when it equals every parameter the file still holds, bit for bit, and gives
        every fold found so far its constant again (at least one of either): a checkpoint
        that changed a folded weight alone changes its copy.
        """
        compared = 0
        for name, kind in self.kinds.items():
            value = self._file_value(name) if kind == "parameter" else None
            equal = self.checkpoint.equals(name, value) if value is not None else None
            if equal is None:
                continue
            if not equal:
                return False
            compared += 1
        for fold in self.folding.folds.values():
            current = self._gives_constant(fold)
            if current is False:
                return False
            compared += current is True
        return compared > 0

    def _gives_constant(self, fold: Fold) -> bool | None:
        """Whether the checkpoint's values give ``fold``'s constant through its recipe.

        ``None`` where that is not known: no recipe, one found by nearness, or values missing.
        """
        tensor = self.initializers.get(fold.name)
        if fold.recipe is None or fold.inferred or fold.kind != "parameter" or tensor is None:
            return None
        names = (fold.source, *fold.recipe.reads)
        values = [v for v in map(self.checkpoint.value, names) if v is not None]
        if len(values) != len(names):
            return None
        constant = tensor.numpy()
        try:
            computed = fold.recipe.compute(*values)
        except (ValueError, IndexError):
            return None
        return computed.shape == constant.shape and fold.recipe.same_values(computed, constant)

    def _source_shape(self, name: str) -> tuple[int, ...] | None:
        tensor = self.initializers.get(name)
        if tensor is not None and name not in self.folding.fused:
            return tuple(int(d) for d in tensor.shape)
        return self.checkpoint.shape(name)

    # ------------------------------------------------------------- dynamo: records
    def _recorded_folds(self) -> None:
        contractions: list[tuple[Fold, Tensor]] = []
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
            if len(floats) == 2 and self._weight_norm(name, floats, recorded, tensor):
                continue
            if len(parameters) > 1 and self._selection_of_several(name, parameters, state,
                                                                  recorded, tensor):
                continue
            if len(parameters) > 1 and self._computed(
                    Fold(name, parameters[0], "parameter", recorded,
                         others=tuple(s for s in state if s != parameters[0])),
                    parameters, tensor):
                continue
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
            if fold.recipe is None and fold.kind == "parameter" and \
                    self._computed(fold, [source], tensor):
                continue
            if fold.recipe is None and fold.kind == "parameter" and tensor is not None and \
                    contraction_output(self._steps(fold)) is not None:
                contractions.append((fold, tensor))
                continue
            self._add(fold)
        self._contracted(contractions)

    def _weight_norm(self, name: str, sources: list[str], recorded: tuple[str, ...],
                     tensor: Tensor | None) -> bool:
        """Add ``name``'s fold if torch's record says it is a weight norm of ``sources``.

        ``torch.nn.utils.parametrizations.weight_norm`` keeps the magnitude ``g`` and the
        direction ``v`` as ``<module>.parametrizations.<weight>.original0`` and
        ``original1`` (its ``state_dict()`` names, which the export records); the weight
        is ``g * v / ||v||``, the norm over every axis but the one ``g`` keeps.
        """
        magnitude, direction = sorted(sources)
        prefix = magnitude.removesuffix(".original0")
        if not magnitude.endswith(".original0") or direction != f"{prefix}.original1" or \
                ".parametrizations." not in f".{prefix}":
            return False
        fold = Fold(name, direction, self.kinds.get(direction), recorded,
                    others=tuple(s for s in recorded if s != direction and self._is_state(s)))
        shapes = [self._source_shape(direction), self._source_shape(magnitude)]
        values = [self._file_value(direction), self._file_value(magnitude)]
        values = [v if v is not None else self.checkpoint.value(n)
                  for v, n in zip(values, (direction, magnitude), strict=True)]
        what = (f"the weight norm g * v / ||v|| of {magnitude!r} (g) and {direction!r} (v), "
                "as torch's parametrization names them")
        direction_shape, magnitude_shape = shapes
        if direction_shape is None or magnitude_shape is None:
            fold.problem = f"it is {what}, and {self._nowhere('them')}"
            self._add(fold)
            return True
        kept = [k for k, g in enumerate(magnitude_shape) if g != 1]  # the axis g keeps
        if kept and (len(kept) > 1 or len(magnitude_shape) != len(direction_shape)
                     or magnitude_shape[kept[0]] != direction_shape[kept[0]]):
            return False
        norm = WeightNorm(magnitude=magnitude, dim=kept[0] if kept else None,
                          rank=len(direction_shape))
        if tensor is None or values[0] is None or values[1] is None:
            fold.problem = (f"it is {what}, and the values of "
                            + ("the constant are not known (the file does not hold it)"
                               if tensor is None else f"g and v are not known "
                               f"({self._nowhere('them')})"))
            self._add(fold)
            return True
        constant = tensor.numpy()
        weight = norm.weight(values[0], values[1])
        for inner in shape_ops(weight.shape, constant.shape):
            if close(inner.compute(weight), constant):
                fold.recipe = WeightNorm(magnitude=magnitude, dim=norm.dim, inner=inner,
                                         rank=norm.rank)
                fold.evidence = (f"torch's record: folded from {what}; values: equals "
                                 f"{fold.recipe.describe(direction)}")
                self._add(fold)
                return True
        fold.problem = (f"it was folded from {what}, but no shape op of that weight gives "
                        "its values")
        self._add(fold)
        return True

    def _selection_of_several(self, name: str, sources: list[str], state: list[str],
                              recorded: tuple[str, ...], tensor: Tensor | None) -> bool:
        """Add ``name``'s fold if it is an index selection over several parameters.

        Every element of it is then a copy of one element of theirs (values from the file
        or the checkpoint): a ``Concat`` of several weights, each reshaped or transposed
        first (:class:`SelectSeveral`).

        Each element is located in the sources laid end to end (:func:`locate`); where one
        is not there, or several positions hold its value, or the constant is one repeated
        value (which tells nothing), nothing is added and the fold of several tensors is
        reported as before.
        """
        if tensor is None:
            return False
        values = []
        for source in sources:
            value = self._file_value(source)
            value = value if value is not None else self.checkpoint.value(source)
            if value is None:
                return False
            values.append(value)
        constant = tensor.numpy()
        if len({v.dtype for v in values} | {constant.dtype}) != 1:
            return False
        if constant.size > 1 and bool((constant == constant.reshape(-1)[0]).all()):
            return False
        pool = np.concatenate([np.ascontiguousarray(v).reshape(-1) for v in values])
        located = locate(constant, pool)
        if located is None or bool(located.ambiguous.any()):
            return False
        recipe = SelectSeveral(others=tuple(sources[1:]), indices=located.indices)
        fold = Fold(name, sources[0], self.kinds.get(sources[0]), recorded,
                    others=tuple(s for s in state if s != sources[0]), recipe=recipe,
                    evidence=f"values: equals {recipe.describe(sources[0])}")
        self._add(fold)
        return True

    def _computed(self, fold: Fold, parameters: list[str], tensor: Tensor | None) -> bool:
        """Add ``fold`` if it is a computation over ``parameters`` its record allows.

        torch's record names the FX nodes folded (``linear_1``, ``permute_3``, ``getitem``)
        and every parameter; :func:`computed_recipe` evaluates what those operators compute
        over the parameters' values (the file's or the checkpoint's) and maps the result
        onto the constant. Nothing is added when a value is unknown or no candidate gives
        the constant.
        """
        if tensor is None:
            return False
        values = {}
        for parameter in parameters:
            value = self._file_value(parameter)
            value = value if value is not None else self.checkpoint.value(parameter)
            if value is None:
                return False
            values[parameter] = value
        steps = self._steps(fold)
        found = computed_recipe(tensor.numpy(), values, steps)
        if found is None:
            return False
        source, recipe = found
        fold.others = tuple(dict.fromkeys(s for s in (fold.source, *fold.others)
                                          if s != source))
        fold.source, fold.kind, fold.recipe, fold.problem = source, "parameter", recipe, None
        fold.evidence = (f"torch's record: folded by the FX nodes {_names(steps)} from "
                         f"{_names(parameters)}; values: equals {recipe.describe(source)} "
                         f"within float32 rounding")
        self._add(fold)
        return True

    def _steps(self, fold: Fold) -> list[str]:
        """The FX nodes torch's record says ``fold`` was computed by, its own first."""
        return [fold.name, *(name for name in fold.recorded if not self._is_state(name)
                             and fx_operator(name) is not None)]

    def _exported_value(self, name: str) -> np.ndarray[Any, Any] | None:
        """The value state ``name`` had at export time, where that is known.

        The file's, or the checkpoint's when it equals every parameter the file still holds.
        """
        value = self._file_value(name)
        if value is None and self._checkpoint_is_exported:
            value = self.checkpoint.value(name)
        return value

    def _contracted(self, folds: list[tuple[Fold, Tensor]]) -> None:
        """Add ``folds``, each contracting its one parameter with a parameter-free table.

        Each gets the table the values determine (:func:`contraction_recipes`), if any.
        """
        systems = {}
        for fold, tensor in folds:
            value = self._exported_value(fold.source)
            constant = tensor.numpy()
            steps = self._steps(fold)
            if value is not None and value.dtype == constant.dtype:
                systems[fold.name] = ContractionFold(
                    constant, value, linear=any(fx_operator(s) == "linear" for s in steps),
                    direct=contraction_output(steps) == "direct")
        found = contraction_recipes(systems)
        for fold, _ in folds:
            recipe = found.recipes.get(fold.name)
            if fold.name in found.problems:
                fold.problem = found.problems[fold.name]
            elif fold.name not in systems and self.checkpoint.value(fold.source) is not None:
                fold.problem = ("it is a contraction of it with a table computed from no "
                                "parameter, which graphpass reads back from the constant and "
                                "the parameter's values at export time; the checkpoint "
                                "differs from the weights the file holds, so it does not "
                                "hold them")
            if recipe is not None:
                fold.kind, fold.recipe, fold.problem = "parameter", recipe, None
                what = "the output of the contraction" if systems[fold.name].direct else \
                    "a shape node of a contraction's output,"
                fold.evidence = (
                    f"torch's record: {what} FX node {fold.name!r}, folded from "
                    f"{fold.source!r} and nodes of no parameter ({_names(self._steps(fold)[1:])}"
                    f"); values: equals {recipe.describe(fold.source)} within float32 rounding")
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
            if shape is not None and self._recorded_permute(fold, shape):
                fold.recipe, fold.evidence = Transpose((1, 0)), _PERMUTE_EVIDENCE
                return
            fold.problem = ("the file does not hold it (the export was saved without its "
                            "weights), so it cannot be compared with the source")
            return
        constant = tensor.numpy()
        ambiguity = None
        for where, values in (("the file", self._file_value(fold.source)),
                              ("the checkpoint", self.checkpoint.value(fold.source))):
            if values is None:
                continue
            found = recipe_by_value(constant, values, rows_read=self._rows_read(fold))
            if isinstance(found.recipe, Affine) and not fold.others and \
                    (found.recipe.scale.size > 1 or found.recipe.offset.size > 1):
                fold.problem = (
                    f"its values are {found.recipe.describe(fold.source)} of {where}, a scale "
                    "or offset per channel that no other state tensor recorded with the fold "
                    "holds: computed from the weight itself (a weight standardization: "
                    "(w - mean) / std per channel), it would be differentiated as constants "
                    "and give wrong gradients")
                return
            if found.recipe is not None:
                fold.recipe, fold.inferred = found.recipe, found.inferred
                fold.evidence = (f"values: equals {found.recipe.describe(fold.source)} of "
                                 f"{where}" + (f" ({found.how})" if found.how else ""))
                return
            ambiguity = ambiguity or found.problem
        if ambiguity is not None:
            fold.problem = ambiguity
            return
        computing = sorted({operator for operator in map(fx_operator, self._steps(fold))
                            if operator in FLOAT_COMPUTATIONS})
        if computing:  # what follows reads a selection of the source from the constant
            fold.problem = (f"torch's record says it was computed ({', '.join(computing)}), "
                            "not only selected, and "
                            + self._unknown(fold, constant, source_shape))
            return
        if source_shape is None:
            recorded = self._recorded_shape(fold, tuple(constant.shape))
            if recorded is not None:
                shape_of, how = recorded
                fold.recipe = Reshape(tuple(constant.shape), shape_of) \
                    if shape_of != tuple(constant.shape) else Copy()
                fold.evidence = (f"torch's record: {how}, so the parameter is the constant "
                                 f"in shape {list(shape_of)}, its elements in order")
                return
        if source_shape is None and self._recorded_broadcast(fold):
            read, text = _broadcast_read_back(constant)
            if read is None:
                fold.problem = f"{text}; {self._nowhere(repr(fold.source))}"
                return
            fold.recipe = read
            fold.evidence = (f"torch's record: the constant is the FX node {fold.name!r} (a "
                             "broadcast of its input), folded from the parameter alone; "
                             f"values: {text}")
            return
        recipe, evidence = self._recipe_from_constant(fold, constant, source_shape)
        if recipe is not None:
            fold.recipe, fold.evidence = recipe, evidence
            return
        changed = self.checkpoint.value(fold.source)
        indices = nearest_rows(constant, changed) if changed is not None else None
        if indices is not None:
            fold.recipe, fold.inferred = Rows(indices=indices), True
            fold.evidence = (f"nearness: each row of it is far nearer one row of the "
                             f"checkpoint's {fold.source!r} than any other (a table the "
                             "checkpoint changed a little, as fine-tuning does)")
            return
        fold.problem = self._unknown(fold, constant, source_shape)

    def _recorded_shape(self, fold: Fold, shape: tuple[int, ...]
                        ) -> tuple[tuple[int, ...], str] | None:
        """The source's shape from torch's records, where neither file nor checkpoint has it.

        Two records say how many axes of size 1 the exporter added to a parameter, and
        nothing else (so the constant holds the parameter's elements in order):

        * every FX node the fold records, its own first, is an ``unsqueeze``
          (``w.unsqueeze(-1).unsqueeze(-1)``, a layer scale), which adds one axis of size 1,
          or returns its input (:data:`IDENTITIES`: ``w[:, :n]`` over a whole axis is an
          ``alias``);
        * every reader of the fold is recorded as an aten operator whose state arguments
          are one value per channel by its schema (``aten.group_norm``: weight and bias
          are 1-D), reading the parameter itself, and the fold records nothing but the
          parameter and values made inside that operator's decomposition (``val_N``): the
          parameter is 1-D, unsqueezed to broadcast.

        Returns:
            The shape (the constant's less as many axes of size 1, where that is one
            shape) and how it was found, or ``None``.
        """
        others = [name for name in fold.recorded if name != fold.source]
        steps = [name for name in (fold.name, *others) if fx_operator(name) is not None]
        rank: int | None = None
        how = ""
        operators = [fx_operator(step) for step in steps]
        if steps and all(o == "unsqueeze" or o in IDENTITIES for o in operators):
            added = operators.count("unsqueeze")
            rank = len(shape) - added
            how = (f"folded by the FX nodes {', '.join(steps)} of the parameter alone, which "
                   f"add {added} axes of size 1 and keep its elements in order")
        elif not steps:  # made inside one operator's decomposition
            placeholder = self.placeholders.get(fold.source)
            readers = [node for node, _ in self.graph.uses(fold.name)]
            targets = {fx_target(node) for node in readers if node is not None}
            if placeholder is not None and readers and len(targets) == 1 and \
                    targets <= _PER_CHANNEL_OPS and all(
                        node is not None and placeholder in fx_arguments(node)
                        for node in readers):
                rank = 1
                how = (f"read only by {next(iter(targets))}, whose state arguments are one "
                       "value per channel (1-D), and folded inside its decomposition")
        if rank is None:
            return None
        found = _without_unit_axes(shape, rank)
        return (found, how) if found is not None else None

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
        if source_shape is not None and broadcasts(source_shape, constant.shape) and \
                constant.shape != source_shape:
            first = first_slice(constant, source_shape)
            if np.array_equal(np.broadcast_to(first, constant.shape), constant):
                return (Broadcast(tuple(constant.shape)),
                        "the constant repeats one slice of the source's shape")
        if self._transposed_weight(fold.name, constant.shape, source_shape):
            return (Transpose((1, 0)), "its shape is the source's transposed, and only MatMul "
                                       "reads it, as its weight")
        if self._recorded_permute(fold, constant.shape) and (
                source_shape is None or source_shape == constant.shape[::-1]):
            return Transpose((1, 0)), _PERMUTE_EVIDENCE
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

    def _recorded_permute(self, fold: Fold, shape: Sequence[int]) -> bool:
        """Whether torch's record says the matrix is one permute of its source alone.

        The optimizer names a folded constant after the last FX node it folded and records
        every value it folded from: ``permute`` (``W.T``, ``W.permute(1, 0)``) folded from
        the parameter and nothing else is the source transposed, square or not.
        """
        return len(shape) == 2 and fold.recorded == (fold.source,) and \
            fx_operator(fold.name) in _PERMUTES

    def _recorded_broadcast(self, fold: Fold) -> bool:
        """Whether torch's record says the constant is one expand of its source alone.

        The optimizer names a folded constant after the last FX node it folded and records
        every value it folded from: ``expand`` (``cls_token.expand(batch, -1, -1)``, its
        sizes the exporter's own constants) folded from one state tensor and no other.
        """
        return fold.source in fold.recorded and not fold.others and \
            fx_operator(fold.name) in _BROADCASTS

    def _rows_read(self, fold: Fold) -> np.ndarray[Any, Any] | None:
        """The rows the integer state recorded with ``fold`` reads (an index buffer), if any."""
        found = []
        for name in fold.others:
            values = self._file_value(name)
            if values is None:
                values = self.checkpoint.value(name)
            if values is not None and values.dtype.kind in "iu":
                found.append(values.reshape(-1).astype(np.int64))
        return np.concatenate(found) if found else None

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
            return self._nowhere(repr(fold.source))
        computed = f"{fold.source!r}" + (f" and {_names(fold.others)}" if fold.others else "")
        return (f"its values are neither copies of elements of {computed} (a selection: "
                "gathers, slices, transposes, reshapes, broadcasts, concatenations) nor a "
                f"scaling or offset of a shape op of it ({list(constant.shape)} from "
                f"{list(source_shape)})")

    def _nowhere(self, what: str) -> str:
        """``the file does not hold 'w' (and no checkpoint is given)``, or with one given."""
        if self.checkpoint.names():
            return f"neither the file nor the checkpoint holds {what}"
        return f"the file does not hold {what}, and no checkpoint is given"

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
            for alias in listed_names(self.graph.values[name].metadata.get(TIED_NAMES)):
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
            bias = conv.inputs[2] if conv is not None and len(conv.inputs) > 2 else ""
            if bias in biases and self.folding.folds[name].recipe is None:
                self._add(Fold(bias, bias, None, problem=(
                    f"the bias of a convolution whose weight {name!r} was folded too, such as "
                    "a batch norm fused in makes it")))
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
            found = matching_source(constant, values)
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
        return self._nearest_fusion(weight, near) or \
            self._partial_fusion(node, weight, bias, candidates, scope)

    def _partial_fusion(self, node: Node, weight: str, bias: str, candidates: list[str],
                        scope: str) -> bool:
        """A fusion the checkpoint holds only in part: its conv weight and some batch norm keys.

        Fusing scales each output channel of the conv weight by ``gamma / sigma``, so the
        conv weight whose every channel is a multiple of the fused weight's is its source,
        whatever the batch norm's keys the checkpoint lacks. A batch norm of the checkpoint
        with a running statistic of that many channels and some of its four tensors missing
        is the one fused in when it is the only one the present values do not contradict.
        The fusion found names the missing tensors (:attr:`FusedBatchNorm.sources`), so
        that the slot is refused naming them rather than filled with a raw tensor.
        """
        fused_weight = self.initializers[weight].numpy().astype(np.float64)
        channels = fused_weight.shape[0]
        leaves = ("weight", "bias", "running_mean", "running_var")
        prefixes = sorted({name.rpartition(".")[0] for name in self.checkpoint.names()
                           if name.endswith((".running_mean", ".running_var"))
                           and self.checkpoint.shape(name) == (channels,)},
                          key=lambda prefix: -_shared_prefix(prefix, scope))
        partial = [p for p in prefixes
                   if not all(f"{p}.{leaf}" in self.checkpoint for leaf in leaves)]
        found: list[FusedBatchNorm] = []
        for conv_weight in candidates:
            factor = _channel_factor(fused_weight, self.checkpoint.value(conv_weight))
            if factor is None:
                continue
            module = conv_weight.rpartition(".")[0]
            conv_bias = f"{module}.bias" if f"{module}.bias" in self.checkpoint else None
            for prefix in partial:
                fused = FusedBatchNorm(
                    node, weight, bias, conv_weight, conv_bias, f"{prefix}.weight",
                    f"{prefix}.bias", f"{prefix}.running_mean", f"{prefix}.running_var",
                    epsilon=1e-5, momentum=0.1, evidence=(
                        f"values: every output channel of {weight!r} is a multiple of the "
                        f"checkpoint's {conv_weight!r}, as a batch norm fused in makes it; the "
                        f"checkpoint lacks part of the batch norm {prefix!r}"))
                if self._contradicts(fused, factor):
                    continue
                found.append(fused)
        if len(found) != 1:
            return False
        self.folding.fused[weight] = found[0]
        return True

    def _contradicts(self, fused: FusedBatchNorm, factor: np.ndarray[Any, Any]) -> bool:
        """Whether the batch norm tensors the checkpoint has rule out ``fused``."""
        scale, variance = self.checkpoint.value(fused.scale), self.checkpoint.value(fused.variance)
        if scale is not None and variance is not None:
            return not any(close(factor, scale.astype(np.float64) / np.sqrt(
                variance.astype(np.float64) + epsilon)) for epsilon in (1e-5, 1e-3))
        return False

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


def _broadcast_read_back(constant: np.ndarray[Any, Any]) -> tuple[Recipe | None, str]:
    """The source of an expand read back from the constant, when its values show its shape.

    ``expand`` keeps every element of its source and repeats it along the source's axes
    of size 1 (and new leading axes), so each axis along which the constant repeats one
    slice is one torch broadcast, and every other axis is the source's own: the source is
    the constant's first slice along the repeated axes (:class:`Broadcast`, or the
    constant itself, :class:`Copy`, when none repeats). The export does not record the
    parameter's shape, so it is taken with the constant's rank, each repeated axis 1 (torch's
    may lack leading axes of size 1: the same values and gradients). A constant of one
    repeated value shows nothing (any of its axes may be broadcast), nor does an axis a
    parameter repeats by construction: those are what the values cannot tell apart.

    Returns:
        The recipe and how its shape was read, or ``None`` and why it cannot be.
    """
    if constant.size > 1 and bool((constant == constant.reshape(-1)[0]).all()):
        return None, (f"it holds one value {constant.size} times, which does not show the "
                      "parameter's shape (which axes the expand repeated), and the export "
                      "does not record it")
    shape = tuple(int(d) for d in constant.shape)
    repeated = [axis for axis, size in enumerate(shape) if size > 1 and np.array_equal(
        np.broadcast_to(np.take(constant, [0], axis=axis), shape), constant)]
    if not repeated:
        return Copy(), (f"no axis of it repeats, so it is the parameter itself, of shape "
                        f"{list(shape)}")
    source = tuple(1 if axis in repeated else size for axis, size in enumerate(shape))
    axes = ", ".join(str(axis) for axis in repeated)
    return Broadcast(shape, source=source), (
        f"it repeats one slice along axis {axes}, which is the parameter, of shape "
        f"{list(source)} (its shape is not recorded: the constant's rank, each repeated "
        "axis 1)")


def _without_unit_axes(shape: tuple[int, ...], rank: int) -> tuple[int, ...] | None:
    """``shape`` less axes of size 1 down to ``rank`` axes, where every choice gives one shape."""
    ones = [k for k, size in enumerate(shape) if size == 1]
    drop = len(shape) - rank
    if rank < 0 or drop < 0 or drop > len(ones):
        return None
    found = {tuple(size for k, size in enumerate(shape) if k not in chosen)
             for chosen in itertools.combinations(ones, drop)}
    return found.pop() if len(found) == 1 else None


def _batch_norm_groups(values: StateValues, channels: int) -> list[tuple[str]]:
    groups = []
    for name in values.names():
        if not name.endswith(".running_mean") or values.shape(name) != (channels,):
            continue
        prefix = name[: -len(".running_mean")]
        if all(f"{prefix}.{leaf}" in values for leaf in ("weight", "bias", "running_var")):
            groups.append((prefix,))
    return groups


def _channel_factor(fused: np.ndarray[Any, Any], weight: np.ndarray[Any, Any] | None
                    ) -> np.ndarray[Any, Any] | None:
    """The factor of each output channel with ``fused == weight * factor``, if there is one."""
    if weight is None or weight.shape != fused.shape or weight.dtype.kind != "f":
        return None
    rows = weight.reshape(weight.shape[0], -1).astype(np.float64)
    wanted = fused.reshape(fused.shape[0], -1)
    largest = np.abs(rows).argmax(axis=1)
    pivot = rows[np.arange(rows.shape[0]), largest]
    if rows.shape[1] < 2 or bool((pivot == 0).any()):
        return None  # one value a channel: any factor fits, which proves nothing
    factor: np.ndarray[Any, Any] = wanted[np.arange(rows.shape[0]), largest] / pivot
    if not close(rows * factor[:, None], wanted):
        return None
    return factor


def _shared_prefix(name: str, scope: str) -> int:
    count = 0
    for a, b in zip(name.split("."), scope.split("."), strict=False):
        if a != b:
            break
        count += 1
    return count


def listed_names(text: str | None) -> list[str]:
    """The names of a ``"['a', 'b']"`` metadata value (``[]`` for none or a bad one)."""
    if not text:
        return []
    try:
        names = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


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
