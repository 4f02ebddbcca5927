"""Replacing calls with copies of function bodies.

:class:`Inliner` walks a graph (and every subgraph in it, innermost first) and
replaces each call of a function that has a prepared :class:`Body` with a copy of
that body:

* formal inputs become the call's actual inputs (``""`` when omitted), formal
  outputs the call's outputs; every other name the body defines, at any depth of
  subgraph, gets a fresh name ``<call>/<name>``;
* an attribute that refers to a function attribute takes the call's value, else
  the function's declared default, else (ONNX semantics) the node goes without it;
* an output that is directly an input (or an output listed twice) is wired to its
  source, with an ``Identity`` when the caller's name must exist (a graph output
  or a declared value);
* the body's ``value_info`` is carried over, renamed;
* each copied node records the call stack it came from in
  ``metadata_props["graphpass.inlined_from"]``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from graphpass.ir import (
    CHANGED_ATTRIBUTES,
    CHANGED_INPUTS,
    CHANGED_METADATA,
    CHANGED_NAME,
    CHANGED_OUTPUTS,
    Attribute,
    FunctionId,
    Graph,
    Node,
    clone_node,
)
from graphpass.passes._inline_body import (
    PROVENANCE_KEY,
    Body,
    Fallbacks,
    NodePlan,
    ReferenceSpec,
)
from graphpass.passes._inline_callgraph import graphs_of
from graphpass.passes._inline_codes import (
    BAD_CALL,
    BAD_FUNCTION_BODY,
    OPSET_CONFLICT,
    InlineError,
)
from graphpass.passes._inline_names import FreshNames
from graphpass.passes._inline_opsets import convert_body

__all__ = ["Inliner"]


class Inliner:
    """Copies prepared bodies into call sites, for one run of the pass.

    Attributes:
        names: Where fresh names come from.
        fallbacks: Defaults to use for references left unbound, per copied node (see
            :data:`~graphpass.passes._inline_body.Fallbacks`).
        calls: How many calls of each function were inlined.
        conversions: Bodies converted per call attributes: ``(function, from, to)`` and how
            many distinct sets of attributes.
        ir_version: The model's IR version (for converting bodies).
    """

    def __init__(self, names: FreshNames, ir_version: int):
        self.names = names
        self.fallbacks: Fallbacks = {}
        self.calls: Counter[FunctionId] = Counter()
        self.ir_version = ir_version
        self.conversions: Counter[tuple[str, int, int]] = Counter()
        self._converted: dict[tuple[int, tuple[tuple[str, bytes], ...]], Body] = {}

    # ================================================================ walking
    def expand(self, root: Graph, bodies: Mapping[FunctionId, Body]) -> None:
        """Inline every call in ``root`` and its subgraphs whose function is in ``bodies``.

        Subgraphs are done before the graphs that hold them, so a graph passed to a call
        as an attribute is already expanded when the call is.
        """
        graphs = list(graphs_of(root))
        graphs.reverse()
        for graph in graphs:
            calls = [(node, body) for node in graph
                     if (body := bodies.get((node.domain, node.op_type, node.overload)))]
            if not calls:
                continue
            # A sorted graph stays sorted when each call is replaced, in place, by a
            # sorted body: saying so spares the next order check a walk over the copies.
            in_order = all(body.in_order and body.convert_to is None for _, body in calls) \
                and graph.is_sorted()
            for node, body in calls:
                self.inline_call(node, graph, body)
            if in_order:
                graph._mark_sorted()

    # ============================================================= call sites
    def inline_call(self, call: Node, graph: Graph, body: Body) -> None:
        """Replace ``call`` (a node of ``graph``) with a copy of ``body``."""
        if body.convert_to is not None:
            body = self._bound_and_converted(body, call)
        names = self.names
        prefix = names.prefix_for(call)
        entry = f"{body.label}@{call.name or '<unnamed>'}"
        mapping: dict[str, str] = {"": ""}
        actual_inputs = call.inputs
        for index, formal in enumerate(body.inputs):
            mapping[formal] = actual_inputs[index] if index < len(actual_inputs) else ""
        forwarded: list[tuple[str, str]] = []
        actual_outputs = call.outputs
        produced = body.produced
        for index, formal in enumerate(body.outputs):
            actual = actual_outputs[index] if index < len(actual_outputs) else ""
            if not actual:
                continue
            if formal in produced and formal not in mapping:
                mapping[formal] = actual
            else:
                forwarded.append((formal, actual))
        fresh = [name for name in body.defined if name not in mapping]
        mapping.update(zip(fresh, names.values(prefix, fresh), strict=True))
        attributes = call.attributes
        nodes = None
        if body.stamped and not any(attribute.graphs for attribute in attributes.values()):
            nodes = self._stamp_all(body, mapping, prefix, entry, attributes)
        if nodes is None:  # graphs to adopt: copied node by node (names given in order)
            nodes = [self._copy_node(plan, mapping, prefix, entry, attributes, body)
                     for plan in body.plans]
        rewired: list[tuple[str, str]] = []
        for formal, actual in forwarded:
            source = mapping[formal]
            value = graph.values.get(actual)
            if value is not None and (value.is_graph_output or value.is_declared):
                if not source:
                    raise InlineError(
                        BAD_CALL,
                        f"output {actual!r} is function input {formal!r} passed through, but "
                        "the call omits that input",
                        where=f"call {call.name or '<unnamed>'!r} of {body.label}",
                        hint="give the input at the call")
                nodes.append(Node("Identity", [source], [actual],
                                  name=names.node(prefix, "Identity"),
                                  metadata={PROVENANCE_KEY: entry}))
            else:
                rewired.append((actual, source))
        graph.replace(call, nodes)
        for actual, source in rewired:
            _move_uses(graph, actual, source, where=f"call {call.name!r} of {body.label}")
        for name, info in body.value_info:
            if name in produced:  # declarations of inputs belong to the caller
                target = mapping[name]
                if not graph.value(target).is_declared:
                    info.name = target  # add_value_info copies it
                    graph.add_value_info(info)
        self.calls[body.function.id] += 1

    def _stamp_all(self, body: Body, mapping: Mapping[str, str], prefix: str, entry: str,
                   attributes: Mapping[str, Attribute]) -> list[Node]:
        """Copies of a body without graphs, made directly from the prepared plans.

        The same nodes :meth:`_copy_node` makes, without the detours through a clone and
        the setters: names come from ``mapping``, attribute references are bound, and
        each copy shares the proto its source was loaded from (see ``Node._changed``).
        """
        node_names = self.names.nodes(prefix, body.labels, body.distinct_labels)
        new_node = Node.__new__
        changed_here = CHANGED_INPUTS | CHANGED_OUTPUTS | CHANGED_NAME | CHANGED_METADATA
        fallbacks = self.fallbacks
        nodes: list[Node] = []
        for plan, node_name in zip(body.plans, node_names, strict=True):
            source = plan.node
            node = new_node(Node)
            node._op_type = source._op_type
            node._domain = source._domain
            node._overload = source._overload
            node._doc_string = source._doc_string
            node._name = node_name
            node._inputs = plan.renamed_inputs(mapping)
            node._outputs = plan.renamed_outputs(mapping)
            node._loaded_from = source._loaded_from
            node._loaded_index = source._loaded_index
            node._changed = source._changed | changed_here
            node._captures = None
            node._graph = None
            node._prev = None
            node._next = None
            own = source._attributes
            if plan.references:
                bound_attributes = dict(source._decoded_attributes())
                for spec in plan.references:
                    bound = attributes.get(spec.ref)
                    if bound is not None:
                        bound_attributes[spec.attribute] = bound if bound.name == spec.attribute \
                            else bound.renamed(spec.attribute)
                        if bound.ref_attr_name and spec.default is not None:
                            fallbacks.setdefault(node, {})[spec.attribute] = spec.default
                    elif spec.default is not None:
                        bound_attributes[spec.attribute] = spec.default
                    else:
                        del bound_attributes[spec.attribute]
                node._attributes = bound_attributes
                node._changed |= CHANGED_ATTRIBUTES
            else:
                node._attributes = dict(own) if own is not None else None
            provenance = entry if plan.provenance is None else f"{entry} > {plan.provenance}"
            metadata = plan.metadata
            node._metadata = {**metadata, PROVENANCE_KEY: provenance} if metadata \
                else {PROVENANCE_KEY: provenance}
            nodes.append(node)
        return nodes

    def _copy_node(self, plan: NodePlan, mapping: Mapping[str, str], prefix: str, entry: str,
                   attributes: Mapping[str, Attribute], body: Body) -> Node:
        source = plan.node
        node = clone_node(source)  # shares plain attributes, copies subgraphs
        rename = mapping.__getitem__  # the mapping sends "" (an omitted name) to ""
        node.set_inputs(tuple(map(rename, source.inputs)))
        node.set_outputs(tuple(map(rename, source.outputs)))
        node.name = self.names.node(prefix, plan.label)
        if plan.has_graphs:
            for attribute_name, attribute in node.attributes.items():
                originals = source.attributes[attribute_name].graphs
                for original, copy in zip(originals, attribute.graphs, strict=True):
                    self._adopt_subgraph(original, copy, mapping, prefix, entry, attributes,
                                         body)
        for spec in plan.references:
            self._bind(node, spec, attributes, mapping, prefix, entry, body)
        node.set_metadata(PROVENANCE_KEY, entry if plan.provenance is None
                          else f"{entry} > {plan.provenance}")
        return node

    # ============================================================= attributes
    def _bind(self, node: Node, spec: ReferenceSpec, attributes: Mapping[str, Attribute],
              mapping: Mapping[str, str], prefix: str, entry: str, body: Body) -> None:
        """Resolve one attribute reference of a copied node."""
        bound = attributes.get(spec.ref)
        if bound is not None:
            attribute = bound if bound.name == spec.attribute else bound.renamed(spec.attribute)
            if bound.graphs:
                # A graph given at the call is read in the function's scope (as onnx's
                # inliner and onnxruntime do): body names in it become the call site's;
                # names the function does not define keep meaning the caller's.
                copies = [graph.copy() for graph in bound.graphs]
                for copy in copies:
                    self._rename_definitions(copy, prefix)
                    _replace_outer_names(copy, mapping, self.names, prefix, body, strict=False)
                    for inner in copy.walk():
                        inner.name = self.names.node(prefix, inner.name or inner.op_type)
                attribute = Attribute(spec.attribute, attribute.type, attribute.proto, copies)
            node.set_attribute(attribute)
            if bound.ref_attr_name and spec.default is not None:
                self.fallbacks.setdefault(node, {})[spec.attribute] = spec.default
        elif spec.default is not None:
            attribute = spec.default
            if attribute.graphs:
                # A declared default graph lives in the function's scope.
                copies = [graph.copy() for graph in attribute.graphs]
                for original, copy in zip(attribute.graphs, copies, strict=True):
                    self._adopt_subgraph(original, copy, mapping, prefix, entry, attributes,
                                         body)
                attribute = Attribute(spec.attribute, attribute.type, attribute.proto, copies)
            node.set_attribute(attribute)
        else:
            node.remove_attribute(spec.attribute)

    # ============================================================== subgraphs
    def _adopt_subgraph(self, original: Graph, copy: Graph, mapping: Mapping[str, str],
                        prefix: str, entry: str, attributes: Mapping[str, Attribute],
                        body: Body) -> None:
        """Make a copied body subgraph fit the call site.

        Its own definitions (at any depth) get fresh names, the body names it uses get
        the call site's names, its attribute references are bound, and its nodes are
        renamed and get the provenance entry.
        """
        pairs = list(zip(original.walk(), copy.walk(), strict=True))
        self._rename_definitions(copy, prefix)
        _replace_outer_names(copy, mapping, self.names, prefix, body)
        for source, node in pairs:
            for name, attribute in list(node.attributes.items()):
                if attribute.ref_attr_name:
                    default = body.default_for(name, attribute.ref_attr_name,
                                               self.fallbacks.get(source))
                    spec = ReferenceSpec(name, attribute.ref_attr_name, default)
                    self._bind(node, spec, attributes, mapping, prefix, entry, body)
            node.name = self.names.node(prefix, node.name or node.op_type)
            inner = source.metadata.get(PROVENANCE_KEY)
            node.set_metadata(PROVENANCE_KEY, entry if inner is None else f"{entry} > {inner}")

    def _rename_definitions(self, graph: Graph, prefix: str) -> None:
        """Give every name defined in ``graph`` or its subgraphs a fresh name."""
        for sub in list(graphs_of(graph)):
            defined = list(dict.fromkeys([
                *sub.input_names, *sub.initializers, *sub.sparse_initializers,
                *(name for node in sub for name in node.outputs if name)]))
            for name in defined:
                sub.rename_value(name, self.names.value(prefix, name))

    # ================================================ conversion per binding
    def _bound_and_converted(self, body: Body, call: Node) -> Body:
        """The body with this call's attributes bound, converted to ``body.convert_to``."""
        target = body.convert_to
        assert target is not None and body.version is not None
        key_parts: list[tuple[str, bytes]] = []
        for ref in sorted(body.references):
            bound = call.attributes.get(ref)
            if bound is None:
                key_parts.append((ref, b""))
                continue
            if bound.ref_attr_name or bound.graphs:
                raise InlineError(
                    OPSET_CONFLICT,
                    f"cannot convert function {body.label} from opset {body.version} to "
                    f"{target}: attribute {ref!r} is given as "
                    f"{'a reference' if bound.ref_attr_name else 'a graph'} at this call, and "
                    "the body can only be converted once its attributes are known",
                    where=f"call {call.name or '<unnamed>'!r}",
                    hint="re-export the model so that its functions use one opset version, or "
                         "exclude the function from inlining (option 'exclude')")
            key_parts.append((ref, bound.proto.SerializeToString()))
        key = (id(body), tuple(key_parts))
        converted = self._converted.get(key)
        if converted is None:
            bound_graph = body.graph.copy()
            for source, node in list(zip(body.graph.walk(), bound_graph.walk(), strict=True)):
                for name, attribute in list(node.attributes.items()):
                    if not attribute.ref_attr_name:
                        continue
                    value = call.attributes.get(attribute.ref_attr_name)
                    if value is not None:
                        value = value if value.name == name else value.renamed(name)
                    else:
                        value = body.default_for(name, attribute.ref_attr_name,
                                                 self.fallbacks.get(source))
                    if value is None:
                        node.remove_attribute(name)
                    elif value.graphs:
                        node.set_attribute(Attribute(name, value.type, value.proto,
                                                     [g.copy() for g in value.graphs]))
                    else:
                        node.set_attribute(value)
            graph = convert_body(bound_graph, body.imports, body.version, target,
                                 label=body.label, ir_version=self.ir_version)
            converted = Body(body.function, graph, {**body.imports, "": target}, target, {})
            self.conversions[(body.label, body.version, target)] += 1
            self._converted[key] = converted
        return converted


