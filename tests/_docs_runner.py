"""Run the code blocks of a Markdown page in order, as a reader would.

    python tests/_docs_runner.py PAGE.md WORKDIR

``python`` blocks run in one namespace; ``console`` blocks run each ``$ graphpass ...``
line with this interpreter (``python -m graphpass``), and the ``<!-- test: exit N -->``
comment before the block gives the exit code it must end with. Other blocks (``text``,
``toml``) are shown, not run. Prints one JSON line: ``{"ok": true, "ran": N}`` or the
failing block and why. Runs in whatever environment the caller picks (the tutorial needs
the onnxruntime-training venv).
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
from pathlib import Path

_BLOCK = re.compile(r"(?:<!-- test: exit (?P<exit>\d+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```",
                    re.DOTALL)


def main() -> int:
    page, workdir = Path(sys.argv[1]), Path(sys.argv[2])
    os.chdir(workdir)
    namespace: dict[str, object] = {"__name__": "docs_page"}
    ran = 0
    for number, match in enumerate(_BLOCK.finditer(page.read_text()), start=1):
        lang, body = match["lang"], match["body"]
        try:
            if lang == "python":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec(compile(body, f"{page.name} block {number}", "exec"), namespace)
                ran += 1
            elif lang == "console":
                expected = int(match["exit"]) if match["exit"] is not None else None
                if expected is None:
                    raise AssertionError("console block without <!-- test: exit N -->")
                for line in body.splitlines():
                    if not line.startswith("$ "):
                        continue
                    command = shlex.split(line[2:])
                    if command[0] != "graphpass":
                        raise AssertionError(f"only graphpass commands run here: {line}")
                    done = subprocess.run([sys.executable, "-m", "graphpass", *command[1:]],
                                          capture_output=True, text=True, check=False,
                                          timeout=600)
                    if done.returncode != expected:
                        raise AssertionError(f"{line!r} exited {done.returncode}, not {expected}:"
                                             f"\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
                    ran += 1
        except BaseException as error:  # report which block failed, then stop
            print(json.dumps({"ok": False, "block": number, "lang": lang, "ran": ran,
                              "error": f"{type(error).__name__}: {error}"[-5000:],
                              "traceback": traceback.format_exc()[-3000:]}))
            return 0
    print(json.dumps({"ok": True, "ran": ran}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
