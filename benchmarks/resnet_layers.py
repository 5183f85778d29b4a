"""ResNet-18 conv layers with latency hiding off (1 virtual thread) and on (searched), with compile time.

Every layer is compiled from a cold schedule cache (so the compile time includes the schedule search),
run on the backend and checked bit-exact against numpy. Prints one row per layer and writes JSON::

    python benchmarks/resnet_layers.py --config pynq --json out/resnet_layers.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vdla.compiler import ScheduleCache
from vdla.config import DEFAULT_PRESET, load_config
from vdla.experiments.layers import run_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=DEFAULT_PRESET)
    p.add_argument("--backend", default="sim")
    p.add_argument("--layers", nargs="+", metavar="NAME")
    p.add_argument("--json", help="write the records and totals here")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    console = Console(width=None if sys.stdout.isatty() else 150)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = ScheduleCache(Path(tmp) / "schedules.json")
        for label, vt in (("off", 1), ("on", "auto")):
            console.print(f"latency hiding {label}: compiling and running ...")
            runs[label] = run_model("resnet18", cfg, args.backend, vt, cache, layers=args.layers)
    t = Table(title=f"ResNet-18 on '{cfg.name}' ({args.backend}): GEMM utilization, latency hiding off -> on")
    for col in (
        "layer",
        "schedule (on)",
        "util off",
        "util on",
        "ceiling",
        "GOPS on",
        "speed-up",
        "DRAM bytes on",
        "ops/byte on",
        "above ridge",
        "compile s",
        "correct",
    ):
        t.add_column(col, justify="left" if col in ("layer", "schedule (on)") else "right")
    for a, b in zip(runs["off"], runs["on"]):
        t.add_row(
            b.name,
            b.schedule,
            f"{a.utilization:.1%}",
            f"{b.utilization:.1%}",
            f"{b.ceiling:.1%}",
            f"{b.gops:.2f}",
            f"{a.cycles / b.cycles:.2f}x",
            f"{b.dram_bytes:,}",
            f"{b.intensity:.1f}",
            "yes" if b.intensity > cfg.ridge_intensity else "no",
            f"{b.compile_seconds:.2f}",
            "yes" if a.correct and b.correct else "NO",
        )
    console.print(t)
    console.print(
        "ceiling: the GEMM utilization the epilogue leaves (GEMM iterations per output element over those "
        "plus the epilogue's ALU cycles per element; the bias init and the requantization are free)"
    )
    totals = {
        label: {
            "compile_seconds": round(sum(r.compile_seconds for r in recs), 3),
            "search_seconds": round(sum(r.search_seconds for r in recs), 3),
        }
        for label, recs in runs.items()
    }
    console.print(
        f"compile time of all layers, search included: {totals['on']['compile_seconds']:.2f} s with "
        f"vthreads auto ({totals['on']['search_seconds']:.2f} s searching), "
        f"{totals['off']['compile_seconds']:.2f} s with vthreads 1"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "config": cfg.name,
                    "backend": args.backend,
                    "totals": totals,
                    "off": [asdict(r) for r in runs["off"]],
                    "on": [asdict(r) for r in runs["on"]],
                },
                indent=2,
            )
        )
    return 0 if all(r.correct for recs in runs.values() for r in recs) else 1


if __name__ == "__main__":
    sys.exit(main())
