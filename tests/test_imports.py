"""gsnb's layers point one way: no import cycle between its subpackages and top-level modules.

Every ``.py`` under ``gsnb/`` is read with :mod:`ast` (module- and function-level
imports, ``import x``, ``from x import y``, relative imports). Each import of another
part of gsnb is an edge between two nodes: a subpackage (``gsnb.raster``) or a
top-level module (``gsnb.kernels``). The package root only re-exports, so it is no
node, and nothing below it may import it. Only the notebook and viewer layers may
import a GUI library (DESIGN.md).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gsnb"
GUI_LIBRARIES = ("ipywidgets", "plotly", "viser")
GUI_LAYERS = ("gsnb.notebook", "gsnb.viewer")


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it is written."""

    source: str  # the importing module, e.g. "gsnb.raster.cuda"
    target: str  # the imported module, e.g. "gsnb.kernels"
    where: str  # "gsnb/raster/cuda.py:17"


def module_name(path: Path, package: Path) -> str:
    """``gsnb/raster/cuda.py`` -> ``gsnb.raster.cuda``; a package's ``__init__.py`` -> its name."""
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, package: Path) -> bool:
    """Whether ``name`` (``gsnb.x.y``) is a module or a package under ``package``."""
    path = package.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path, package: Path) -> Iterator[Import]:
    """Every import in ``path``, at any depth (functions, ``if TYPE_CHECKING:`` included)."""
    source = module_name(path, package)
    # A module's relative imports start from its package; a package's from itself.
    here = source.split(".") if path.name == "__init__.py" else source.split(".")[:-1]
    where = path.relative_to(package.parent).as_posix()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(source, alias.name, f"{where}:{node.lineno}")
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                # ``from gsnb import kernels`` imports the module gsnb.kernels.
                child = f"{origin}.{alias.name}"
                named = origin.split(".")[0] == package.name and is_module(child, package)
                yield Import(source, child if named else origin, f"{where}:{node.lineno}")


def all_imports(package: Path = PACKAGE) -> list[Import]:
    return [i for path in sorted(package.rglob("*.py")) for i in imports_of(path, package)]


