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
the parameter itself is an initializer and trains as torch trains it. The legacy
exporter also merges distinct tensors that held equal values into one initializer
(``block2.ln.weight = Identity(block1.ln.weight)``): :func:`find_merges` finds them and
:func:`split_merges` gives each its own initializer again. The dynamo exporter's optimizer
merges folded constants of equal values (a fresh Mamba's ``-exp(A_log)`` of every layer):
:func:`find_merged_constants` finds them from the readers' FX records, and
:func:`split_merged_constants` gives each layer its own constant again, recorded as folded
from its own parameter.

How a recipe is established, most certain first (:attr:`Fold.evidence` says which):

* torch's records: a ``MatMul`` recorded as ``aten.linear`` of the parameter reads the
  transpose; a constant named after a ``permute`` FX node and folded from the parameter
  alone is its transpose; a fused ``Conv`` recorded as the batch norm names its
  parameters, buffers, momentum and epsilon; a fold of a ``weight_norm``
  parametrization's two tensors is ``g * v / ||v||`` (:class:`WeightNorm`); a fold of
  several tensors whose every element is a copy of one of theirs (a ``Concat`` of a
  transposed weight and another) is an index selection over them laid end to end
  (:class:`SelectSeveral`); a fold whose record names FX nodes of a few operators of fixed
  meaning (``linear``, a batch norm's standardization, ``div`` by a number) over the
  recorded parameters is that computation, evaluated over their values and mapped onto the
  constant by an index selection, up to float32 rounding (:class:`Computed`, ``_computed``);
* values, by two general rules (``_search``): every element of
  the constant is a copy of one element of the source (any chain of gathers, slices,
  transposes, reshapes, broadcasts and concatenations: the smallest equivalent shape op,
  else :class:`Select`), or it is ``a * op(source) + b`` per tensor or per channel
  (:class:`Affine`); the source's values are the file's own initializer, or the
  checkpoint's tensor when the checkpoint holds the values the export was made from.
  Repeated values are decided by the only shape op the values allow or by an index tensor
  recorded with the fold, else refused (:attr:`Fold.problem` names the ambiguity);
* the constant itself: a broadcast repeats one slice, which is the source; where neither
  the file nor a checkpoint gives the source's shape, a constant torch's record names an
  ``expand`` of one tensor alone shows it (each axis along which one slice repeats is
  broadcast; a constant of one repeated value shows nothing and is refused); the rows of a
  position table are the indices the same export computed from the same values, kept
  as an integer constant beside it.

Staleness is decided, not assumed: a fold is stale when the checkpoint gives its source
values from which the recipe computes something else (:meth:`Fold.stale`).
"""

from graphpass.torch.folding._computed import Computed
from graphpass.torch.folding._finder import (
    find_folds,
    find_merged_constants,
    find_merges,
    find_ties,
)
from graphpass.torch.folding._folds import (
    Fold,
    Folding,
    FusedBatchNorm,
    MergedConstant,
    UnrestorableParameters,
)
from graphpass.torch.folding._recipes import (
    Affine,
    Broadcast,
    Copy,
    Recipe,
    Reshape,
    Rows,
    Select,
    SelectSeveral,
    Transpose,
    WeightNorm,
)
from graphpass.torch.folding._rewrite import (
    mark_state,
    mark_ties,
    recompute,
    split_merged_constants,
    split_merges,
    unfuse,
)
from graphpass.torch.folding._search import shape_ops
from graphpass.torch.folding._values import StateValues

__all__ = [
    "Affine",
    "Broadcast",
    "Computed",
    "Copy",
    "Fold",
    "Folding",
    "FusedBatchNorm",
    "MergedConstant",
    "Recipe",
    "Reshape",
    "Rows",
    "Select",
    "SelectSeveral",
    "StateValues",
    "Transpose",
    "UnrestorableParameters",
    "WeightNorm",
    "find_folds",
    "find_merged_constants",
    "find_merges",
    "find_ties",
    "mark_state",
    "mark_ties",
    "recompute",
    "shape_ops",
    "split_merged_constants",
    "split_merges",
    "unfuse",
]
