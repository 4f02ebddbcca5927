"""Protobuf's wire format, for writing the bulk of a model without building its proto.

Saving a model serializes the main graph's nodes and initializers one by one and
splices them into the bytes of the rest of the model (see
:func:`graphpass.ir.proto.model_to_chunks`). That is exact because protobuf writes
the fields of a message in the order of their numbers, fields its schema does not
know last, and a message field as its tag, its length and the message's bytes; the
tests compare the result with ``SerializeToString`` on the round-trip corpora.

:class:`NodeWriter` gives each node's bytes: an unchanged loaded node's straight from
its proto; a changed one's from its fields, taking what did not change (and what the
IR does not model) from the proto it was loaded from, in the order protobuf uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import onnx

from graphpass.ir._node import (
    CHANGED_ATTRIBUTES,
    CHANGED_FIELDS,
    CHANGED_INPUTS,
    CHANGED_METADATA,
    CHANGED_NAME,
    CHANGED_OUTPUTS,
)

if TYPE_CHECKING:
    from graphpass.ir import Attribute, Graph, Node

__all__ = ["NodeWriter", "encode_varint", "field_prefix", "find_field", "first_field_after"]

_LENGTH_DELIMITED: Final = 2

# NodeProto's fields: all length-delimited, so an entry's tag is (number << 3) | 2.
_INPUT, _OUTPUT, _NAME, _OP_TYPE, _ATTRIBUTE, _DOC_STRING, _DOMAIN, _OVERLOAD, _METADATA = (
    range(1, 10))
_LAST_NODE_FIELD: Final = 10  # device_configurations
_INPUT_TAG, _OUTPUT_TAG, _NAME_TAG, _OP_TYPE_TAG, _ATTRIBUTE_TAG, _DOC_STRING_TAG, _DOMAIN_TAG, \
    _OVERLOAD_TAG, _METADATA_TAG = (number << 3 | 2 for number in range(1, 10))
_KEY_TAG: Final = 0x0A  # StringStringEntryProto.key
_VALUE_TAG: Final = 0x12  # StringStringEntryProto.value


def _tag(number: int) -> int:
    return number << 3 | _LENGTH_DELIMITED


# ============================================================== varints, fields
def encode_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a protobuf varint."""
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


_PREFIXES: dict[tuple[int, int], bytes] = {}


def field_prefix(tag: int, size: int) -> bytes:
    """The bytes before a length-delimited field's content: its tag and length."""
    key = (tag, size)
    prefix = _PREFIXES.get(key)
    if prefix is None:
        out = bytearray((tag,)) if tag < 0x80 else bytearray()
        if tag >= 0x80:
            encode_varint(out, tag)
        encode_varint(out, size)
        prefix = bytes(out)
        if len(_PREFIXES) < 1 << 16:  # lengths repeat a lot; keep the table bounded
            _PREFIXES[key] = prefix
    return prefix


def _short_prefixes(tag: int) -> tuple[bytes, ...]:
    """The prefixes of a field with a one-byte tag and a content of 0 to 127 bytes."""
    return tuple(bytes((tag, size)) for size in range(0x80))


_SHORT_PREFIXES: Final = {tag: _short_prefixes(tag) for tag in (
    _INPUT_TAG, _OUTPUT_TAG, _NAME_TAG, _OP_TYPE_TAG, _ATTRIBUTE_TAG, _DOC_STRING_TAG,
    _DOMAIN_TAG, _OVERLOAD_TAG, _METADATA_TAG, _KEY_TAG, _VALUE_TAG)}


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _skip_field(data: bytes, position: int, wire_type: int) -> int:
    if wire_type == 0:
        _, position = _read_varint(data, position)
        return position
    if wire_type == 1:
        return position + 8
    if wire_type == 5:
        return position + 4
    if wire_type == _LENGTH_DELIMITED:
        size, position = _read_varint(data, position)
        return position + size
    raise ValueError(f"unexpected wire type {wire_type}")  # groups: not in ONNX's schema


