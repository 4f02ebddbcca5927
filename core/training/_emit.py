"""The emitter: how gradient builders append standard ONNX nodes to a graph.

An :class:`Emitter` appends nodes of the default ONNX domain at the graph's opset
(13 or later: reduction axes and ``Squeeze``/``Unsqueeze`` axes are inputs there,
so they can be computed at run time). It hands out fresh value names, makes
constants (one ``Constant`` node per distinct value), and offers the helpers most
builders need, above all :meth:`Emitter.sum_to`: reduce a broadcast gradient back to
an input's shape, with axes found statically when the shapes say enough and
computed at run time (``Shape``, ``Equal``, ``NonZero``, ``ReduceSum``) when they
do not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphpass.ir import Graph, Node, numpy_dtype
from graphpass.training._value_types import TypeInfo

__all__ = ["MIN_OPSET", "Emitter", "NameScope", "OutputNaming"]

MIN_OPSET = 13
"""The lowest ai.onnx opset graphpass writes backward nodes at."""

Axes = Sequence[int] | str | None

_BOOL_RESULT = frozenset({"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And",
                          "Or", "Not", "Xor", "IsNaN", "IsInf"})
_INT64_RESULT = frozenset({"Shape", "Size", "NonZero", "ArgMax", "ArgMin"})


class NameScope:
    """Fresh names that collide with nothing in a model."""

    def __init__(self, taken: Iterable[str] = ()):
        """Start with the names already used."""
        self._taken = set(taken)
        self._counters: dict[str, int] = {}

    def reserve(self, name: str) -> None:
        """Mark ``name`` as used."""
        self._taken.add(name)

    def is_taken(self, name: str) -> bool:
        """Whether ``name`` is used."""
        return name in self._taken

    def fresh(self, hint: str) -> str:
        """``hint`` if it is free, else ``hint_1``, ``hint_2`` ... (and mark it used)."""
        if hint not in self._taken:
            self._taken.add(hint)
            return hint
        count = self._counters.get(hint, 0)
        while True:
            count += 1
            candidate = f"{hint}_{count}"
            if candidate not in self._taken:
                self._counters[hint] = count
                self._taken.add(candidate)
                return candidate


def names_in(graph: Graph) -> set[str]:
    """Every value and node name of ``graph`` and its subgraphs."""
    names: set[str] = set(graph.values) | set(graph.initializers)
    for node in graph.walk():
        names.update(n for n in node.inputs if n)
        names.update(n for n in node.outputs if n)
        if node.name:
            names.add(node.name)
    return names


class Emitter:
    """Appends standard ONNX nodes to a graph (see the module docstring).

    Attributes:
        graph: The graph nodes go into.
        opset: The ai.onnx opset version of the model.
        prefix: Prepended to node and value names (the engine sets it per forward
            node, e.g. ``"/layer1/MatMul_grad"``).
        nodes: The nodes emitted so far, in order.
    """

    def __init__(self, graph: Graph, opset: int, names: NameScope,
                 type_of: Callable[[str], TypeInfo]):
        """Emit into ``graph`` at ai.onnx ``opset``, naming values from ``names``.

        ``type_of`` tells the types of the values the graph had before (forward values).
        """
        self.graph = graph
        self.opset = opset
        self.names = names
        self.prefix = "grad"
        self.nodes: list[Node] = []
        self._producers: dict[str, Node] = {}
        self._type_of = type_of
        self._types: dict[str, TypeInfo] = {}
        self._constants: dict[tuple[int, tuple[int, ...], bytes], str] = {}

    # ------------------------------------------------------------- basics
    def producer(self, name: str) -> Node | None:
        """The node this emitter emitted that computes ``name`` (``None``: not one of its own)."""
        return self._producers.get(name)

    def fresh(self, hint: str = "") -> str:
        """A fresh value name under the current prefix."""
        return self.names.fresh(f"{self.prefix}/{hint}" if hint else self.prefix)

    def op(self, op_type: str, *inputs: str, **attributes: Any) -> str:
        """Append an ``op_type`` node with one output and return the output's name.

        Args:
            op_type: A default-domain operator.
            *inputs: Input names (``""`` for an omitted optional input).
            **attributes: Attribute values (``None`` values are left out).
        """
        output = self.fresh(op_type)
        self.node(op_type, inputs, [output], **attributes)
        return output

    def ops(self, op_type: str, *inputs: str, count: int, **attributes: Any) -> list[str]:
        """Append an ``op_type`` node with ``count`` outputs and return their names."""
        outputs = [self.fresh(f"{op_type}.{i}") for i in range(count)]
        self.node(op_type, inputs, outputs, **attributes)
        return outputs

    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str],
             **attributes: Any) -> Node:
        """Append a node with the given output names."""
        values = {key: value for key, value in attributes.items() if value is not None}
        node = Node(op_type, list(inputs), list(outputs),
                    name=self.names.fresh(f"{self.prefix}/{op_type}"), attributes=values)
        self.graph.append(node)
        self.nodes.append(node)
        for name in outputs:
            if name:
                self._producers[name] = node
        elem_type = self._result_type(op_type, inputs, values)
        if elem_type is not None:
            for name in outputs:
                if name and name not in self._types:
                    self._types[name] = TypeInfo(elem_type)
        return node

    def _result_type(self, op_type: str, inputs: Sequence[str],
                     attributes: dict[str, Any]) -> int | None:
        """The element type of an emitted node's outputs, where it follows from its inputs."""
        if op_type in _BOOL_RESULT:
            return onnx.TensorProto.BOOL
        if op_type in _INT64_RESULT:
            return onnx.TensorProto.INT64
        if op_type == "Cast":
            return int(attributes["to"])
        if op_type == "ConstantOfShape":
            value = attributes.get("value")
            return int(value.data_type) if value is not None else onnx.TensorProto.FLOAT
        if op_type in ("Where", "CastLike"):
            return self.elem_type(inputs[1]) if len(inputs) > 1 and inputs[1] else None
        if op_type == "Constant":
            return None
        return self.elem_type(inputs[0]) if inputs and inputs[0] else None

    def type_of(self, name: str) -> TypeInfo:
        """What is known of a value's type (forward values, constants made here)."""
        known = self._types.get(name)
        return known if known is not None else self._type_of(name)

    def elem_type(self, name: str) -> int | None:
        """The element type of ``name``, if known."""
        return self.type_of(name).elem_type or None

    def note_type(self, name: str, info: TypeInfo) -> None:
        """Record what a builder knows of an emitted value's type."""
        self._types[name] = info

    # ---------------------------------------------------------- constants
    def constant(self, value: Any, dtype: int | None = None) -> str:
        """A ``Constant`` holding ``value`` (of ONNX element type ``dtype`` if given)."""
        array = np.asarray(value)
        if dtype is not None:
            array = array.astype(numpy_dtype(dtype))
        elem_type = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        key = (int(elem_type), tuple(array.shape), array.tobytes())
        found = self._constants.get(key)
        if found is not None:
            return found
        name = self.names.fresh("grad/const")
        tensor = numpy_helper.from_array(array, name)
        if tensor.data_type != elem_type:  # bfloat16, float8 ...: numpy_helper guesses
            tensor = onnx.helper.make_tensor(name, elem_type, array.shape, array.tobytes(),
                                             raw=True)
        saved, self.prefix = self.prefix, "grad/const"
        try:
            self.node("Constant", [], [name], value=tensor)
        finally:
            self.prefix = saved
        self._constants[key] = name
        self._types[name] = TypeInfo(int(elem_type), tuple(array.shape))
        return name

    def ints(self, values: Iterable[int]) -> str:
        """A 1-D ``int64`` constant."""
        return self.constant(np.array(list(values), dtype=np.int64))

    def scalar(self, value: float, like: str) -> str:
        """A 0-d constant of ``like``'s element type (``CastLike`` when it is unknown)."""
        elem_type = self.elem_type(like)
        if elem_type is not None:
            return self.constant(np.array(value), elem_type)
        return self.op("CastLike", self.constant(np.array(value, dtype=np.float32)), like)

    # ------------------------------------------------------------- shapes
    def shape(self, x: str, start: int | None = None, end: int | None = None) -> str:
        """``Shape(x)[start:end]`` (1-D ``int64``)."""
        if start is None and end is None:
            return self.op("Shape", x)
        if self.opset >= 15:
            return self.op("Shape", x, start=start, end=end)
        whole = self.op("Shape", x)
        return self.op("Slice", whole, self.ints([start or 0]),
                           self.ints([end if end is not None else 2**62]))

    def dims(self, x: str, start: int | None = None, end: int | None = None) -> str:
        """Like :meth:`shape`, but from the static shape when it is known."""
        static = self.type_of(x).static_shape
        if static is not None:
            return self.ints(static[start:end])
        return self.shape(x, start, end)

    def reshape(self, x: str, shape: str | Sequence[int]) -> str:
        """``Reshape(x, shape)`` (``shape`` a name or numbers)."""
        target = shape if isinstance(shape, str) else self.ints(shape)
        return self.op("Reshape", x, target)

    def reshape_like(self, x: str, like: str) -> str:
        """``x`` reshaped to ``like``'s shape (static when known; zero sizes kept)."""
        allow_zero = 1 if self.opset >= 14 else None
        return self.op("Reshape", x, self.dims(like), allowzero=allow_zero)

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        """``Transpose(x, perm)``; ``x`` itself when ``perm`` is the identity."""
        perm = [int(p) for p in perm]
        if perm == list(range(len(perm))):
            return x
        return self.op("Transpose", x, perm=perm)

    def unsqueeze(self, x: str, axes: Sequence[int] | str) -> str:
        """``Unsqueeze(x, axes)``."""
        return self.op("Unsqueeze", x, self._axes_input(axes))

    def squeeze(self, x: str, axes: Sequence[int] | str) -> str:
        """``Squeeze(x, axes)``."""
        return self.op("Squeeze", x, self._axes_input(axes))

    def _axes_input(self, axes: Sequence[int] | str) -> str:
        return axes if isinstance(axes, str) else self.ints(axes)

    # --------------------------------------------------------- reductions
    def reduce(self, op_type: str, x: str, axes: Axes, *, keepdims: bool = True) -> str:
        """``op_type`` (``ReduceSum``, ``ReduceMean`` ...) over ``axes``.

        ``axes=None`` reduces every axis; an empty list returns ``x`` unchanged. Axes
        go in as an input where the opset takes one (``ReduceSum`` from 13, the
        others from 18), else as an attribute (then they must be numbers).
        """
        if axes is not None and not isinstance(axes, str) and len(axes) == 0:
            return x
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        keep = int(keepdims)
        if axes is None:
            return self.op(op_type, x, keepdims=keep)
        if as_input:
            return self.op(op_type, x, self._axes_input(axes), keepdims=keep)
        if isinstance(axes, str):
            raise ValueError(f"{op_type} at opset {self.opset} takes static axes only")
        return self.op(op_type, x, axes=[int(a) for a in axes], keepdims=keep)

    def reduce_sum(self, x: str, axes: Axes, *, keepdims: bool = True) -> str:
        """``ReduceSum(x, axes)`` (see :meth:`reduce`)."""
        return self.reduce("ReduceSum", x, axes, keepdims=keepdims)

    def reduce_mean(self, x: str, axes: Axes, *, keepdims: bool = True) -> str:
        """``ReduceMean(x, axes)`` (see :meth:`reduce`)."""
        return self.reduce("ReduceMean", x, axes, keepdims=keepdims)

    def sum_to(self, grad: str, target: str, source: str | None = None, *,
               target_shape: Sequence[Any] | None = None,
               source_shape: Sequence[Any] | None = None) -> str:
        """Reduce a gradient of a broadcast result back to ``target``'s shape.

        Args:
            grad: The gradient, shaped like ``source`` (the broadcast result).
            target: The value whose gradient this becomes (a node's input).
            source: The value ``grad`` is shaped like (the node's output), for the
                static shape; ``None`` if unknown.
            target_shape: ``target``'s shape, when the builder knows it better.
            source_shape: ``grad``'s shape, when the builder knows it better.

        Returns:
            ``grad`` itself when no broadcasting happened; else the sum over the
            broadcast axes, reshaped to ``target``'s shape. The axes come from the
            static shapes when they decide it, and are computed at run time
            otherwise.
        """
        if target_shape is None:
            target_shape = self.type_of(target).shape
        if source_shape is None and source:
            source_shape = self.type_of(source).shape
        if target_shape is not None and source_shape is not None:
            static = _broadcast_axes(tuple(target_shape), tuple(source_shape))
            if static is not None:
                axes, lead = static
                if not axes:
                    return grad
                reduced = self.reduce_sum(grad, axes, keepdims=True)
                if lead:
                    reduced = self.squeeze(reduced, list(range(lead)))
                return reduced
        return self._sum_to_dynamic(grad, target, target_shape, source_shape)

    def _sum_to_dynamic(self, grad: str, target: str, target_shape: Any,
                        source_shape: Any) -> str:
        target_dims = self.shape(target)
        if target_shape is not None and source_shape is not None:
            lead = len(source_shape) - len(target_shape)
            padded = (self.op("Concat", self.ints([1] * lead), target_dims, axis=0)
                      if lead > 0 else target_dims)
        else:
            grad_rank = self.op("Size", self.shape(grad))
            target_rank = self.op("Size", target_dims)
            lead_count = self.op("Sub", grad_rank, target_rank)
            ones = self.op("ConstantOfShape", self.unsqueeze(lead_count, [0]),
                           value=numpy_helper.from_array(np.array([1], dtype=np.int64)))
            padded = self.op("Concat", ones, target_dims, axis=0)
        is_one = self.op("Equal", padded, self.ints([1]))
        axes = self.reshape(self.op("NonZero", is_one), [-1])
        reduced = self.op("ReduceSum", grad, axes, keepdims=1, noop_with_empty_axes=1)
        return self.reshape(reduced, target_dims)

    # ------------------------------------------------------------ values
    def cast_like(self, x: str, like: str) -> str:
        """``x`` in ``like``'s element type (``x`` itself when they already agree)."""
        x_type, like_type = self.elem_type(x), self.elem_type(like)
        if x_type is not None and x_type == like_type:
            return x
        if like_type is not None:
            return self.op("Cast", x, to=like_type)
        return self.op("CastLike", x, like)

    def zeros_like(self, x: str) -> str:
        """Zeros of ``x``'s shape and element type."""
        return self.filled_like(x, 0.0)

    def filled_like(self, x: str, value: float) -> str:
        """A tensor of ``x``'s shape and element type, every element ``value``."""
        return self.filled(self.dims(x), value, like=x)

    def filled(self, dims: str, value: float, like: str) -> str:
        """A tensor of shape ``dims`` (a 1-D ``int64`` value) and ``like``'s element type."""
        elem_type = self.elem_type(like)
        if elem_type is not None:
            fill = numpy_helper.from_array(np.array([value], dtype=numpy_dtype(elem_type)))
            if fill.data_type != elem_type:
                fill = onnx.helper.make_tensor("value", elem_type, [1], [value])
            return self.op("ConstantOfShape", dims, value=fill)
        filled = self.op("ConstantOfShape", dims,
                         value=numpy_helper.from_array(np.array([value], dtype=np.float32)))
        return self.op("CastLike", filled, like)

    def add_all(self, names: Sequence[str]) -> str:
        """The sum of ``names`` (the name itself for one).

        A term that scatter-adds into zeros (a ``Gather``'s gradient, as
        ``ScatterND(zeros, indices, updates, reduction="add")``) scatters into the sum of
        the other terms instead: a tied embedding's two gradients then need no zeros of
        the weight's size and no third buffer for the sum (the terms of one value's
        gradient are shaped like that value, so the sum has the zeros' shape).
        """
        if len(names) == 1:
            return names[0]
        for index, name in enumerate(names):
            node = self._producers.get(name)
            if node is None or node.op_type != "ScatterND" or \
                    node.attribute("reduction", "none") not in ("add", b"add"):
                continue
            zeros = self._producers.get(node.inputs[0])
            if zeros is None or not _zero_fill(zeros):
                continue
            rest = self.add_all([*names[:index], *names[index + 1:]])
            return self.op("ScatterND", rest, node.inputs[1], node.inputs[2], reduction="add")
        if len(names) == 2:
            return self.op("Add", *names)
        return self.op("Sum", *names)

    def where_positive(self, condition_of: str, grad: str, otherwise: str | None = None) -> str:
        """``grad`` where ``condition_of > 0``, else ``otherwise`` (zero).

        Without ``otherwise`` this is ``grad * (condition_of > 0)``: onnxruntime's CPU
        ``Where`` is about ten times slower than ``Cast`` and ``Mul`` (a ReLU's gradient
        is on every convolutional network's backward path).
        """
        positive = self.op("Greater", condition_of, self.scalar(0.0, like=condition_of))
        if otherwise is None:
            return self.masked(grad, positive)
        return self.op("Where", positive, grad, otherwise)

    def masked(self, grad: str, mask: str) -> str:
        """``grad`` where the boolean ``mask`` holds, else zero: ``grad * Cast(mask)``.

        onnxruntime's CPU ``Where`` runs on one thread, about ten times slower than
        ``Cast`` and ``Mul`` (on MobileNetV2 its 35 ``Clip`` gradients took 14% of a
        step as ``Where``).
        """
        return self.op("Mul", grad, self.cast_like(mask, grad))


