"""The model zoo's place between the library and the experiments: it imports with numpy alone (onnx,
onnxruntime and the other extras on first use), imports nothing but the library, and no library module
imports it. (The import walk and the library's packages are test_architecture's.)"""

from __future__ import annotations

import subprocess
import sys

from test_architecture import LIBRARY, _imports, _modules, _under

EXTRAS = ("onnx", "onnxruntime", "rich", "llvmlite", "matplotlib", "cocotb")
WHOLE_LIBRARY = (*LIBRARY, "vdla.errors", "vdla.hw_header", "vdla.model")


def test_zoo_imports_without_the_extras():
    code = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {EXTRAS!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import vdla.zoo.models, vdla.zoo.resnet, vdla.zoo.tiled_matmul, vdla.zoo.workloads\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_zoo_imports_the_library_alone_and_the_library_not_the_zoo():
    bad = []
    for mod, path in _modules().items():
        imported = _imports(path) - {"vdla"}
        if _under(mod, "vdla.zoo"):
            allowed = (*WHOLE_LIBRARY, "vdla.zoo")
            bad += [f"{mod} imports {i}" for i in imported if not any(_under(i, a) for a in allowed)]
        elif any(_under(mod, lib) for lib in WHOLE_LIBRARY):
            bad += [f"{mod} imports {i}" for i in imported if _under(i, "vdla.zoo")]
    assert not bad, "\n".join(sorted(bad))
