"""Every board preset, measured: ResNet-18 end to end and the suite's MobileNet-V2 and YOLOv8n on its simulator,
with its committed Yosys fit (``benchmarks/fit/NAME.json``) against the timing-closure budget.

    python benchmarks/boards.py [--config NAME ...] [--json benchmarks/boards.json] [--markdown]

One record per preset: ``{"preset", "boards", "part", "clock_mhz", "bus_width_bits", "peak_gops", "fit",
"models": [{"model", "cycles", "mac_bound_cycles", "ratio", "latency_ms", "fps", "correct"}, ...]}``.
``latency_ms`` is the accelerator's cycles at the preset's clock (the CPU steps' time, host-measured, is not
in it); ResNet-18 is checked bit-exact against vdla's CPU reference of the same quantized graph, the suite
models by their cosine with onnxruntime's float output (>= 0.99, as ``benchmarks/models.py``). ``fit`` is the
committed fit's share of each resource, the hard-block average, whether it is within the budget, and its LUT
levels against the level budget at the clock (None where no fit is committed). ``--markdown`` prints the
README's board table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vdla.config import board_presets, load_config
from vdla.hw.fit import fit_summary

sys.path.insert(0, str(Path(__file__).parent))
from models import float_calibrated  # noqa: E402  (benchmarks/models.py: the suite's vdla-calibration record)

console = Console(stderr=True)
SUITE_MODELS = ("mobilenet_v2", "yolov8n")


def resnet18(config: str) -> dict:
    from vdla.experiments.e2e import prepare, run_e2e

    r = run_e2e(prepare(config), "sim")
    return {
        "model": "resnet18",
        "cycles": r.cycles,
        "mac_bound_cycles": r.compute_bound_cycles,
        "ratio": round(r.ratio, 4),
        "latency_ms": round(r.latency_ms, 3),
        "fps": round(1e3 / r.latency_ms, 1),
        "correct": r.correct,
    }


def suite_model(name: str, config: str) -> dict:
    from vdla.zoo.suite import SUITE

    m = SUITE[name]
    with tempfile.TemporaryDirectory() as d:
        rec = float_calibrated(m, m.load(), m.samples(16, 1), m.feeds(4, 7), Path(d), config)
    keys = ("model", "accel_cycles", "mac_bound_cycles", "ratio", "latency_ms", "fps", "correct")
    out = {k: rec[k] for k in keys}
    out["cycles"] = out.pop("accel_cycles")
    out["ratio"] = round(out["ratio"], 4)
    return out


def measure(name: str) -> dict:
    cfg = load_config(name)
    console.print(f"[bold]{cfg.name}[/]: ResNet-18")
    models = [resnet18(cfg.name)]
    for m in SUITE_MODELS:
        console.print(f"[bold]{cfg.name}[/]: {m}")
        models.append(suite_model(m, cfg.name))
    return {
        "preset": cfg.name,
        "boards": list(cfg.boards),
        "part": cfg.part,
        "clock_mhz": cfg.clock_mhz,
        "bus_width_bits": cfg.bus_width_bits,
        "peak_gops": round(cfg.peak_gops, 1),
        "fit": fit_summary(cfg),
        "models": models,
    }


def markdown(records: list[dict]) -> str:
    """The README's table: one row per preset."""
    head = (
        "| preset (boards) | part | clock | peak | LUT | DSP | BRAM36 | URAM | levels | ResNet-18 | MobileNet-V2 | "
        "YOLOv8n |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [head]
    for r in records:
        fit = r["fit"] or {"share": {}, "used": {}}
        cell = [
            f"{fit['used'][k]:,.0f} ({fit['share'][k]:.0%})" if k in fit["share"] else "-"
            for k in ("LUT", "DSP", "BRAM36", "URAM")
        ]
        levels = f"{fit['levels']} / {fit['level_budget']}" if r["fit"] else "-"
        ms = {m["model"]: f"{m['latency_ms']:.2f} ms" + ("" if m["correct"] else " (wrong)") for m in r["models"]}
        rows.append(
            f"| `{r['preset']}` ({', '.join(r['boards'])}) | {r['part']} | {r['clock_mhz']:.4g} MHz | "
            f"{r['peak_gops']:g} GOPS | {' | '.join(cell)} | {levels} | {ms['resnet18']} | {ms['mobilenet_v2']} | "
            f"{ms['yolov8n']} |"
        )
    return "\n".join(rows)


def table(records: list[dict]) -> Table:
    t = Table(title="board presets on the simulator")
    for c in ("preset", "model", "cycles", "ratio", "ms", "fps", "ok"):
        t.add_column(c, justify="left" if c in ("preset", "model") else "right")
    for r in records:
        for m in r["models"]:
            ok = "[green]yes[/]" if m["correct"] else "[red]no[/]"
            t.add_row(
                r["preset"], m["model"], f"{m['cycles']:,}", f"{m['ratio']:.3f}x", f"{m['latency_ms']:.2f}",
                f"{m['fps']:g}", ok,
            )  # fmt: skip
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", help="a preset (repeatable; default: every board preset)")
    ap.add_argument("--json", type=Path, help="write the records (merged into the file's records of other presets)")
    ap.add_argument("--markdown", action="store_true", help="print the README table")
    ap.add_argument(
        "--fits-only", action="store_true", help="refresh only the records' fits (from benchmarks/fit/) in --json"
    )
    args = ap.parse_args()
    names = args.config or [c.name for c in board_presets()]
    if args.fits_only:
        if not args.json or not args.json.is_file():
            ap.error("--fits-only refreshes the records of an existing --json file")
        records = json.loads(args.json.read_text())
        for r in records:
            r["fit"] = fit_summary(load_config(r["preset"]))
        args.json.write_text(json.dumps(records, indent=2) + "\n")
        if args.markdown:
            print(markdown(records))
        return 0
    records = [measure(n) for n in names]
    Console().print(table(records))
    if args.json:
        old = json.loads(args.json.read_text()) if args.json.is_file() else []
        done = {r["preset"] for r in records}
        order = [c.name for c in board_presets()]
        merged = sorted([r for r in old if r["preset"] not in done] + records, key=lambda r: order.index(r["preset"]))
        args.json.write_text(json.dumps(merged, indent=2) + "\n")
        records = merged
    if args.markdown:
        print(markdown(records))
    return 0 if all(m["correct"] for r in records for m in r["models"]) else 1


if __name__ == "__main__":
    sys.exit(main())
