"""Run ONNX's checker and shape inference on a model without touching its weights.

``onnx.checker`` and ``onnx.shape_inference`` take a serialized model: handing them
``model.to_proto()`` would copy every embedded weight (and fail past 2 GiB), and
external data would be looked up relative to the current folder. Both only need
the weights' types and shapes, so :func:`structural_proto` writes the main graph's
large or external initializers as typed graph inputs instead. Small initializers
(shape tensors and the like) stay, so shape inference can still propagate their
values.

Strict shape inference is the costly half of the full check (on a 100k-node model,
four times the checker proper). :func:`strict_inference` runs it for anyone who needs
a model's types (``lint-gradients`` does) and remembers the outcome with the model's
fingerprint; :func:`run_checker` then reuses it while the model has not changed, so
a pipeline that lints, then checks, infers once.

Both are C++, and a model onnx does not expect could crash them, and the process with
them (older onnx releases segfaulted on malformed ``Gemm``, ``Conv``, ``Einsum`` and
``OneHotEncoder`` nodes; the fuzzers find no such model for the onnx graphpass
needs). :func:`check_model` and :func:`infer_shapes` run them here by default, or, with
the environment variable ``GRAPHPASS_ONNX_ISOLATION=process``, in a separate process
that may crash alone: the call then raises a ``RuntimeError`` saying so (the ``check``
and ``infer-shapes`` passes report it as a finding), and a call that takes longer than
``GRAPHPASS_ONNX_TIMEOUT`` seconds (600 by default) is stopped the same way::

    GRAPHPASS_ONNX_ISOLATION=process graphpass lint untrusted.onnx -p check
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import onnx

from graphpass.files import _onnx_worker as _worker
from graphpass.ir import Model, Tensor
from graphpass.ir.proto import model_to_chunks, model_to_proto, subgraph_protos

__all__ = ["ISOLATION_ENV", "TIMEOUT_ENV", "CheckerProblem", "check_model", "infer_shapes",
           "run_checker", "strict_inference", "structural_bytes", "structural_proto"]

ISOLATION_ENV: Final = "GRAPHPASS_ONNX_ISOLATION"
"""Set to ``process`` to run onnx's checker and shape inference in a separate process."""
TIMEOUT_ENV: Final = "GRAPHPASS_ONNX_TIMEOUT"
"""With isolation: the seconds one call may take (default 600)."""

INLINE_LIMIT: Final = 4096
"""Initializers up to this many bytes stay in the proto given to the checker."""

_NODE_PATTERNS = (
    re.compile(r"[Nn]ode\.?\s*[Nn]ame: (?P<node>\S*)\s*OpType: (?P<op>\S+)"),
    re.compile(r"of node:\s*name: (?P<node>\S*)\s*OpType: (?P<op>\S+)"),
    re.compile(r"\(op_type:(?P<op>[^,]+), node name: (?P<node>[^)]*)\)"),
    re.compile(r"Node \((?P<node>[^)]*)\)"),
)


@dataclass(frozen=True)
class CheckerProblem:
    """What the ONNX checker said about a model.

    Attributes:
        kind: ``validation`` (the checker proper) or ``inference`` (strict shape
            inference, run by the full check).
        message: The checker's message, first lines only.
        node: The node it names, when it names one.
    """

    kind: str
    message: str
    node: str | None = None


def structural_proto(model: Model, *, inline_limit: int = INLINE_LIMIT) -> onnx.ModelProto:
    """The model as a ``ModelProto`` with its large and external weights left out.

    Main-graph initializers that are external or larger than ``inline_limit`` bytes
    become graph inputs of the same type and shape. Initializers of subgraphs (rare,
    and never the big weights) are embedded.

    Args:
        model: The model; it is not changed.
        inline_limit: Initializers up to this size are kept as they are.

    Returns:
        A new proto, fit for ``onnx.checker`` and ``onnx.shape_inference``.
    """
    # Keyed by name: the stub protos are copied into the model and then freed, so
    # their ids are reused and cannot identify them.
    stubs: dict[str, Tensor] = {}

    def emit(tensor: Tensor) -> onnx.TensorProto:
        if tensor.is_external or tensor.nbytes > inline_limit:
            stubs[tensor.name] = tensor
            return onnx.TensorProto(name=tensor.name, data_type=tensor.dtype, dims=tensor.shape)
        embedded: onnx.TensorProto = tensor.to_proto()
        return embedded

    proto: onnx.ModelProto = model_to_proto(model, emit)
    if not stubs:
        return proto
    main = proto.graph
    main_stubs: list[onnx.TensorProto] = []
    kept: list[onnx.TensorProto] = []
    for tensor_proto in main.initializer:
        if tensor_proto.name in stubs and not _has_data(tensor_proto):
            main_stubs.append(tensor_proto)
        else:
            kept.append(tensor_proto)
    declared = {value.name for value in main.input}
    del main.initializer[:]
    main.initializer.extend(kept)
    for stub in main_stubs:
        if stub.name not in declared:
            main.input.append(onnx.helper.make_tensor_value_info(
                stub.name, stub.data_type, list(stub.dims)))
    for graph in subgraph_protos(main):
        for index, tensor_proto in enumerate(graph.initializer):
            if tensor_proto.name in stubs and not _has_data(tensor_proto):
                graph.initializer[index].CopyFrom(stubs[tensor_proto.name].to_embedded_proto())
    # Graph inputs without initializers need IR version 4 or later.
    proto.ir_version = max(proto.ir_version, 4)
    return proto