def _replace_outer_names(graph: Graph, mapping: Mapping[str, str], names: FreshNames,
                         prefix: str, body: Body, *, strict: bool = True) -> None:
    """Make the body names ``graph`` uses from enclosing scopes read the call site's names.

    All names are replaced as one simultaneous substitution (``a -> b, b -> c`` moves
    the uses of ``a`` to ``b`` and those of ``b`` to ``c``). With ``strict``, every
    outer name must be a body name.
    """
    changes = {}
    for name in graph.free_names:
        if name not in mapping:
            if not strict:
                continue
            raise InlineError(
                BAD_FUNCTION_BODY,
                f"a graph in function {body.label} uses {name!r}, which the function does not "
                "define", hint="a function body may only use its inputs and the values its "
                "nodes compute")
        if mapping[name] != name:
            changes[name] = mapping[name]
    if not changes:
        return
    if any(target in changes for target in changes.values()):
        temporary = {old: names.value(prefix, f"outer.{old}") for old in changes}
        for old, tmp in temporary.items():
            graph.replace_uses(old, tmp, include_outputs=True)
        changes = {temporary[old]: new for old, new in changes.items()}
    for old, new in changes.items():
        if new:
            graph.replace_uses(old, new, include_outputs=True)
        else:
            _drop_uses(graph, old, where=f"function {body.label}")


def _move_uses(graph: Graph, old: str, new: str, *, where: str) -> None:
    """Make the uses of ``old`` read ``new`` (``""``: the optional input is omitted)."""
    if new:
        graph.replace_uses(old, new)
    else:
        _drop_uses(graph, old, where=where)


def _drop_uses(graph: Graph, name: str, *, where: str) -> None:
    """Turn every use of ``name`` in ``graph`` (and the subgraphs it reaches) into ``""``."""
    for sub in graphs_of(graph):
        if name in sub.output_names and not sub.is_defined(name):
            raise InlineError(
                BAD_CALL,
                f"{name!r} is an input the call omits, but a graph returns it as an output",
                where=where, hint="give the input at the call")
    graph.replace_uses(name, "", include_outputs=False)
