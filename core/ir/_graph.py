"""Graphs: nodes in order, the values between them, and a networkx view of both.

A :class:`Graph` offers a ``networkx.MultiDiGraph`` (:attr:`Graph.nx`) whose nodes
are the graph's :class:`~graphpass.Node` objects and whose edges are the uses of
values: one edge from a value's producer to each consuming node, keyed by
``(value name, input slot)``. A node that uses a value only inside one of its
subgraphs gets an edge too, with slot :data:`~graphpass.ir.CAPTURE`, so
reachability questions can be answered with plain networkx algorithms. The graph
itself keeps its structure in its values (each knows its producer and its uses);
the networkx view is built from them in bulk the first time someone asks for it,
and from then on kept up to date with every change.

Nodes keep the order they were loaded or inserted in (a linked list), so an
unchanged model round-trips exactly; :meth:`Graph.topological_order` and
:meth:`Graph.sort` give or restore a valid execution order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import onnx

from graphpass.errors import CycleError, InvalidModelError
from graphpass.ir._clone import clone_graph
from graphpass.ir._describe import describe_node
from graphpass.ir._metadata import LazyMetadata
from graphpass.ir._tensor import Tensor
from graphpass.ir._value import CAPTURE, Use, Value

if TYPE_CHECKING:
    import networkx

    # Nodes hold attributes, which hold graphs: at run time the graph needs no Node.
    from graphpass.ir._function import Function
    from graphpass.ir._model import Model
    from graphpass.ir._node import Node

__all__ = ["Graph"]

_FEW_USES = 8
"""A value keeps its uses in a list up to this many, then in a dict (see ``Value._uses``)."""


class Graph(LazyMetadata):
    """A computation graph: the main graph, a function body, or a subgraph.

    Attributes:
        name: The graph name.
        doc_string: The graph's doc string.
    """

    def __init__(
        self,
        name: str = "",
        *,
        inputs: Sequence[str | onnx.ValueInfoProto] = (),
        outputs: Sequence[str | onnx.ValueInfoProto] = (),
        nodes: Iterable[Node] = (),
        initializers: Iterable[Tensor] = (),
        doc_string: str = "",
    ):
        """Create a graph.

        Args:
            name: The graph name.
            inputs: Input names, or ``ValueInfoProto`` declarations.
            outputs: Output names, or ``ValueInfoProto`` declarations.
            nodes: Nodes to append, in order.
            initializers: Initializer tensors.
            doc_string: The doc string.
        """
        self._name = name
        self._doc_string = doc_string
        self._values: dict[str, Value] = {}
        self._inputs: list[Value] = []
        self._input_names: dict[str, int] = {}
        self._outputs: list[Value] = []
        self._value_info: list[Value] = []
        self._initializers: dict[str, Tensor] = {}
        self._sparse_initializers: dict[str, onnx.SparseTensorProto] = {}
        self._free: dict[str, int] = {}
        self._nx: networkx.MultiDiGraph | None = None  # built on first use (see ``nx``)
        self._head: Node | None = None
        self._tail: Node | None = None
        self._count = 0
        self._parent: Node | None = None
        self._model: Model | None = None
        self._function: Function | None = None
        self._version = 0
        self._metadata: dict[str, str] | None = None
        self._metadata_proto: Any = None
        self._extra: dict[str, Any] | None = None
        self._present_empty: frozenset[str] = frozenset()
        # ``(root, root version)`` when the nodes were last known to be in topological
        # order (see _known_sorted): checking order is a walk over every node.
        self._sorted_at: tuple[Graph, int] | None = None
        for item in inputs:
            self.add_input(item)
        for tensor in initializers:
            self.set_initializer(tensor)
        for node in nodes:
            self.append(node)
        self.set_outputs(list(outputs))

    # ================================================================== fields
    @property
    def name(self) -> str:
        """The graph name."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = value
        self._touch()

    @property
    def doc_string(self) -> str:
        """The graph's doc string."""
        return self._doc_string

    @doc_string.setter
    def doc_string(self, value: str) -> None:
        self._doc_string = value
        self._touch()

    def _loaded_metadata(self) -> Any:
        return self._metadata_proto

    def _forget_loaded_metadata(self) -> None:
        self._metadata_proto = None

    # ================================================================ ownership
    @property
    def parent(self) -> Node | None:
        """The node whose attribute holds this graph, for subgraphs."""
        return self._parent

    @property
    def parent_graph(self) -> Graph | None:
        """The graph enclosing this subgraph, or ``None`` for a top-level graph."""
        return self._parent._graph if self._parent is not None else None

    @property
    def root(self) -> Graph:
        """The outermost graph (the main graph or a function body)."""
        graph = self
        while graph._parent is not None and graph._parent._graph is not None:
            graph = graph._parent._graph
        return graph

    @property
    def model(self) -> Model | None:
        """The model this graph belongs to, if any."""
        root = self.root
        if root._model is not None:
            return root._model
        if root._function is not None:
            return root._function._model
        return None

    @property
    def function(self) -> Function | None:
        """The function whose body this graph is (or is nested in), if any."""
        return self.root._function

    def _touch(self) -> None:
        self.root._version += 1

    # =================================================================== nodes
    def __iter__(self) -> Iterator[Node]:
        """Iterate over the nodes in order. Safe against removing the current node."""
        node = self._head
        while node is not None:
            following = node._next
            yield node
            node = following

    def __len__(self) -> int:
        return self._count

    @property
    def nodes(self) -> list[Node]:
        """The nodes in order (a new list)."""
        return list(self)

    def __reversed__(self) -> Iterator[Node]:
        node = self._tail
        while node is not None:
            preceding = node._prev
            yield node
            node = preceding

    def append(self, node: Node) -> Node:
        """Add a node at the end.

        Raises:
            ValueError: The node already belongs to a graph.
            InvalidModelError: One of its outputs is already defined in this graph
                (nothing is changed).
        """
        self._check_detached(node)
        self._attach(node)
        self._link(node, self._tail, None)
        return node

    def extend(self, nodes: Iterable[Node]) -> None:
        """Add nodes at the end, in order (all or none of them)."""
        if self._tail is None:
            self._insert(list(nodes), None, None)
        else:
            self.insert_after(self._tail, nodes)

    def insert_before(self, anchor: Node, nodes: Node | Iterable[Node]) -> None:
        """Insert one or more nodes, in order, just before ``anchor`` (all or none)."""
        self._check_member(anchor)
        self._insert(_as_list(nodes), anchor._prev, anchor)

    def insert_after(self, anchor: Node, nodes: Node | Iterable[Node]) -> None:
        """Insert one or more nodes, in order, just after ``anchor`` (all or none)."""
        self._check_member(anchor)
        self._insert(_as_list(nodes), anchor, anchor._next)

    def _insert(self, nodes: list[Node], previous: Node | None, following: Node | None) -> None:
        for node in nodes:
            if node._graph is not None:
                self._check_detached(node)  # raises
        if len({id(node) for node in nodes}) != len(nodes):
            raise ValueError("the same node is listed twice")
        inserted: list[Node] = []
        attach, link = self._attach, self._link  # a hot loop: inlining stamps many nodes
        try:
            for node in nodes:
                attach(node, touch=False)
                link(node, previous, following)
                inserted.append(node)
                previous = node
        except Exception:
            for node in reversed(inserted):
                self.remove(node, safe=False)
            raise
        finally:
            self._touch()

    def _link(self, node: Node, previous: Node | None, following: Node | None) -> None:
        node._prev = previous
        node._next = following
        if previous is None:
            self._head = node
        else:
            previous._next = node
        if following is None:
            self._tail = node
        else:
            following._prev = node

    def remove(self, node: Node, *, safe: bool = True) -> None:
        """Remove a node.

        Args:
            node: The node to remove.
            safe: When true (the default), refuse to remove a node whose outputs are
                still used; when false, those uses become undefined names.

        Raises:
            ValueError: The node is not in this graph, or (``safe``) its outputs are used.
        """
        self._check_member(node)
        if safe:
            for name in node._outputs:
                if name and self._values[name]._uses:
                    users = ", ".join(_describe_use(u) for u in self._values[name]._uses)
                    raise ValueError(
                        f"cannot remove node {describe_node(node)}: its output "
                        f"{name!r} is still used by {users}"
                    )
        self._detach(node)
        if node._prev is None:
            self._head = node._next
        else:
            node._prev._next = node._next
        if node._next is None:
            self._tail = node._prev
        else:
            node._next._prev = node._prev
        node._prev = node._next = None

    def replace(self, old: Node, new_nodes: Sequence[Node],
                output_map: Mapping[str, str] | None = None) -> None:
        """Replace ``old`` by ``new_nodes``, moving the uses of its outputs.

        Args:
            old: The node to replace.
            new_nodes: The nodes that take its place (inserted where it was).
            output_map: For each output of ``old``, the name that now carries it (by
                default, the new nodes must produce the same output names, and ``old``
                is removed first so that they can). Outputs left out must be unused.

        Raises:
            ValueError: A node is not in (or already in) a graph, or a used output of
                ``old`` has no replacement in ``output_map``.
            InvalidModelError: A new node defines a name that is already defined.

        On an error the graph is left as it was.
        """
        self._check_member(old)
        new_nodes = list(new_nodes)
        if output_map is None:
            previous = old._prev
            self.remove(old, safe=False)
            try:
                self._insert(new_nodes, previous,
                             previous._next if previous is not None else self._head)
            except Exception:
                self._attach(old)
                self._link(old, previous, previous._next if previous is not None else self._head)
                raise
            return
        for name in old._outputs:
            if name and name not in output_map and self._values[name]._uses:
                raise ValueError(f"output {name!r} of {describe_node(old)} is still used; "
                                 "give its replacement in output_map")
        self.insert_before(old, new_nodes)
        for old_name in old._outputs:
            if old_name and old_name in output_map:
                self.replace_uses(old_name, output_map[old_name], include_outputs=True,
                                  rename_outputs=True)
        self.remove(old, safe=True)

    def _check_detached(self, node: Node) -> None:
        if node._graph is not None:
            raise ValueError(f"{node!r} already belongs to a graph; remove it or copy it first")

    def _check_member(self, node: Node) -> None:
        if node._graph is not self:
            raise ValueError(f"{node!r} is not in graph {self.name!r}")

    def _attach(self, node: Node, *, touch: bool = True) -> None:
        node._graph = self
        view = self._nx
        if view is not None:
            view.add_node(node)
        self._count += 1
        values = self._values
        try:
            for index, name in enumerate(node._outputs):
                if name:
                    if view is None and name not in values:  # a new name: nothing else to do
                        value = values[name] = Value(self, name)
                        value._producer = node
                        value._index = index
                    else:
                        self._define_output(name, node, index)
        except InvalidModelError:
            for name in node._outputs:
                defined = self._values.get(name) if name else None
                if defined is not None and defined._producer is node:
                    self._undefine_output(name, node)
            if self._nx is not None:
                self._nx.remove_node(node)
            self._count -= 1
            node._graph = None
            raise
        for slot, name in enumerate(node._inputs):
            if name:
                used = values.get(name)
                if view is None and used is not None and (
                        used._producer is not None or self._is_defined(name)):
                    uses = used._uses  # defined here: nothing else to update
                    if not uses:
                        used._uses = [(node, slot)]
                        continue
                    if type(uses) is dict:
                        uses[(node, slot)] = None
                        continue
                    if type(uses) is list and len(uses) < _FEW_USES:
                        uses.append((node, slot))
                        continue
                self._use(name, node, slot)
        if node._captures:
            for name in node._captures:
                self._use(name, node, CAPTURE)
        if touch:
            self._touch()

    def _detach(self, node: Node) -> None:
        for slot, name in enumerate(node._inputs):
            if name:
                self._unuse(name, node, slot)
        if node._captures:
            for name in node._captures:
                self._unuse(name, node, CAPTURE)
        for name in node._outputs:
            if name:
                self._undefine_output(name, node)
        if self._nx is not None:
            self._nx.remove_node(node)
        self._count -= 1
        node._graph = None
        self._touch()

    # ================================================================== values
    @property
    def values(self) -> Mapping[str, Value]:
        """Every value this graph knows, by name (read-only)."""
        return MappingProxyType(self._values)

    def value(self, name: str) -> Value:
        """Return the value called ``name``.

        Raises:
            KeyError: No value of that name in this graph.
        """
        return self._values[name]

    def producer(self, name: str) -> Node | None:
        """Return the node that produces ``name`` in this graph, or ``None``."""
        value = self._values.get(name)
        return value._producer if value is not None else None

    def consumers(self, name: str) -> list[Node]:
        """Return the distinct nodes that use ``name`` (inputs and subgraph captures)."""
        value = self._values.get(name)
        return value.consumers() if value is not None else []

    def uses(self, name: str) -> tuple[Use, ...]:
        """Return every use of ``name``: node inputs, captures, graph outputs."""
        value = self._values.get(name)
        return value.uses if value is not None else ()

    def is_used(self, name: str) -> bool:
        """Whether anything uses ``name`` (a node, a subgraph, or the graph outputs)."""
        value = self._values.get(name)
        return value is not None and bool(value._uses)

    def _is_defined(self, name: str) -> bool:
        value = self._values.get(name)
        return (
            (value is not None and value._producer is not None)
            or name in self._initializers
            or name in self._input_names
            or name in self._sparse_initializers
        )

    def is_defined(self, name: str) -> bool:
        """Whether this graph defines ``name`` (input, initializer, or node output)."""
        return self._is_defined(name)

    def resolve(self, name: str) -> Value | None:
        """Find the value ``name`` refers to here, searching enclosing scopes outward."""
        graph: Graph | None = self
        while graph is not None:
            if graph._is_defined(name):
                return graph._values.get(name)
            graph = graph.parent_graph
        return None

    @property
    def free_names(self) -> tuple[str, ...]:
        """Names used in this graph (or its subgraphs) that it does not define.

        In a subgraph these come from enclosing scopes; in a top-level graph they are
        undefined.
        """
        return tuple(self._free)

    def _value_for(self, name: str) -> Value:
        value = self._values.get(name)
        if value is None:
            value = self._values[name] = Value(self, name)
        return value

    def _use(self, name: str, node: Node | None, slot: int) -> None:
        value = self._values.get(name)
        if value is None:
            value = self._values[name] = Value(self, name)
        uses = value._uses
        if type(uses) is list:
            if len(uses) < _FEW_USES:
                uses.append((node, slot))
            else:
                value._uses = many = dict.fromkeys(uses)
                many[(node, slot)] = None
        elif type(uses) is dict:
            uses[(node, slot)] = None
        else:  # the first use
            value._uses = [(node, slot)]
        producer = value._producer
        if producer is not None:
            if node is not None and self._nx is not None:
                self._nx.add_edge(producer, node, key=(name, slot))
        elif not self._is_defined(name):
            self._free_changed(name, +1)

    def _unuse(self, name: str, node: Node | None, slot: int) -> None:
        value = self._values[name]
        try:
            uses = value._uses
            if type(uses) is dict:
                del uses[(node, slot)]  # O(1): uses are keys of an ordered dict
            else:
                uses.remove((node, slot))  # type: ignore[union-attr]  # a few: a short scan
        except (KeyError, ValueError, AttributeError):  # pragma: no cover - internal consistency
            raise AssertionError(f"use of {name!r} not found") from None
        producer = value._producer
        if producer is not None:
            if node is not None and self._nx is not None:
                self._nx.remove_edge(producer, node, key=(name, slot))
        elif not self._is_defined(name):
            self._free_changed(name, -1)

    def _capture(self, name: str, node: Node) -> None:
        self._use(name, node, CAPTURE)

    def _release(self, name: str, node: Node) -> None:
        self._unuse(name, node, CAPTURE)

    def _free_changed(self, name: str, delta: int) -> None:
        old = self._free.get(name, 0)
        new = old + delta
        if new:
            self._free[name] = new
        else:
            del self._free[name]
        parent = self._parent
        if parent is not None:
            if old == 0 and new > 0:
                parent._capture_changed(name, +1)
            elif old > 0 and new == 0:
                parent._capture_changed(name, -1)

    def _became_defined(self, value: Value) -> None:
        """Bookkeeping when ``value`` gains its first definition."""
        count = self._free.pop(value.name, 0)
        if count and self._parent is not None:
            self._parent._capture_changed(value.name, -1)

    def _became_undefined(self, value: Value) -> None:
        """Bookkeeping when ``value`` loses its last definition."""
        if value._uses:
            self._free[value.name] = len(value._uses)
            if self._parent is not None:
                self._parent._capture_changed(value.name, +1)

    def _define_output(self, name: str, node: Node, index: int, *,
                       where: str | None = None) -> None:
        value = self._values.get(name)
        if value is None:
            value = self._values[name] = Value(self, name)
        elif self._is_defined(name):
            raise InvalidModelError(
                f"value {name!r} is defined twice: by {_describe_definition(self, name)} and "
                f"as output {index} of node {node.name or node.op_type!r}",
                where=where or f"graph {self.name!r}",
                hint="every value name must be defined exactly once (ONNX is SSA)",
            )
        value._producer = node
        value._index = index
        if self._nx is not None:
            add_edge = self._nx.add_edge
            for consumer, slot in value._uses:
                if consumer is not None:
                    add_edge(node, consumer, key=(name, slot))
        self._became_defined(value)

    def _undefine_output(self, name: str, node: Node) -> None:
        value = self._values[name]
        if value._producer is not node:  # pragma: no cover - internal consistency
            raise AssertionError(f"{name!r} is not produced by {node!r}")
        if self._nx is not None:
            remove_edge = self._nx.remove_edge
            for consumer, slot in value._uses:
                if consumer is not None:
                    remove_edge(node, consumer, key=(name, slot))
        value._producer = None
        value._index = -1
        if not self._is_defined(name):
            self._became_undefined(value)

    # ================================================================== inputs
    @property
    def inputs(self) -> tuple[Value, ...]:
        """The graph inputs, in order."""
        return tuple(self._inputs)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The graph input names, in order."""
        return tuple(v.name for v in self._inputs)

    def add_input(self, item: str | onnx.ValueInfoProto, index: int | None = None) -> Value:
        """Add a graph input (a name or a full ``ValueInfoProto`` declaration).

        Args:
            item: The input's name, or its declaration.
            index: Where to insert it among the inputs (default: at the end).

        Raises:
            InvalidModelError: A node of this graph already produces that name.
        """
        name = item if isinstance(item, str) else item.name
        value = self._value_for(name)
        if value._producer is not None:
            raise InvalidModelError(
                f"cannot add input {name!r}: node {describe_node(value._producer)} already "
                "produces that name",
                where=f"graph {self.name!r}",
            )
        if not isinstance(item, str):
            value.declare(item)
        was_defined = self._is_defined(name)
        if index is None:
            self._inputs.append(value)
        else:
            self._inputs.insert(index, value)
        self._input_names[name] = self._input_names.get(name, 0) + 1
        if not was_defined:
            self._became_defined(value)
        self._touch()
        return value

    def remove_input(self, name: str) -> None:
        """Remove the graph input ``name`` (its uses become undefined unless defined else)."""
        for position, value in enumerate(self._inputs):
            if value.name == name:
                del self._inputs[position]
                break
        else:
            raise KeyError(f"graph {self.name!r} has no input {name!r}")
        count = self._input_names[name] - 1
        if count:
            self._input_names[name] = count
        else:
            del self._input_names[name]
            if not self._is_defined(name):
                self._became_undefined(self._values[name])
        self._touch()

    # ================================================================= outputs
    @property
    def outputs(self) -> tuple[Value, ...]:
        """The graph outputs, in order."""
        return tuple(self._outputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The graph output names, in order."""
        return tuple(v.name for v in self._outputs)

    def set_outputs(self, items: Sequence[str | onnx.ValueInfoProto | Value]) -> None:
        """Replace the graph outputs (names, declarations, or values of this graph)."""
        for slot, value in enumerate(self._outputs):
            self._unuse(value.name, None, slot)
        self._outputs = []
        for slot, item in enumerate(items):
            if isinstance(item, Value):
                name = item.name
            elif isinstance(item, str):
                name = item
            else:
                name = item.name
            self._use(name, None, slot)
            value = self._values[name]
            if isinstance(item, onnx.ValueInfoProto):
                value.declare(item)
            self._outputs.append(value)
        self._touch()

    def add_output(self, item: str | onnx.ValueInfoProto) -> Value:
        """Append one graph output."""
        self.set_outputs([*self._outputs, item])
        return self._outputs[-1]

    # ============================================================== value_info
    @property
    def value_info(self) -> tuple[Value, ...]:
        """The values that have a ``value_info`` entry, in order."""
        return tuple(self._value_info)

    def add_value_info(self, info: onnx.ValueInfoProto) -> Value:
        """Declare a value's type (appends a ``value_info`` entry)."""
        value = self._value_for(info.name)
        # Only a declared value can be listed already: skip the scan for new ones, so
        # that adding many entries stays linear.
        listed = value._info is not None and any(v is value for v in self._value_info)
        value.declare(info)
        if not listed:
            self._value_info.append(value)
        self._touch()
        return value

    def remove_value_info(self, name: str) -> None:
        """Drop the ``value_info`` entry for ``name`` (if any)."""
        self._value_info = [v for v in self._value_info if v.name != name]
        self._touch()

    # ============================================================ initializers
    @property
    def initializers(self) -> Mapping[str, Tensor]:
        """The initializers by name, in order (read-only; see :meth:`set_initializer`)."""
        return MappingProxyType(self._initializers)

    @property
    def sparse_initializers(self) -> Mapping[str, onnx.SparseTensorProto]:
        """The sparse initializers by name (read-only)."""
        return MappingProxyType(self._sparse_initializers)

    def set_initializer(self, tensor: Tensor) -> Value:
        """Add or replace the initializer ``tensor.name``."""
        name = tensor.name
        value = self._value_for(name)
        if value._producer is not None:
            raise InvalidModelError(
                f"cannot add initializer {name!r}: node {value._producer.name!r} already "
                "produces that name",
                where=f"graph {self.name!r}",
            )
        was_defined = self._is_defined(name)
        self._initializers[name] = tensor
        if not was_defined:
            self._became_defined(value)
        self._touch()
        return value

    def remove_initializer(self, name: str) -> Tensor:
        """Remove and return the initializer ``name``."""
        tensor = self._initializers.pop(name)
        if not self._is_defined(name):
            self._became_undefined(self._values[name])
        self._touch()
        return tensor

    # ================================================================ rewiring
    def replace_uses(self, old: str, new: str, *, include_outputs: bool = False,
                     rename_outputs: bool = False) -> int:
        """Make every use of ``old`` read ``new`` instead.

        Uses inside subgraphs (captures) are rewritten too.

        Args:
            old: The name whose uses move.
            new: The name that replaces it (must be visible wherever ``old`` is used).
            include_outputs: Also replace ``old`` among the graph outputs. A subgraph's
                or a function body's outputs are positional, so this changes no
                interface; the outputs of a top-level graph (a model's main graph) are
                the model's interface, and moving one renames a model output: that is
                refused unless ``rename_outputs`` says it is meant.
            rename_outputs: With ``include_outputs``, let a model output be renamed.

        Returns:
            The number of uses changed.

        Raises:
            InvalidModelError: ``old`` is a model output and ``rename_outputs`` is not
                set (nothing is changed), or a subgraph that uses ``old`` from outside
                defines ``new`` itself.
        """
        value = self._values.get(old)
        if value is None or old == new:
            return 0
        self._check_not_shadowed(old, new, value)
        if (include_outputs and not rename_outputs and self._parent is None
                and self._function is None and value.is_graph_output):
            raise InvalidModelError(
                f"replace_uses({old!r}, {new!r}, include_outputs=True) would rename the "
                f"model output {old!r} to {new!r}; output names are the model's interface",
                hint="to remove the node computing it, give its output name to the value "
                     "that replaces it: graph.remove(node, safe=False), then "
                     f"graph.rename_value({new!r}, {old!r}) (docs/ir.md, 'Removing a node "
                     "whose output is a graph output'); to rename the output on purpose, "
                     "pass rename_outputs=True")
        changed = 0
        for node, slot in list(value._uses):
            if node is None:
                if include_outputs:
                    outputs: list[str | Value] = list(self._outputs)
                    outputs[slot] = new
                    self.set_outputs(outputs)
                    replacement = self._values[new]
                    if replacement._info is None and value._info is not None:
                        replacement.declare(value._info)  # the output keeps its declared type
                    changed += 1
            elif slot == CAPTURE:
                for subgraph in list(node.subgraphs()):
                    if old in subgraph._free:
                        changed += subgraph.replace_uses(old, new, include_outputs=True)
            else:
                node.set_input(slot, new)
                changed += 1
        return changed

    def _check_not_shadowed(self, old: str, new: str, value: Value) -> None:
        """Refuse to move captured uses of ``old`` into a subgraph that defines ``new``."""
        for node, slot in value._uses:
            if slot != CAPTURE or node is None:
                continue
            for subgraph in node.subgraphs():
                if old not in subgraph._free:
                    continue
                if subgraph._is_defined(new):
                    raise InvalidModelError(
                        f"cannot replace {old!r} by {new!r}: subgraph {subgraph.name!r} of node "
                        f"{describe_node(node)} uses {old!r} from outside but defines its own "
                        f"{new!r}, which would hide it"
                    )
                subgraph._check_not_shadowed(old, new, subgraph._values[old])

    def rename_value(self, old: str, new: str) -> None:
        """Rename a value everywhere in this graph and in subgraphs that capture it.

        The declaration (type, doc string, metadata), the producer's output, the
        graph input or output entry and the initializer all move to the new name.

        ``new`` may be a name that is used but defined nowhere, such as a graph output
        whose producer was just removed: the renamed value takes over those uses, and
        the output keeps its own declaration. That is how a node whose output is a graph
        output is removed without renaming the output (see the IR guide).

        Raises:
            InvalidModelError: This graph has no value ``old``; ``new`` is defined here
                or in an enclosing graph, or used here while defined nowhere and ``old``
                is not defined here (or both are graph outputs); or a subgraph that uses
                ``old`` defines ``new``. Nothing is changed.
        """
        if old == new:
            return
        value = self._values.get(old)
        if value is None:
            raise InvalidModelError(f"cannot rename {old!r} to {new!r}: graph {self.name!r} "
                                    f"has no value {old!r}")
        existing = self._values.get(new)
        if existing is not None and (self._is_defined(new) or (existing._uses and (
                self.resolve(new) is not None or not self._is_defined(old)
                or (value.is_graph_output and existing.is_graph_output)))):
            raise InvalidModelError(f"cannot rename {old!r} to {new!r}: {new!r} already exists",
                                    hint="pick a name nothing in the graph uses")
        self._check_not_shadowed(old, new, value)
        merging = existing is not None and bool(existing._uses)
        self.replace_uses(old, new, include_outputs=True, rename_outputs=True)
        producer = value._producer
        if producer is not None:
            outputs = list(producer._outputs)
            outputs[value._index] = new
            producer.set_outputs(outputs)
        if old in self._initializers:
            tensor = self.remove_initializer(old)
            self.set_initializer(tensor.with_name(new))
        if old in self._sparse_initializers:
            sparse = self._sparse_initializers.pop(old)
            renamed = onnx.SparseTensorProto()
            renamed.CopyFrom(sparse)
            renamed.values.name = new
            self._sparse_initializers[new] = renamed
        new_value = self._value_for(new)
        if value._info is not None and new_value._info is None:
            new_value.declare(value._info)
        if old in self._input_names:
            positions = [i for i, v in enumerate(self._inputs) if v.name == old]
            for _ in positions:
                self.remove_input(old)
            for position in positions:
                self.add_input(new, position)
        declared_elsewhere = merging and (new_value.is_graph_output or new_value.is_graph_input
                                          or any(v is new_value for v in self._value_info))
        self._value_info = [new_value if v is value else v for v in self._value_info
                            if not (v is value and declared_elsewhere)]
        if not value._uses and not self._is_defined(old):
            self._values.pop(old, None)
        self._touch()

    def drop_value(self, name: str) -> None:
        """Forget a value nothing uses or defines (for example a stale declaration)."""
        value = self._values.get(name)
        if value is None:
            return
        if value._uses or self._is_defined(name):
            raise ValueError(f"value {name!r} is still used or defined")
        self._value_info = [v for v in self._value_info if v is not value]
        del self._values[name]
        self._touch()

    # ================================================================= walking
    @property
    def nx(self) -> networkx.MultiDiGraph:
        """The networkx view: nodes are :class:`Node`, edges are value uses.

        Edge keys are ``(value name, input slot)``; slot :data:`~graphpass.ir.CAPTURE`
        marks a use inside the consumer's subgraphs. Treat it as read-only. It is
        built on first use (in one go, from the values) and then kept up to date.
        """
        view = self._nx
        if view is None:
            view = self._nx = self._build_nx()
        return view

    def _build_nx(self) -> networkx.MultiDiGraph:
        import networkx  # imported on first use: loading and saving need none of it

        view = networkx.MultiDiGraph()
        view.add_nodes_from(self)
        edges: list[tuple[Node, Node, tuple[str, int], dict[str, object]]] = []
        append = edges.append
        values = self._values
        for node in self:
            for slot, name in enumerate(node._inputs):
                if name:
                    producer = values[name]._producer
                    if producer is not None:
                        append((producer, node, (name, slot), {}))
            if node._captures:
                for name in node._captures:
                    producer = values[name]._producer
                    if producer is not None:
                        append((producer, node, (name, CAPTURE), {}))
        view.add_edges_from(edges)
        return view

    def _producers_of(self, node: Node) -> Iterator[tuple[Node, str]]:
        """``(producer, value name)`` for each use by ``node`` of a value computed here."""
        values = self._values
        for name in node._inputs:
            if name:
                producer = values[name]._producer
                if producer is not None:
                    yield producer, name
        if node._captures:
            for name in node._captures:
                producer = values[name]._producer
                if producer is not None:
                    yield producer, name

    def nodes_by_op(self, op_type: str, domain: str | None = None) -> list[Node]:
        """Return the nodes with this op type (and domain, if given), in order."""
        return [
            node for node in self
            if node.op_type == op_type and (domain is None or _same_domain(node.domain, domain))
        ]

    def subgraphs(self) -> Iterator[Graph]:
        """Yield every nested graph at any depth, in order, each before its own subgraphs."""
        stack: list[Iterator[Graph]] = [self._child_graphs()]
        while stack:
            for graph in stack[-1]:
                yield graph
                stack.append(graph._child_graphs())
                break
            else:
                stack.pop()

    def _child_graphs(self) -> Iterator[Graph]:
        node = self._head
        while node is not None:
            if node._attributes:
                for attribute in node._attributes.values():
                    if attribute.graphs:
                        yield from attribute.graphs
            node = node._next

    def walk(self) -> Iterator[Node]:
        """Yield every node of this graph and of all nested graphs.

        A node is yielded before the nodes of its subgraphs.
        """
        stack: list[Iterator[Node]] = [iter(self)]
        while stack:
            for node in stack[-1]:
                yield node
                if node._attributes:
                    subgraphs = list(node.subgraphs())
                    if subgraphs:
                        for subgraph in reversed(subgraphs):
                            stack.append(iter(subgraph))
                        break
            else:
                stack.pop()

    def topological_order(self) -> list[Node]:
        """Return the nodes in an order where each comes after its producers.

        The current order is kept wherever it is already valid (a stable sort).

        Raises:
            CycleError: The nodes depend on each other in a cycle.
        """
        if self.is_sorted():
            return self.nodes
        return self._stable_sorted_nodes()

    def _stable_sorted_nodes(self) -> list[Node]:
        """The nodes in topological order, keeping the current order where it is valid."""
        position = {node: index for index, node in enumerate(self)}
        indegree: dict[Node, int] = {}
        succ: dict[Node, list[Node]] = {node: [] for node in position}
        for node in position:
            producers = {producer: None for producer, _ in self._producers_of(node)}
            indegree[node] = len(producers)
            for producer in producers:
                succ[producer].append(node)
        ready = [(index, node) for node, index in position.items() if indegree[node] == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            _, node = heapq.heappop(ready)
            order.append(node)
            for successor in succ[node]:
                indegree[successor] -= 1
                if indegree[successor] == 0:
                    heapq.heappush(ready, (position[successor], successor))
        if len(order) != len(position):
            remaining = [node for node in position if indegree[node] > 0]
            import networkx

            cycle = networkx.find_cycle(self.nx.subgraph(remaining))
            described = " -> ".join(describe_node(edge[0]) for edge in cycle)
            raise CycleError(
                f"the nodes form a cycle: {described} -> {describe_node(cycle[0][0])}",
                where=f"graph {self.name!r}",
                hint="a node cannot depend on its own output; check the named nodes' inputs",
            )
        return order

    def is_sorted(self) -> bool:
        """Whether every node comes after the producers of its inputs."""
        return self._first_use_before_definition() is None

    def _known_sorted(self) -> bool:
        """Whether the nodes are known to be in order: nothing changed since it was seen."""
        mark = self._sorted_at
        if mark is None:
            return False
        root = self.root
        return mark[0] is root and mark[1] == root._version

    def _mark_sorted(self) -> None:
        """Remember that the nodes are in topological order now (until anything changes)."""
        root = self.root
        self._sorted_at = (root, root._version)

    def _first_use_before_definition(self) -> tuple[Node, Node, str] | None:
        """The first node that uses a value of a later node: ``(user, producer, value name)``."""
        if self._known_sorted():
            return None
        found = self._find_use_before_definition()
        if found is None:
            self._mark_sorted()
        return found

    def _find_use_before_definition(self) -> tuple[Node, Node, str] | None:
        seen: set[Node] = set()
        values = self._values
        for node in self:
            for name in node._inputs:
                if name:
                    producer = values[name]._producer
                    if producer is not None and producer not in seen:
                        return node, producer, name
            if node._captures:
                for name in node._captures:
                    producer = values[name]._producer
                    if producer is not None and producer not in seen:
                        return node, producer, name
            seen.add(node)
        return None

    def sort(self) -> bool:
        """Reorder the nodes topologically (stable). Returns whether the order changed.

        Raises:
            CycleError: The nodes depend on each other in a cycle.
        """
        if self.is_sorted():
            return False
        previous: Node | None = None
        for node in self._stable_sorted_nodes():
            self._link(node, previous, None)
            previous = node
        self._touch()
        return True

    def copy(self) -> Graph:
        """Return a deep copy (tensors are shared; they are immutable)."""
        return clone_graph(self)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {self._count} nodes, {len(self._inputs)} inputs, "
                f"{len(self._outputs)} outputs, {len(self._initializers)} initializers)")


def _as_list(nodes: Node | Iterable[Node]) -> list[Node]:
    return list(nodes) if isinstance(nodes, Iterable) else [nodes]  # a Node is not iterable


def _same_domain(a: str, b: str) -> bool:
    return a == b or (a in ("", "ai.onnx") and b in ("", "ai.onnx"))


def _describe_use(use: tuple[Node | None, int]) -> str:
    node, slot = use
    if node is None:
        return f"graph output {slot}"
    return describe_node(node)


def _describe_definition(graph: Graph, name: str) -> str:
    value = graph._values[name]
    if value._producer is not None:
        return f"node {describe_node(value._producer)}"
    if name in graph._initializers or name in graph._sparse_initializers:
        return "an initializer"
    return "a graph input"