def structural_bytes(model: Model, *, inline_limit: int = INLINE_LIMIT) -> bytes:
    """``structural_proto(model).SerializeToString()``, in about half the time.

    The main graph is written node by node from the protos it was loaded from
    (:func:`graphpass.ir.proto.model_to_chunks`), not built as a proto first.
    """
    decided: dict[int, bool] = {}  # by id: the model holds every tensor during the call

    def stubbed(tensor: Tensor) -> bool:
        known = decided.get(id(tensor))
        if known is None:
            known = decided[id(tensor)] = tensor.is_external or tensor.nbytes > inline_limit
        return known

    def emit(tensor: Tensor) -> onnx.TensorProto:  # subgraphs' initializers: embedded
        embedded: onnx.TensorProto = tensor.to_embedded_proto() if stubbed(tensor) \
            else tensor.to_proto()
        return embedded

    try:
        return b"".join(model_to_chunks(model, emit, declare_instead=stubbed))
    except ValueError:  # fields protobuf does not know: the plain way
        plain: bytes = structural_proto(model, inline_limit=inline_limit).SerializeToString()
        return plain


@dataclass(frozen=True)
class _Inferred:
    """What :func:`strict_inference` found, for the model as it was (its fingerprint)."""

    fingerprint: int
    structure: bytes  # the serialized structural_proto
    problem: CheckerProblem | None


_INFERRED: weakref.WeakKeyDictionary[Model, _Inferred] = weakref.WeakKeyDictionary()


def strict_inference(model: Model) -> tuple[onnx.ModelProto | None, CheckerProblem | None]:
    """Strict shape inference on the model's structure, as the full check runs it.

    The outcome is remembered for :func:`run_checker` until the model changes.

    Args:
        model: The model; it is not changed and its weights are not read.

    Returns:
        The inferred proto and ``None``, or ``None`` and the problem inference found.
    """
    fingerprint = model.fingerprint()
    structure = structural_bytes(model)
    try:
        inferred = infer_shapes(structure, check_type=True, strict_mode=True, data_prop=False)
    except onnx.shape_inference.InferenceError as error:
        problem = _problem("inference", error)
        _INFERRED[model] = _Inferred(fingerprint, structure, problem)
        return None, problem
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as error:
        return None, _problem("inference", error)  # not what the full check would say
    _INFERRED[model] = _Inferred(fingerprint, structure, None)
    return inferred, None


def run_checker(model: Model, *, full_check: bool = False) -> CheckerProblem | None:
    """Run ``onnx.checker.check_model`` on the model's structure.

    Args:
        model: The model; it is not changed and its weights are not read.
        full_check: Also run strict shape inference (what ``check`` does); its
            outcome from :func:`strict_inference` is reused if the model is unchanged.

    Returns:
        The first problem the checker reports, or ``None`` if it is satisfied.
    """
    known = _INFERRED.get(model) if full_check else None
    if known is not None and known.fingerprint == model.fingerprint():
        try:
            check_model(known.structure)
        except (onnx.checker.ValidationError, ValueError, RuntimeError) as error:
            return _problem("validation", error)
        return known.problem
    structure = structural_bytes(model)
    try:
        check_model(structure, full_check=full_check)
    except onnx.shape_inference.InferenceError as error:
        return _problem("inference", error)
    except (onnx.checker.ValidationError, ValueError, RuntimeError) as error:
        return _problem("validation", error)
    return None


def check_model(proto: onnx.ModelProto | bytes, *, full_check: bool = False) -> None:
    """``onnx.checker.check_model``, here or in the isolated process (see the module doc).

    Raises:
        onnx.checker.ValidationError: The model breaks a rule.
        onnx.shape_inference.InferenceError: Strict shape inference fails (full check).
        RuntimeError: The isolated process crashed or took too long.
    """
    if not _isolated():
        onnx.checker.check_model(proto, full_check=full_check)
        return
    _WORKER.call(b"c", _worker.FULL if full_check else 0, proto, "checker")


