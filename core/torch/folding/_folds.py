"""What was folded: :class:`Fold`, :class:`FusedBatchNorm` and a graph's :class:`Folding`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphpass.ir import Graph, Node
from graphpass.torch._export_record import StateKind
from graphpass.torch.folding._recipes import Recipe, close

__all__ = ["Fold", "Folding", "FusedBatchNorm", "MergedConstant", "UnrestorableParameters"]


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

    def stale(self, source: np.ndarray[Any, Any], constant: np.ndarray[Any, Any],
              *others: np.ndarray[Any, Any]) -> bool:
        """Whether ``source`` (a checkpoint's values) makes the constant differ from the file's.

        ``others``: the values of the recipe's further state (:attr:`Recipe.reads`).

        Raises:
            ValueError: No recipe is known (staleness cannot be decided from the constant).
        """
        if self.recipe is None:
            raise ValueError(f"no recipe is known for {self.name!r}")
        return not self.recipe.same_values(self.recipe.compute(source, *others), constant)


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
        if not close(weight, graph.initializers[self.weight].numpy()):
            return False
        return self.bias is None or close(bias, graph.initializers[self.bias].numpy())

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
        checkpoint_is_exported: Whether the checkpoint given holds the export's own values:
            it equals, bit for bit, every parameter the file still holds (at least one).
            The constants folded from its state are then the export's for it.
    """

    folds: dict[str, Fold] = field(default_factory=dict)
    fused: dict[str, FusedBatchNorm] = field(default_factory=dict)
    ties: dict[str, list[str]] = field(default_factory=dict)
    checkpoint_is_exported: bool = False

    def parameter_folds(self) -> list[Fold]:
        """The folds whose source torch trains (or may train: unrecorded)."""
        return [fold for fold in self.folds.values() if fold.is_parameter]

    def sources(self) -> set[str]:
        """Every state name some fold or fusion was computed from."""
        found = {fold.source for fold in self.folds.values()}
        for fused in self.fused.values():
            found.update(fused.sources)
        return found


@dataclass(frozen=True)
class MergedConstant:
    """A folded constant the exporter's optimizer merged into another of equal values.

    Two parameters of equal values (a fresh Mamba's ``A_log`` in every layer) give equal
    folded constants, and the optimizer keeps one: the other layer's nodes read the first
    layer's constant, whose record names the first layer's parameter only
    (:func:`~graphpass.torch.folding.find_merged_constants`).

    Attributes:
        name: The FX value the readers' records say they read (``unsqueeze_21``).
        constant: The initializer they read instead (``unsqueeze_3``).
        source: The parameter ``name`` was folded from, by its torch name
            (``model.backbone.layers.1.mixer.A_log``): in the readers' module, named as
            ``replaces`` is in its own, and recorded nowhere else.
        replaces: The parameter ``constant``'s record names (``...layers.0.mixer.A_log``).
        readers: The node inputs that read ``constant`` in place of ``name``:
            ``(node, slot)``.
    """

    name: str
    constant: str
    source: str
    replaces: str
    readers: tuple[tuple[Node, int], ...]


@dataclass(frozen=True)
class UnrestorableParameters:
    """Torch parameters the model computes with that no pass could restore: an analysis.

    ``restore-parameters`` gives it (and reports them, ``GP251``); ``lint-gradients``
    asks for it so as not to report the same parameters again (``GP426``).

    Attributes:
        names: The parameters, by their torch names.
    """

    names: frozenset[str] = frozenset()
