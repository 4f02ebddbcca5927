"""The conversion between ``onnx`` protos and the IR, under its 0.2 path.

It lives in the IR, :mod:`graphpass.ir.proto` (the IR's own serialization, below every
other layer); this module gives the very same functions, so that code importing
``graphpass.files.proto`` keeps working.
"""

from __future__ import annotations

from graphpass.ir import proto as _ir_proto
from graphpass.ir.proto import *  # noqa: F403 - every public name, the same objects

__all__ = _ir_proto.__all__
