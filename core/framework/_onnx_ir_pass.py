"""Passes whose work is done on an ``onnx_ir`` model, and pattern rewrites as passes.

:class:`OnnxIRPass` runs code written for ``onnx_ir`` (its own passes, onnxscript's
optimizer and rewriter, a plugin's) inside a graphpass pipeline, with graphpass's
planning, options, findings, ``--verify`` and reports. The model is converted with
:class:`graphpass.files._onnx_ir_bridge.OnnxIRConversion` (weights are not read, what the
pass leaves alone is written back as it was), changed in place by
:meth:`OnnxIRPass.run_onnx_ir`, and written back only when something changed::

    import onnx_ir.passes.common
    import graphpass

    class Dedupe(graphpass.OnnxIRPass):
        name = "dedupe-initializers"
        description = "Merge initializers with the same contents."

        def run_onnx_ir(self, model, context):
            onnx_ir.passes.common.DeduplicateInitializersPass()(model)

A plugin that only has onnxscript pattern rewrites returns :class:`RewriteRules`
from its ``graphpass_rewrite_rules`` hook; each becomes a pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from graphpass.errors import GraphpassError, PassError, PluginError, first_line
from graphpass.files import OnnxIRConversion, count_nodes
from graphpass.findings import Finding, Severity
from graphpass.framework._pass_base import Pass, PassContext, PassResult

if TYPE_CHECKING:
    import onnx_ir as ir

    from graphpass.ir import Model

__all__ = ["CHANGED_CODE", "OnnxIRPass", "RewritePass", "RewriteRules"]

CHANGED_CODE = "GP800"
"""An onnx_ir-based pass changed the model (node counts before and after, by operator)."""

_log = logging.getLogger("graphpass")


class OnnxIRPass(Pass):
    """Base class of a pass that works on an ``onnx_ir.Model``.

    Subclasses set the usual class attributes (``name``, ``description``,
    ``Options`` ...) and implement :meth:`run_onnx_ir`. The base class converts the
    model, tells whether it changed, writes it back, reports node counts before and
    after (finding ``GP800``), and turns what the library raises into a
    :class:`~graphpass.PassError` that names the pass, its plugin and the library.

    Attributes:
        library: What does the work, for messages (``onnx_ir``, ``onnxscript``).
    """

    library: ClassVar[str] = "onnx_ir"
    codes: ClassVar[dict[str, str]] = {
        CHANGED_CODE: "the pass changed the model: node counts before and after, by operator",
    }

    def run_onnx_ir(self, model: ir.Model, context: PassContext) -> ir.Model | None:
        """Change ``model`` in place.

        Args:
            model: The model, converted to onnx_ir.
            context: Paths, checkpoints, the plan and earlier results.

        Returns:
            ``None``, or a new model that replaces ``model`` (for passes that are not
            in place).
        """
        raise NotImplementedError(f"pass {self.name!r} does not implement run_onnx_ir()")

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Convert the model, run :meth:`run_onnx_ir`, write back what changed."""
        start = time.perf_counter()
        conversion = OnnxIRConversion(model)
        converted = time.perf_counter()
        before = count_nodes(conversion.ir_model)
        try:
            replacement = self.run_onnx_ir(conversion.ir_model, context)
        except GraphpassError:
            raise
        except Exception as error:  # whatever the library raises
            raise PassError(f"{self.library} raised {_describe(error)}",
                            hint=f"the model is left as it was before this pass; leave "
                                 f"{self.name!r} out of the pipeline, or report the model to the "
                                 f"authors of the pass's plugin (or of {self.library})"
                            ) from error
        if replacement is not None:
            conversion.ir_model = replacement
        ran = time.perf_counter()
        after = count_nodes(conversion.ir_model)
        changed = False if self.analysis else conversion.write_back(model)
        context.log.info("%s: converted to onnx_ir in %.3f s, ran in %.3f s, written back in "
                         "%.3f s", self.name, converted - start, ran - converted,
                         time.perf_counter() - ran)
        stats = {"nodes before": sum(before.values()), "nodes after": sum(after.values())}
        findings = [_changes(before, after)] if changed else []
        return PassResult(changed=changed, findings=findings, stats=stats)


def _changes(before: dict[str, int], after: dict[str, int]) -> Finding:
    total_before, total_after = sum(before.values()), sum(after.values())
    by_op = {op: [before.get(op, 0), after.get(op, 0)]
             for op in sorted(set(before) | set(after)) if before.get(op, 0) != after.get(op, 0)}
    shown = ", ".join(f"{op} {old} -> {new}" for op, (old, new) in list(by_op.items())[:8])
    more = f", and {len(by_op) - 8} more operators" if len(by_op) > 8 else ""
    detail = f" ({shown}{more})" if by_op else " (same operators: nodes, names or types changed)"
    return Finding(CHANGED_CODE, Severity.INFO,
                   f"{total_before} -> {total_after} nodes{detail}",
                   data={"nodes_before": total_before, "nodes_after": total_after,
                         "by_operator": by_op})


