"""What PyTorch's ONNX exporters record about model state, read without torch.

``torch.onnx.export(..., dynamo=True)`` (torch 2.13) writes:

* on the graph, ``pkg.torch.export.ExportedProgram.graph_signature``: one line per
  placeholder, ``p_blocks_0_norm_weight: PARAMETER target='blocks.0.norm.weight'``;
* in the ``metadata_props`` of each state tensor's ``value_info`` (or graph input),
  ``pkg.torch.export.graph_signature.InputSpec.kind`` (``PARAMETER``, ``BUFFER``,
  ``CONSTANT_TENSOR``, ``USER_INPUT``), ``...InputSpec.persistent`` and
  ``pkg.torch.onnx.original_node_name`` (its placeholder);
* on an initializer its optimizer computed from weights (a folded transpose),
  ``pkg.onnxscript.optimizer.folded_from = "['blocks.0.proj.0.weight']"``;
* on each node, ``pkg.torch.onnx.fx_node`` (the FX node it came from, whose
  arguments name the placeholders it reads, even after the optimizer merged
  identical initializers or the model was saved without its initializers) and
  ``pkg.torch.onnx.name_scopes`` (module path). torch.export names the placeholder of
  parameter ``a.b`` ``p_a_b``, of a buffer ``b_a_b``, of a tensor constant ``c_a_b``.

The legacy exporter (``dynamo=False``) records none of this, but names nodes by
module path: ``/transformer/blocks.0/proj/proj.0/MatMul``.

:func:`state_kinds` reads the record so that passes can tell parameters (what
training updates) from buffers and constants (what it must not), whatever the
export mode; the other functions read one piece of it each.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterable
from typing import Final, Literal, NamedTuple

import onnx

from graphpass.ir import Graph, Node

__all__ = [
    "CONSTANT_INPUTS",
    "FOLDED_FROM",
    "FX_NODE",
    "INPUT_KIND",
    "INPUT_PERSISTENT",
    "LEGACY_CONSTANT_NAME",
    "LIFTED_CONSTANT_NAME",
    "NAME_SCOPES",
    "NOT_SAVED",
    "ORIGINAL_NAME",
    "PREFIXED_LEGACY_CONSTANT_NAME",
    "SIGNATURE",
    "TIED_NAMES",
    "TRAINABLE_TYPES",
    "Placeholder",
    "StateKind",
    "default_trainable",
    "default_trainable_rules",
    "exporter_constant",
    "folded_from",
    "fx_arguments",
    "fx_operator",
    "fx_placeholders",
    "fx_target",
    "graph_signature",
    "input_spec_kind",
    "is_placeholder_name",
    "module_scope",
    "parameters_left_out",
    "placeholder_stem",
    "records_state",
    "signature_kinds",
    "signature_parameters",
    "state_kinds",
]

StateKind = Literal["parameter", "buffer", "constant", "input"]
"""What a tensor of a torch export is: a parameter, a buffer (persistent or not), a
constant (a tensor attribute, a lifted or folded constant), or a user input."""

TRAINABLE_TYPES: Final = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                    onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16})
"""Element types a trainer can compute gradients for."""

SIGNATURE: Final = "pkg.torch.export.ExportedProgram.graph_signature"
"""Graph metadata key: the placeholders and the state-dict names they stand for."""
INPUT_KIND: Final = "pkg.torch.export.graph_signature.InputSpec.kind"
"""Value metadata key: what torch says a graph input or weight is (``PARAMETER`` ...)."""
INPUT_PERSISTENT: Final = "pkg.torch.export.graph_signature.InputSpec.persistent"
"""Value metadata key: whether a buffer is persistent (``True``/``False``)."""
ORIGINAL_NAME: Final = "pkg.torch.onnx.original_node_name"
"""Value metadata key: the torch.export placeholder a weight came from."""
FOLDED_FROM: Final = "pkg.onnxscript.optimizer.folded_from"
"""Value metadata key: the values the onnxscript optimizer folded a constant from."""
FX_NODE: Final = "pkg.torch.onnx.fx_node"
"""Node metadata key: the FX node the ONNX node was exported from."""
NAME_SCOPES: Final = "pkg.torch.onnx.name_scopes"
"""Node metadata key: the module path of the node, as a list."""
TIED_NAMES: Final = "graphpass.torch.tied_names"
"""Value metadata key graphpass writes: the other torch names of a tied initializer, as a
Python list literal (``"['transformer.wte.weight']"``)."""

_SPEC_KINDS: Final[dict[str, StateKind]] = {
    "PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant",
    "USER_INPUT": "input"}
_PLACEHOLDER_KINDS: Final[dict[str, StateKind]] = {
    "p": "parameter", "b": "buffer", "c": "constant"}
_SIGNATURE_LINE: Final = re.compile(
    r"^\s*(\w+): (?:PARAMETER|BUFFER|CONSTANT_TENSOR) target='([^']+)'", re.MULTILINE)
_SIGNATURE_KIND: Final = re.compile(
    r"^\s*(\w+): (PARAMETER|BUFFER|CONSTANT_TENSOR) target='([^']+)'", re.MULTILINE)
_FX_ARGUMENT: Final = re.compile(r"%(\w+)")
_FX_REPEAT: Final = re.compile(r"_\d+$")
_EXPORTER_VALUE: Final = re.compile(r"val_\d+")
_FX_TARGET: Final = re.compile(r"target=(?:torch\.ops\.)?([\w.]+)\]")
_PLACEHOLDER: Final = re.compile(r"([pbc])_(\w+)")
_NOT_IN_PLACEHOLDER: Final = re.compile(r"[^0-9A-Za-z_]")


class Placeholder(NamedTuple):
    """A torch.export placeholder that an FX node reads.

    Attributes:
        name: The placeholder (``b_block_scale``).
        kind: What it stands for: ``parameter``, ``buffer`` or ``constant``.
        stem: The name without its prefix (``block_scale``); see :func:`placeholder_stem`.
    """

    name: str
    kind: StateKind
    stem: str


# ================================================================ value records
def input_spec_kind(metadata: dict[str, str]) -> StateKind | None:
    """What ``InputSpec.kind`` in a value's metadata says it is (``None``: nothing known)."""
    return _SPEC_KINDS.get(metadata.get(INPUT_KIND, ""))


