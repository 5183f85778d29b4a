"""Benchmark the CPU fallback kernels against numpy (and int8 conv against onnxruntime).

    python benchmarks/cpu_fallback.py --json out.json

Writes a list of records {"name", "shape", "jit_s", "numpy_s", "speedup_vs_numpy", "compile_s", "correct"}
(plus "onnxruntime_s" / "speedup_vs_onnxruntime" for the int8 convolutions) and prints a table.
"""

import sys

from vdla.experiments.cpu_bench import main

if __name__ == "__main__":
    sys.exit(main())