def _describe(error: BaseException) -> str:
    """``Type: message`` of the error at the bottom of the chain.

    onnx_ir's pass managers wrap what a pass raises (``PassError: An error occurred
    at step 0``) once per level; the original error is the one that says what failed.
    """
    root, seen = error, {id(error)}
    while True:
        cause = root.__cause__ or root.__context__
        if cause is None or id(cause) in seen:
            break
        seen.add(id(cause))
        root = cause
    return f"{type(root).__name__}: {first_line(root)}"


# ============================================================== pattern rewrites
class RewritePass(OnnxIRPass):
    """A pass that applies onnxscript pattern-rewrite rules (``onnxscript.rewriter.rewrite``).

    Like ``rewrite``, it removes the nodes, functions and opset imports the rewrites
    leave unused.

    Attributes:
        rules: The rules (``onnxscript.rewriter.RewriteRule`` objects or a
            ``RewriteRuleSet``); ``None`` for onnxscript's default rules.
    """

    library: ClassVar[str] = "onnxscript"
    rules: ClassVar[Any] = None

    def run_onnx_ir(self, model: ir.Model, context: PassContext) -> None:
        """Apply the rules until none matches."""
        from onnxscript import rewriter

        rewriter.rewrite(model, pattern_rewrite_rules=self.rules)


@dataclass(frozen=True)
class RewriteRules:
    """onnxscript pattern-rewrite rules that a plugin gives as one graphpass pass.

    Returned by a plugin's ``graphpass_rewrite_rules`` hook::

        from onnxscript.rewriter import pattern

        def _pattern(op, x):
            return op.Neg(op.Neg(x))

        def _replacement(op, x):
            return op.Identity(x)

        @hookimpl
        def graphpass_rewrite_rules():
            return [graphpass.RewriteRules(
                "fold-double-negation", [pattern.RewriteRule(_pattern, _replacement)],
                description="Replace Neg(Neg(x)) by x.")]

    Attributes:
        name: The pass name.
        rules: ``onnxscript.rewriter.RewriteRule`` objects (or a ``RewriteRuleSet``).
        description: One line for ``graphpass passes``.
        requires: Passes that must run first.
        after: Passes this one runs after, when they are planned too.
        before: Passes this one runs before, when they are planned too.
    """

    name: str
    rules: Sequence[Any] | Any
    description: str = ""
    requires: Sequence[str] = ()
    after: Sequence[str] = ()
    before: Sequence[str] = ()
    _class: list[type[Pass]] = field(default_factory=list, repr=False, compare=False)

    def as_pass(self) -> type[Pass]:
        """The pass class that applies these rules (made once).

        Raises:
            PluginError: The rules are not onnxscript rewrite rules.
        """
        if self._class:
            return self._class[0]
        from onnxscript import rewriter

        rules = self.rules
        if isinstance(rules, rewriter.RewriteRule):
            rules = [rules]
        if not isinstance(rules, rewriter.RewriteRuleSet):
            rules = list(rules) if isinstance(rules, Sequence) and not isinstance(
                rules, str) else [rules]
            bad = [r for r in rules if not isinstance(r, rewriter.RewriteRule)]
            if bad or not rules:
                raise PluginError(
                    f"{_short(bad[0])} is not an onnxscript.rewriter.RewriteRule" if bad
                    else "no rules given",
                    hint="make them with onnxscript.rewriter.pattern.RewriteRule(target, "
                         "replacement)")
            rules = rewriter.RewriteRuleSet(rules)
        namespace = {
            "name": self.name,
            "description": self.description or f"Apply the pattern rewrites {self.name!r}.",
            "requires": tuple(self.requires), "after": tuple(self.after),
            "before": tuple(self.before), "rules": rules,
            "__doc__": self.description or None, "__module__": __name__,
        }
        pass_class = type(_class_name(self.name), (RewritePass,), namespace)
        self._class.append(pass_class)
        return pass_class


def _short(item: Any) -> str:
    text = getattr(item, "__qualname__", None) or repr(item)
    return text if len(text) <= 60 else text[:57] + "..."


def _class_name(pass_name: str) -> str:
    return "".join(part.capitalize() for part in pass_name.replace(".", "-").replace(
        "_", "-").split("-") if part) or "Rewrite"
