"""The experiments: run a model's conv layers on a backend (checked bit-exact against numpy), and the
roofline of latency hiding off (one virtual thread) versus on (the searched schedule)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vdla.compiler.cache import ScheduleCache
from vdla.compiler.epilogue_passes import cycles_per_element
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.runtime.device import Device
from vdla.zoo.resnet import LayerCase, ZooError, layer_case, layer_specs


@dataclass
class LayerRecord:
    """One layer run: the fields of the layer table and of its JSON record."""

    name: str
    config: str
    backend: str
    vthreads: int
    schedule: str
    macs: int
    cycles: int
    utilization: float
    gops: float
    dram_bytes: int
    intensity: float
    correct: bool
    ceiling: float  # the utilization the epilogue leaves: GEMM cycles / (GEMM + epilogue cycles) per output
    compile_seconds: float
    search_seconds: float  # 0 when the schedule came from the cache


def run_layer(
    case: LayerCase, cfg: HwConfig, dev: Device, vthreads: int | str = "auto", cache: ScheduleCache | None = None
) -> LayerRecord:
    """Compile and run one layer, check it against the numpy oracle and derive its metrics."""
    sp = case.spec
    layer = case.compile(cfg, vthreads=vthreads, cache=cache)
    run = layer.run(dev, case.x)
    ref = case.oracle(layer.epilogue.bounds)
    c = run.counters
    ops = 2 * sp.macs
    search = layer.search
    gemm = layer.lowering.ib * sp.kh * sp.kw  # GEMM iterations per accumulator element
    epi = cycles_per_element(layer.epilogue, cfg.timing, out_mul=layer.lowering.out_mul, passes=cfg.alu_passes)
    return LayerRecord(
        name=case.name,
        config=cfg.name,
        backend=dev.backend.name,
        vthreads=layer.schedule.vthreads,
        schedule=layer.schedule.describe(),
        macs=sp.macs,
        cycles=c.cycles,
        utilization=round(c.utilization, 4),
        gops=round(ops * cfg.clock_mhz / c.cycles / 1e3, 3),
        dram_bytes=c.dram_bytes,
        intensity=round(ops / c.dram_bytes, 2),
        correct=bool(np.array_equal(run.out, ref)),
        ceiling=round(gemm / (gemm + epi), 4),
        compile_seconds=round(layer.compile_seconds, 3),
        search_seconds=0.0 if search is None or search.cached else round(search.seconds, 3),
    )


def run_model(
    model: str = "resnet18",
    config: str | HwConfig = DEFAULT_PRESET,
    backend: str = "sim",
    vthreads: int | str = "auto",
    cache: ScheduleCache | None = None,
    seed: int = 0,
    layers: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[LayerRecord]:
    """Run every (or the named) conv layer of a model; ``progress`` is called before each layer."""
    cfg = load_config(config)
    dev = Device(cfg, backend=backend)
    specs = layer_specs(model)
    unknown = set(layers or ()) - set(specs)
    if unknown:
        raise ZooError(f"unknown layers {sorted(unknown)}; {model} has {', '.join(specs)}")
    records = []
    for name, spec in specs.items():
        if layers and name not in layers:
            continue
        if progress:
            progress(name)
        records.append(run_layer(layer_case(name, spec, seed), cfg, dev, vthreads, cache))
    return records


def write_json(records: list[LayerRecord], path: str | Path, **meta) -> None:
    """The layer records as JSON: {"config", ..., "layers": [record, ...]}."""
    config = records[0].config if records else None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"config": config, **meta, "layers": [asdict(r) for r in records]}, indent=2))


@dataclass
class Roofline:
    """The files written and the records of both runs."""

    csv: Path
    png: Path
    off: list[LayerRecord]
    on: list[LayerRecord]


def roofline(
    out_dir: str | Path,
    model: str = "resnet18",
    config: str | HwConfig = DEFAULT_PRESET,
    backend: str = "sim",
    cache: ScheduleCache | None = None,
    seed: int = 0,
    layers: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Roofline:
    """Run every layer with latency hiding off (1 virtual thread) and on (searched), write the CSV and plot."""
    cfg = load_config(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for label, vt in (("off", 1), ("on", "auto")):

        def tick(name: str, label: str = label) -> None:
            if progress:
                progress(f"{name} latency hiding {label}")

        runs[label] = run_model(model, cfg, backend, vt, cache, seed, layers, tick)
    csv_path, png_path = out / "roofline.csv", out / "roofline.png"
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "layer",
                "latency_hiding",
                "vthreads",
                "schedule",
                "macs",
                "cycles",
                "utilization",
                "gops",
                "dram_bytes",
                "intensity",
                "correct",
            ]
        )
        for label in ("off", "on"):
            for r in runs[label]:
                writer.writerow(
                    [
                        r.name,
                        label,
                        r.vthreads,
                        r.schedule,
                        r.macs,
                        r.cycles,
                        r.utilization,
                        r.gops,
                        r.dram_bytes,
                        r.intensity,
                        r.correct,
                    ]
                )
    plot_roofline(runs["off"], runs["on"], cfg, png_path)
    return Roofline(csv_path, png_path, runs["off"], runs["on"])


def plot_roofline(off: list[LayerRecord], on: list[LayerRecord], cfg: HwConfig, path: Path) -> None:
    """Log-log arithmetic intensity vs GOPS with the compute and bandwidth roofs (TVM paper, Figure 10)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [r.intensity for r in off + on]
    x = np.geomspace(min(xs + [cfg.ridge_intensity]) / 2, max(xs + [cfg.ridge_intensity]) * 2, 200)
    ax.plot(x, np.minimum(cfg.peak_gops, cfg.peak_bandwidth_gbs * x), color="black", lw=2, label="roofline")
    ax.axvline(cfg.ridge_intensity, color="gray", ls=":", lw=1)
    ax.annotate(
        f"compute roof {cfg.peak_gops:g} GOPS",
        (x[-1], cfg.peak_gops),
        textcoords="offset points",
        xytext=(0, 14),
        ha="right",
        va="bottom",
    )
    ax.annotate(
        f"bandwidth roof {cfg.peak_bandwidth_gbs:g} GB/s",
        (x[2], cfg.peak_bandwidth_gbs * x[2]),
        textcoords="offset points",
        xytext=(12, -4),
        ha="left",
        va="top",
    )
    ax.annotate(
        f"ridge {cfg.ridge_intensity:g} ops/byte",
        (cfg.ridge_intensity, min(r.gops for r in off + on)),
        rotation=90,
        textcoords="offset points",
        xytext=(-4, 0),
        ha="right",
        fontsize=8,
        color="gray",
    )
    ax.scatter(
        [r.intensity for r in off],
        [r.gops for r in off],
        marker="o",
        facecolors="none",
        edgecolors="tab:red",
        label="latency hiding off (1 virtual thread)",
    )
    ax.scatter(
        [r.intensity for r in on],
        [r.gops for r in on],
        marker="o",
        color="tab:blue",
        label="latency hiding on (searched virtual threads)",
    )
    for a, b in zip(off, on):
        ax.annotate(
            "",
            (b.intensity, b.gops),
            (a.intensity, a.gops),
            arrowprops={"arrowstyle": "->", "color": "gray", "lw": 0.8},
        )
        ax.annotate(b.name, (b.intensity, b.gops), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=cfg.peak_gops * 1.25)  # room for the compute roof's label above the layers near it
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
        axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        axis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("arithmetic intensity (ops/byte of DRAM traffic)")
    ax.set_ylabel("GOPS")
    ax.set_title(
        f"ResNet-18 conv layers on VDLA '{cfg.name}' ({cfg.clock_mhz:g} MHz, "
        f"{cfg.batch}x{cfg.block_in}x{cfg.block_out} GEMM)"
    )
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