def find_field(data: bytes, position: int, end: int, number: int) -> tuple[int, int, int]:
    """``(tag start, content start, content end)`` of the first length-delimited field.

    Raises:
        ValueError: No such field between ``position`` and ``end``.
    """
    while position < end:
        start = position
        key, position = _read_varint(data, position)
        if key >> 3 == number and key & 7 == _LENGTH_DELIMITED:
            size, content = _read_varint(data, position)
            return start, content, content + size
        position = _skip_field(data, position, key & 7)
    raise ValueError(f"field {number} not found")


def first_field_after(data: bytes, position: int, end: int, number: int) -> int:
    """Where the first field numbered above ``number`` starts (or ``end``)."""
    while position < end:
        key, following = _read_varint(data, position)
        if key >> 3 > number:
            return position
        position = _skip_field(data, following, key & 7)
    return end


# ===================================================================== nodes
class _Loaded:
    """A loaded ``NodeProto`` taken apart: each known field's entries, then the rest."""

    __slots__ = ("fields", "middle", "rest", "tail", "texts")

    def __init__(self, proto: onnx.NodeProto):
        data = proto.SerializeToString()
        fields: list[list[bytes]] = [[] for _ in range(_LAST_NODE_FIELD + 1)]
        position, end, last = 0, len(data), 0
        while position < end:
            start = position
            key, position = _read_varint(data, position)
            number, wire_type = key >> 3, key & 7
            position = _skip_field(data, position, wire_type)
            if wire_type != _LENGTH_DELIMITED or not last <= number <= _LAST_NODE_FIELD:
                position = start  # fields protobuf does not know: written last, kept as is
                break
            last = number
            fields[number].append(data[start:position])
        self.fields = [b"".join(entries) for entries in fields]
        self.rest = data[position:]
        # What a node that changed only its inputs, outputs, name or metadata shares
        # with its loaded proto: fields 4 to 8, then 10 and the unknown ones.
        self.middle = b"".join(self.fields[_OP_TYPE:_METADATA])
        self.tail = self.fields[_LAST_NODE_FIELD] + self.rest
        self.texts = {_NAME: proto.name, _OP_TYPE: proto.op_type, _DOMAIN: proto.domain,
                      _OVERLOAD: proto.overload, _DOC_STRING: proto.doc_string}


TensorEmitter = Callable[["onnx.TensorProto"], onnx.TensorProto]
AttributeWriter = Callable[["Attribute"], bytes]


