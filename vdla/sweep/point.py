"""One point of a sweep: its hardware configuration, the models compiled for it and run, its resources.

:func:`make_config` builds a point's :class:`HwConfig` from the base preset and the point's parameters
(ConfigError: the point is invalid, and recorded so). :func:`model_refs` describes each model and hashes it
(the ONNX bytes, the calibration data and method, the input shapes); :func:`quantized` loads or quantizes it,
once per content: in this process's memo, else from the cache directory, else quantized there and then
(the quantized graph does not depend on the point: the compiler takes any configuration). :func:`evaluate`,
the executor's task, compiles each model for the point (the schedule cache keyed by content, so a layer is
never searched twice), runs one inference on the ``sim`` backend (and the ``rtl`` one on request: cycles and
outputs bit-exact with sim's), and adds the hard-block estimate and, on request, the Yosys fit (cached by
the RTL's hash and the config's).

A record is a dict of JSON values; ``timings`` holds every wall-clock figure, so that two runs of one point
agree on everything else.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from vdla._version import __version__
from vdla.config import HwConfig
from vdla.parts import HARD_BLOCKS
from vdla.paths import cache_root
from vdla.sweep.spec import ModelSpec, SweepSpec

FIT_FIELDS = ("LUT", "FF", "DSP", "BRAM36", "URAM")
_MEMO: dict[str, tuple[Any, dict[str, np.ndarray]]] = {}  # model hash -> (quantized graph, test input)


def sweep_cache() -> Path:
    return cache_root() / "sweep"


def make_config(base: HwConfig, params: dict[str, Any]) -> HwConfig:
    """``base`` with ``params`` (ConfigError when the point is invalid). ``block`` sets block_in and block_out;
    where the space does not vary ``alu_lanes``, a half-width ALU in the base stays half the new lanes."""
    changes = dict(params)
    if "block" in changes:
        b = changes.pop("block")
        changes.update(block_in=b, block_out=b)
    if "alu_lanes" not in changes and base.alu_lanes:
        lanes = changes.get("batch", base.batch) * changes.get("block_out", base.block_out)
        half = base.alu_lanes * 2 == base.batch * base.block_out
        changes["alu_lanes"] = lanes // 2 if half and lanes % 2 == 0 else lanes
    return replace(base, **changes)


def content_hash(*parts: Any) -> str:
    """SHA-256 of JSON values (keys sorted) and bytes, each part ended by a NUL."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()


def _arrays_hash(arrays: dict[str, np.ndarray]) -> str:
    return content_hash(
        *(f"{k}:{a.dtype}:{a.shape}".encode() + np.ascontiguousarray(a).tobytes() for k, a in sorted(arrays.items()))
    )


def _source(m: ModelSpec, calib_samples: int) -> tuple[Any, dict | None, str, dict, dict]:
    """(model: ModelProto or path, calibration arrays or None, method, input shapes, one test input)."""
    if m.onnx is None and m.name == "resnet18":
        from vdla.zoo.models import calibration_images, resnet18

        images = calibration_images((3, 224, 224), calib_samples + 1, seed=1)
        return resnet18(seed=0), {"image": images[:-1]}, m.calibration or "entropy", {}, {"image": images[-1:]}
    if m.onnx is None:
        from vdla.zoo.suite import SUITE

        s = SUITE[m.name]
        method = m.calibration or s.calibration
        return s.load(), s.samples(calib_samples, 1), method, s.input_shapes(), s.feeds(1, 7)[0]
    from vdla.model.pipeline import read_calib_file

    calib = read_calib_file(m.calib) if m.calib else None
    feed = {k: v[:1] for k, v in calib.items()} if calib else {}
    return m.onnx, calib, m.calibration or "percentile", dict(m.input_shapes), feed


def model_refs(spec: SweepSpec) -> list[dict]:
    """Each model of ``spec`` with its content hash: ONNX bytes, calibration arrays and method, input shapes."""
    refs = []
    for m in spec.models:
        model, calib, method, shapes, _ = _source(m, spec.calib_samples)
        data = Path(model).read_bytes() if isinstance(model, str) else model.SerializeToString()
        digest = content_hash(data, _arrays_hash(calib) if calib else None, method, shapes, m.name)
        refs.append({"spec": m, "calib_samples": spec.calib_samples, "hash": digest[:24]})
    return refs


def _code_hash() -> str:
    """The vdla sources that quantization reads (a changed checkout does not reuse an older quantized graph)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(__version__.encode())
    for sub in ("graph", "frontend"):
        for p in sorted((root / sub).rglob("*.py")):
            h.update(p.read_bytes())
    return h.hexdigest()[:12]


def forget_models() -> None:
    """Drop this process's quantized graphs (the cache directory keeps them)."""
    _MEMO.clear()


