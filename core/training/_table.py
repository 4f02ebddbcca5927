"""The builders a trainer can use, looked up by ``(domain, op_type)`` and opset.

:class:`BuilderTable` indexes :class:`~graphpass.training.GradientBuilder` objects;
:func:`registered_builders` gives the table of the builders a registry holds
(graphpass's own come from the built-in plugin, the others from installed plugins).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from graphpass.errors import PluginError
from graphpass.framework import Registry
from graphpass.training._builder import GradientBuilder
from graphpass.training.rules import normalize_domain

__all__ = ["BuilderTable", "registered_builders"]


class BuilderTable:
    """Gradient builders by ``(domain, op_type)``, each over its opset range."""

    def __init__(self, builders: Iterable[GradientBuilder] = ()):
        """Index ``builders``.

        Raises:
            PluginError: Two builders cover the same operator at one opset version.
        """
        self._by_key: dict[tuple[str, str], list[GradientBuilder]] = {}
        for builder in builders:
            self.add(builder)

    def add(self, builder: GradientBuilder) -> None:
        """Add a builder.

        Raises:
            PluginError: Another builder covers the same operator at an opset version
                this one covers too.
        """
        entries = self._by_key.setdefault(builder.key, [])
        for other in entries:
            if _overlap(builder, other):
                raise PluginError(
                    f"two gradient builders cover {builder.name} and {other.name} at the "
                    f"same opset versions", hint="give them disjoint opset ranges "
                                                 "(since_version / until_version)")
        entries.append(builder)

    def find(self, domain: str, op_type: str, opset: int) -> GradientBuilder | None:
        """The builder for ``op_type`` of ``domain`` at ``opset``, if any."""
        for builder in self._by_key.get((normalize_domain(domain), op_type), ()):
            if builder.covers(opset):
                return builder
        return None

    def versions(self, domain: str, op_type: str) -> list[GradientBuilder]:
        """Every builder of ``op_type`` of ``domain`` (any opset)."""
        return list(self._by_key.get((normalize_domain(domain), op_type), ()))

    def __iter__(self) -> Iterator[GradientBuilder]:
        for entries in self._by_key.values():
            yield from entries

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_key.values())

    def keys(self) -> set[tuple[str, str]]:
        """The ``(domain, op_type)`` pairs with at least one builder."""
        return set(self._by_key)


def _overlap(a: GradientBuilder, b: GradientBuilder) -> bool:
    a_end = a.until_version if a.until_version is not None else 10**9
    b_end = b.until_version if b.until_version is not None else 10**9
    return a.since_version <= b_end and b.since_version <= a_end


def registered_builders(registry: Registry) -> BuilderTable:
    """The table of the builders a registry holds (the built-in plugin's and every plugin's).

    A pass hands down ``context.registry``; code of its own builds one with
    :func:`graphpass.framework._plugin_loading.default_registry`.
    """
    return BuilderTable(entry.item for entry in registry.gradient_builders.values())