class OutputNaming:
    """Gives computed values the names the contract asks for (``<weight>.new`` ...).

    A value is renamed when that is safe, else copied by an ``Identity``: renaming spares
    the runtime a copy per step, since the node computing a new weight then writes
    straight into the output buffer a runner binds.
    """

    def __init__(self, emit: Emitter):
        self.emit = emit
        self._renamed: dict[str, str] = {}

    def name(self, value: str, name: str) -> None:
        """Make ``name`` hold ``value``."""
        emit = self.emit
        graph = emit.graph
        current = self._renamed.get(value, value)
        found = graph.values.get(current)
        producer = found.producer if found is not None else None
        if (current == value and found is not None and producer is not None
                and producer.op_type != "Constant" and not found.is_graph_output
                and not found.is_graph_input and not found.is_initializer):
            info = emit.type_of(value)
            graph.rename_value(value, name)
            emit.note_type(name, info)
            self._renamed[value] = name
            return
        emit.node("Identity", [current], [name])


def _zero_fill(node: Node) -> bool:
    """Whether ``node`` is a ``ConstantOfShape`` of zeros."""
    if node.op_type != "ConstantOfShape":
        return False
    value = node.attribute("value")
    if value is None:
        return True  # the default fill is a float zero
    array = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else \
        np.asarray(value)
    return bool(array.size == 1 and not np.any(array))


def _broadcast_axes(target: tuple[Any, ...], source: tuple[Any, ...]
                    ) -> tuple[list[int], int] | None:
    """The axes of ``source`` to sum to get ``target``'s shape, and the leading count.

    ``None`` when the static shapes cannot decide (a dimension of ``target`` that is
    symbolic or unknown where ``source`` might be larger).
    """
    lead = len(source) - len(target)
    if lead < 0:
        return None
    axes = list(range(lead))
    for index, dim in enumerate(target):
        other = source[lead + index]
        if dim == 1:
            if other != 1:
                axes.append(lead + index)
            continue
        if isinstance(dim, int) and dim >= 0:
            if other == dim or other is None or isinstance(other, str):
                continue  # equal, or (when unknown) equal by broadcasting rules
            return None
        # A symbolic or unknown target dimension: only the same symbol decides it.
        if isinstance(dim, str) and dim and other == dim:
            continue
        return None
    return axes, lead
