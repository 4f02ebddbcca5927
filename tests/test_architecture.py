"""The architecture, checked: graphpass's imports form layers that point one way.

The import graph is read from the source with ``ast`` (module-level and
function-level imports; imports under ``if TYPE_CHECKING:`` are for type checkers
only and do not count). Importing ``a.b.c`` runs ``a/b/__init__`` too, so an
import also points at each package above its target (except the root package,
the public facade that Python runs before anything else, and the importer's own
packages, which are already running). ``docs/architecture.md`` describes the
layers in words.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

import graphpass

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"core": "graphpass", "passes": "graphpass.passes", "plugins": "graphpass.plugins"}

# Lowest first. A module belongs to the layer of the longest package that holds it (the
# root package ``graphpass`` holds only itself); it may import from its own layer and
# the layers below, never from a layer above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("graphpass.errors", "graphpass.findings", "graphpass._lazy")),
    ("ir", ("graphpass.ir",)),
    ("files", ("graphpass.files",)),
    ("torch", ("graphpass.torch",)),
    ("framework", ("graphpass.framework",)),
    ("reporting", ("graphpass.reporting",)),
    ("checkpoint", ("graphpass.checkpoint",)),
    ("training", ("graphpass.training",)),
    ("api", ("graphpass",)),
    ("torch-module", ("graphpass.torch._module",)),
    ("passes", ("graphpass.passes",)),
    ("plugins", ("graphpass.plugins",)),
    ("batch", ("graphpass.batch",)),
    ("testing", ("graphpass.testing",)),
    ("cli", ("graphpass.cli", "graphpass.__main__")),
]

def _modules() -> dict[str, Path]:
    modules = {}
    for folder, package in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, outside ``if TYPE_CHECKING:`` blocks and lazy re-exports.

    A package's module-level ``__getattr__`` (PEP 562) imports a name only when a user
    asks the package for it, once everything below is loaded: it is the package's public
    facade (``graphpass.torch.Module``), like the root package's imports.
    """
    for node in ast.iter_child_nodes(tree):
        if (isinstance(tree, ast.Module) and isinstance(node, ast.FunctionDef)
                and node.name == "__getattr__"):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The graphpass modules an import statement runs."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    for alias in node.names:
        # A submodule (``from pkg import module``), else a name of the package itself.
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _with_packages(importer: str, target: str) -> Iterator[str]:
    """``target`` and the packages Python runs to import it (see the module docstring)."""
    parts = target.split(".")
    for end in range(2, len(parts) + 1):
        name = ".".join(parts[:end])
        if name == target or not importer.startswith(name + "."):
            yield name


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for module, path in MODULES.items():
        graph.add_node(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree):
            for target in _targets(module, path, node):
                for name in _with_packages(module, target):
                    if name in MODULES and name != module:
                        if not graph.has_edge(module, name):
                            graph.add_edge(module, name, line=node.lineno, named=set())
                        graph.edges[module, name]["named"].add(target)
    return graph


GRAPH = import_graph()


def layer_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            inside = module.startswith(prefix + ".") and prefix != "graphpass"
            if (module == prefix or inside) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


RANK = {layer: rank for rank, (layer, _) in enumerate(LAYERS)}


def _where(edge: tuple[str, str]) -> str:
    importer, target = edge
    line = GRAPH.edges[edge]["line"]
    return f"{MODULES[importer].relative_to(REPO)}:{line}: {importer} imports {target}"


def test_the_import_graph_has_no_cycle() -> None:
    graph = GRAPH
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    components = sorted((sorted(c) for c in nx.strongly_connected_components(graph)
                         if len(c) > 1), key=len, reverse=True)
    pytest.fail("the imports form a cycle:\n  " + "\n  ".join(_where(e) for e in cycle)
                + "\nstrongly connected components: "
                + "; ".join(f"{len(c)} modules: {', '.join(c)}" for c in components))


def test_every_module_belongs_to_a_layer() -> None:
    unassigned = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unassigned, ("modules in no layer (add them to LAYERS in this test and to "
                            f"docs/architecture.md): {', '.join(unassigned)}")


def test_imports_point_down_the_layers() -> None:
    upward = []
    for importer, target in sorted(GRAPH.edges):
        source, destination = layer_of(importer), layer_of(target)
        if source is None or destination is None:
            continue  # reported by test_every_module_belongs_to_a_layer
        if RANK[destination] > RANK[source]:
            upward.append(f"{_where((importer, target))}: layer {source!r} imports the "
                          f"higher layer {destination!r}")
    assert not upward, "imports that point up:\n  " + "\n  ".join(upward)


