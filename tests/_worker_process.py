"""A helper process for the fuzzers: one JSON request per line, one line back (not a test).

The fuzzers run each case in a process of its own, so that a case that crashes,
hangs or eats memory costs that process, never the test run. Both fuzzers
(``_mutations`` for models, ``_checkpoint_mutations`` for checkpoints) start their
worker the same way: a module function that prints ``ready``, then answers each
request line on stdin with one line on stdout. :class:`WorkerProcess` is that
protocol; what a request holds and what an answer means is the fuzzer's business.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["WorkerProcess"]

HERE = Path(__file__).resolve().parent
_START_SECONDS = 120.0


class WorkerProcess:
    """A worker started on first use and again after it died.

    Args:
        root: Its working folder; its stderr goes to ``worker-stderr.log`` there.
        entry: The Python statement that runs the worker (``import m; m._worker()``),
            with this folder on ``PYTHONPATH``.
        env: Variables added to (or, with ``None``, removed from) the environment.
    """

    def __init__(self, root: Path, entry: str, env: Mapping[str, str | None] | None = None):
        self.root = root
        self.entry = entry
        self.env = dict(env or {})
        self.log = root / "worker-stderr.log"
        self.process: subprocess.Popen[str] | None = None
        self.exit_code: int | None = None  # of the last worker that did not answer

    def ask(self, request: Mapping[str, Any], seconds: float) -> str | None:
        """Send one request; the answer line, or ``None`` when none came in ``seconds``.

        Without an answer the worker is stopped (a hung one is killed) and
        :attr:`exit_code` says how it ended (``None``: it hung).
        """
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = _read_line(self.process, seconds)
        if line is None:
            self.exit_code = self.process.poll()
            self.close()
        return line

    def stderr_tail(self, size: int) -> str:
        """The last ``size`` characters the workers wrote to stderr."""
        return self.log.read_text(errors="replace")[-size:]

    def close(self) -> None:
        """Stop the worker (the next request starts a new one)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.process = None

    def _start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
               "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        for name, value in self.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        with open(self.log, "wb") as log:  # the worker's stderr: why it died, if it does
            process = subprocess.Popen(
                [sys.executable, "-c", self.entry], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=self.root)
        if _read_line(process, _START_SECONDS) != "ready":
            process.kill()
            process.wait()
            raise RuntimeError(f"the worker did not start: {self.stderr_tail(2000)}")
        return process


def _read_line(process: subprocess.Popen[str], seconds: float) -> str | None:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    if not ready:
        return None
    line = process.stdout.readline()
    return line.strip() if line else None
