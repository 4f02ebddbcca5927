"""Every finding code a built-in pass can report is declared, with a description.

A pass declares its codes in ``Pass.codes`` (code -> one line); the framework's own
codes (``GP0xx``, the instruments' ``GP6xx``) are in
:data:`graphpass.reporting._render.FRAMEWORK_CODES`. The SARIF report's ``rules`` take
their descriptions from there, so a code declared nowhere would reach SARIF with only
the placeholder "Reported by the ... pass".
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import graphpass.passes
import graphpass.plugins
from graphpass.cli import _rule_descriptions
from graphpass.framework import Pass, build_registry
from graphpass.reporting._render import FRAMEWORK_CODES

REPO = Path(__file__).resolve().parent.parent
_CODE = re.compile(r"GP\d{3}")


def _code_literals() -> dict[str, str]:
    """Every string constant that is a finding code, in core/, passes/ and plugins/."""
    found: dict[str, str] = {}
    for folder in ("core", "passes", "plugins"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and _CODE.fullmatch(node.value)):
                    found.setdefault(node.value, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_codes_is_part_of_the_pass_contract() -> None:
    assert Pass.codes == {}
    registry = build_registry()
    for name, entry in registry.passes.items():
        assert all(_CODE.fullmatch(code) and text.strip()
                   for code, text in entry.item.codes.items()), name


def _built_in_pass_classes() -> list[type[Pass]]:
    """Every pass class of passes/ and plugins/, registered here or not (the
    onnxruntime-training pass registers only where onnxruntime-training is installed)."""
    classes = []
    for package in (graphpass.passes, graphpass.plugins):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            classes += [value for value in vars(module).values()
                        if isinstance(value, type) and issubclass(value, Pass)
                        and value.__module__ == module.__name__]
    return classes


def test_every_code_a_built_in_pass_reports_has_a_description() -> None:
    described = {**FRAMEWORK_CODES, **_rule_descriptions(build_registry())}
    for cls in _built_in_pass_classes():
        described.update(cls.codes)
    literals = _code_literals()
    assert len(literals) > 80  # the scan sees the codes
    missing = sorted(f"{code} ({where})" for code, where in literals.items()
                     if code not in described)
    assert not missing, "finding codes without a description:\n  " + "\n  ".join(missing)