def test_the_ir_imports_nothing_above_it() -> None:
    """The IR converts to and from protobuf itself (``graphpass.ir.proto``), as onnx-ir
    keeps ``onnx_ir.serde``: ``Model.from_proto`` and ``to_proto`` need no layer above."""
    above = [_where(edge) for edge in sorted(GRAPH.edges)
             if layer_of(edge[0]) == "ir" and layer_of(edge[1]) not in ("base", "ir")]
    assert not above, "the IR imports layers above it:\n  " + "\n  ".join(above)


def test_no_pass_imports_another_pass() -> None:
    found = []
    for importer, target in sorted(GRAPH.edges):
        if not (importer.startswith("graphpass.passes.")
                and target.startswith("graphpass.passes.")):
            continue
        if not target.rsplit(".", 1)[1].startswith("_"):
            found.append(_where((importer, target)))
    assert not found, ("a pass names the passes it needs in `requires`; shared code goes in a "
                       "private passes/_helper module:\n  " + "\n  ".join(found))


# ------------------------------------------------------------------ facades
PUBLIC_MODULES = frozenset({
    "graphpass", "graphpass.errors", "graphpass.findings", "graphpass.cli", "graphpass.__main__",
    "graphpass.batch", "graphpass.checkpoint", "graphpass.files", "graphpass.framework",
    "graphpass.ir", "graphpass.ir.proto", "graphpass.reporting", "graphpass.testing",
    "graphpass.testing.models", "graphpass.testing.pytest_plugin", "graphpass.torch",
    "graphpass.torch.folding", "graphpass.training", "graphpass.training.rules",
})
"""The public modules of ``core/``: the root, the base modules, the command line, each
package's facade, the public serialization (``graphpass.ir.proto``), the namespaces with
their own facade and what ``pyproject.toml`` names. Everything else is private."""


def _private_home(target: str) -> str | None:
    """The package that owns ``target`` privately (None: ``target`` is public)."""
    parts = target.split(".")
    for end, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:end])
    return None


