"""``vdla.sweep.run(spec)``: the points of the spec's space (and the base preset's own), each checked, hashed,
evaluated on the executor unless the results file has it already, streamed into ``sweep.jsonl``, then the
report (the table, ``sweep.csv``, the Pareto plots).

A point's **hash** covers everything that determines its record: the point's whole configuration dict, the
RTL sources' and generated package's hash (:func:`vdla.hw.fit.rtl_hash`), each model's content hash (ONNX
bytes, calibration data and method, input shapes), what is measured and vdla's version. A point whose
configuration is refused (ConfigError: invalid for the ISA, over the part's capacity) is recorded with the
reason (status ``invalid``) and never sent to a worker; a point whose task failed after its retries is
recorded ``failed`` with the error, and tried again by the next run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vdla._version import __version__
from vdla.config import ConfigError, HwConfig, load_config
from vdla.sweep.executor import connect_ray, run_tasks
from vdla.sweep.point import content_hash, evaluate, forget_models, make_config, model_refs, quantized
from vdla.sweep.space import Nsga2Search, grid, random_points
from vdla.sweep.spec import SweepSpec, load_spec
from vdla.sweep.store import ResultStore

RESULTS = "sweep.jsonl"
Progress = Callable[[dict], None]  # called with {"done", "total", "running", "failed", "record"} as points finish


@dataclass
class SweepResult:
    """What a run of the sweep produced: every point's record (the base preset's first), where they were
    written, how many points were computed now and how many came from the results file."""

    spec: SweepSpec
    out: Path
    records: list[dict]
    evaluated: int
    reused: int
    seconds: float
    files: dict[str, Path] = field(default_factory=dict)
    report: dict = field(default_factory=dict)  # report.summarize(): fronts, best points

    @property
    def base(self) -> dict:
        return self.records[0]


class _Points:
    """The checked points of one sweep: configs built, hashes computed, invalid points recorded."""

    def __init__(self, spec: SweepSpec, store: ResultStore):
        self.spec, self.store = spec, store
        self.base = load_config(spec.base)
        self.refs = model_refs(spec)
        self.measure = list(spec.measure)
        self.reused: set[str] = set()  # valid points the results file held before this run
        self._before = set(store.records)  # a point asked twice in one run (NSGA-II) is not reused

    def prepare(self, params: dict[str, Any], is_base: bool = False) -> tuple[str, dict | None]:
        """(hash, the item to evaluate, or None when the store has the point or it is invalid (then recorded))."""
        try:
            cfg = make_config(self.base, params)
        except ConfigError as e:
            key = content_hash("invalid", self.base.to_dict(), params, __version__)[:24]
            if not self.store.done(key):
                self.store.append(
                    {"hash": key, "params": params, "base": is_base, "status": "invalid", "error": str(e)}
                )
            return key, None
        determined = self.determined_by(cfg)
        key = content_hash(determined)[:24]
        if self.store.done(key):
            if key in self._before:
                self.reused.add(key)
            return key, None
        item = {"hash": key, "params": params, "config": cfg.to_dict(), "models": self.refs, "measure": self.measure}
        return key, {"item": item, "determined_by": determined, "base": is_base}

    def determined_by(self, cfg: HwConfig) -> dict:
        from vdla.hw.fit import rtl_hash

        return {
            "config": cfg.to_dict(),
            "rtl_hash": rtl_hash(cfg),
            "models": {r["spec"].name: r["hash"] for r in self.refs},
            "measure": self.measure,
            "vdla": __version__,
        }


def run(
    spec: SweepSpec | str | Path,
    out: str | Path = "sweep-out",
    *,
    workers: int | None = None,
    ray: str | None = None,
    method: str | None = None,
    samples: int | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
    evaluate: Callable[[dict], dict] = evaluate,
    report: bool = True,
) -> SweepResult:
    """Run the sweep ``spec`` (a SweepSpec or a TOML path) into the directory ``out``; the keywords override
    the spec's. ``limit``: evaluate at most this many new points now (the rest on a later run). ``evaluate``
    is the executor's task (a module-level function taking a point's item, :func:`vdla.sweep.point.evaluate`)."""
    t0 = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    spec = spec.replaced(workers=workers, ray=ray, method=method, samples=samples)
    if spec.ray is not None:  # an unreachable cluster fails now, before the models are built and quantized
        connect_ray(spec.ray)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = ResultStore(out / RESULTS)
    pts = _Points(spec, store)
    state = {"done": 0, "failed": 0, "evaluated": 0, "limit": limit, "progress": progress}
    keys: list[str] = []
    base_key, base_item = pts.prepare({}, is_base=True)
    keys.append(base_key)
    if spec.method == "nsga2":
        keys += _nsga2(spec, pts, store, state, evaluate, base_item)
    else:
        space = grid(spec.space) if spec.method == "grid" else random_points(spec.space, spec.samples, spec.seed)
        pending = {base_key: base_item} if base_item else {}
        for params in space:
            key, item = pts.prepare(params)
            keys.append(key)
            if item is not None and key not in pending:  # a grid point that is the base keeps the base's item
                pending[key] = item
        state["total"] = len(dict.fromkeys(keys))
        state["done"] = state["total"] - len(pending)
        for _ in _execute(spec, pending, pts, store, state, evaluate):
            pass
    # the base preset's point is marked as this run's, whichever spec recorded it first
    records = [dict(store.records[k], base=k == base_key) for k in dict.fromkeys(keys) if k in store.records]
    result = SweepResult(spec, out, records, state["evaluated"], len(pts.reused), 0.0)
    if report and records:
        from vdla.sweep.report import write_report

        result.files, result.report = write_report(records, spec, out)
    result.files["results"] = store.path
    result.seconds = time.perf_counter() - t0
    return result


def _execute(spec, pending: dict[str, dict], pts: _Points, store: ResultStore, state: dict, evaluate) -> Iterator[dict]:
    """Evaluate the pending points on the executor, recording each as it finishes; yields the records."""
    if not pending:
        return
    if state["limit"] is not None:
        if state["evaluated"] >= state["limit"]:
            return
        pending = dict(list(pending.items())[: state["limit"] - state["evaluated"]])
    # quantize each model once, here, before the workers load it from the cache directory (Ray workers on other
    # machines quantize it once into theirs)
    for ref in pts.refs:
        quantized(ref)
    forget_models()
    workers = spec.workers
    items = {k: p["item"] for k, p in pending.items()}
    _report(state, len(pending), workers, None)
    for o in run_tasks(evaluate, items, workers=workers, ray=spec.ray, retries=spec.retries, timeout=spec.timeout):
        p = pending.pop(o.key)
        if o.ok:
            rec = dict(o.value)
        else:
            rec = {"hash": o.key, "params": p["item"]["params"], "status": "failed", "error": o.error}
            state["failed"] += 1
        rec.update(base=p["base"], attempts=o.attempts, determined_by=p["determined_by"])
        rec.setdefault("timings", {})["task"] = round(o.seconds, 3)
        store.append(rec)
        state["done"] += 1
        state["evaluated"] += 1
        _report(state, len(pending), workers, rec)
        yield rec


def _report(state: dict, left: int, workers: int | None, rec: dict | None) -> None:
    if state["progress"] is not None:
        running = min(left, workers or os.cpu_count() or 1)
        state["progress"](
            {
                "done": state["done"],
                "total": state["total"],
                "running": running,
                "failed": state["failed"],
                "record": rec,
            }
        )


def objectives(rec: dict, models: list[str]) -> list[float] | None:
    """What NSGA-II minimizes: each model's latency, then the resources (the fit's LUT, DSP and BRAM36, or
    without a fit the estimate's DSP and BRAM36); None for a point without them all."""
    if rec.get("status") != "ok":
        return None
    lat = [rec["models"][m]["latency_ms"] for m in models]
    src = rec["fit"]["used"] if "fit" in rec else rec["estimate"]["used"]
    res = [src["LUT"]] if "fit" in rec else []
    return [*lat, *res, src["DSP"], src["BRAM36"]]


