"""CPU fallback: LLVM-compiled kernels (via llvmlite) for every operator the accelerator does not run.

Quick use from numpy::

    from vdla.cpu_fallback import compile_chain, ew, functions
    y = functions.max_pool2d(x, 3, 2, 1)
    k = compile_chain(acc, [ew.requantize(m, s), ew.add(res), ew.relu(), ew.clip(0, 127), ew.cast("int8")])
    z = k(acc, res)

The JIT names (``compile_graph``, ``get_kernel``, ``functions`` ...) load llvmlite on first use and raise an
ImportError naming the ``jit`` extra where it is missing; the kernel specs (and their numpy semantics,
``Spec.evaluate``) and the loader of ahead-of-time code (:mod:`~vdla.cpu_fallback.native`, what a board
runs) need numpy only.
See docs/cpu_fallback.md for the design (operator stacking, caches, ahead-of-time code) and measured
performance.
"""

import importlib

from vdla.graph import ew
from vdla.graph.graph import Graph, Node
from vdla.graph.types import TensorType, UnsupportedError

_JIT_NAMES = {
    "Kernel": "jit",
    "clear_cache": "jit",
    "disk_cache_dir": "jit",
    "get_kernel": "jit",
    "set_disk_cache": "jit",
    "CompiledGraph": "stacking",
    "compile_chain": "stacking",
    "compile_graph": "stacking",
    "fuse": "stacking",
    "run_chain": "stacking",
    "functions": None,
}


def __getattr__(name: str) -> object:
    """The JIT's names, imported on first use (llvmlite missing: an ImportError naming the extra)."""
    if name not in _JIT_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _JIT_NAMES[name]
    try:
        mod = importlib.import_module(f"{__name__}.{module or name}")
        if module is None:
            return mod
        importlib.import_module(f"{__name__}.jit")
    except ModuleNotFoundError as e:
        if e.name is None or not e.name.startswith("llvmlite"):
            raise
        raise ImportError("vdla.cpu_fallback JIT-compiles its kernels with llvmlite: pip install 'vdla[jit]'") from e
    return getattr(mod, name)


__all__ = ["Graph", "Node", "TensorType", "UnsupportedError", "ew", *_JIT_NAMES]