def folded_from(metadata: dict[str, str]) -> tuple[str, ...]:
    """The weights an optimizer folded a value from (empty when not folded)."""
    text = metadata.get(FOLDED_FROM)
    if not text:
        return ()
    try:
        names = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return ()
    if isinstance(names, str):
        return (names,)
    if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
        return tuple(names)
    return ()


def fx_operator(name: str) -> str | None:
    """The torch operator an FX node of a record is named after (``None``: not an FX node).

    torch names each FX node after its operator and numbers repeats: ``permute_3`` is a
    ``permute``, ``_to_copy_1`` a ``_to_copy``, ``t`` a ``t``. ``val_12`` is a value that
    onnxscript made inside an operator's decomposition, not an FX node. The one reading of
    those names: every rule that asks what a folded FX node computed goes through it.
    """
    if _EXPORTER_VALUE.fullmatch(name):
        return None
    return _FX_REPEAT.sub("", name)


def graph_signature(graph: Graph) -> dict[str, str]:
    """Placeholder names and the state-dict names they stand for (dynamo exports)."""
    text = graph.metadata.get(SIGNATURE, "")
    return dict(_SIGNATURE_LINE.findall(text))


def signature_kinds(graph: Graph) -> dict[str, StateKind]:
    """What torch.export's graph signature says each state name is (dynamo exports).

    Every parameter, buffer and tensor constant of the exported module by its
    ``state_dict()`` name (with the export's module prefix), whether or not the ONNX
    graph still has an initializer of that name. Empty for other producers.
    """
    text = graph.metadata.get(SIGNATURE, "")
    return {target: _SPEC_KINDS[kind] for _, kind, target in _SIGNATURE_KIND.findall(text)}


def signature_parameters(graph: Graph) -> dict[str, str]:
    """The parameters torch.export's graph signature lists: state-dict name -> placeholder.

    Every parameter of the exported module, in signature order (tied parameters once,
    under the name torch.export chose), whether or not the ONNX graph still has it.
    """
    text = graph.metadata.get(SIGNATURE, "")
    return {target: placeholder for placeholder, kind, target in _SIGNATURE_KIND.findall(text)
            if kind == "PARAMETER"}


