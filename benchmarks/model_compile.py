"""Whole-model compile time and run: ResNet-18 at 224x224, QDQ-quantized by onnxruntime, compiled by vdla.

Builds the seeded ResNet-18 (torchvision layout, BatchNorm) with the project's ONNX builder, quantizes it
with onnxruntime's static QDQ quantizer on seeded calibration images (cached in out/), then compiles it with
a cold schedule cache (schedule search included) and again with the warm cache, and runs it once on the
simulator. Targets (issue 10): cold under 30 s, warm under 5 s on the 2-core development machine.

    python benchmarks/model_compile.py [--json out/model_compile.json] [--calib 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vdla.compiler import ScheduleCache
from vdla.config import DEFAULT_PRESET
from vdla.model import Module
from vdla.model.pipeline import compile_model
from vdla.zoo.models import calibration_images, quantize_qdq, resnet18


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calib", type=int, default=8, help="calibration images for onnxruntime")
    parser.add_argument("--config", default=DEFAULT_PRESET)
    parser.add_argument("--json", help="write the figures as JSON")
    args = parser.parse_args(argv)
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
