"""What the benchmark scripts share (not a benchmark: ``run_all.py`` skips ``_*`` files).

* :func:`run_worker`: a measurement in a fresh process (no warm caches, no collector
  state or memory high-water mark left by other runs);
* :class:`Stopwatch`: CPU time of this process, lap by lap, and wall time;
* :func:`peak_rss_bytes`: this process's peak resident memory;
* :func:`write_docs_section`: a benchmark's section of ``docs/benchmarks.md``;
* :func:`judge_zoo`: judge zoo cases one at a time or in a process pool, printing each;
* :func:`markdown_text`: free text (an error message) made safe for a Markdown table or list.
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def _now() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


class Stopwatch:
    """CPU seconds of this process (``time.process_time``) per lap, and wall seconds.

    The benchmarks compare CPU time: on a shared machine wall time mostly measures
    the neighbours.
    """

    def __init__(self) -> None:
        self._marks = [_now()]

    def lap(self) -> float:
        """End a lap here; return its CPU seconds."""
        self._marks.append(_now())
        return self._marks[-1][0] - self._marks[-2][0]

    @property
    def cpu(self) -> float:
        """CPU seconds from the start to the end of the last lap."""
        return self._marks[-1][0] - self._marks[0][0]

    @property
    def wall(self) -> float:
        """Wall seconds from the start to the end of the last lap."""
        return self._marks[-1][1] - self._marks[0][1]


def peak_rss_bytes() -> int:
    """This process's peak resident memory: ``VmHWM``.

    Not ``ru_maxrss``: that also counts the parent's memory the process had between
    fork and exec.
    """
    try:
        kib = int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0])
    except (OSError, IndexError):
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def run_worker(script: str, *arguments: str, python: str | None = None) -> dict[str, Any]:
    """Run ``script --worker ARGUMENTS`` in a fresh Python; return the JSON it prints last.

    Args:
        script: The benchmark script.
        arguments: What follows ``--worker``.
        python: The interpreter (default: this one). Another checkout's venv measures
            that version of graphpass with the same script ("before" columns).

    Raises:
        RuntimeError: the worker failed; the message ends with the end of its stderr.
    """
    completed = subprocess.run([python or sys.executable, script, "--worker", *arguments],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{Path(script).name} {' '.join(arguments)} failed:\n"
                           f"{completed.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def write_docs_section(name: str, lines: list[str]) -> None:
    """Replace (or append) section ``name`` of docs/benchmarks.md with ``lines``.

    A section sits between ``<!-- name:start -->`` and ``<!-- name:end -->``.
    """
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    section = "\n".join([start, *lines, end])
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOCS.write_text(text)


def judge_zoo(judge: Callable[[str, str, str], dict[str, Any]], cases: list[str],
              modes: list[str], jobs: int, prefix: str) -> list[dict[str, Any]]:
    """``judge(case, mode, workdir)`` for every case in every mode, in (case, mode) order.

    ``judge`` must be a module-level function (it is sent to the pool's processes); each
    record is printed as it comes.
    """
    pairs = [(name, mode) for name in cases for mode in modes]
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        if jobs <= 1:
            for name, mode in pairs:
                records.append(judge(name, mode, workdir))
                _print_record(records[-1])
        else:
            with ProcessPoolExecutor(jobs) as pool:
                futures = [pool.submit(judge, name, mode, workdir) for name, mode in pairs]
                for future in futures:
                    records.append(future.result())
                    _print_record(records[-1])
    return records


def zoo_arguments(description: str, cases: list[str], modes: list[str], results: Path, *,
                  jobs: int) -> argparse.Namespace:
    """The zoo scripts' command line (``--cases --modes --jobs --json --no-docs``), parsed.

    ``cases`` and ``modes`` (the zoo's) are the defaults; the namespace holds them as lists.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", default=",".join(cases))
    parser.add_argument("--modes", default=",".join(modes))
    parser.add_argument("--jobs", type=int, default=jobs)
    parser.add_argument("--json", default=str(results), help="where to write the records")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    args.cases = [c for c in args.cases.split(",") if c]
    args.modes = [m for m in args.modes.split(",") if m]
    return args


def write_records(path: str, records: list[dict[str, Any]]) -> None:
    """The zoo's records as JSON, one case a line."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(records, indent=1) + "\n")


def zoo_table(records: list[dict[str, Any]], modes: list[str],
              cell: Callable[[dict[str, Any]], str]) -> list[str]:
    """Architecture x export mode as a Markdown table, ``cell(record)`` in each cell."""
    by_case: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for record in records:
        by_case[record["case"]][record["mode"]] = record
    lines = ["| architecture | " + " | ".join(f"`{m}`" for m in modes) + " |",
             "|---|" + "---|" * len(modes)]
    for name, row in by_case.items():
        lines.append(f"| {name} | " + " | ".join(cell(row[m]) if m in row else "" for m in modes)
                     + " |")
    return lines


def _print_record(record: dict[str, Any]) -> None:
    print(f"{record['case']:<13} {record['mode']:<18} {record['label']:<16} "
          f"{record['seconds'].get('total', 0):6.1f} s  {record['reason'][:160]}", flush=True)


def markdown_text(text: str, limit: int = 400) -> str:
    """``text`` with Markdown's table and emphasis characters escaped, cut at ``limit``."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")[:limit]
