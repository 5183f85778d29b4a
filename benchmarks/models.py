"""The model suite on the accelerator: each model of ``vdla.zoo.suite`` compiled twice (float with vdla's
calibration, and onnxruntime's QDQ model), run on the simulator and checked against the reference.

    python benchmarks/models.py [--config PRESET] [--json out/models.json] [--only NAME ...] [--tests 4] [--calib 16]

One record per (model, quantization), for one preset (default pynq-z2; ``benchmarks/models/PRESET.json``
holds each board preset's):

    {"model", "quantization", "preset", "clock_mhz", "latency_ms", "fps", "macs", "accel_mac_share",
     "accel_cycles", "mac_bound_cycles", "ratio",
     "layer_roofline_cycles", "roofline_ratio", "cpu_steps", "cpu_ms", "correct", "agreement", "compile_s",
     "compile_warm_s", "cpu_ops"[, "depthwise"]}

``depthwise`` (models with depthwise layers): the MACs, accelerator cycles and MACs per cycle of those run
apart from a 1x1 layer (with the cycles of a global average fused into them, squeeze-excite's pool), and the
pairs fused with the 1x1 convolution after them (``fused_pairs``, ``fused_cycles``), of which ``fused_blocks``
have the 1x1 expand layer before them fused too (the whole inverted residual block on chip);
``pairs`` lists each fused step (its op, cycles and own bound).

``latency_ms`` = accel_cycles at the preset's clock (the accelerator's time; the CPU steps' time on the board
is not in it), ``fps`` its inverse. ``mac_bound_cycles`` = MACs / (BATCH x BLOCK_IN x BLOCK_OUT) of the
config, ``ratio`` = accel_cycles / mac_bound_cycles. ``layer_roofline_cycles``: the sum over the accelerator
steps of each step's own bound, its MACs over the core's MACs per cycle or the bytes of the activations it
reads (input, residual) and writes (its output, channels padded to blocks) over the bus's bytes per cycle,
whichever is larger (weights not counted): what layer-by-layer execution cannot beat, where only fusing layers
on chip goes below; ``roofline_ratio`` = accel_cycles / layer_roofline_cycles.

``correct``: for vdla's calibration, the cosine of every output with onnxruntime's float output (graph
optimizations off: ``vdla.frontend.reference``) is at least 0.99 on every test input; for the QDQ model,
every output equals the reference running the QDQ model, or differs only where ``compare_layers`` finds a
rounding tie of the reference's float32 arithmetic. ``agreement`` holds the figures (cosines, or differing
elements and ties). ``compile_warm_s`` compiles again with the schedule cache the first compile filled.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from vdla.compiler import ScheduleCache
from vdla.config import DEFAULT_PRESET, load_config
from vdla.frontend.onnx import import_onnx
from vdla.frontend.reference import compare_layers, reference_session
from vdla.graph.passes import simplify
from vdla.graph.qdq import lower_qdq
from vdla.model import Module
from vdla.model.pipeline import CompileOptions, compile_model
from vdla.zoo.models import cosine, quantize_qdq
from vdla.zoo.suite import SUITE, SuiteModel

console = Console(stderr=True)
COSINE = 0.99
FUSED = "depthwise_conv2d+conv2d"  # a fused pair's op; "conv2d+" before it: the expand layer fused too


def compile_twice(model, calib, options: CompileOptions, cache_dir: Path) -> tuple:
    """(artifact, report, cold seconds, warm seconds): cold with an empty schedule cache, warm with the one
    the cold compile filled."""
    cache = ScheduleCache(cache_dir / "schedules.json")
    t0 = time.perf_counter()
    artifact, report = compile_model(model, calib, options, cache=cache)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    compile_model(model, calib, options, cache=cache)
    return artifact, report, cold, time.perf_counter() - t0


def run_all(module: Module, feeds: list[dict[str, np.ndarray]]) -> tuple[list[dict], object]:
    outs = []
    for f in feeds:
        y = module.run(f)
        outs.append(y if isinstance(y, dict) else {next(iter(module.artifact.outputs)): y})
    return outs, module.last_report


def layer_roofline(artifact) -> float:
    """Cycles of the accelerator steps at their own bounds (module docstring: ``layer_roofline_cycles``)."""
    return sum(step_bound(s, artifact) for s in artifact.steps if s.kind == "accel")


def step_bound(s, artifact) -> float:
    """One accelerator step's own bound: its MACs at the core's rate, or the activation bytes it reads and
    writes (channels padded to blocks) at the bus's, whichever is larger."""
    cfg = artifact.config
    n, c, h, w = s.layer["output"]
    out = -(-n // cfg.batch) * cfg.batch * -(-c // cfg.block_out) * cfg.block_out * h * w
    read = sum(artifact.dram[r].nbytes for r in s.reads)
    return max(s.macs / cfg.macs_per_cycle, (read + out) / cfg.bus_bytes)


def record(m: SuiteModel, quantization: str, artifact, report, run, cold: float, warm: float) -> dict:
    cfg = artifact.config
    bound = artifact.total_macs / cfg.macs_per_cycle
    roof = layer_roofline(artifact)
    cpu_ops = sorted({n.op for s in artifact.steps if s.kind == "cpu" for n in s.graph.nodes})
    apart = ("depthwise_conv2d", "depthwise_conv2d+global_avg_pool")  # alone, or with the average of its output
    depthwise = {s.name: s.macs for s in artifact.steps if s.kind == "accel" and s.layer["op"] in apart}
    dw_cycles = sum(st.cycles for st in run.steps if st.name in depthwise)
    rec = {
        "model": m.name,
        "quantization": quantization,
        "preset": cfg.name,
        "clock_mhz": cfg.clock_mhz,
        "latency_ms": round(run.accel_ms, 3),
        "fps": round(cfg.clock_mhz * 1e6 / run.accel_cycles, 1) if run.accel_cycles else None,
        "macs": int(artifact.total_macs),
        "accel_mac_share": artifact.accel_macs / artifact.total_macs if artifact.total_macs else 0.0,
        "accel_cycles": int(run.accel_cycles),
        "mac_bound_cycles": int(round(bound)),
        "ratio": run.accel_cycles / bound if bound else None,
        "layer_roofline_cycles": int(round(roof)),
        "roofline_ratio": run.accel_cycles / roof if roof else None,
        "cpu_steps": sum(s.kind == "cpu" for s in artifact.steps),
        "cpu_ms": round(run.cpu_ms, 3),
        "compile_s": round(cold, 2),
        "compile_warm_s": round(warm, 2),
        "cpu_ops": cpu_ops,
    }
    fused = {s.name: s.layer["op"] for s in artifact.steps if s.kind == "accel" and s.layer["op"].endswith(FUSED)}
    if depthwise or fused:  # the depthwise layers apart: their cycles and MACs per cycle (of the core's 256)
        macs = sum(depthwise.values())
        rec["depthwise"] = {"macs": macs, "cycles": dw_cycles, "macs_per_cycle": round(macs / max(dw_cycles, 1), 2)}
        # fused with the 1x1 convolution after them (vdla.compiler.dw_pointwise): the pairs and their cycles,
        # each pair's against its own bound (as layer_roofline: its MACs, or the activation bytes it moves)
        rec["depthwise"]["fused_pairs"] = len(fused)
        rec["depthwise"]["fused_blocks"] = sum(op != FUSED for op in fused.values())
        rec["depthwise"]["fused_cycles"] = sum(st.cycles for st in run.steps if st.name in fused)
        bounds = {s.name: step_bound(s, artifact) for s in artifact.steps if s.name in fused}
        rec["depthwise"]["pairs"] = [
            {"step": st.name, "op": fused[st.name], "cycles": st.cycles, "bound": round(bounds[st.name])}
            for st in run.steps
            if st.name in fused
        ]
    return rec


def float_calibrated(m: SuiteModel, model, calib, tests, work: Path, config: str) -> dict:
    """vdla's calibration on ``calib``; every output's cosine with the reference's float output."""
    options = CompileOptions(config=config, input_shapes=m.input_shapes(), calibration=m.calibration)
    artifact, report, cold, warm = compile_twice(model, calib, options, work / "vdla")
    outs, run = run_all(Module(artifact, "sim"), tests)
    session = reference_session(model)
    cosines = []
    for f, got in zip(tests, outs, strict=True):
        want = dict(zip([o.name for o in session.get_outputs()], session.run(None, f), strict=True))
        cosines += [cosine(got[k], want[k]) for k in want]
    rec = record(m, "vdla", artifact, report, run, cold, warm)
    rec["correct"] = bool(min(cosines) >= COSINE)
    rec["agreement"] = {"cosine_min": min(cosines), "cosine_mean": float(np.mean(cosines))}
    return rec


def qdq(m: SuiteModel, model, calib, tests, work: Path, config: str) -> dict:
    """onnxruntime's QDQ model; every output against the reference running it, differences explained by the
    layer-by-layer comparison (each a rounding tie of the reference's float32 arithmetic)."""
    qmodel = quantize_qdq(model, calib)
    options = CompileOptions(config=config, input_shapes=m.input_shapes())
    artifact, report, cold, warm = compile_twice(qmodel, None, options, work / "qdq")
    outs, run = run_all(Module(artifact, "sim"), tests)
    session = reference_session(qmodel)
    differing, elements = 0, 0
    for f, got in zip(tests, outs, strict=True):
        want = dict(zip([o.name for o in session.get_outputs()], session.run(None, f), strict=True))
        for k, w in want.items():
            differing += int(np.count_nonzero(got[k] != w))
            elements += w.size
    layers = compare_layers(qmodel, lower_qdq(simplify(import_onnx(qmodel, m.input_shapes()))), tests)
    ties = sum(a.ties for a in layers)
    layer_diff = sum(a.differing for a in layers)
    rec = record(m, "ort-qdq", artifact, report, run, cold, warm)
    rec["correct"] = bool(differing == 0 or layer_diff == ties)
    rec["agreement"] = {
        "outputs_differing": differing,
        "outputs": elements,
        "layer_elements_differing": layer_diff,
        "layer_ties": ties,
    }
    return rec


def table(records: list[dict], config: str) -> Table:
    t = Table(title=f"the model suite on {config!r}, simulator")
    columns = ("model", "quant", "MACs", "accel share", "cycles", "ms", "bound", "ratio", "vs roofline", "CPU steps")
    for c in (*columns, "CPU ms", "ok"):
        t.add_column(c, justify="left" if c in ("model", "quant") else "right")
    for r in records:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        roof = f"{r['roofline_ratio']:.2f}x" if r.get("roofline_ratio") else "-"
        t.add_row(
            r["model"],
            r["quantization"],
            f"{r['macs'] / 1e6:,.1f} M",
            f"{r['accel_mac_share']:.1%}",
            f"{r['accel_cycles']:,}",
            f"{r['latency_ms']:.2f}",
            f"{r['mac_bound_cycles']:,}",
            ratio,
            roof,
            str(r["cpu_steps"]),
            f"{r['cpu_ms']:.1f}",
            "[green]yes[/]" if r["correct"] else "[red]no[/]",
        )
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=DEFAULT_PRESET, help="preset (vdla boards) or JSON file")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", nargs="*", choices=sorted(SUITE))
    ap.add_argument("--tests", type=int, default=4, help="test inputs per model")
    ap.add_argument("--calib", type=int, default=16, help="calibration samples per model")
    args = ap.parse_args()
    config = args.config
    load_config(config)  # an unknown preset fails here, before any model is compiled
    records = []
    for name in args.only or SUITE:
        m = SUITE[name]
        model = m.load()
        calib, tests = m.samples(args.calib, 1), m.feeds(args.tests, 7)
        with tempfile.TemporaryDirectory() as d:
            for kind, fn in (("vdla", float_calibrated), ("ort-qdq", qdq)):
                console.print(f"{name}: {kind}")
                try:
                    records.append(fn(m, model, calib, tests, Path(d), config))
                except Exception as e:  # a model the suite cannot compile yet: recorded, not hidden
                    records.append({"model": name, "quantization": kind, "error": f"{type(e).__name__}: {e}"})
                    console.print(f"[red]{name} {kind}: {type(e).__name__}: {str(e)[:400]}[/]")
    Console().print(table([r for r in records if "error" not in r], config))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(records, indent=2) + "\n")
    return 0 if all("error" not in r and r["correct"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
