"""A function body prepared once, to be copied into any number of call sites.

:class:`Body` holds a function's body after the calls inside it have been inlined
(and, if needed, converted to the opset version of the graphs it goes into), and
everything a call site needs precomputed: which names the body defines, which
attributes refer to the function's attributes and what each falls back to when a
call does not give it. Copying the body into a call site is then linear in the
body's size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import itemgetter

from graphpass.ir import Attribute, Function, Graph, Node
from graphpass.passes._inline_callgraph import graphs_of
from graphpass.passes._inline_codes import BAD_FUNCTION_BODY, InlineError
from graphpass.passes._inline_opsets import used_domains

__all__ = ["PROVENANCE_KEY", "Body", "Fallbacks", "NodePlan", "ReferenceSpec"]

PROVENANCE_KEY = "graphpass.inlined_from"
"""The ``metadata_props`` key of an inlined node: the call stack it came from."""

Fallbacks = dict[Node, dict[str, Attribute]]
"""For nodes whose attribute refers to an attribute of the enclosing function: the value
to use when the enclosing function's call does not give that attribute (the default
declared by a function inlined further in)."""


@dataclass(frozen=True)
class ReferenceSpec:
    """An attribute of a body node that refers to an attribute of the function.

    Attributes:
        attribute: The node's attribute name.
        ref: The function attribute it refers to.
        default: The value used when a call does not give ``ref`` (already named
            ``attribute``), or ``None``: then the node goes without the attribute.
    """

    attribute: str
    ref: str
    default: Attribute | None


@dataclass(frozen=True)
class NodePlan:
    """How to copy one top-level body node.

    Attributes:
        node: The body node.
        references: Its attributes that refer to function attributes.
        has_graphs: Whether it holds subgraphs of its own.
        provenance: Its own ``graphpass.inlined_from`` entry (from calls inlined into
            the body earlier), if any.
        label: What its copies' names are made from: its name, else its op type.
        metadata: Its ``metadata_props`` (the copies add their provenance entry).
        stamped: Whether copies are made directly (see ``Inliner._stamp``): no graphs in
            the node, and none in the defaults of its references.
        renamed_inputs: Given a call site's name mapping, the copy's inputs.
        renamed_outputs: Given a call site's name mapping, the copy's outputs.
    """

    node: Node
    references: tuple[ReferenceSpec, ...]
    has_graphs: bool
    provenance: str | None
    label: str
    metadata: Mapping[str, str]
    stamped: bool
    renamed_inputs: Renamer
    renamed_outputs: Renamer


Renamer = Callable[[Mapping[str, str]], tuple[str, ...]]
"""Takes a call site's name mapping to the names a copied node uses, in order."""


def renamer(names: tuple[str, ...]) -> Renamer:
    """``lambda mapping: tuple(mapping[name] for name in names)``, done by ``itemgetter``.

    Stamping a body looks up every name of every copied node (a hot loop of inlining);
    ``operator.itemgetter`` does it in C, about three times as fast as ``map``.
    """
    if not names:
        return lambda mapping: ()
    if len(names) == 1:
        only = itemgetter(names[0])
        return lambda mapping: (only(mapping),)
    many: Renamer = itemgetter(*names)
    return many


class Body:
    """A function body ready to be copied into call sites.

    Attributes:
        function: The function.
        label: ``domain::name[:overload]``.
        graph: The body (with inner calls already inlined). Not changed by copying.
        inputs: The formal input names.
        outputs: The formal output names.
        imports: The opset imports of the domains the body uses.
        version: The default-domain version of the body's nodes, if it imports one.
        domains: The domains its nodes use.
        convert_to: When set, the body holds attribute references and needs converting
            to this default-domain version at each call, once the references are bound.
        plans: How to copy each top-level node.
        labels: What each top-level node's copies are named after, in order.
        distinct_labels: Whether no two labels are the same.
        stamped: Whether every top-level node is copied directly (no graphs anywhere).
        defined: The names the body's nodes define, in order.
        produced: The same, as a set.
        in_order: Whether the body's nodes are in topological order.
        value_info: The body's ``value_info`` declarations, by value name.
        references: Every function attribute the body (or a subgraph in it) refers to.
    """

    def __init__(self, function: Function, graph: Graph, imports: Mapping[str, int],
                 version: int | None, fallbacks: Fallbacks):
        """Prepare ``graph`` (the expanded body of ``function``) for copying.

        Raises:
            InlineError: The body uses a name it does not define, or an output is
                neither computed nor an input.
        """
        self.function = function
        self.label = function.qualified_name
        self.graph = graph
        self.inputs = graph.input_names
        self.outputs = graph.output_names
        self.imports = dict(imports)
        self.version = version
        self.domains = used_domains(graph)
        self.convert_to: int | None = None
        undefined = [name for name in graph.free_names if name]
        if undefined:
            raise InlineError(
                BAD_FUNCTION_BODY,
                f"function {self.label} uses {', '.join(map(repr, sorted(undefined)))}, which "
                "it does not define",
                hint="a function body may only use its inputs and the values its nodes compute")
        self.defined: list[str] = []
        plans = []
        for node in graph:
            self.defined.extend(name for name in node.outputs if name)
            plans.append(self._plan(node, fallbacks.get(node)))
        self.plans = tuple(plans)
        self.labels = tuple(plan.label for plan in plans)
        self.stamped = all(plan.stamped for plan in plans)
        self.distinct_labels = len(set(self.labels)) == len(self.labels)
        self.produced = frozenset(self.defined)
        self.in_order = graph.is_sorted()
        inputs = set(self.inputs)
        for name in self.outputs:
            if name not in self.produced and name not in inputs:
                raise InlineError(
                    BAD_FUNCTION_BODY,
                    f"function {self.label} returns {name!r}, which no node computes",
                    hint="every function output must be an input or a node's output")
        self.value_info = tuple((value.name, value.declaration()) for value in graph.value_info)
        self.references = frozenset(
            attribute.ref_attr_name
            for sub in graphs_of(graph) for node in sub
            for attribute in node.attributes.values() if attribute.ref_attr_name)

    def _plan(self, node: Node, node_fallbacks: dict[str, Attribute] | None) -> NodePlan:
        references = tuple(
            ReferenceSpec(name, attribute.ref_attr_name,
                          self.default_for(name, attribute.ref_attr_name, node_fallbacks))
            for name, attribute in node.attributes.items() if attribute.ref_attr_name)
        has_graphs = any(attribute.graphs for attribute in node.attributes.values())
        metadata = dict(node.metadata)
        provenance = metadata.get(PROVENANCE_KEY)
        stamped = not has_graphs and not any(
            spec.default is not None and spec.default.graphs for spec in references)
        return NodePlan(node, references, has_graphs, provenance, node.name or node.op_type,
                        metadata, stamped, renamer(node.inputs), renamer(node.outputs))

    def default_for(self, attribute: str, ref: str,
                    node_fallbacks: Mapping[str, Attribute] | None) -> Attribute | None:
        """What a node's attribute referring to ``ref`` becomes when a call omits ``ref``.

        The function's declared default for ``ref`` if it has one, else the default of
        a function inlined further in (``node_fallbacks``), else ``None``.
        """
        default = self.function.attribute_defaults.get(ref)
        if default is not None:
            return default if default.name == attribute else default.renamed(attribute)
        if node_fallbacks:
            return node_fallbacks.get(attribute)
        return None

    @property
    def uses_default_domain(self) -> bool:
        """Whether any node of the body is an ONNX operator of the default domain."""
        return "" in self.domains

    def __repr__(self) -> str:
        return f"<body of {self.label}: {len(self.plans)} nodes>"