# ================================================================= node records
def fx_arguments(node: Node) -> tuple[str, ...]:
    """The FX values (``p_...`` placeholders, other nodes) the node's FX node reads."""
    text = node.metadata.get(FX_NODE, "")
    _, found, arguments = text.partition("](")
    return tuple(_FX_ARGUMENT.findall(arguments)) if found else ()


def fx_target(node: Node) -> str | None:
    """The operator of the node's FX node (``aten.linear.default``), if recorded."""
    match = _FX_TARGET.search(node.metadata.get(FX_NODE, ""))
    return match.group(1) if match else None


def is_placeholder_name(name: str) -> bool:
    """Whether an FX name looks like a torch.export state placeholder (``p_...``)."""
    return _PLACEHOLDER.fullmatch(name) is not None


def placeholder_stem(name: str) -> str:
    """The stem torch.export gives the placeholder of state ``name``: ``a.b`` -> ``a_b``."""
    return _NOT_IN_PLACEHOLDER.sub("_", name).lower()


def fx_placeholders(node: Node) -> list[Placeholder]:
    """The state placeholders (``%p_``, ``%b_``, ``%c_``) the node's FX node reads."""
    found: list[Placeholder] = []
    for argument in fx_arguments(node):
        match = _PLACEHOLDER.fullmatch(argument)
        if match is not None:
            found.append(Placeholder(argument, _PLACEHOLDER_KINDS[match.group(1)],
                                     match.group(2)))
    return found


def module_scope(node: Node) -> str | None:
    """The path of the module the node was exported from (``transformer.blocks.0.norm``).

    Read from ``pkg.torch.onnx.name_scopes`` (dynamo), whose last entry is the FX
    node, or from a legacy node name such as ``/transformer/blocks.0/proj/proj.0/MatMul``,
    where a container's child repeats the container's name (``proj`` then ``proj.0``).
    """
    text = node.metadata.get(NAME_SCOPES)
    if text:
        try:
            scopes = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            scopes = None
        if isinstance(scopes, list) and len(scopes) >= 2 and isinstance(scopes[-2], str):
            return scopes[-2] or None
        return None
    if not node.name.startswith("/"):
        return None
    parts = [part for part in node.name.split("/")[1:-1] if part]
    path: list[str] = []
    for part in parts:
        if path and part.startswith(path[-1] + "."):
            path[-1] = part
        else:
            path.append(part)
    return ".".join(path) or None


# ======================================================================= state
def state_kinds(graph: Graph) -> dict[str, StateKind]:
    """What torch's export record says each initializer or graph input of ``graph`` is.

    A value's own record (folded, or its ``InputSpec.kind``) comes first; a value
    whose record was dropped is known by the placeholder its consumers' FX nodes
    read. Names the record says nothing about are left out (models not exported by
    torch, or exported by the legacy exporter, which records nothing).
    """
    kinds: dict[str, StateKind] = {}
    names = list(dict.fromkeys([*graph.initializers, *graph.input_names]))
    values = graph.values
    signature = signature_kinds(graph)
    for name in names:
        value = values.get(name)
        metadata = value.metadata if value is not None else {}
        if FOLDED_FROM in metadata:
            kinds[name] = "constant"
        elif (kind := input_spec_kind(metadata)) is not None:
            kinds[name] = kind
        elif name in signature:  # the state name itself: torch's record of the source
            kinds[name] = signature[name]
    if len(kinds) == len(names):
        return kinds
    read = [(node, placeholder) for node in graph for placeholder in fx_placeholders(node)]
    if not read:  # not a torch export, or one without FX records: no stems to make
        return kinds
    stems = {placeholder_stem(name): name for name in names if name not in kinds}
    for node, placeholder in read:
        stem_of = stems.get(placeholder.stem)
        if stem_of is not None and stem_of in node.inputs and stem_of not in kinds:
            kinds[stem_of] = placeholder.kind
    return kinds


LEGACY_CONSTANT_NAME: Final = re.compile(r"onnx::[A-Za-z]+_\d+")
"""The names the legacy exporter gives constants it makes (``onnx::MatMul_303``,
``onnx::Div_12``): its constant folding's results, never a parameter, which it names
by ``state_dict()`` key."""


def records_state(graph: Graph) -> bool:
    """Whether ``graph`` carries torch's record of what its state is (dynamo exports).

    True when the graph has torch.export's graph signature, or some value of it the
    ``InputSpec.kind`` of a placeholder.
    """
    if SIGNATURE in graph.metadata:
        return True
    return any(INPUT_KIND in value.metadata for value in graph.values.values())


