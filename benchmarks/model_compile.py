"""Whole-model compile time and run: ResNet-18 at 224x224, QDQ-quantized by onnxruntime, compiled by vdla.

Builds the seeded ResNet-18 (torchvision layout, BatchNorm) with the project's ONNX builder, quantizes it
with onnxruntime's static QDQ quantizer on seeded calibration images (cached in out/), then compiles it with
a cold schedule cache (schedule search included) and again with the warm cache, and runs it once on the
simulator. Targets (issue 10): cold under 30 s, warm under 5 s on the 2-core development machine.

    python benchmarks/model_compile.py [--json out/model_compile.json] [--calib 8]

``--detector`` measures instead a 3-GMAC detector compiled cold from the command line, as a user would (issue 51:
under 60 s on the 2-core machine): the suite's YOLOv8n builder (:func:`vdla.zoo.models.yolov8`, width 0.25,
depth 0.33) at 544x544, 3.16 GMAC, saved as an ONNX file with 16 of the suite's seeded images as the
calibration file, then ``vdla compile MODEL --calib calib.npz`` in a subprocess with an empty ``VDLA_CACHE_DIR``
(schedule search and the calibration's JIT kernels from scratch). It records the wall time, the CPU time of
the compile (user + system) and the machine's load averages before and after (the machine is shared: the wall
time is the CPU time stretched by the load; ``nice`` records the priority it ran at, ``nice -n -10`` giving the
compile the cores it asks for on a shared machine; ``free_core`` whether the load left a core for the forked
helpers of :mod:`vdla.model.prefetch`, whose CPU time the figure counts too), with the compiler's per-pass
seconds:

    python benchmarks/model_compile.py --detector --json benchmarks/detector_compile.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vdla.compiler import ScheduleCache
from vdla.config import DEFAULT_PRESET
from vdla.model import Module
from vdla.model.artifact import load_artifact
from vdla.model.pipeline import compile_model
from vdla.model.prefetch import free_core
from vdla.zoo.models import calibration_images, quantize_qdq, resnet18, yolov8
from vdla.zoo.suite import suite_images

DETECTOR_SIZE = 544  # YOLOv8n's width and depth at 544x544: 3.16 GMAC
DETECTOR_TARGET_S = 60.0


def qdq_resnet18(calib: int, out: Path) -> Path:
    path = out / f"resnet18_qdq_c{calib}.onnx"
    if not path.exists():
        import onnx

        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        model = quantize_qdq(resnet18(seed=0), calibration_images((3, 224, 224), calib, seed=1))
        onnx.save(model, path)
        print(f"quantized ResNet-18 with onnxruntime in {time.perf_counter() - t0:.1f} s -> {path}")
    return path


def detector_files(folder: Path, size: int, samples: int) -> tuple[Path, Path]:
    """The detector's ONNX file and its calibration file (``samples`` seeded suite images) in ``folder``."""
    import onnx

    model, calib = folder / f"yolov8n_{size}.onnx", folder / f"calib_{size}.npz"
    onnx.save(yolov8(width=0.25, depth=0.33, image=size, classes=80, seed=0), model)
    np.savez(calib, image=suite_images(samples, size, 1))
    return model, calib


def cold_cli_compile(model: Path, calib: Path, config: str, folder: Path) -> dict:
    """``vdla compile MODEL --calib CALIB`` in a subprocess with an empty cache folder: wall and CPU seconds, the
    load averages around it, the compile report and the artifact's path."""
    out, report, cache = folder / "model.vdla", folder / "report.json", folder / "cache"
    cmd = [sys.executable, "-m", "vdla", "compile", str(model), "--calib", str(calib), "--config", config]
    cmd += ["-o", str(out), "--json", str(report)]
    helpers = free_core()  # what the compile's own check sees as it starts, near enough
    load_before, used = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env={**os.environ, "VDLA_CACHE_DIR": str(cache)}, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = done.ru_utime - used.ru_utime + done.ru_stime - used.ru_stime
    load = (load_before, os.getloadavg())
    report = json.loads(report.read_text())
    return {"wall_s": wall, "cpu_s": cpu, "load": load, "helpers": helpers, "report": report, "artifact": out}


