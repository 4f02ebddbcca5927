"""The finding codes of ``inline-functions`` and the error it raises.

Notes and warnings are reported as findings; problems that would make the
inlined model wrong stop the pass with an :class:`InlineError` whose message
starts with its code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from graphpass.errors import PassError

__all__ = [
    "ATTRIBUTE_NOT_DECLARED",
    "BAD_CALL",
    "BAD_FUNCTION_BODY",
    "BODY_CONVERTED",
    "CALLS_INLINED",
    "CODES",
    "DEFAULT_PROMOTED",
    "DEPTH_EXCEEDED",
    "FUNCTION_REMOVED",
    "KEPT_FOR_BUILDER",
    "KEPT_RECURSION",
    "OPSET_CONFLICT",
    "RECURSION",
    "UNKNOWN_SELECTOR",
    "UNREPRESENTABLE_DEFAULT",
    "InlineError",
]

# Notes (info).
CALLS_INLINED = "GP101"
FUNCTION_REMOVED = "GP102"
BODY_CONVERTED = "GP103"
DEFAULT_PROMOTED = "GP104"
KEPT_FOR_BUILDER = "GP105"

# Warnings.
UNKNOWN_SELECTOR = "GP110"
ATTRIBUTE_NOT_DECLARED = "GP111"
KEPT_RECURSION = "GP112"

# Errors (raised).
RECURSION = "GP120"
BAD_CALL = "GP121"
BAD_FUNCTION_BODY = "GP122"
OPSET_CONFLICT = "GP123"
DEPTH_EXCEEDED = "GP124"
UNREPRESENTABLE_DEFAULT = "GP125"


CODES: Final[Mapping[str, str]] = {
    CALLS_INLINED: "The calls of one function were replaced by its body.",
    FUNCTION_REMOVED: "A function was dropped from the model: nothing calls it any more.",
    BODY_CONVERTED: "A function body was converted to the opset version of the graph it was "
                    "inlined into.",
    DEFAULT_PROMOTED: "A kept function received an attribute default so that an inlined callee's "
                      "default survives.",
    KEPT_FOR_BUILDER: "The calls of a function were kept: the plan builds a training graph, and a"
                      " registered gradient builder differentiates the function's operator (it "
                      "wins over the body).",
    UNKNOWN_SELECTOR: "``only`` or ``exclude`` names a function the model does not have.",
    ATTRIBUTE_NOT_DECLARED: "A call passes an attribute the function does not declare; it has no "
                            "effect and is dropped.",
    KEPT_RECURSION: "Functions that are not inlined call each other in a cycle; they are left as "
                    "they are.",
    RECURSION: "A function calls itself, directly or through others: it cannot be inlined.",
    BAD_CALL: "A call does not fit the function: too many inputs or outputs, or a mistyped "
              "attribute.",
    BAD_FUNCTION_BODY: "A function body uses a name it does not define, or does not produce an "
                       "output.",
    OPSET_CONFLICT: "A function's opset imports cannot be reconciled with the graph it is inlined"
                    " into.",
    DEPTH_EXCEEDED: "Calls nest deeper than ``max_depth``.",
    UNREPRESENTABLE_DEFAULT: "A kept function would need different defaults for one attribute "
                             "(see ``GP104``).",
}
"""Every code of ``inline-functions``, with its description."""


class InlineError(PassError):
    """``inline-functions`` cannot inline the model correctly.

    Attributes:
        code: The finding code (``GP12x``); the message starts with it.
    """

    def __init__(self, code: str, message: str, *, where: str | None = None,
                 hint: str | None = None):
        self.code = code
        super().__init__(f"{code} {message}", where=where, hint=hint)
