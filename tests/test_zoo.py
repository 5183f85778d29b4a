"""The model zoo imports with numpy alone: onnx, onnxruntime and the other extras on first use. (Its place
between the library and the experiments is test_architecture's rule.)"""

from __future__ import annotations

import subprocess
import sys

EXTRAS = ("onnx", "onnxruntime", "rich", "llvmlite", "matplotlib", "cocotb")


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
