"""``vdla cpu-bench``: run the CPU fallback benchmark suite (same code as benchmarks/cpu_fallback.py)."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace) -> int:
    from vdla.cpu_fallback import bench

    return bench.main_from_args(args)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``cpu-bench`` subcommand; its handler is stored as ``func`` on the parsed namespace."""
    from vdla.cpu_fallback import bench

    parser = subparsers.add_parser("cpu-bench", help="benchmark the LLVM-JIT CPU fallback kernels against numpy")
    bench.add_arguments(parser)
    parser.set_defaults(func=_run)
