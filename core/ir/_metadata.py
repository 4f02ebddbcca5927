"""``metadata_props`` of nodes and graphs, decoded only when someone asks.

Most nodes of a loaded model carry no metadata, or metadata nobody reads. A loaded
:class:`~graphpass.Node` or :class:`~graphpass.Graph` therefore keeps the repeated
``metadata_props`` field it was loaded with (a node finds it in the ``NodeProto`` it
was loaded from) and decodes it into a dict on first use. Until it is changed, the
loaded field is what gets written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["NO_METADATA", "LazyMetadata"]

NO_METADATA: dict[str, str] = {}
"""``_metadata`` of an object loaded without ``metadata_props``: known empty, without a
trip to the proto, and without a dict of its own (a model's nodes would make hundreds of
thousands, and the collector would walk the whole heap for them). Shared, so never
changed: :meth:`LazyMetadata.set_metadata` gives the object a dict of its own first."""


class LazyMetadata:
    """``metadata`` and ``set_metadata`` for IR objects loaded with ``metadata_props``.

    The object holds ``_metadata`` (the decoded dict, or ``None`` until needed); the
    subclass says where the loaded field is (:meth:`_loaded_metadata`) and forgets it
    once the dict has been changed (:meth:`_forget_loaded_metadata`), and tells its
    owner about changes through ``_touch``.
    """

    __slots__ = ("_metadata",)

    _metadata: dict[str, str] | None

    @property
    def metadata(self) -> Mapping[str, str]:
        """``metadata_props`` as a read-only mapping (see :meth:`set_metadata`)."""
        return MappingProxyType(self._decoded_metadata())

    def set_metadata(self, key: str, value: str | None) -> None:
        """Set (or with ``None`` remove) one ``metadata_props`` entry."""
        metadata = self._decoded_metadata()
        if metadata is NO_METADATA:
            metadata = self._metadata = {}
        self._forget_loaded_metadata()  # written from the dict from now on
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
        self._touch()

    def _decoded_metadata(self) -> dict[str, str]:
        metadata = self._metadata
        if metadata is None:
            metadata = self._metadata = {}
            loaded = self._loaded_metadata()
            if loaded is not None:
                for entry in loaded:
                    metadata[entry.key] = entry.value
        return metadata  # NO_METADATA too: callers only read it (set_metadata replaces it)

    def _loaded_metadata(self) -> Any:
        """The ``metadata_props`` field as loaded, or ``None`` (none, or changed since)."""
        raise NotImplementedError

    def _forget_loaded_metadata(self) -> None:
        raise NotImplementedError

    def _touch(self) -> None:
        raise NotImplementedError
