"""Simulator speed on a GEMM-heavy program: a tiled int8 matrix multiply checked against numpy.

Reports simulated cycles, GEMM utilization, and simulator speed in uop-iterations (GEMM, GEMM reset
and ALU) per wall second of the simulator run (median of several runs), plus the end-to-end time
that includes building the program with the command builder. Target: >= 5 million per second.

    python benchmarks/sim_speed.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from vdla.config import DEFAULT_PRESET
from vdla.runtime import Device
from vdla.zoo.tiled_matmul import matmul_oracle, tiled_matmul


def measure(config: str, size: tuple[int, int, int], vthreads: int, repeats: int) -> dict:
    dev = Device(config)
    rng = np.random.default_rng(0)
    m, k, n = size
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    sim_walls, walls, res = [], [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = tiled_matmul(dev, a, b, shift=12, vthreads=vthreads)
        walls.append(time.perf_counter() - t0)
        sim_walls.append(res.run.wall_s)
    c = res.run.counters
    iters = c.gemm_iters + c.gemm_reset_iters + c.alu_iters
    wall = statistics.median(sim_walls)
    return {
        "config": config,
        "size": list(size),
        "vthreads": vthreads,
        "uop_iters": iters,
        "wall_s": wall,
        "end_to_end_s": statistics.median(walls),
        "uop_iters_per_s": iters / wall,
        "cycles": c.cycles,
        "utilization": c.utilization,
        "instructions": sum(c.insn_counts.values()),
        "correct": bool(np.array_equal(res.out, matmul_oracle(a, b, 12))),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=DEFAULT_PRESET)
    p.add_argument("--size", type=int, nargs=3, default=(1024, 1024, 1024), metavar=("M", "K", "N"))
    p.add_argument("--vthreads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="write the headline record here")
    args = p.parse_args()
    rows = [
        measure(args.config, (256, 256, 256), args.vthreads, args.repeats),
        measure(args.config, tuple(args.size), args.vthreads, args.repeats),
    ]
    table = Table(title="vdla simulator speed (tiled int8 matmul, median wall time)")
    for col in (
        "M x K x N",
        "uop-iters",
        "instructions",
        "cycles",
        "utilization",
        "sim s",
        "M uop-iters/s",
        "end-to-end s",
        "correct",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            "x".join(map(str, r["size"])),
            f"{r['uop_iters']:,}",
            f"{r['instructions']:,}",
            f"{r['cycles']:,}",
            f"{r['utilization']:.1%}",
            f"{r['wall_s']:.3f}",
            f"{r['uop_iters_per_s'] / 1e6:.1f}",
            f"{r['end_to_end_s']:.3f}",
            str(r["correct"]),
        )
    Console(width=140).print(table)
    headline = rows[-1]
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**headline, "runs": rows}, indent=2))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