def detector(args: argparse.Namespace) -> dict:
    """The ``--detector`` figures (see the module docstring)."""
    with tempfile.TemporaryDirectory() as d:
        model, calib = detector_files(Path(d), args.size, args.samples)
        run = cold_cli_compile(model, calib, args.config, Path(d))
        artifact = load_artifact(run["artifact"])
    accel = [s for s in artifact.steps if s.kind == "accel"]
    return {
        "model": f"yolov8n (vdla.zoo.models.yolov8, width 0.25, depth 0.33) at {args.size}x{args.size}",
        "command": f"vdla compile yolov8n_{args.size}.onnx --calib calib_{args.size}.npz (empty VDLA_CACHE_DIR)",
        "config": args.config,
        "macs": artifact.total_macs,
        "accel_mac_share": artifact.accel_macs / artifact.total_macs,
        "accel_layers": len(accel),
        "cpu_steps": len(artifact.steps) - len(accel),
        "calibration_samples": args.samples,
        "compile_cold_wall_s": round(run["wall_s"], 1),
        "compile_cold_cpu_s": round(run["cpu_s"], 1),
        "target_s": DETECTOR_TARGET_S,
        "machine": {
            "cpus": os.cpu_count(),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),  # run under `nice -n -10` for the compile's own time
            "free_core": run["helpers"],  # whether the compile could fork its helpers (vdla.model.prefetch)
            "load_avg_before": run["load"][0],
            "load_avg_after": run["load"][1],
        },
        "passes_s": {k: round(v, 2) for k, v in run["report"]["seconds"].items()},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calib", type=int, default=8, help="calibration images for onnxruntime")
    parser.add_argument("--config", default=DEFAULT_PRESET)
    parser.add_argument("--json", help="write the figures as JSON")
    parser.add_argument("--detector", action="store_true", help="the 3-GMAC detector compiled cold by `vdla compile`")
    parser.add_argument("--size", type=int, default=DETECTOR_SIZE, help="the detector's image size (--detector)")
    parser.add_argument("--samples", type=int, default=16, help="the detector's calibration images (--detector)")
    args = parser.parse_args(argv)
    if args.detector:
        figures = detector(args)
        print(json.dumps(figures, indent=2))
        wall, ok = figures["compile_cold_wall_s"], figures["compile_cold_wall_s"] < DETECTOR_TARGET_S
        print(f"cold compile {wall} s (target < {DETECTOR_TARGET_S:g} s): {'met' if ok else 'missed'}")
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
        return 0
    path = qdq_resnet18(args.calib, Path("out"))
    with tempfile.TemporaryDirectory() as tmp:
        cache = ScheduleCache(Path(tmp) / "schedules.json")
        t0 = time.perf_counter()
        artifact, report = compile_model(path, config=args.config, cache=cache)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        compile_model(path, config=args.config, cache=cache)
        warm = time.perf_counter() - t0
    module = Module(artifact, "sim")
    x = calibration_images((3, 224, 224), 1, seed=9)
    t0 = time.perf_counter()
    module.run(x)
    run_s = time.perf_counter() - t0
    r = module.last_report
    accel = sum(s.kind == "accel" for s in artifact.steps)
    figures = {
        "model": "resnet18 224x224 (onnxruntime QDQ, per-channel int8)",
        "config": args.config,
        "compile_cold_s": round(cold, 2),
        "compile_warm_s": round(warm, 2),
        "passes_s": {k: round(v, 3) for k, v in report.seconds.items()},
        "accel_layers": accel,
        "cpu_steps": len(artifact.steps) - accel,
        "accel_mac_share": r.accel_mac_share,
        "accel_cycles": r.accel_cycles,
        "accel_ms": round(r.accel_ms, 2),
        "cpu_ms": round(r.cpu_ms, 1),
        "sim_wall_s": round(run_s, 2),
        "dram_arena_bytes": artifact.memory["dram_arena_bytes"],
        "dram_arena_no_reuse_bytes": artifact.memory["dram_arena_no_reuse_bytes"],
        "image_bytes": artifact.memory["image_bytes"],
        "host_arena_bytes": module.host_plan.total if module.host_plan else 0,
        "host_no_reuse_bytes": module.host_plan.no_reuse if module.host_plan else 0,
    }
    width = max(map(len, figures))
    for k, v in figures.items():
        print(f"{k:<{width}}  {v}")
    ok = cold < 30 and warm < 5
    print(f"compile: cold {cold:.1f} s (target < 30 s), warm {warm:.1f} s (target < 5 s): {'met' if ok else 'missed'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
