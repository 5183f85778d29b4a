"""No import cycles in vdla: the import graph of its modules, read from the source, has no cycle.

The graph has a node per module of the ``vdla`` package (a package is its ``__init__``) and an edge for every
import statement anywhere in a module, function-level (lazy) imports included, since they run too, only later:

* ``import a.b.c`` -> ``a.b.c``;
* ``from a.b import x`` -> ``a.b``, whose namespace ``x`` is read from (its ``__init__`` runs first), and
  also -> ``a.b.x`` when that is a module.

The parent packages Python runs before ``a.b.c`` are no edge of ``import a.b.c`` (else every package whose
``__init__`` re-exports its submodules would be a cycle with each of them), and a package's ``__init__``
importing its own submodules through itself is no edge to itself. A cycle is a strongly connected component of
two or more modules; the test names each one by a path around it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import vdla

ROOT = Path(vdla.__file__).parent


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root`` by its dotted name (``pkg/sub/__init__.py`` is ``pkg.sub``)."""
    mods = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return mods


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute name ``from`` imports from, ``level`` dots resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path) -> dict[str, set[str]]:
    """The import graph of the package at ``root`` (see the module doc): module -> the modules it imports."""
    mods = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(name, node, path.name == "__init__.py")
                out.add(source)
                out.update(f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in mods)
        graph[name] = {m for m in out if m in mods and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, successors = work[-1]
            w = next(successors, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def path_around(graph: dict[str, set[str]], component: Iterable[str]) -> str:
    """A shortest cycle through the component's first module, as ``a -> b -> ... -> a``."""
    members = sorted(component)
    start, inside = members[0], set(members)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return " -> ".join([start, *reversed(path[:-1]), start])
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise ValueError(f"{members} is not a cycle")


def test_the_graph_and_its_cycles_on_a_small_package(tmp_path):
    """The rules of the module doc on a package made here: each kind of edge, and a cycle found only with it."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "A = 1\n\ndef f():\n    from pkg.sub import c  # lazy, through the package's namespace\n",
        "b.py": "import pkg.sub.c\n",
        "sub/__init__.py": "from pkg.sub import c\n",
        "sub/c.py": "from . import d\n",
        "sub/d.py": "import pkg.b\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(pkg)
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.sub", "pkg.sub.c"},
        "pkg.b": {"pkg.sub.c"},
        "pkg.sub": {"pkg.sub.c"},
        "pkg.sub.c": {"pkg.sub", "pkg.sub.d"},
        "pkg.sub.d": {"pkg.b"},
    }
    assert cycles(graph) == [["pkg.b", "pkg.sub", "pkg.sub.c", "pkg.sub.d"]]
    assert path_around(graph, cycles(graph)[0]) == "pkg.b -> pkg.sub.c -> pkg.sub.d -> pkg.b"
    (pkg / "sub/d.py").write_text("X = 2\n")
    assert cycles(import_graph(pkg)) == [["pkg.sub", "pkg.sub.c"]]
    (pkg / "sub/c.py").write_text("import pkg.sub.d as d\n")
    assert cycles(import_graph(pkg)) == []


def test_no_import_cycles():
    graph = import_graph(ROOT)
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(f"  {path_around(graph, c)}  (component: {c})" for c in found)
