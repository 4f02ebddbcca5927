"""Run the code blocks of a Markdown page in order, as a reader would.

``python`` blocks run in one namespace; ``console`` blocks run each ``$ graphpass ...``
line with this interpreter (``python -m graphpass``), and the ``<!-- test: exit N -->``
comment before the block gives the exit code it must end with. Other blocks (``text``,
``toml``) are shown, not run.

The docs tests run a page in their own process, in the current folder::

    from _docs_runner import run_page

    ran = run_page(PAGE)  # raises at the first block that fails

A page that needs another environment (the tutorial needs the onnxruntime-training
venv) runs there as a script, which prints one JSON line: ``{"ok": true, "ran": N}``
(python blocks and commands) or the failing block and why::

    python tests/_docs_runner.py PAGE.md WORKDIR
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_BLOCK = re.compile(r"(?:<!-- test: exit (?P<exit>\d+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```",
                    re.DOTALL)


@dataclass(frozen=True)
class Block:
    """A fenced code block: its number on the page (from 1), language, text, and the
    exit code its ``<!-- test: exit N -->`` comment asks for."""

    number: int
    lang: str
    body: str
    exit: int | None
    start: int


@dataclass(frozen=True)
class Command:
    """A ``$ graphpass ...`` line of a console block, as it ran."""

    line: str
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Ran:
    """How much of a page ran: python blocks, console blocks, and their commands."""

    python: int = 0
    console: int = 0
    commands: int = 0


def blocks(text: str) -> list[Block]:
    """Every fenced code block of a page, in order."""
    return [Block(number, match["lang"], match["body"],
                  int(match["exit"]) if match["exit"] is not None else None, match.start())
            for number, match in enumerate(_BLOCK.finditer(text), start=1)]


def block_after(text: str, marker: str, lang: str) -> str:
    """The text of the first ``lang`` block after ``marker`` on the page."""
    start = text.index(marker)
    found = next((b for b in blocks(text) if b.start >= start and b.lang == lang), None)
    assert found is not None, f"no {lang} block after {marker!r}"
    return found.body


def section_blocks(text: str, section: str, lang: str) -> list[str]:
    """The text of every ``lang`` block under the heading ``## section``, up to the next one."""
    heading = f"## {section}"
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    end = len(text) if end < 0 else end
    return [b.body for b in blocks(text) if b.lang == lang and start <= b.start < end]


class PageRunner:
    """Runs the blocks of one page in one namespace, counting what ran."""

    def __init__(self, page: Path, *, on_command: Callable[[Command], None] | None = None,
                 timeout: float = 600) -> None:
        """Read the page.

        Args:
            page: The Markdown page.
            on_command: Called after each command that exited as the page says.
            timeout: Seconds a command may take.
        """
        self.page = page
        self.blocks = blocks(page.read_text())
        self.ran = Ran()
        self._namespace: dict[str, object] = {"__name__": "docs_page"}
        self._on_command = on_command
        self._timeout = timeout

    def run(self, block: Block) -> None:
        """Run one block (``python`` or ``console``; others are skipped)."""
        if block.lang == "python":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # dont_inherit: a reader's code does not get this module's __future__ imports.
                exec(compile(block.body, f"{self.page.name} block {block.number}", "exec",
                             dont_inherit=True),
                     self._namespace)
            self.ran.python += 1
        elif block.lang == "console":
            if block.exit is None:
                raise AssertionError(f"console block without <!-- test: exit N -->: {block.body}")
            for line in block.body.splitlines():
                if line.startswith("$ "):
                    self._command(line, block.exit)
            self.ran.console += 1

    def _command(self, line: str, expected: int) -> None:
        command = shlex.split(line[2:])
        if command[0] != "graphpass":
            raise AssertionError(f"only graphpass commands run here: {line}")
        done = subprocess.run([sys.executable, "-m", "graphpass", *command[1:]],
                              capture_output=True, text=True, check=False, timeout=self._timeout)
        if done.returncode != expected:
            raise AssertionError(f"{line!r} exited {done.returncode}, not {expected}:"
                                 f"\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
        self.ran.commands += 1
        if self._on_command is not None:
            self._on_command(Command(line, done.returncode, done.stdout, done.stderr))


def run_page(page: Path, *, on_command: Callable[[Command], None] | None = None,
             timeout: float = 600) -> Ran:
    """Run every block of ``page`` in order in the current folder; see :class:`PageRunner`."""
    runner = PageRunner(page, on_command=on_command, timeout=timeout)
    for block in runner.blocks:
        runner.run(block)
    return runner.ran


def main() -> int:
    page, workdir = Path(sys.argv[1]), Path(sys.argv[2])
    os.chdir(workdir)
    runner = PageRunner(page)
    for block in runner.blocks:
        try:
            runner.run(block)
        except BaseException as error:  # report which block failed, then stop
            print(json.dumps({"ok": False, "block": block.number, "lang": block.lang,
                              "ran": runner.ran.python + runner.ran.commands,
                              "error": f"{type(error).__name__}: {error}"[-5000:],
                              "traceback": traceback.format_exc()[-3000:]}))
            return 0
    print(json.dumps({"ok": True, "ran": runner.ran.python + runner.ran.commands}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
