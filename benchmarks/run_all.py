"""Run every benchmark script in this folder, one after the other, and summarize.

A benchmark is any ``benchmarks/*.py`` other than this file and files whose name
starts with ``_``. Each runs in its own process with its default arguments (the
sizes its author chose); its output is shown as it comes, and a table at the end
lists each script's status and time. ``make bench`` calls this.

Usage::

    .venv/bin/python benchmarks/run_all.py [--only roundtrip,inline] [--skip NAME,...]
                                           [--list]

Exit status: 0 when every script succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
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
    outcomes: list[tuple[str, int, float]] = []
    for script in scripts:
        print(f"\n{'=' * 78}\n== {script.stem}\n{'=' * 78}", flush=True)
        started = time.perf_counter()
        returncode = subprocess.run([sys.executable, str(script)], cwd=HERE.parent,
                                    check=False).returncode
        outcomes.append((script.stem, returncode, time.perf_counter() - started))
    print(f"\n{'=' * 78}\n== summary\n{'=' * 78}")
    width = max((len(name) for name, _, _ in outcomes), default=10)
    for name, returncode, seconds in outcomes:
        status = "ok" if returncode == 0 else f"FAILED (exit {returncode})"
        print(f"{name:<{width}}  {status:<18} {seconds:8.1f} s")
    return 0 if all(code == 0 for _, code, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