def _private_imports(module: str, path: Path, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """The private modules of other packages that ``module`` imports (TYPE_CHECKING too)."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for target in _targets(module, path, node):
            home = _private_home(target) if target.startswith("graphpass.") else None
            if home and module != home and not module.startswith(home + "."):
                yield node.lineno, target


def test_the_public_modules_are_the_facades() -> None:
    """A module of ``core/`` is private (``_name``) unless it is a facade or named above:
    a new public module is a decision (see ``docs/architecture.md``)."""
    public = {m for m in MODULES if m.startswith("graphpass") and _private_home(m) is None
              and not m.startswith(("graphpass.passes", "graphpass.plugins"))}
    assert public == PUBLIC_MODULES, (
        f"public modules that should be private (_name, re-exported by their package): "
        f"{sorted(public - PUBLIC_MODULES)}; gone: {sorted(PUBLIC_MODULES - public)}")


def test_nothing_imports_another_packages_private_modules() -> None:
    """Code outside a package imports its public names from the package (its facade,
    ``from graphpass.training import build_training_graphs``), never from its private
    modules (``graphpass.training._graphs``): the facade is the contract."""
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in _private_imports(module, path, tree):
            found.append(f"{path.relative_to(REPO)}:{line}: {module} imports {target}")
    assert not found, ("import from the package (add the name to its __all__ and lazy "
                       "exports) instead of:\n  " + "\n  ".join(found))


def test_the_private_import_rule_sees_each_form() -> None:
    source = """
from graphpass.training._graphs import build_training_graphs
import graphpass.files._atomic
from graphpass.files import _atomic as atomic
from graphpass.training import build_training_graphs, Trainer
from graphpass.passes._reconcile_plan import plan
from graphpass.training.rules import GradientRules
from graphpass._lazy import lazy_exports
"""
    path = REPO / "passes" / "example.py"
    found = [target for _, target in _private_imports("graphpass.passes.example", path,
                                                      ast.parse(source))]
    assert found == ["graphpass.training._graphs", "graphpass.files._atomic",
                     "graphpass.files._atomic"]
    inside = list(_private_imports("graphpass.training._trainer", REPO / "core" / "x.py",
                                   ast.parse(source)))
    assert [target for _, target in inside] == ["graphpass.files._atomic",
                                                "graphpass.files._atomic",
                                                "graphpass.passes._reconcile_plan"]


@pytest.mark.parametrize("package", sorted(PUBLIC_MODULES - {"graphpass.__main__"}))
def test_every_public_name_resolves(package: str) -> None:
    """Each name a public module's ``__all__`` lists (lazy ones included) is there."""
    module = importlib.import_module(package)
    missing = [name for name in getattr(module, "__all__", ())
               if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it lacks: {missing}"


_HANDED_DOWN = ("graphpass.framework._registry", "graphpass.framework._plugin_loading",
                "graphpass.plugins")


def test_passes_get_the_registry_from_their_context() -> None:
    found = [_where(edge) for edge in sorted(GRAPH.edges)
             if edge[0].startswith("graphpass.passes.") and edge[1].startswith(_HANDED_DOWN)]
    assert not found, ("a pass uses context.registry; it never imports the registry, the "
                       "plugin loading or the plugins:\n  " + "\n  ".join(found))


# ------------------------------------------------------------------ one run specification
RUN_SPEC_MODULE = "graphpass.framework._runspec"
"""Where a run's manager and registry are built for every caller above the framework."""
_BUILDERS = ("PassManager", "build_registry", "default_registry")
"""Calls that build a manager or a registry: above the framework, RunSpec makes them."""
_MAY_BUILD_A_REGISTRY = {
    ("graphpass.checkpoint._loader", "default_registry"):
        "open_checkpoint, given no loaders or registry, starts the work itself "
        "(docs/architecture.md, 'The registry is handed down')",
}
"""Calls the rule allows, each with why."""


def _building_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where a module calls ``PassManager(``, ``build_registry(`` or ``default_registry(``
    (by name, or as an attribute: ``graphpass.PassManager(``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = (function.id if isinstance(function, ast.Name)
                else function.attr if isinstance(function, ast.Attribute) else None)
        if name in _BUILDERS:
            yield node.lineno, name


def test_above_the_framework_managers_and_registries_come_from_a_run_spec() -> None:
    """The CLI, the batch layer, ``graphpass.torch.Module``, ``graphpass.testing`` (and
    every layer above the framework) build their manager and registry through
    ``graphpass.RunSpec``, so a run's settings, presets and input checks live in one place.
    Tests and the docs' examples may call ``PassManager`` (it stays public)."""
    found = []
    for module, path in MODULES.items():
        layer = layer_of(module)
        if layer is None or RANK[layer] <= RANK["framework"]:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, call in _building_calls(tree):
            if (module, call) not in _MAY_BUILD_A_REGISTRY:
                found.append(f"{path.relative_to(REPO)}:{line}: {call}(")
    assert not found, (f"above the framework, build the manager and the registry with "
                       f"{RUN_SPEC_MODULE}.RunSpec (spec.manager(), spec.registry()) instead "
                       "of:\n  " + "\n  ".join(found))


def test_the_run_spec_rule_sees_each_way_of_building() -> None:
    source = """
import graphpass
from graphpass.framework._manager import PassManager
PassManager(["check"]); graphpass.PassManager(["check"]); build_registry(strict=True)
plugin_loading.default_registry(); graphpass.RunSpec(passes=["check"]).manager()
"""
    calls = [call for _, call in _building_calls(ast.parse(source))]
    assert calls == ["PassManager", "PassManager", "build_registry", "default_registry"]


# ------------------------------------------------------------------ one writer module
WRITER_MODULE = "graphpass.files._atomic"
"""The one module that renames files into place and makes temporaries beside outputs."""
_RENAMING = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move"),
             ("tempfile", "mkstemp"), ("tempfile", "mkdtemp")}
"""Calls that put a file in place or make a temporary that a kill leaves behind."""
_BESIDE = {("tempfile", name) for name in ("TemporaryDirectory", "NamedTemporaryFile",
                                           "TemporaryFile", "SpooledTemporaryFile")}
"""Temporaries that are the writer module's business when made beside an output (``dir=``)."""
_NOT_A_PATH = {"dataclasses", "matcher"}
"""Receivers of ``.replace(x)``/``.rename(x)`` that are not paths (``dataclasses.replace``,
the reconcile matcher's ``rename``)."""


def _writing_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where a module renames a file or makes a temporary beside an output itself."""
    imported: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil", "tempfile"):
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        target: tuple[str, str] | None = None
        if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
            target = (function.value.id, function.attr)
        elif isinstance(function, ast.Name):
            target = imported.get(function.id)
        beside = any(keyword.arg == "dir" for keyword in node.keywords)
        if target in _RENAMING or (target in _BESIDE and beside):
            yield node.lineno, f"{target[0]}.{target[1]}"
        elif (isinstance(function, ast.Attribute) and function.attr in ("replace", "rename")
              and len(node.args) == 1 and not node.keywords
              and ast.unparse(function.value) not in _NOT_A_PATH):
            # str.replace takes two arguments; Path.replace/rename one.
            yield node.lineno, f"{ast.unparse(function.value)}.{function.attr}() (Path)"


def test_one_module_writes_files_into_place() -> None:
    """Every writer goes through ``graphpass.files._atomic`` (``replace_file``,
    ``replace_folder``, ``temporary_folder`` ...): no other module renames a file into
    place or makes a temporary beside an output, so every output gets the same
    guarantees (fsync, temporaries that carry their owner, a folder replaced as one)."""
    found = []
    for module, path in MODULES.items():
        if module == WRITER_MODULE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, call in _writing_calls(tree):
            found.append(f"{path.relative_to(REPO)}:{line}: {call}")
    assert not found, ("write through graphpass.files._atomic (replace_file, replace_folder, "
                       "new_folder, temporary_folder, publish) instead of:\n  "
                       + "\n  ".join(found))


def test_the_writer_rule_sees_each_way_of_writing_around_it() -> None:
    source = """
import os, shutil, tempfile
from os import replace as swap
from tempfile import mkstemp
os.replace(a, b); os.rename(a, b); shutil.move(a, b); swap(a, b); mkstemp()
tempfile.mkdtemp(); tempfile.TemporaryDirectory(dir=folder); Path(a).replace(b)
tmp.rename(target)
tempfile.TemporaryDirectory(); text.replace("a", "b"); dataclasses.replace(x)
"""
    calls = [call for _, call in _writing_calls(ast.parse(source))]
    assert calls == ["os.replace", "os.rename", "shutil.move", "os.replace", "tempfile.mkstemp",
                     "tempfile.mkdtemp", "tempfile.TemporaryDirectory",
                     "Path(a).replace() (Path)", "tmp.rename() (Path)"]


# ------------------------------------------------------------------ old import paths
_PYTHON_ROOTS = ("core", "passes", "plugins", "tests", "benchmarks", "examples")
# The module paths of 0.1 (never published) and 0.2's path of the proto conversion: gone.
GONE = ("graphpass.checking", "graphpass.config", "graphpass.gradients",
        "graphpass.instruments", "graphpass.listings", "graphpass.manager",
        "graphpass.pass_base", "graphpass.pipeline", "graphpass.planning",
        "graphpass.plugins.hookspecs", "graphpass.plugins.manager", "graphpass.progress",
        "graphpass.proto", "graphpass.registry", "graphpass.render", "graphpass.results",
        "graphpass.summary", "graphpass.torch_export", "graphpass.validate",
        "graphpass.value_types", "graphpass.verify", "graphpass.files.proto")
_DOC_IMPORT = re.compile(r"^\s*(?:from\s+(graphpass[\w.]*)\s+import|import\s+(graphpass[\w.]*))",
                         re.MULTILINE)


def _python_files() -> Iterator[Path]:
    for folder in _PYTHON_ROOTS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if ".cache" not in path.parts:
                yield path


def _imported_names(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:
                if node.module == "graphpass" and alias.name in graphpass.__all__:
                    continue  # the public API (graphpass.validate is a function there)
                yield node.lineno, f"{node.module}.{alias.name}"


def test_the_old_paths_are_gone() -> None:
    import sys

    assert not [finder for finder in sys.meta_path if "graphpass" in type(finder).__module__]
    for old in GONE:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)


def test_nothing_imports_an_old_path() -> None:
    moved = set(GONE)
    found = []
    for path in _python_files():
        for line, name in _imported_names(path):
            if name in moved:
                found.append(f"{path.relative_to(REPO)}:{line}: {name}")
    for path in sorted([*(REPO / "docs").rglob("*.md"), REPO / "README.md"]):
        text = path.read_text(encoding="utf-8")
        for match in _DOC_IMPORT.finditer(text):
            name = match.group(1) or match.group(2)
            if name in moved:
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert not found, "old import paths (use the new one):\n  " + "\n  ".join(found)


# ------------------------------------------------------------------ the docs page
_PAGE = REPO / "docs" / "architecture.md"
_ROW = re.compile(r"^\| (?P<cells>.+) \|$", re.MULTILINE)


def _table_after(text: str, heading: str) -> list[list[str]]:
    section = text[text.index(heading):]
    rows = []
    for match in _ROW.finditer(section[:section.find("\n\n", section.index("| ---"))]):
        cells = [cell.strip() for cell in match.group("cells").split(" | ")]
        if not set(cells[0]) <= {"-"}:
            rows.append(cells)
    return rows[1:]  # without the header


def test_the_docs_list_the_layers_of_this_test() -> None:
    rows = _table_after(_PAGE.read_text(encoding="utf-8"), "## The layers")
    documented = [(layer, tuple(re.findall(r"`([\w.]+)`", packages)))
                  for layer, packages, _ in reversed(rows)]
    assert documented == LAYERS


def test_the_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from _docs_runner import section_blocks

    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "tiny_classifier.onnx").write_bytes(
        (REPO / "examples" / "tiny_classifier.onnx").read_bytes())
    monkeypatch.chdir(tmp_path)
    [block] = section_blocks(_PAGE.read_text(encoding="utf-8"), "The layers", "python")
    exec(compile(block, str(_PAGE), "exec"), {})