def _nsga2(spec, pts: _Points, store, state, evaluate, base_item) -> list[str]:
    """Generations of Optuna's NSGA-II: ask a generation, evaluate its new points, tell every point's
    objectives (from the results file where it has them)."""
    models = [m.name for m in spec.models]
    population = max(4, min(16, (spec.samples or 8) // 2))
    search = Nsga2Search(spec.space, len(models) + 2 + ("fit" in spec.measure), spec.seed, population)
    keys, asked = [], 0
    state["total"] = spec.samples + 1
    if base_item is not None:
        for _ in _execute(spec, {base_item["item"]["hash"]: base_item}, pts, store, state, evaluate):
            pass
    else:
        state["done"] += 1
    while asked < spec.samples:
        batch, trials = {}, []
        while asked < spec.samples and len(batch) < population:
            trial, params = search.ask()
            asked += 1
            key, item = pts.prepare(params)
            keys.append(key)
            if item is None or key in batch:
                trials.append((trial, key))
                state["done"] += item is None
                continue
            batch[key] = item
            trials.append((trial, key))
        for _ in _execute(spec, batch, pts, store, state, evaluate):
            pass
        for trial, key in trials:
            rec = store.records.get(key)
            search.tell(trial, None if rec is None else objectives(rec, models))
        if state["limit"] is not None and state["evaluated"] >= state["limit"]:
            break
    return keys
