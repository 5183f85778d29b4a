"""Experiments and benchmarks that sit above the library: runs of the ResNet-18 layer table
(``layers``), the roofline of latency hiding, ResNet-18 end to end (``e2e``), the cycle agreement of the
simulator with the RTL (``cycle_agreement``) and the CPU fallback benchmark suite (``cpu_bench``), with
their ``vdla`` subcommands (``cli``).

The models and workloads they run are the zoo's (``vdla.zoo``). Experiments import the library and the zoo;
nothing in the library or the zoo imports this package, and neither do the tests: they reach the experiments
through the ``vdla`` command line. The CLI subcommands and the scripts in ``benchmarks/`` import it.
"""
