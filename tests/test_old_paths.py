"""The module paths of 0.1 keep working until 0.3: same objects, one DeprecationWarning each.

Checked in a fresh interpreter, because a warning is given once per process and an
old path, once imported, stays in ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from graphpass._moved import MOVED, REMOVED_IN

_SCRIPT = textwrap.dedent("""
    import importlib, json, sys, warnings

    warnings.simplefilter("always")
    import graphpass
    from graphpass._moved import MOVED

    report = {}
    for old, targets in MOVED.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
            new = [importlib.import_module(target) for target in targets]
            names = sorted({name for target in new for name in target.__all__})
            namespace = {}
            exec(f"from {old} import " + ", ".join(names), namespace)
            same = all(namespace[name] is getattr(next(t for t in new if hasattr(t, name)), name)
                       for name in names)
            star = {}
            exec(f"from {old} import *", star)
            importlib.import_module(old)  # again: no second warning
            parent, _, child = old.rpartition(".")
            attribute = getattr(sys.modules[parent], child)
        report[old] = {
            "names": names,
            "same": same,
            "star": sorted(name for name in star if not name.startswith("__")) == names,
            "attribute": attribute is module or old == "graphpass.validate",
            "warnings": [(str(w.message), w.category.__name__) for w in caught],
        }
    # A fresh start for one path, to see the warning of the statement a user writes.
    del sys.modules["graphpass.pass_base"], graphpass.pass_base
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from graphpass.pass_base import Pass
    report["statement"] = {
        "same": Pass is graphpass.Pass,
        "warnings": [(str(w.message), w.category.__name__, w.filename, w.lineno)
                     for w in caught],
    }
    report["validate is the function"] = callable(graphpass.validate) and (
        graphpass.validate is sys.modules["graphpass.files.validate"].validate)
    import graphpass.plugins.manager
    report["dotted"] = (graphpass.plugins.manager.build_registry
                        is graphpass.framework.plugin_loading.build_registry)
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    script = tmp_path_factory.mktemp("old-paths") / "uses_old_paths.py"
    script.write_text(_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    result["script"] = str(script)
    return result


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_gives_the_same_objects_and_warns_once(report: dict[str, Any],
                                                           old: str) -> None:
    entry = report[old]
    assert entry["names"], f"{old} forwards to modules without __all__"
    assert entry["same"] and entry["star"] and entry["attribute"]
    assert len(entry["warnings"]) == 1, entry["warnings"]
    message, category = entry["warnings"][0]
    assert category == "DeprecationWarning"
    assert old in message and f"goes away in graphpass {REMOVED_IN}" in message
    assert all(target in message for target in MOVED[old])


def test_the_warning_points_at_the_users_import_line(report: dict[str, Any]) -> None:
    statement = report["statement"]
    assert statement["same"]
    [(message, category, filename, line)] = statement["warnings"]
    assert category == "DeprecationWarning"
    assert "graphpass.framework.pass_base" in message
    assert Path(filename) == Path(report["script"])
    assert Path(filename).read_text().splitlines()[line - 1].strip().startswith(
        "from graphpass.pass_base import Pass")


def test_importing_the_old_validate_module_keeps_graphpass_validate_the_function(
        report: dict[str, Any]) -> None:
    assert report["validate is the function"]


def test_an_old_subpackage_path_is_an_attribute_of_its_package(report: dict[str, Any]) -> None:
    assert report["dotted"]
