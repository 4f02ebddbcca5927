"""What the benchmark scripts share (not a benchmark: ``run_all.py`` skips ``_*`` files).

* :func:`run_worker`: a measurement in a fresh process (no warm caches, no collector
  state or memory high-water mark left by other runs);
* :class:`Stopwatch`: CPU time of this process, lap by lap, and wall time;
* :func:`peak_rss_bytes`: this process's peak resident memory;
* :func:`write_docs_section`: a benchmark's section of ``docs/benchmarks.md``;
* :func:`judge_zoo`: judge zoo cases one at a time or in a process pool, printing each;
* :func:`zoo_arguments`, :func:`available_modes`, :func:`write_records`,
  :func:`docs_from_records`, :func:`zoo_table`, :func:`mode_counts`: the zoo scripts'
  command line, records and tables;
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
    """The zoo scripts' command line (``--cases --modes --jobs --json --no-docs
    --from-json``), parsed.

    ``cases`` and ``modes`` (the zoo's) are the defaults; the namespace holds them as lists.
    ``--modes`` takes mode names and ``new`` (the modes of issue 22, :data:`zoo.MODES`
    after the first four), ``all`` (every mode).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", default=",".join(cases))
    parser.add_argument("--modes", default="all",
                        help="comma-separated modes, 'new' (issue 22's) or 'all' (the default)")
    parser.add_argument("--jobs", type=int, default=jobs)
    parser.add_argument("--json", default=str(results), help="where to write the records")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not update docs/benchmarks.md")
    parser.add_argument("--from-json", metavar="RECORDS",
                        help="judge nothing: write the docs section from these records")
    args = parser.parse_args()
    args.cases = [c for c in args.cases.split(",") if c]
    chosen: list[str] = []
    for item in (m for m in args.modes.split(",") if m):
        chosen += {"all": modes, "new": modes[len(ISSUE_12_MODES):]}.get(item, [item])
    args.modes = list(dict.fromkeys(chosen))
    return args


ISSUE_12_MODES = ("dynamo", "dynamo-state-dict", "dynamo-full-state", "legacy-functions")
"""The zoo's first four modes; the docs tables show them apart from the later ones."""


def available_modes(modes: list[str], optimum_modes: tuple[str, ...],
                    have_optimum: bool) -> list[str]:
    """``modes`` less ``optimum_modes`` where there is no Optimum venv (said so)."""
    kept = [m for m in modes if have_optimum or m not in optimum_modes]
    if kept != modes:
        print("no Optimum venv (make optimum-venv): leaving out "
              + ", ".join(m for m in modes if m not in kept))
    return kept


def docs_from_records(path: str, modes: list[str], section: str,
                      docs_lines: Callable[[list[dict[str, Any]], list[str], float], list[str]]
                      ) -> None:
    """Write a zoo script's docs section from the records it wrote (``--from-json``): the
    asked modes that the records hold; the wall time is the cases' seconds added up."""
    records: list[dict[str, Any]] = json.loads(Path(path).read_text())
    held = [m for m in modes if any(r["mode"] == m for r in records)]
    wall = sum(r["seconds"].get("total", 0.0) for r in records)
    write_docs_section(section, docs_lines(records, held, wall))


def write_records(path: str, records: list[dict[str, Any]]) -> None:
    """The zoo's records as JSON, one case a line."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(records, indent=1) + "\n")


def zoo_table(records: list[dict[str, Any]], modes: list[str],
              cell: Callable[[dict[str, Any]], str]) -> list[str]:
    """Architecture x export mode as Markdown, ``cell(record)`` in each cell: one table for
    issue 12's modes and one for the later ones (either left out when none is asked)."""
    by_case: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for record in records:
        by_case[record["case"]][record["mode"]] = record
    lines: list[str] = []
    groups = ([m for m in modes if m in ISSUE_12_MODES],
              [m for m in modes if m not in ISSUE_12_MODES])
    for group in (g for g in groups if g):
        if lines:
            lines.append("")
        lines += ["| architecture | " + " | ".join(f"`{m}`" for m in group) + " |",
                  "|---|" + "---|" * len(group)]
        for name, row in by_case.items():
            lines.append(f"| {name} | "
                         + " | ".join(cell(row[m]) if m in row else "" for m in group) + " |")
    return lines


def mode_counts(records: list[dict[str, Any]], modes: list[str]) -> list[str]:
    """A line per mode: how many cases got each label (Markdown list items)."""
    lines = []
    for mode in modes:
        counts = collections.Counter(r["label"] for r in records if r["mode"] == mode)
        if counts:
            lines.append(f"- `{mode}`: " + ", ".join(f"{n} {label}"
                                                     for label, n in counts.most_common()))
    return lines


def _print_record(record: dict[str, Any]) -> None:
    print(f"{record['case']:<13} {record['mode']:<29} {record['label']:<16} "
          f"{record['seconds'].get('total', 0):6.1f} s  {record['reason'][:160]}", flush=True)


def markdown_text(text: str, limit: int = 400) -> str:
    """``text`` with Markdown's table and emphasis characters escaped, cut at ``limit``."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")[:limit]