def default_trainable(graph: Graph) -> tuple[list[str], dict[str, StateKind]]:
    """The weights to train when the user names none.

    When torch's export record is there (:func:`records_state`), exactly the float
    initializers it says are parameters: buffers (a causal mask, rotary frequencies),
    tensor constants, folded constants and every constant the exporter or its optimizer
    made (lifted scalars, ``Pow`` exponents: named ``val_N``, no record of their own)
    are left out, as PyTorch never trains them. Without a record (other exporters, the
    legacy one, quantizers and other tools), every floating-point initializer except the
    constants :func:`exporter_constant` recognises (by their names' forms, or because
    only an exponent, a shape or the like reads them) and the running statistics of
    ``BatchNormalization`` (initializers read only as its inputs 3 and 4: buffers).
    :func:`default_trainable_rules` says which rule decided each.

    Returns:
        The trainable initializer names, in order, and the float initializers left
        out with what they are.
    """
    kinds = state_kinds(graph)
    only_parameters = records_state(graph)
    statistics = _running_statistics(graph)
    trainable: list[str] = []
    left_out: dict[str, StateKind] = {}
    for name, tensor in graph.initializers.items():
        if tensor.dtype not in TRAINABLE_TYPES:
            continue
        kind = kinds.get(name)
        if kind in ("buffer", "constant"):
            left_out[name] = kind
        elif kind is None and (only_parameters or exporter_constant(graph, name) is not None):
            left_out[name] = "constant"
        elif kind is None and name in statistics:
            left_out[name] = "buffer"
        else:
            trainable.append(name)
    return trainable, left_out


PREFIXED_LEGACY_CONSTANT_NAME: Final = re.compile(r".*[^A-Za-z0-9]onnx::[A-Za-z]+_\d+")
"""A legacy exporter's constant name under a prefix that a tool added: ``g_onnx::LSTM_352``
(``onnx.compose.merge_models(..., prefix2="g_")``), ``decoder/onnx::MatMul_12``."""

LIFTED_CONSTANT_NAME: Final = re.compile(r"(?:.*/)?[A-Za-z][A-Za-z0-9]*(?:_\d+)?_output_\d+")
"""The name the legacy exporter gives a node's output (``/Constant_output_0``,
``/encoder/Constant_12_output_0``, ``/lstm/Expand_1_output_0``) on an initializer: a value
that a tool lifted out of its ``Constant`` node, or computed once and stored (constant
folding: onnxruntime's optimizer, its quantizer's pre-processing, onnxscript's
optimizer). Parameters are named by their ``state_dict()`` keys, never so."""

CONSTANT_INPUTS: Final = {
    ("Pow", 1): "Pow's exponent",
    ("Reshape", 1): "Reshape's shape",
    ("Expand", 1): "Expand's shape",
    ("ConstantOfShape", 0): "ConstantOfShape's shape",
    ("Tile", 1): "Tile's repeats",
    ("Resize", 1): "Resize's region of interest",
    ("Resize", 2): "Resize's scales",
    ("Resize", 3): "Resize's sizes",
    ("Upsample", 1): "Upsample's scales",
    ("Range", 0): "a Range bound",
    ("Range", 1): "a Range bound",
    ("Range", 2): "a Range bound",
}
"""Inputs that hold a constant of the model's structure, never a weight: what reads an
initializer only there makes it a constant (:func:`exporter_constant`)."""


def exporter_constant(graph: Graph, name: str) -> str | None:
    """Why initializer ``name`` of a model without torch's record is a constant, in words.

    ``None`` when nothing says so. The rules, in order: a name of the legacy exporter's
    constants (:data:`LEGACY_CONSTANT_NAME`, with or without a prefix a tool added:
    :data:`PREFIXED_LEGACY_CONSTANT_NAME`), a node's output name
    (:data:`LIFTED_CONSTANT_NAME`: ``.../Constant_N_output_0``), and being read only where
    a constant goes (:data:`CONSTANT_INPUTS`: an exponent, a shape, scales).
    """
    if LEGACY_CONSTANT_NAME.fullmatch(name) or PREFIXED_LEGACY_CONSTANT_NAME.fullmatch(name):
        return "named like the legacy exporter's constants (onnx::Op_N)"
    if LIFTED_CONSTANT_NAME.fullmatch(name):
        return ("named like a node's output (.../Constant_N_output_0): a constant lifted or "
                "folded into an initializer")
    uses = graph.uses(name)
    roles = {CONSTANT_INPUTS.get((node.op_type, slot)) if node is not None
             and node.domain in ("", "ai.onnx") else None for node, slot in uses}
    if uses and None not in roles:
        return "read only as " + " and ".join(sorted(str(role) for role in roles))
    return None


