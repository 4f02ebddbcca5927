"""A process that runs onnx's checker and shape inference for another one.

onnx's checker and shape inference are C++: a model that makes them crash (older
onnx releases segfaulted on malformed ``Gemm``, ``Conv`` or ``Einsum`` nodes) would
take the calling process with it. With ``GRAPHPASS_ONNX_ISOLATION=process``,
:mod:`graphpass.files._checking` sends the calls here instead. This file runs as a
script (``python _onnx_worker.py``) and imports nothing but onnx, so that it starts
quickly.

The protocol, over standard input and output: a request is an operation byte (``c``
check, ``i`` infer shapes), a flags byte (``1`` full check or check types, ``2``
strict mode, ``4`` data propagation) and the serialized model with its length (8 bytes,
little-endian). The answer is ``o`` with the inferred model (empty for a check), or
``e`` with the exception's class name and message.
"""

from __future__ import annotations

import struct
import sys
from typing import BinaryIO, Final

FULL: Final = 1
STRICT: Final = 2
DATA_PROPAGATION: Final = 4


def read_exactly(stream: BinaryIO, size: int) -> bytes:
    """``size`` bytes from ``stream`` (fewer only at its end)."""
    chunks = []
    while size > 0:
        chunk = stream.read(size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def write_block(stream: BinaryIO, data: bytes) -> None:
    """``data`` with its length in front."""
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)


def read_block(stream: BinaryIO) -> bytes | None:
    """What :func:`write_block` wrote, or ``None`` at the end of the stream."""
    head = read_exactly(stream, 8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    data = read_exactly(stream, size)
    return data if len(data) == size else None


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer requests until the input ends."""
    import onnx

    while True:
        head = read_exactly(requests, 2)
        payload = read_block(requests)
        if len(head) < 2 or payload is None:
            return
        operation, flags = head[:1], head[1]
        try:
            proto = onnx.ModelProto()
            proto.ParseFromString(payload)
            if operation == b"c":
                onnx.checker.check_model(proto, full_check=bool(flags & FULL))
                result = b""
            else:
                result = onnx.shape_inference.infer_shapes(
                    proto, check_type=bool(flags & FULL), strict_mode=bool(flags & STRICT),
                    data_prop=bool(flags & DATA_PROPAGATION)).SerializeToString()
        except Exception as error:
            answers.write(b"e")
            write_block(answers, type(error).__name__.encode())
            write_block(answers, str(error).encode("utf-8", "replace"))
        else:
            answers.write(b"o")
            write_block(answers, result)
        answers.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
