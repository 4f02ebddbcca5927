"""Write the snapshot of the ecosystem passes for the installed versions (see ``_catalog``).

Usage::

    .venv/bin/python -m graphpass.plugins.ecosystem
"""

from __future__ import annotations

import sys

from graphpass.plugins.ecosystem._catalog import installed_versions, write_snapshot
from graphpass.plugins.ecosystem._onnx_ir import live_entries as onnx_ir_entries
from graphpass.plugins.ecosystem._onnxscript import live_entries as onnxscript_entries


def main() -> int:
    """Discover the passes and write ``_snapshot.py``."""
    write_snapshot([*onnx_ir_entries(), *onnxscript_entries()])
    print(f"wrote the ecosystem passes' snapshot for {installed_versions()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
