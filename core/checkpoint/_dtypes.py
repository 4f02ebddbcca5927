"""Element types of checkpoint formats, as ONNX element types.

Every checkpoint entry reports its element type as an ONNX ``TensorProto`` data
type, so that it compares directly with the model's initializers.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import onnx

__all__ = ["SAFETENSORS_DTYPES", "numpy_to_onnx", "torch_to_onnx"]

_T = onnx.TensorProto

SAFETENSORS_DTYPES: Final[dict[str, int]] = {
    "BOOL": _T.BOOL,
    "U8": _T.UINT8,
    "I8": _T.INT8,
    "U16": _T.UINT16,
    "I16": _T.INT16,
    "F16": _T.FLOAT16,
    "BF16": _T.BFLOAT16,
    "U32": _T.UINT32,
    "I32": _T.INT32,
    "F32": _T.FLOAT,
    "U64": _T.UINT64,
    "I64": _T.INT64,
    "F64": _T.DOUBLE,
    "C64": _T.COMPLEX64,
    "F8_E4M3": _T.FLOAT8E4M3FN,
    "F8_E5M2": _T.FLOAT8E5M2,
}
"""safetensors dtype names and the ONNX element types with the same bytes."""

_TORCH_NAMES: Final[dict[str, int]] = {
    "bool": _T.BOOL,
    "uint8": _T.UINT8,
    "int8": _T.INT8,
    "uint16": _T.UINT16,
    "int16": _T.INT16,
    "float16": _T.FLOAT16,
    "bfloat16": _T.BFLOAT16,
    "uint32": _T.UINT32,
    "int32": _T.INT32,
    "float32": _T.FLOAT,
    "uint64": _T.UINT64,
    "int64": _T.INT64,
    "float64": _T.DOUBLE,
    "complex64": _T.COMPLEX64,
    "complex128": _T.COMPLEX128,
    "float8_e4m3fn": _T.FLOAT8E4M3FN,
    "float8_e5m2": _T.FLOAT8E5M2,
    "float8_e4m3fnuz": _T.FLOAT8E4M3FNUZ,
    "float8_e5m2fnuz": _T.FLOAT8E5M2FNUZ,
}


def torch_to_onnx(dtype: Any) -> int | None:
    """The ONNX element type of a ``torch.dtype``, or ``None`` if ONNX has none."""
    return _TORCH_NAMES.get(str(dtype).removeprefix("torch."))


def numpy_to_onnx(dtype: np.dtype[Any]) -> int | None:
    """The ONNX element type of a numpy dtype, or ``None`` if ONNX has none."""
    if dtype.hasobject or dtype.kind in "USVOMm":
        return None
    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(dtype))
    except (KeyError, ValueError, TypeError):
        return None
