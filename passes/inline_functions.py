"""The ``inline-functions`` pass: replace calls of model-local functions with their bodies.

ONNX Runtime training has no gradient for a call of a model-local function (``The
gradient builder has not been registered: Block for node Block_1``), and torch
exports one for every module listed in ``export_modules_as_functions``. The ONNX
IR lets a runtime inline a body it has no kernel for; this pass does it ahead of
time, with the full semantics of the spec:

* calls everywhere: the main graph, function bodies, and subgraphs at any depth;
  nested calls at any depth (callees are expanded into their callers first, so
  every body is expanded once and a call site costs the size of its body);
  recursion is an error that names the cycle;
* attribute references bound from the call, else from the function's declared
  default, else left out (inside subgraphs and for graph-typed attributes too);
* IR v10 overloads, omitted optional inputs and outputs, outputs that are inputs,
  the body's ``value_info``, fresh readable names (``<call>/<name>``);
* opset imports merged, and a body written for another version of the default
  ONNX domain converted with onnx's version converter (or a clear error);
* provenance: every inlined node's ``metadata_props["graphpass.inlined_from"]``
  holds the call stack, e.g. ``local::M@M_1 > local::N@N_3``;
* a gradient builder wins over a body: when the plan builds a training graph
  (``build-training-graph``), the calls of a function whose operator (``domain``,
  ``name``, outside the ONNX domain) a registered gradient builder differentiates are
  kept, so that the builder, not the body, gives its gradient (``GP105``); naming the
  function in ``only`` inlines it all the same.

Example::

    from graphpass.passes.inline_functions import InlineFunctions
    result = InlineFunctions({"exclude": ["custom::FusedAttention"]}).run(model, context)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

from graphpass.errors import PipelineError
from graphpass.findings import Finding, Severity
from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import Attribute, Function, FunctionId, Model, format_function_id, paused_gc
from graphpass.passes._inline_body import PROVENANCE_KEY, Body, Fallbacks
from graphpass.passes._inline_callgraph import (
    CallGraph,
    build_call_graph,
    callees_first,
    check_depth,
    check_recursion,
    graphs_of,
)
from graphpass.passes._inline_codes import (
    ATTRIBUTE_NOT_DECLARED,
    BODY_CONVERTED,
    CALLS_INLINED,
    CODES,
    DEFAULT_PROMOTED,
    FUNCTION_REMOVED,
    KEPT_FOR_BUILDER,
    KEPT_RECURSION,
    UNKNOWN_SELECTOR,
    UNREPRESENTABLE_DEFAULT,
    InlineError,
)
from graphpass.passes._inline_expand import Inliner
from graphpass.passes._inline_names import FreshNames
from graphpass.passes._inline_opsets import (
    convert_body,
    default_version,
    merge_imports,
    normalize_domain,
)
from graphpass.passes._inline_selection import Selection, parse_selectors
from graphpass.training import registered_builders

__all__ = ["PROVENANCE_KEY", "InlineFunctions", "InlineOptions"]

_PASS = "inline-functions"
_TRAINING_GRAPH = "build-training-graph"
"""The pass whose gradient builders win over inlining, when it is planned."""


@dataclass
class InlineOptions:
    """Options of ``inline-functions``.

    Attributes:
        only: Inline only these functions (``domain::name`` for every overload, or
            ``domain::name:overload``). Empty: every model-local function.
        exclude: Never inline these functions (same form): their calls stay calls, e.g.
            to keep a fused kernel that a runtime implements.
        max_depth: A safety valve: refuse to inline calls nested deeper than this many
            levels. ``None`` (the default): no limit.
    """

    only: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    max_depth: int | None = None


class InlineFunctions(Pass):
    """Replace every call of a model-local function with the function's body."""

    name = _PASS
    description = "Replace every call of a model-local function with the function's body."
    codes = CODES
    Options = InlineOptions

    def __init__(self, options: InlineOptions | dict[str, object] | None = None,
                 **option_values: Any):
        """Create the pass.

        Args:
            options: :class:`InlineOptions`, a mapping of option names to values, or
                ``None`` for the defaults.
            **option_values: Options as keywords (``max_depth=3``).

        Raises:
            PipelineError: An option is unknown, mistyped, or names no function in the
                form ``domain::name[:overload]``.
        """
        super().__init__(options, **option_values)
        self.selection = Selection(parse_selectors(self.options.only, "only"),
                                   parse_selectors(self.options.exclude, "exclude"))
        if self.options.max_depth is not None and self.options.max_depth < 1:
            raise PipelineError(
                f"option 'max-depth' of pass {_PASS!r} must be at least 1, "
                f"got {self.options.max_depth}",
                hint="leave it unset for no limit")

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Inline the selected functions' calls everywhere in ``model`` and drop them.

        Raises:
            InlineError: The model cannot be inlined correctly (recursion, a call that does
                not fit its function, opsets that cannot be reconciled, nesting deeper
                than ``max_depth``). Every such problem that can be found before the model
                changes is found then.
        """
        kept = _kept_for_builders(model, context, self.selection)
        with paused_gc() as block:  # millions of objects are created and few freed
            block.owner = model  # what the pass creates lives (and dies) with the model
            return _Run(model, self.selection, self.options.max_depth, kept).run()


def _kept_for_builders(model: Model, context: PassContext, selection: Selection
                       ) -> dict[FunctionId, tuple[str, str]]:
    """The functions whose calls stay for a gradient builder: ``(builder, plugin)`` each.

    Only when the plan builds a training graph, for functions outside the ONNX domain
    that would be inlined and that ``only`` does not name (naming one there asks for its
    body).
    """
    if _TRAINING_GRAPH not in context.plan or not model.functions:
        return {}
    table = registered_builders(context.registry)
    kept: dict[FunctionId, tuple[str, str]] = {}
    for fid in model.functions:
        domain, name, _overload = fid
        if not normalize_domain(domain) or not selection.selects(fid) or any(
                selector.matches(fid) for selector in selection.only):
            continue
        builder = table.find(domain, name, model.opset_imports.get(domain, 1))
        if builder is not None:
            plugin = context.registry.plugin_of("gradient_builders", builder.name) or "?"
            kept[fid] = (builder.name, plugin)
    return kept


class _Run:
    """One run of the pass on one model."""

    def __init__(self, model: Model, selection: Selection, max_depth: int | None,
                 kept: dict[FunctionId, tuple[str, str]]):
        self.model = model
        self.selection = selection
        self.max_depth = max_depth
        self.kept = kept
        self.findings: list[Finding] = []
        self.conversions: list[tuple[str, int, int]] = []

    def run(self) -> PassResult:
        model = self.model
        functions = model.functions
        for option, selector in self.selection.unknown(functions):
            self._note(UNKNOWN_SELECTOR, Severity.WARNING,
                       f"option {option!r} names {selector.text!r}, but the model has no such "
                       "function", hint="check the spelling: 'domain::name' or "
                       "'domain::name:overload'")
        unchanged = PassResult(False, self.findings, {"calls inlined": 0, "functions removed": 0,
                                                      "bodies converted": 0})
        if not functions:
            return unchanged
        inlined = self.selection.inlined(functions) - set(self.kept)
        for fid, (builder, plugin) in sorted(self.kept.items(),
                                             key=lambda item: format_function_id(item[0])):
            label = format_function_id(fid)
            self._note(KEPT_FOR_BUILDER, Severity.INFO,
                       f"kept the calls of {label}: the plan builds a training graph, and the "
                       f"gradient builder {builder!r} of plugin {plugin!r} differentiates "
                       "them (it wins over the function's body)", function=label,
                       hint=f"name {label} in `only` to inline it all the same",
                       data={"builder": builder, "plugin": plugin})

        # Everything that can fail is checked before the model changes.
        call_graph = build_call_graph(model, inlined)
        for cycle in check_recursion(call_graph, inlined):
            self._note(KEPT_RECURSION, Severity.WARNING,
                       "functions that are not inlined call each other in a cycle: "
                       + " -> ".join(format_function_id(f) for f in cycle),
                       function=format_function_id(cycle[0]),
                       hint="no runtime can execute recursive ONNX functions")
        if not inlined:
            return unchanged
        check_depth(call_graph, inlined, self.max_depth)
        for (fid, attribute), count in sorted(call_graph.undeclared.items()):
            self._note(ATTRIBUTE_NOT_DECLARED, Severity.WARNING,
                       f"{count} call(s) of {format_function_id(fid)} pass attribute "
                       f"{attribute!r}, which the function does not declare; it is dropped",
                       function=format_function_id(fid))
        inliner = Inliner(FreshNames.for_model(model), model.ir_version)
        owners = self._owners(call_graph, inlined)
        bodies = self._prepare_bodies(call_graph, inlined, owners, inliner)
        owner_imports = [self._merged_imports(owner, version, callees, bodies)
                         for owner, version, callees in owners]

        # Change the model.
        for (owner, version, callees), imports in zip(owners, owner_imports, strict=True):
            graph = model.graph if owner is None else functions[owner].graph
            inliner.expand(graph, {callee: bodies[(callee, version)] for callee in callees})
            target = model.opset_imports if owner is None else functions[owner].opset_imports
            target.update(imports)
            if owner is not None:
                self._keep_defaults(functions[owner], inliner.fallbacks)
        for fid in sorted(inlined, key=format_function_id):
            model.remove_function(fid)
            count = inliner.calls[fid]
            label = format_function_id(fid)
            if count:
                self._note(CALLS_INLINED, Severity.INFO,
                           f"inlined {count} call(s) of {label} and removed the function",
                           function=label, data={"calls": count})
            else:
                self._note(FUNCTION_REMOVED, Severity.INFO,
                           f"removed function {label}: nothing calls it", function=label)
        for label, old_version, new_version in self.conversions:
            self._note(BODY_CONVERTED, Severity.INFO,
                       f"converted the body of {label} from opset {old_version} to "
                       f"{new_version}", function=label)
        total = sum(inliner.calls.values())
        stats = {"calls inlined": total, "functions removed": len(inlined),
                 "bodies converted": len(self.conversions) + len(inliner.conversions)}
        for (label, old_version, new_version), count in inliner.conversions.items():
            self._note(BODY_CONVERTED, Severity.INFO,
                       f"converted the body of {label} from opset {old_version} to "
                       f"{new_version} for {count} distinct set(s) of call attributes",
                       function=label)
        return PassResult(True, self.findings, stats)

    # ============================================================== planning
    def _owners(self, call_graph: CallGraph, inlined: set[FunctionId]
                ) -> list[tuple[FunctionId | None, int | None, list[FunctionId]]]:
        """The graphs that keep their calls' copies: ``(owner, version, callees)``.

        The main graph (owner ``None``) and every function that is not inlined but calls
        one that is; ``version`` is the default-domain version their copies must have.
        """
        functions = self.model.functions
        fallback = max((v for fid in inlined
                        if (v := default_version(functions[fid].opset_imports)) is not None),
                       default=None)

        def version_of(imports: dict[str, int]) -> int | None:
            version = default_version(imports)
            return version if version is not None else fallback

        owners: list[tuple[FunctionId | None, int | None, list[FunctionId]]] = []
        main_callees = sorted(call_graph.main_calls & inlined, key=format_function_id)
        owners.append((None, version_of(self.model.opset_imports), main_callees))
        for fid in sorted(functions, key=format_function_id):
            if fid in inlined:
                continue
            callees = sorted((c for c in call_graph.graph.successors(fid) if c in inlined),
                             key=format_function_id)
            if callees:
                owners.append((fid, version_of(functions[fid].opset_imports), callees))
        return owners

    def _prepare_bodies(self, call_graph: CallGraph, inlined: set[FunctionId],
                        owners: list[tuple[FunctionId | None, int | None, list[FunctionId]]],
                        inliner: Inliner) -> dict[tuple[FunctionId, int | None], Body]:
        """Expand every body that will be copied, once per default-domain version needed."""
        functions = self.model.functions
        needed: dict[FunctionId, set[int | None]] = {}
        pending = [(callee, version) for _, version, callees in owners for callee in callees]
        while pending:
            fid, version = pending.pop()
            versions = needed.setdefault(fid, set())
            if version in versions:
                continue
            versions.add(version)
            inner = _inner_version(functions[fid], version)
            pending.extend((callee, inner) for callee in call_graph.graph.successors(fid)
                           if callee in inlined)
        bodies: dict[tuple[FunctionId, int | None], Body] = {}
        for fid in callees_first(call_graph, inlined):
            for version in sorted(needed.get(fid, ()), key=lambda v: -1 if v is None else v):
                bodies[(fid, version)] = self._prepare_body(
                    functions[fid], version, call_graph, inlined, bodies, inliner)
        return bodies

    def _prepare_body(self, function: Function, version: int | None, call_graph: CallGraph,
                      inlined: set[FunctionId],
                      bodies: dict[tuple[FunctionId, int | None], Body],
                      inliner: Inliner) -> Body:
        inner = _inner_version(function, version)
        graph = function.graph.copy()
        callees = [c for c in call_graph.graph.successors(function.id) if c in inlined]
        inner_bodies = {callee: bodies[(callee, inner)] for callee in callees}
        inliner.expand(graph, inner_bodies)
        imports = {normalize_domain(d): v for d, v in function.opset_imports.items()}
        for body in sorted(inner_bodies.values(), key=lambda b: b.label):
            merge_imports(imports, body.imports, body.domains, what=f"function {body.label}",
                          into=f"function {function.qualified_name}")
        if inner is not None:
            imports[""] = inner
        body = Body(function, graph, imports, inner, inliner.fallbacks)
        if version is None or inner is None or inner == version or not body.uses_default_domain:
            return body
        if body.references:
            body.convert_to = version
            return body
        converted = convert_body(graph, imports, inner, version, label=body.label,
                                 ir_version=self.model.ir_version)
        self.conversions.append((body.label, inner, version))
        return Body(function, converted, {**imports, "": version}, version, {})

    def _merged_imports(self, owner: FunctionId | None, version: int | None,
                        callees: list[FunctionId],
                        bodies: dict[tuple[FunctionId, int | None], Body]) -> dict[str, int]:
        """The imports ``owner`` must gain for the bodies copied into it (checked now)."""
        functions = self.model.functions
        current = dict(self.model.opset_imports if owner is None
                       else functions[owner].opset_imports)
        into = "the model" if owner is None else f"function {format_function_id(owner)}"
        merged = {normalize_domain(d): v for d, v in current.items()}
        for callee in callees:
            body = bodies[(callee, version)]
            merge_imports(merged, body.imports, body.domains, what=f"function {body.label}",
                          into=into)
            if body.uses_default_domain and default_version(merged) is None \
                    and version is not None:
                merged[""] = version
        known = {normalize_domain(d) for d in current}
        return {d: v for d, v in merged.items() if d not in known}

    # ============================================================ finishing
    def _keep_defaults(self, function: Function, fallbacks: Fallbacks) -> None:
        """Give a kept function the defaults of the callees inlined into it, where needed.

        A callee's attribute that the kept function passed on by reference keeps the
        callee's default when the kept function's own call omits it: that becomes the
        kept function's declared default (possible when every reference to that
        attribute in its body falls back to the same value).
        """
        fallbacks_by_ref: dict[str, list[Attribute | None]] = {}
        for graph in graphs_of(function.graph):
            for node in graph:
                for name, attribute in node.attributes.items():
                    if attribute.ref_attr_name:
                        fallback = fallbacks.get(node, {}).get(name)
                        fallbacks_by_ref.setdefault(attribute.ref_attr_name, []).append(fallback)
        label = function.qualified_name
        for ref, entries in sorted(fallbacks_by_ref.items()):
            if ref in function.attribute_defaults:
                continue
            found = [fallback for fallback in entries if fallback is not None]
            if not found:
                continue
            if len(found) != len(entries) or len({_value_key(f) for f in found}) != 1:
                raise InlineError(
                    UNREPRESENTABLE_DEFAULT,
                    f"function {label} passes its attribute {ref!r} on to inlined functions "
                    "whose defaults for it differ, so it cannot be kept as a function",
                    where=f"function {label}",
                    hint=f"inline {label} too (remove it from 'exclude'), or give {ref!r} a "
                         "default in the function")
            default = found[0]
            function.attribute_defaults[ref] = default.renamed(ref)
            if ref in function.attribute_names:
                function.attribute_names.remove(ref)
            self._note(DEFAULT_PROMOTED, Severity.INFO,
                       f"function {label} now declares a default for attribute {ref!r} (the "
                       "default of the function inlined into it)", function=label)

    def _note(self, code: str, severity: Severity, message: str, *, function: str | None = None,
              hint: str | None = None, data: dict[str, object] | None = None) -> None:
        self.findings.append(Finding(code, severity, message, _PASS, function=function,
                                     hint=hint, data=data or {}))


def _inner_version(function: Function, outer: int | None) -> int | None:
    """The default-domain version of a function's own nodes (its import, else ``outer``)."""
    version = default_version(function.opset_imports)
    return version if version is not None else outer


def _value_key(attribute: Attribute) -> bytes:
    """A key equal for attributes with equal values (whatever their names)."""
    if attribute.graphs:
        return repr(id(attribute)).encode()
    copy = onnx.AttributeProto()
    copy.CopyFrom(attribute.proto)
    copy.name = ""
    return bytes(copy.SerializeToString(deterministic=True))
