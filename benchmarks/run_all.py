"""Run every benchmark script in this folder, one after the other, and summarize.

A benchmark is any ``benchmarks/*.py`` other than this file and files whose name
starts with ``_``. Each runs in its own process with its default arguments (the
sizes its author chose); its output is shown as it comes, and a table at the end
lists each script's status and time. ``make bench`` calls this.

``--before PYTHON`` runs every script twice, first with another interpreter (a venv
whose ``graphpass`` is an older checkout: see ``benchmarks/limits.py``), then with
this one, and adds both runs' CPU seconds (the script and its workers) and their
ratio to the summary. Scripts that measure several tools print their own figures
for each version; ``benchmarks/limits.py --before`` measures the two side by side.

Usage::

    .venv/bin/python benchmarks/run_all.py [--only roundtrip,inline] [--skip NAME,...]
                                           [--before PYTHON] [--list]

Exit status: 0 when every script succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover() -> list[Path]:
    """The benchmark scripts, in name order."""
    return sorted(path for path in HERE.glob("*.py")
                  if path.name != Path(__file__).name and not path.name.startswith("_"))


def _names(text: str) -> set[str]:
    return {name.strip().removesuffix(".py") for name in text.split(",") if name.strip()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated script names to run")
    parser.add_argument("--skip", default="", help="comma-separated script names to skip")
    parser.add_argument("--list", action="store_true", help="list the scripts and exit")
    parser.add_argument("--before", metavar="PYTHON",
                        help="also run each script with this interpreter (an older graphpass)")
    args = parser.parse_args()
    scripts = discover()
    only, skip = _names(args.only), _names(args.skip)
    unknown = (only | skip) - {script.stem for script in scripts}
    if unknown:
        parser.error(f"no benchmark named {', '.join(sorted(unknown))}; "
                     f"known: {', '.join(s.stem for s in scripts)}")
    if only:
        scripts = [s for s in scripts if s.stem in only]
    scripts = [s for s in scripts if s.stem not in skip]
    if args.list:
        print("\n".join(s.stem for s in scripts))
        return 0
    interpreters = [("before", args.before)] if args.before else []
    interpreters.append(("after" if args.before else "", sys.executable))
    outcomes: list[tuple[str, str, int, float, float]] = []
    for script in scripts:
        for label, python in interpreters:
            title = f"{script.stem} ({label})" if label else script.stem
            print(f"\n{'=' * 78}\n== {title}\n{'=' * 78}", flush=True)
            returncode, seconds, cpu = _run(python, script)
            outcomes.append((script.stem, label, returncode, seconds, cpu))
    print(f"\n{'=' * 78}\n== summary\n{'=' * 78}")
    width = max((len(name) for name, *_ in outcomes), default=10)
    cpu_of = {(name, label): cpu for name, label, _, _, cpu in outcomes}
    for name, label, returncode, seconds, cpu in outcomes:
        status = "ok" if returncode == 0 else f"FAILED (exit {returncode})"
        line = f"{name:<{width}}  {label:<7}{status:<18} {seconds:8.1f} s wall {cpu:8.1f} s CPU"
        before = cpu_of.get((name, "before"))
        if label == "after" and before:
            line += f"  after / before {cpu / before:5.2f}x"
        print(line)
    return 0 if all(code == 0 for _, _, code, _, _ in outcomes) else 1


def _run(python: str, script: Path) -> tuple[int, float, float]:
    """Run one script; its exit code, wall seconds, and CPU seconds (workers included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    returncode = subprocess.run([python, str(script)], cwd=HERE.parent, check=False).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return returncode, time.perf_counter() - started, cpu


if __name__ == "__main__":
    sys.exit(main())