def infer_shapes(proto: onnx.ModelProto | bytes, *, check_type: bool = False,
                 strict_mode: bool = False, data_prop: bool = False) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes``, here or in the isolated process.

    Returns:
        The model with the types and shapes inference found.

    Raises:
        onnx.shape_inference.InferenceError: Inference fails (strict mode).
        RuntimeError: The isolated process crashed or took too long.
    """
    if not _isolated():
        inferred: onnx.ModelProto = onnx.shape_inference.infer_shapes(
            proto, check_type=check_type, strict_mode=strict_mode, data_prop=data_prop)
        return inferred
    flags = ((_worker.FULL if check_type else 0) | (_worker.STRICT if strict_mode else 0)
             | (_worker.DATA_PROPAGATION if data_prop else 0))
    result = onnx.ModelProto()
    result.ParseFromString(_WORKER.call(b"i", flags, proto, "shape inference"))
    return result


def _isolated() -> bool:
    return os.environ.get(ISOLATION_ENV, "").strip().lower() in ("process", "1", "true", "yes")


class _Worker:
    """The isolated process (started on first use, again after it dies), one call at a time."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the process that started the worker (a fork must start its own)
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The process id of the running worker (for tests)."""
        return self._process.pid if self._process is not None else None

    def call(self, operation: bytes, flags: int, proto: onnx.ModelProto | bytes,
             what: str) -> bytes:
        payload = proto if isinstance(proto, bytes) else proto.SerializeToString()
        with self._lock:
            process = self._started()
            assert process.stdin is not None and process.stdout is not None
            deadline = time.monotonic() + _timeout()
            try:
                process.stdin.write(operation + bytes([flags]) + struct.pack("<Q", len(payload)))
                process.stdin.write(payload)
                process.stdin.flush()
                answer = self._answer(process, deadline)
            except (BrokenPipeError, OSError):
                answer = None
            if answer is None:
                raise self._failure(process, what, time.monotonic() >= deadline)
        kind, parts = answer
        if kind == b"o":
            return parts[0]
        name, message = (part.decode("utf-8", "replace") for part in parts)
        error_type = {"ValidationError": onnx.checker.ValidationError,
                      "InferenceError": onnx.shape_inference.InferenceError,
                      "ValueError": ValueError}.get(name)
        raise (error_type(message) if error_type is not None
               else RuntimeError(f"{name}: {message}"))

    def _started(self) -> subprocess.Popen[bytes]:
        if self._owner != os.getpid():
            self._process = None  # inherited through fork: the parent's, not ours to use
        if self._process is None or self._process.poll() is not None:
            self._owner = os.getpid()
            script = Path(_worker.__file__)
            # Not ``python script.py``: that would put this package's folder first on the path.
            bootstrap = ("import runpy, sys; sys.path.pop(0); "
                         "runpy.run_path(sys.argv[1], run_name='__main__')")
            self._process = subprocess.Popen(
                [sys.executable, "-c", bootstrap, str(script)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self._process

    def _answer(self, process: subprocess.Popen[bytes],
                deadline: float) -> tuple[bytes, list[bytes]] | None:
        kind = _read(process, 1, deadline)
        if kind == b"o":
            block = _read_block(process, deadline)
            return None if block is None else (kind, [block])
        if kind == b"e":
            name = _read_block(process, deadline)
            message = _read_block(process, deadline)
            return None if name is None or message is None else (kind, [name, message])
        return None

    def _failure(self, process: subprocess.Popen[bytes], what: str,
                 timed_out: bool) -> RuntimeError:
        self._process = None
        if timed_out:
            process.kill()
            process.wait()
            return RuntimeError(f"onnx's {what} took longer than {_timeout():g} s on this model "
                                "and was stopped")
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        code = process.poll()
        if code is not None and code < 0:
            how = f"killed by signal {-code} ({signal.Signals(-code).name})"
        else:
            how = f"ended with exit code {code}"
        return RuntimeError(f"onnx's {what} crashed on this model (its process was {how}); "
                            "the model is malformed in a way onnx does not catch")

    def close(self) -> None:
        """Stop the worker (it also ends with this process, when its input closes)."""
        with self._lock:
            if self._process is not None:
                self._process.kill()
                self._process.wait()
                self._process = None


def _timeout() -> float:
    try:
        return max(0.001, float(os.environ.get(TIMEOUT_ENV, "600")))
    except ValueError:
        return 600.0


def _read(process: subprocess.Popen[bytes], size: int, deadline: float) -> bytes | None:
    """``size`` bytes from the worker before ``deadline``, or ``None`` (it died, or is late)."""
    assert process.stdout is not None
    descriptor = process.stdout.fileno()
    chunks: list[bytes] = []
    while size > 0:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([descriptor], [], [], left)[0]:
            return None
        chunk = os.read(descriptor, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_block(process: subprocess.Popen[bytes], deadline: float) -> bytes | None:
    head = _read(process, 8, deadline)
    if head is None:
        return None
    (size,) = struct.unpack("<Q", head)
    return _read(process, size, deadline) if size else b""


_WORKER = _Worker()


def _problem(kind: str, error: Exception) -> CheckerProblem:
    text = str(error).strip()
    node = None
    for pattern in _NODE_PATTERNS:
        match = pattern.search(text)
        if match:
            groups = match.groupdict()
            node = groups.get("node") or groups.get("op") or None
            if node:
                break
    lines = [line for line in text.splitlines() if line.strip()]
    message = " ".join(line.strip() for line in lines[:3])
    return CheckerProblem(kind, message[:1000], node)


def _has_data(tensor: onnx.TensorProto) -> bool:
    return any(field.name not in ("name", "dims", "data_type", "doc_string", "metadata_props")
               for field, _ in tensor.ListFields())