def default_trainable_rules(graph: Graph) -> dict[str, str]:
    """Which rule of :func:`default_trainable` took or left out each float initializer.

    Returns:
        For every float initializer, the rule in words, to follow its name: ``"a
        parameter in torch's export record"``, ``"a BatchNormalization running statistic
        (read only as its mean or variance)"``, :func:`exporter_constant`'s reason, ``"a
        float initializer of a model without torch's export record"`` ...
    """
    trainable, left_out = default_trainable(graph)
    kinds = state_kinds(graph)
    recorded = records_state(graph)
    rules: dict[str, str] = {}
    for name in trainable:
        kind = kinds.get(name)
        rules[name] = (f"a {kind} in torch's export record" if kind is not None else
                       "a float initializer of a model without torch's export record")
    for name, left in left_out.items():
        kind = kinds.get(name)
        if kind is not None:
            rules[name] = f"a {kind} in torch's export record"
        elif recorded:
            rules[name] = "not in torch's export record: an exporter constant"
        elif left == "buffer":
            rules[name] = ("a BatchNormalization running statistic (read only as its mean "
                           "or variance)")
        else:
            rules[name] = exporter_constant(graph, name) or "an exporter constant"
    return rules


def _running_statistics(graph: Graph) -> set[str]:
    """Initializers every node reads only as ``BatchNormalization``'s mean or variance."""
    found: set[str] = set()
    if not any(node.op_type == "BatchNormalization" for node in graph):
        return found  # most models: no need to look at every initializer's uses
    for name in graph.initializers:
        uses = graph.uses(name)
        if uses and all(node is not None and node.op_type == "BatchNormalization"
                        and node.domain in ("", "ai.onnx") and slot in (3, 4)
                        for node, slot in uses):
            found.add(name)
    return found


NOT_SAVED: Final = "not saved with the model: it reads the name, nothing defines it"
"""Where :func:`parameters_left_out` says a parameter went that the file does not hold."""


def parameters_left_out(graph: Graph, trainable: Iterable[str]) -> dict[str, str]:
    """Torch parameters the model still computes with that ``trainable`` does not train.

    The worst failure of a training setup: the parameter "trains" and nothing of it moves.
    A parameter torch.export's signature lists is computed with when an initializer of
    its name is read, when a node's FX record reads its placeholder (it was fused into
    that node), or when an initializer was folded from it; a tied name (recorded under
    :data:`TIED_NAMES`) is the tensor of its initializer. Parameters the forward never
    used are not listed (torch gives them no gradient either).

    A parameter the model reads by its own name that nothing defines was not saved with
    the model (``ONNXProgram.save(..., include_initializers=False)``): its place says
    :data:`NOT_SAVED`.

    Returns:
        Each such parameter and where it went, in signature order.
    """
    chosen = set(trainable)
    tied: set[str] = set()
    folded: dict[str, str] = {}
    for name, value in graph.values.items():
        metadata = value.metadata
        if TIED_NAMES in metadata:
            with contextlib.suppress(ValueError, SyntaxError):
                tied.update(ast.literal_eval(metadata[TIED_NAMES]))
        for source in folded_from(metadata):
            folded.setdefault(source, name)
    readers: dict[str, str] = {}
    for node in graph:
        for read in fx_placeholders(node):
            readers.setdefault(read.name, node.name or node.op_type)
    found: dict[str, str] = {}
    undefined = set(graph.free_names)
    for target, placeholder in signature_parameters(graph).items():
        if target in chosen or target in tied:
            continue
        if target in graph.initializers:
            if graph.is_used(target):
                found[target] = "its initializer is left out of the trainable set"
        elif target in undefined:
            found[target] = NOT_SAVED
        elif target in folded:
            found[target] = f"the exporter folded it into {folded[target]!r}"
        elif placeholder in readers:
            found[target] = f"the exporter fused it into node {readers[placeholder]!r}"
    return found