class NodeWriter:
    """Serializes the nodes of one save (caches what repeats: loaded protos, attributes).

    Args:
        write_graph_attribute: Serializes an attribute that holds graphs.
    """

    def __init__(self, write_graph_attribute: AttributeWriter):
        self._write_graph_attribute = write_graph_attribute
        self._loaded: dict[tuple[int, int], _Loaded] = {}
        self._attributes: dict[int, tuple[onnx.AttributeProto, bytes]] = {}

    def entries(self, graph: Graph) -> list[bytes]:
        """The ``node`` entries of ``graph`` (tag, length, message), in order."""
        parts: list[bytes] = []
        append = parts.append
        prefix = field_prefix
        node_tag = _tag(1)
        for node in graph:
            loaded = node._loaded_from
            if loaded is not None and not node._changed:
                body = loaded[node._loaded_index].SerializeToString()
            else:
                body = self.node(node)
            append(prefix(node_tag, len(body)))
            append(body)
        return parts

    def node(self, node: Node) -> bytes:
        """The bytes of one node, as ``SerializeToString`` of its proto gives them.

        Written into one buffer, field by field, in protobuf's order (a hot loop: a
        save after inlining writes every node this way).
        """
        changed = node._changed
        out = bytearray()
        if node._loaded_from is None:
            _append_strings(out, _INPUT_TAG, node._inputs)
            _append_strings(out, _OUTPUT_TAG, node._outputs)
            _append_text(out, _NAME_TAG, node._name)
            _append_text(out, _OP_TYPE_TAG, node._op_type)
            self._append_attributes(out, node)
            _append_text(out, _DOC_STRING_TAG, node._doc_string)
            _append_text(out, _DOMAIN_TAG, node._domain)
            _append_text(out, _OVERLOAD_TAG, node._overload)
            _append_metadata(out, node._decoded_metadata())
            return bytes(out)
        key = (id(node._loaded_from), node._loaded_index)
        loaded = self._loaded.get(key)
        if loaded is None:
            loaded = self._loaded[key] = _Loaded(node._loaded_from[node._loaded_index])
        fields, texts = loaded.fields, loaded.texts
        # The strings a copy of a loaded node changes (the hot loop of a save after
        # inlining: every copy renames its inputs, outputs and itself).
        if changed & CHANGED_INPUTS:
            _append_strings(out, _INPUT_TAG, node._inputs)
        else:
            out += fields[_INPUT]
        if changed & CHANGED_OUTPUTS:
            _append_strings(out, _OUTPUT_TAG, node._outputs)
        else:
            out += fields[_OUTPUT]
        # A text field that changed is written from the node (an emptied one is left
        # out); one equal to the loaded value keeps the loaded entry (present if empty).
        name = node._name
        if changed & CHANGED_NAME and texts[_NAME] != name:
            _append_text(out, _NAME_TAG, name)
        else:
            out += fields[_NAME]
        if not changed & (CHANGED_FIELDS | CHANGED_ATTRIBUTES):
            out += loaded.middle
        else:
            other_fields = changed & CHANGED_FIELDS
            if other_fields and texts[_OP_TYPE] != node._op_type:
                _append_text(out, _OP_TYPE_TAG, node._op_type)
            else:
                out += fields[_OP_TYPE]
            if changed & CHANGED_ATTRIBUTES:
                self._append_attributes(out, node)
            else:
                out += fields[_ATTRIBUTE]
            for number, tag, value in ((_DOC_STRING, _DOC_STRING_TAG, node._doc_string),
                                       (_DOMAIN, _DOMAIN_TAG, node._domain),
                                       (_OVERLOAD, _OVERLOAD_TAG, node._overload)):
                if other_fields and texts[number] != value:
                    _append_text(out, tag, value)
                else:
                    out += fields[number]
        if changed & CHANGED_METADATA:
            metadata = node._metadata
            if metadata is not None and len(metadata) == 1:  # a copy's provenance, usually
                entry = _ENTRIES.get(next(iter(metadata.items())))
                if entry is not None:
                    out += entry
                else:
                    _append_metadata(out, metadata)
            else:
                _append_metadata(out, node._decoded_metadata())
        else:
            out += fields[_METADATA]
        out += loaded.tail
        return bytes(out)

    def _append_attributes(self, out: bytearray, node: Node) -> None:
        cache = self._attributes
        for attribute in node._decoded_attributes().values():
            if attribute.graphs:
                data = self._write_graph_attribute(attribute)
            else:
                proto = attribute._proto
                cached = cache.get(id(proto))
                if cached is None or cached[0] is not proto:
                    cached = cache[id(proto)] = (proto, proto.SerializeToString())
                data = cached[1]
            _append_length_delimited(out, _ATTRIBUTE_TAG, data)


def _append_length_delimited(out: bytearray, tag: int, data: bytes) -> None:
    size = len(data)
    out.append(tag)
    if size < 0x80:
        out.append(size)
    else:
        encode_varint(out, size)
    out += data


def _append_strings(out: bytearray, tag: int, values: tuple[str, ...]) -> None:
    short = _SHORT_PREFIXES[tag]
    for value in values:
        data = value.encode()
        size = len(data)
        out += short[size] if size < 0x80 else field_prefix(tag, size)
        out += data


def _append_text(out: bytearray, tag: int, value: str) -> None:
    """A text field of a node written from its fields: left out when empty."""
    if value:
        _append_length_delimited(out, tag, value.encode())


_ENTRIES: dict[tuple[str, str], bytes] = {}


def _append_metadata(out: bytearray, metadata: dict[str, str]) -> None:
    for item in metadata.items():
        entry = _ENTRIES.get(item)  # the inlined nodes of one call share their provenance
        if entry is None:
            key, value = item
            body = bytearray()
            _append_length_delimited(body, _KEY_TAG, key.encode())
            _append_length_delimited(body, _VALUE_TAG, value.encode())
            whole = bytearray()
            _append_length_delimited(whole, _METADATA_TAG, bytes(body))
            entry = bytes(whole)
            if len(_ENTRIES) >= 4096:
                _ENTRIES.clear()
            _ENTRIES[item] = entry
        out += entry
