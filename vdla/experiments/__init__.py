"""Experiments and benchmarks that sit above the library: the ResNet-18 layer table and its runs,
the roofline of latency hiding, the RTL calibration workloads, the tiled matmul demo and the CPU
fallback benchmark suite.

Nothing in ``vdla.isa``, ``vdla.graph``, ``vdla.compiler``, ``vdla.cpu_fallback`` or ``vdla.runtime``
imports this package; the CLI subcommands and the scripts in ``benchmarks/`` do.
"""
