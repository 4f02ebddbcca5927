"""Which model-local functions ``inline-functions`` inlines: the ``only`` / ``exclude`` options.

A selector names a function as ``domain::name`` (every overload of it) or
``domain::name:overload`` (one overload). The domain may be empty
(``::name``) for a function in the default domain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from graphpass.errors import PipelineError
from graphpass.ir import FunctionId

__all__ = ["FunctionSelector", "Selection", "parse_selectors"]

_SELECTOR = re.compile(r"^(?P<domain>[^:]*)::(?P<name>[^:]+)(?::(?P<overload>[^:]+))?$")


@dataclass(frozen=True)
class FunctionSelector:
    """One entry of ``only`` or ``exclude``.

    Attributes:
        text: The selector as the user wrote it.
        domain: The function domain.
        name: The function name.
        overload: The overload, or ``None`` for every overload.
    """

    text: str
    domain: str
    name: str
    overload: str | None

    def matches(self, function_id: FunctionId) -> bool:
        """Whether this selector names the function ``function_id``."""
        domain, name, overload = function_id
        return (domain == self.domain and name == self.name
                and (self.overload is None or overload == self.overload))


def parse_selectors(texts: Sequence[str], option: str) -> tuple[FunctionSelector, ...]:
    """Parse the entries of one option.

    Args:
        texts: The entries, ``domain::name`` or ``domain::name:overload``.
        option: The option's name, for messages.

    Raises:
        PipelineError: An entry does not have that form.
    """
    selectors = []
    for text in texts:
        match = _SELECTOR.match(text.strip())
        if match is None:
            raise PipelineError(
                f"option {option!r} of pass 'inline-functions': {text!r} does not name a function",
                hint="write 'domain::name' (every overload) or 'domain::name:overload', "
                     "e.g. 'pkg.torch.module::Block' or '::MyFunction' for the default domain",
            )
        selectors.append(FunctionSelector(text, match["domain"], match["name"],
                                          match["overload"]))
    return tuple(selectors)


@dataclass(frozen=True)
class Selection:
    """The ``only`` and ``exclude`` options, parsed.

    Attributes:
        only: When not empty, only the functions these name are inlined.
        exclude: Functions never inlined (their calls stay calls).
    """

    only: tuple[FunctionSelector, ...] = ()
    exclude: tuple[FunctionSelector, ...] = ()

    def selects(self, function_id: FunctionId) -> bool:
        """Whether calls of ``function_id`` are to be inlined."""
        if self.only and not any(s.matches(function_id) for s in self.only):
            return False
        return not any(s.matches(function_id) for s in self.exclude)

    def unknown(self, functions: Iterable[FunctionId]) -> list[tuple[str, FunctionSelector]]:
        """The selectors that name no function of the model, with their option name."""
        known = list(functions)
        return [
            (option, selector)
            for option, selectors in (("only", self.only), ("exclude", self.exclude))
            for selector in selectors
            if not any(selector.matches(function_id) for function_id in known)
        ]

    def inlined(self, functions: Mapping[FunctionId, object]) -> set[FunctionId]:
        """The keys of ``functions`` whose calls are inlined."""
        return {function_id for function_id in functions if self.selects(function_id)}