def node_of(module: str) -> str | None:
    """The layer of a gsnb module (``gsnb.raster.cuda`` -> ``gsnb.raster``); None for the root."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else None


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_graph(imports: list[Import], package: str) -> dict[str, dict[str, list[Import]]]:
    """Node -> imported node -> the imports making that edge (imports inside a node left out)."""
    graph: dict[str, dict[str, list[Import]]] = {}
    for i in imports:
        if not within(i.target, package):
            continue
        a, b = node_of(i.source), node_of(i.target)
        if a is not None and b is not None and a != b:
            edge = graph.setdefault(a, {}).setdefault(b, [])
            if i not in edge:  # ``from x import (a, b)`` is one import of x
                edge.append(i)
    return graph


def find_cycle(graph: dict[str, dict[str, list[Import]]]) -> list[str] | None:
    """One cycle of ``graph`` as its nodes, the first repeated at the end; None if acyclic."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, {})):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def all_cycles(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Cycles of ``graph`` until none is left, each found after cutting the previous one's
    first edge."""
    rest = {a: dict(b) for a, b in graph.items()}
    cycles = []
    while (cycle := find_cycle(rest)) is not None:
        cycles.append(cycle)
        del rest[cycle[0]][cycle[1]]
    return cycles


def describe_cycle(cycle: list[str], graph: dict[str, dict[str, list[Import]]]) -> str:
    lines = [" -> ".join(cycle)]
    for a, b in itertools.pairwise(cycle):
        lines += [f"  {i.where}: {i.source} imports {i.target}" for i in graph[a][b]]
    return "\n".join(lines)


def root_imports(imports: list[Import], package: str) -> list[Import]:
    """Imports of the package root itself from anywhere below it."""
    return [i for i in imports if i.target == package and i.source != package]


def gui_imports(imports: list[Import]) -> list[Import]:
    """Imports of a GUI library from outside the notebook and viewer layers."""
    return [
        i
        for i in imports
        if any(within(i.target, lib) for lib in GUI_LIBRARIES)
        and not any(within(i.source, layer) for layer in GUI_LAYERS)
    ]


def test_no_import_cycle_between_gsnb_layers() -> None:
    graph = layer_graph(all_imports(), PACKAGE.name)
    cycles = all_cycles(graph)
    assert not cycles, "import cycles between gsnb's layers:\n" + "\n".join(
        describe_cycle(c, graph) for c in cycles
    )


def test_nothing_inside_gsnb_imports_the_package_root() -> None:
    found = root_imports(all_imports(), PACKAGE.name)
    assert not found, "import the module that defines the name, not gsnb:\n" + "\n".join(
        f"  {i.where}: {i.source} imports gsnb" for i in found
    )


def test_only_the_notebook_and_viewer_import_gui_libraries() -> None:
    found = gui_imports(all_imports())
    assert not found, "\n".join(f"  {i.where}: {i.source} imports {i.target}" for i in found)


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "gsnb"
    files = {
        "__init__.py": "from gsnb.a import f\n",
        "a/__init__.py": "from .inner import f\n",
        "a/inner.py": "def f():\n    from ..b import g\n    return g\n",
        "b/__init__.py": "from gsnb import c\n",
        "c.py": "def h():\n    import gsnb.a.inner\n    import plotly\n",
        "d.py": "import gsnb\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    imports = all_imports(pkg)
    graph = layer_graph(imports, "gsnb")
    assert {a: sorted(b) for a, b in graph.items()} == {
        "gsnb.a": ["gsnb.b"],
        "gsnb.b": ["gsnb.c"],
        "gsnb.c": ["gsnb.a"],
    }
    assert find_cycle(graph) == ["gsnb.a", "gsnb.b", "gsnb.c", "gsnb.a"]
    assert "gsnb/a/inner.py:2: gsnb.a.inner imports gsnb.b" in describe_cycle(
        find_cycle(graph), graph
    )
    assert [i.where for i in root_imports(imports, "gsnb")] == ["gsnb/d.py:1"]
    assert [i.where for i in gui_imports(imports)] == ["gsnb/c.py:3"]
    assert all_cycles(graph) == [["gsnb.a", "gsnb.b", "gsnb.c", "gsnb.a"]]
    del graph["gsnb.c"]
    assert find_cycle(graph) is None and all_cycles(graph) == []


def readme_layers(readme: Path = PACKAGE.parent / "README.md") -> list[str]:
    """The README architecture block's layers, top first: ``gsnb/raster/`` -> ``gsnb.raster``."""
    text = readme.read_text(encoding="utf-8").split("## Architecture", 1)[1]
    block = text.split("```text", 1)[1].split("```", 1)[0]
    names = [line.split()[0] for line in block.splitlines() if line.startswith("gsnb/")]
    return [n.rstrip("/").removesuffix(".py").replace("/", ".") for n in names]


def test_the_readme_architecture_lists_every_layer_in_import_order() -> None:
    """Every layer is in the README's list, and each imports only layers listed below it."""
    order = readme_layers()
    graph = layer_graph(all_imports(), PACKAGE.name)
    # The command line dispatches by name and _-modules are private leaves: not layers.
    layers = {n for edge in graph.items() for n in (edge[0], *edge[1])}
    layers = {n for n in layers if n != "gsnb.cli" and not n.split(".")[-1].startswith("_")}
    assert not layers - set(order), f"layers missing from the README: {layers - set(order)}"
    upward = [
        f"{i.where}: {a} imports {b}, listed above it"
        for a, targets in graph.items()
        for b, found in targets.items()
        if a in order and b in order and order.index(b) < order.index(a)
        for i in found[:1]
    ]
    assert not upward, "imports against the README's layer order:\n" + "\n".join(upward)
