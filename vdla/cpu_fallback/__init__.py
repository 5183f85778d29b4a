"""CPU fallback: LLVM-JIT kernels (via llvmlite) for every operator the accelerator does not run.

Quick use from numpy::

    from vdla.cpu_fallback import compile_chain, ew, ops
    y = ops.max_pool2d(x, 3, 2, 1)
    k = compile_chain(acc, [ew.requantize(m, s), ew.add(res), ew.relu(), ew.clip(0, 127), ew.cast("int8")])
    z = k(acc, res)

See docs/cpu_fallback.md for the design (operator stacking, caches) and measured performance.
"""

from vdla.graph import ew
from vdla.graph.graph import Graph, Node
from vdla.graph.types import TensorType, UnsupportedError

try:
    from vdla.cpu_fallback import ops, reference
    from vdla.cpu_fallback.jit import Kernel, clear_cache, disk_cache_dir, get_kernel, set_disk_cache
    from vdla.cpu_fallback.stacking import CompiledGraph, compile_chain, compile_graph, fuse, run_chain
except ModuleNotFoundError as e:
    if e.name is None or not e.name.startswith("llvmlite"):
        raise
    raise ImportError("vdla.cpu_fallback JIT-compiles its kernels with llvmlite: pip install 'vdla[jit]'") from e

__all__ = [
    "CompiledGraph",
    "Graph",
    "Kernel",
    "Node",
    "TensorType",
    "UnsupportedError",
    "clear_cache",
    "compile_chain",
    "compile_graph",
    "disk_cache_dir",
    "ew",
    "fuse",
    "get_kernel",
    "ops",
    "reference",
    "run_chain",
    "set_disk_cache",
]
