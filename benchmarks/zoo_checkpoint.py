"""The last mile back to torch for every zoo architecture: a strict ``load_state_dict``.

Each case of the zoo (``tests/zoo``, export mode ``dynamo-full-state``, the one every
architecture trains in) is trained three steps by ``graphpass train MODEL --checkpoint
CK --checkpoint-out OUT --save TRAINED.onnx``; ``OUT`` is loaded into a fresh Hugging
Face model with ``load_state_dict(strict=True)`` and torch's outputs are compared with
the trained ONNX model's (:mod:`zoo.checkpoint_roundtrip`). Prints one line per case
and a table; exit code 1 if any case fails.

Usage::

    .venv/bin/python benchmarks/zoo_checkpoint.py [--cases bert,gpt2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import zoo  # noqa: E402
from zoo.checkpoint_roundtrip import roundtrip  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(c.name for c in zoo.CASES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    records = []
    with tempfile.TemporaryDirectory(prefix="graphpass-zoo-checkpoint-") as scratch:
        for name in args.cases.split(","):
            outcome = roundtrip(zoo.case(name), Path(scratch) / name)
            records.append(asdict(outcome))
            print(f"{name}: {'ok' if outcome.ok else 'FAILED'}: {outcome.reason}", flush=True)
    print("\n| architecture | keys | tied names written | num_batches_tracked | max output "
          "difference |\n|---|---|---|---|---|")
    for r in records:
        error = f"{r['output_error']:.1e}" if r["output_error"] is not None else "-"
        print(f"| {r['case']} | {r['keys']} | {', '.join(r['aliases']) or '-'} | "
              f"{len(r['counters']) or '-'} | {error} |")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
