"""The architecture's rules, checked on the source: one name per public class, and imports that flow one way
(docs/architecture.md): config -> isa -> graph -> cpu_fallback | runtime -> compiler -> model, the frontend
beside the model compiler, chip-design tools (vdla.hw) beside the runtime's RTL backend; the zoo above the
library, experiments, the sweep and the command line on top."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import vdla

ROOT = Path(vdla.__file__).parent

ABOVE_GRAPH = ("vdla.compiler", "vdla.cpu_fallback", "vdla.runtime", "vdla.model", "vdla.frontend", "vdla.hw")
# the compiler and ONNX, which loading and running an artifact never import
MODEL_COMPILER = (
    "vdla.compiler",
    "vdla.frontend",
    *(
        f"vdla.model.{m}"
        for m in ("pipeline", "lower", "lowering", "match", "place")
        + ("fusion_choice", "views", "lifetimes", "cpu_regions")
    ),
)
# what runs programs: the chip-design tools never import it (the rtl backend imports them)
RUNNING = tuple(f"vdla.runtime.{m}" for m in ("rtl", "sim", "pynq_backend", "device", "commands", "backend"))
# package -> packages it must never import (directly, at any depth of its modules)
FORBIDDEN = {
    "vdla.config": ("vdla.isa", "vdla.graph", *ABOVE_GRAPH),
    "vdla.isa": ("vdla.graph", *ABOVE_GRAPH),
    "vdla.graph": ABOVE_GRAPH,
    "vdla.cpu_fallback": ("vdla.compiler", "vdla.runtime", "vdla.model", "vdla.frontend", "vdla.hw"),
    "vdla.runtime": ("vdla.compiler", "vdla.cpu_fallback", "vdla.graph", "vdla.model", "vdla.frontend"),
    "vdla.compiler": (
        "vdla.cpu_fallback",
        "vdla.runtime.sim",
        "vdla.runtime.rtl",
        "vdla.model",
        "vdla.frontend",
        "vdla.hw",
    ),
    # the frontend builds graphs: it may import vdla.graph, vdla.isa, vdla.config and vdla.errors only
    "vdla.frontend": ("vdla.compiler", "vdla.cpu_fallback", "vdla.runtime", "vdla.model", "vdla.hw"),
    # chip-design tools: the configuration, the ISA and the register map; nothing that runs programs
    "vdla.hw": ("vdla.graph", "vdla.compiler", "vdla.cpu_fallback", "vdla.model", "vdla.frontend", *RUNNING),
    # loading and running an artifact needs neither the compiler nor ONNX
    **{f"vdla.model.{m}": MODEL_COMPILER for m in ("artifact", "executor", "memplan")},
    # the board driver: registers, diagnosis and the ISA; neither the RTL simulation nor the simulator (the
    # simulated board is a test fixture, tests_pynq/pynq_sim.py)
    "vdla.runtime.pynq_backend": ("vdla.runtime.rtl", "vdla.runtime.sim", "vdla.model", "vdla.hw"),
    "vdla.runtime.diagnosis": ("vdla.runtime.rtl", "vdla.runtime.sim", "vdla.runtime.pynq_backend"),
    # the zoo sits on the library: no experiment, no command line
    "vdla.zoo": ("vdla.experiments", "vdla.sweep", "vdla.cli"),
}
# the library: it never imports the zoo, the experiments or the command line above it
LIBRARY = (
    "vdla.config",
    "vdla.cycles",
    "vdla.errors",
    "vdla.paths",
    "vdla.isa",
    "vdla.graph",
    "vdla.compiler",
    "vdla.cpu_fallback",
    "vdla.runtime",
    "vdla.frontend",
    "vdla.model",
    "vdla.hw",
)
ABOVE_LIBRARY = ("vdla.zoo", "vdla.experiments", "vdla.sweep", "vdla.cli")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        mods[name] = path
    return mods


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {f for f in found if f.startswith("vdla")}


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_imports_flow_one_way():
    bad = []
    for mod, path in _modules().items():
        imported = _imports(path)
        for pkg, forbidden in FORBIDDEN.items():
            if _under(mod, pkg):
                bad += [f"{mod} imports {i}" for i in imported for f in forbidden if _under(i, f)]
        if any(_under(mod, lib) for lib in LIBRARY):
            bad += [f"{mod} imports {i}" for i in imported if any(_under(i, a) for a in ABOVE_LIBRARY)]
    assert not bad, "\n".join(sorted(bad))


def test_public_class_names_are_unique():
    homes = defaultdict(set)
    for info in pkgutil.walk_packages(vdla.__path__, "vdla."):
        if info.name in ("vdla.__main__",):
            continue
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and not name.startswith("_") and obj.__module__ == mod.__name__:
                homes[name].add(mod.__name__)
    twice = {name: sorted(mods) for name, mods in homes.items() if len(mods) > 1}
    assert not twice, twice


def test_no_error_derives_from_assertion_error():
    bad = []
    for info in pkgutil.walk_packages(vdla.__path__, "vdla."):
        try:
            mod = importlib.import_module(info.name)
        except ImportError:
            continue
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, AssertionError) and obj.__module__ == mod.__name__:
                bad.append(f"{mod.__name__}.{name}")
    assert not bad, bad


def test_graph_and_frontend_import_without_onnx():
    """onnx is imported by vdla.frontend.onnx alone, on first use: the graph package, its passes and the
    frontend package itself stay numpy-only."""
    code = (
        "import sys, vdla.graph, vdla.graph.passes, vdla.graph.interp, vdla.frontend; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_frontend_without_onnx_says_which_extra_to_install():
    code = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'onnx':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from vdla.frontend import import_onnx\n"
        "import_onnx('model.onnx')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "pip install 'vdla[onnx]'" in out.stderr, out.stderr


def test_only_the_pynq_modules_import_pynq():
    """pynq (a board package pinning numpy<2) is imported by the pynq backend, when one is created (and by the
    tests' simulated board, outside vdla); nothing else in vdla may import it."""
    bad = []
    for mod, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "pynq" for n in names) and mod != "vdla.runtime.pynq_backend":
                bad.append(mod)
    assert not bad, bad
    top = ast.parse((ROOT / "runtime" / "pynq_backend.py").read_text()).body  # module level: imported lazily
    names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in top if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "pynq"], names


def _op_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, literal) of every string literal compared with an ``.op`` attribute (``x.op == "conv2d"``,
    ``x.op in ("add", "mul")``)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(isinstance(s, ast.Attribute) and s.attr == "op" for s in sides):
            continue
        for s in sides:
            elts = s.elts if isinstance(s, (ast.Tuple, ast.Set, ast.List)) else [s]
            found += [(e.lineno, e.value) for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return found


def test_operators_are_compared_against_the_registry_names():
    """A node's operator is compared against a constant of vdla.graph.opnames (a misspelt one fails at import),
    never against a string literal; the registry itself (ops.py, ew.py), which defines the names, is exempt."""
    exempt = {"vdla.graph.ops", "vdla.graph.ew", "vdla.graph.opnames"}
    bad = [
        f"{path.relative_to(ROOT.parent)}:{line}: .op compared with {value!r}"
        for mod, path in _modules().items()
        if mod not in exempt
        for line, value in _op_literals(ast.parse(path.read_text()))
    ]
    assert not bad, "\n".join(bad)


def test_every_operator_name_is_registered_and_every_operator_named():
    from vdla.graph import opnames
    from vdla.graph.ops import OPS

    assert opnames.NAMES == set(OPS)
    assert all(getattr(opnames, name.upper()) == name for name in OPS)
