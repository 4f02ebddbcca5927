"""What the crash tests share: forked writers killed at will, strace, a small MLP.

``tests/_crash_writes.py`` (save's commit protocol), ``tests/_crash_training.py``
(``graphpass train --state-dir``) and ``tests/_crash_atomic.py`` (every other writer)
each run a write in a forked child of their own process (no interpreter start-up, so
a kill can land at any step), with test hooks passed in its environment and its output
kept in a log, and judge what the kill left.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["CALL", "decode_status", "mlp_proto", "run", "run_cli", "start", "start_cli",
           "strace_works"]

CALL = re.compile(r"^(?P<pid>\d+)\s+(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<result>-?\d+|\?)")
"""One finished system call in ``strace -f`` output: pid, name, arguments, result."""


# ===================================================================== children
def start(body: Callable[[], int], env: dict[str, str], log: Path,
          gate: int | None = None) -> int:
    """Fork a child running ``body`` with ``env`` added, its output in ``log``; its pid.

    The child exits with what ``body`` returns, or 3 (the traceback in ``log``) where it
    raises; it never returns to the caller's code. With ``gate`` it first waits for a
    byte on that descriptor.
    """
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            if gate is not None:
                os.read(gate, 1)
            os.environ.update(env)
            descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(descriptor, 1)
            os.dup2(descriptor, 2)
            code = body()
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def decode_status(status: int) -> int:
    """A wait status as ``-signal`` (killed) or the exit code."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def run(body: Callable[[], int], log: Path, **env: str) -> int:
    """Run ``body`` in a forked child to its end (see :func:`start`); ``-signal`` or the code."""
    _, status = os.waitpid(start(body, env, log), 0)
    return decode_status(status)


def _cli(arguments: list[str]) -> Callable[[], int]:
    def body() -> int:
        from graphpass.cli import main

        return main(arguments)
    return body


def start_cli(arguments: list[str], env: dict[str, str], log: Path,
              gate: int | None = None) -> int:
    """Fork a child running ``graphpass <arguments>`` (see :func:`start`); its pid."""
    return start(_cli(arguments), env, log, gate)


def run_cli(arguments: list[str], log: Path, **env: str) -> int:
    """Run ``graphpass <arguments>`` in a forked child to its end; ``-signal`` or the code."""
    return run(_cli(arguments), log, **env)


# ======================================================================= strace
def strace_works() -> bool:
    """Whether ``strace`` is installed and may trace here (ptrace can be forbidden)."""
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-o", os.devnull, "true"], capture_output=True, check=False)
    return probe.returncode == 0


# ======================================================================= models
def mlp_proto(width: int, layers: int, scale: float = 1.0) -> onnx.ModelProto:
    """``layers`` of ``Tanh(x @ W_i)``, ``width`` wide, weights ``w<i>`` scaled by ``scale``."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(
        (scale * rng.standard_normal((width, width)) / 8).astype(np.float32), f"w{i}")
        for i in range(layers)]
    nodes, x = [], "x"
    for i in range(layers):
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Tanh", [f"m{i}"], [f"h{i}"])]
        x = f"h{i}"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["n", width])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