def quantized(ref: dict) -> tuple[Any, dict[str, np.ndarray]]:
    """(the model's quantized graph, its test input): this process's memo, the cache directory, or made now."""
    key = ref["hash"]
    if key in _MEMO:
        return _MEMO[key]
    path = sweep_cache() / "models" / f"{key}-{_code_hash()}.pkl"
    try:
        _MEMO[key] = pickle.loads(path.read_bytes())
        return _MEMO[key]
    except (OSError, pickle.UnpicklingError, EOFError):
        pass
    from vdla.frontend.onnx import import_onnx
    from vdla.graph.passes import simplify
    from vdla.graph.quantize import quantize_model
    from vdla.model.pipeline import calibration_runner

    m: ModelSpec = ref["spec"]
    model, calib, method, shapes, feed = _source(m, ref["calib_samples"])
    graph = simplify(import_onnx(model, shapes, dequantize_dynamic=calib is not None))
    if calib is not None:
        graph, _ = quantize_model(graph, calib, method, runner=calibration_runner(lambda msg: None))
    if not feed:  # a QDQ model without calibration data: a seeded input of each input's type
        rng = np.random.default_rng(7)
        feed = {k: rng.standard_normal(t.shape).astype(t.dtype) for k, t in graph.inputs.items()}
    _MEMO[key] = (graph, feed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as f:
        f.write(pickle.dumps(_MEMO[key]))
    os.replace(f.name, path)
    return _MEMO[key]


def estimate(cfg: HwConfig) -> dict:
    """The hard blocks ``cfg`` needs (HwConfig.hard_block_estimate: an estimate) against its part's budget."""
    used = cfg.hard_block_estimate()
    b = cfg.part_spec.budget(used)
    res = {r: b["resources"][r] for r in HARD_BLOCKS if cfg.part_spec.capacity[r]}
    within = all(v["margin"] >= 0 for v in res.values()) and b["hard_average"]["margin"] >= 0
    return {"used": used, "margins": {r: round(v["margin"], 4) for r, v in res.items()},
            "hard_average_margin": round(b["hard_average"]["margin"], 4), "within": within}  # fmt: skip


def fit(cfg: HwConfig) -> dict:
    """The Yosys fit of ``cfg`` in short (resources, failfast margins, LUT levels), cached by content: the RTL
    sources' and generated package's hash, the config hash and the synthesis settings."""
    from vdla.hw.fit import rtl_hash, run_fit, tool_line

    key = content_hash(rtl_hash(cfg), cfg.hash, tool_line(cfg))[:24]
    path = sweep_cache() / "fits" / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    rep = run_fit(cfg)
    b = rep["budget"]
    out = {
        "used": {r: rep["used"][r] for r in FIT_FIELDS},
        "margins": {r: round(v["margin"], 4) for r, v in b["resources"].items() if v["capacity"]},
        "hard_average_margin": round(b["hard_average"]["margin"], 4),
        "within": b["within"],
        "levels": rep["logic_levels"]["levels"],
        "level_budget": cfg.part_spec.level_budget(cfg.clock_mhz),
        "rtl_hash": rep["rtl_hash"],
        "tool": rep["tool"],
        "seconds": rep["seconds"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    return out


def _error(e: BaseException) -> str:
    tail = traceback.format_exception(type(e), e, e.__traceback__)[-3:]
    return f"{type(e).__name__}: {e}\n" + "".join(tail).strip()


def run_model(cfg: HwConfig, ref: dict, rtl: bool, timings: dict) -> dict:
    """One model on the point: compile (schedule cache), one inference on sim (and rtl), the figures."""
    from vdla.compiler import ScheduleCache
    from vdla.model import Module
    from vdla.model.pipeline import compile_graph_model

    name = ref["spec"].name
    t0 = time.perf_counter()
    graph, feed = quantized(ref)
    timings[f"{name}.quantize"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    artifact, _ = compile_graph_model(graph, cfg, ScheduleCache())
    timings[f"{name}.compile"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    module = Module(artifact, "sim")
    outs = module.run(feed)
    run = module.last_report
    timings[f"{name}.sim"] = round(time.perf_counter() - t0, 3)
    cycles = int(run.accel_cycles)
    bound = artifact.total_macs / cfg.macs_per_cycle
    rec = {
        "cycles": cycles,
        "latency_ms": round(run.accel_ms, 4),
        "fps": round(cfg.clock_mhz * 1e6 / cycles, 2) if cycles else None,
        "macs": int(artifact.total_macs),
        "accel_mac_share": round(artifact.accel_macs / artifact.total_macs, 4) if artifact.total_macs else 0.0,
        "mac_bound_cycles": int(round(bound)),
        "ratio": round(cycles / bound, 4) if bound else None,
        "cpu_steps": sum(s.kind == "cpu" for s in artifact.steps),
    }
    if rtl:
        t0 = time.perf_counter()
        rmod = Module(artifact, "rtl")
        routs = rmod.run(feed)
        a = outs if isinstance(outs, dict) else {"out": outs}
        b = routs if isinstance(routs, dict) else {"out": routs}
        rec["rtl_cycles"] = int(rmod.last_report.accel_cycles)
        rec["rtl_bit_exact"] = a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        timings[f"{name}.rtl"] = round(time.perf_counter() - t0, 3)
    return rec


def evaluate(item: dict) -> dict:
    """The executor's task: one valid point (``item``: its hash, parameters, config dict, model refs and what
    to measure) -> its record. A model that does not compile or run on the point is recorded with its error
    (status ``model_error``); the fit's failure likewise (``fit_error``)."""
    from vdla.config import from_dict

    t_start = time.perf_counter()
    cfg = from_dict(item["config"])
    timings: dict[str, float] = {}
    rec: dict[str, Any] = {"hash": item["hash"], "params": item["params"], "status": "ok"}
    rec["config_hash"] = f"0x{cfg.hash:08x}"
    rec["estimate"] = estimate(cfg)
    models = {}
    for ref in item["models"]:
        try:
            models[ref["spec"].name] = run_model(cfg, ref, "rtl" in item["measure"], timings)
        except Exception as e:  # a layer that does not fit the buffers, a refused configuration, ...
            models[ref["spec"].name] = {"error": _error(e)}
            rec["status"] = "model_error"
    rec["models"] = models
    if "fit" in item["measure"]:
        t0 = time.perf_counter()
        try:
            rec["fit"] = fit(cfg)
        except Exception as e:
            rec["fit"] = {"error": _error(e)}
            rec["status"] = "fit_error" if rec["status"] == "ok" else rec["status"]
        timings["fit"] = round(time.perf_counter() - t0, 3)
    timings["total"] = round(time.perf_counter() - t_start, 3)
    rec["timings"] = timings
    return rec
