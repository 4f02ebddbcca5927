"""``metadata_props`` of nodes and graphs, decoded only when someone asks.

Most nodes of a loaded model carry no metadata, or metadata nobody reads. A loaded
:class:`~graphpass.Node` or :class:`~graphpass.Graph` therefore keeps the repeated
``metadata_props`` field it was loaded with and decodes it into a dict on first
use. Until it is changed, the loaded field is what gets written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["LazyMetadata"]


class LazyMetadata:
    """``metadata`` and ``set_metadata`` for IR objects loaded with ``metadata_props``.

    The object holds ``_metadata`` (the decoded dict, or ``None`` until needed) and
    ``_metadata_proto`` (the loaded repeated field, or ``None`` once the dict has
    been changed), and tells its owner about changes through ``_touch``.
    """

    __slots__ = ("_metadata", "_metadata_proto")

    _metadata: dict[str, str] | None
    _metadata_proto: Any

    @property
    def metadata(self) -> Mapping[str, str]:
        """``metadata_props`` as a read-only mapping (see :meth:`set_metadata`)."""
        return MappingProxyType(self._decoded_metadata())

    def set_metadata(self, key: str, value: str | None) -> None:
        """Set (or with ``None`` remove) one ``metadata_props`` entry."""
        metadata = self._decoded_metadata()
        self._metadata_proto = None  # written from the dict from now on
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
        self._touch()

    def _decoded_metadata(self) -> dict[str, str]:
        if self._metadata is None:
            self._metadata = {}
            if self._metadata_proto is not None:
                for entry in self._metadata_proto:
                    self._metadata[entry.key] = entry.value
        return self._metadata

    def _copy_metadata_from(self, other: LazyMetadata) -> None:
        """Take ``other``'s metadata (the loaded field is shared: it is never changed)."""
        self._metadata = dict(other._metadata) if other._metadata is not None else None
        self._metadata_proto = other._metadata_proto

    def _touch(self) -> None:
        raise NotImplementedError
