"""Automatic mixed precision (``--auto-float TARGET``): the fewest layers kept in float32 that bring the int8
model's outputs to cosine >= ``TARGET`` against the float model, in the style of onnxruntime's QDQ debugging
and TensorRT's per-layer precision.

The method (:func:`auto_float`):

1. **Data.** With at least :data:`HOLDOUT_MIN_BATCHES` model batches of calibration data, the last quarter of
   them (at most :data:`~vdla.graph.qerror.ERROR_BATCHES`) is held out: the scales are calibrated on the rest
   and every cosine is measured on the held-out samples. With fewer, the scales are calibrated on all of them
   and the cosines measured on the first :data:`~vdla.graph.qerror.ERROR_BATCHES` batches of the same samples
   (the report says which).
2. **Rank.** The model is quantized with the user's ``keep_float`` only, and each quantized layer ranked by the
   error it adds to the model's outputs when it alone is quantized (:func:`vdla.graph.qerror.with_errors`,
   ``output_sqnr_db``, the measure ``--report`` prints; lowest first).
3. **Search.** ``cosine(k)``: the model with the ``k`` worst layers kept in float (and the user's), quantized
   again on the same calibration statistics (:func:`~vdla.graph.quantize.quantize_model` with a statistics
   cache, so only values the new plan quantizes for the first time are calibrated) and evaluated in float on
   the numpy interpreter (the fake-quantized QDQ graph, which the lowered graph, the simulator and the
   accelerator match up to rounding ties), its outputs against the float model's as one vector. ``k`` = 0, 1,
   2, 4, ... until the target is reached (or every layer is float), then bisection between the last miss and
   the first hit: ``O(log L)`` evaluations for ``L`` layers, exact where ``cosine(k)`` grows with ``k``.
4. **Prune.** Each chosen layer but the last (without which the prefix is already known to miss) is dropped
   once, least harmful first, where the rest still reach the target, when that is cheap: at most
   ``max(PRUNE_MIN, L // 2)`` evaluations (:data:`PRUNE_MIN`), each one model run a sample, so the prune costs at
   most about what the ranking did (about ``L / 2`` model runs a sample); else it is skipped and the report says
   so.

The outcome is one of: no layer needed (int8 reaches the target), the set found, or an
:class:`AutoFloatError` when even every layer in float misses the target (naming the best cosine reached).
The caller (:func:`vdla.model.pipeline.compile_model`) compiles the set found and measures the artifact's own
cosine on ``sim`` (:attr:`AutoFloatReport.artifact_cosine`).

Invariants: the user's ``keep_float`` layers are always float and never counted; every cosine in the report was
evaluated (none is inferred from monotonicity); the returned graph and report are exactly
:func:`~vdla.graph.quantize.quantize_model`'s with ``keep_float`` = the user's + :attr:`AutoFloatReport.kept` on the
calibration part of the data.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from vdla.graph.calibrate import Progress, QuantizationError, Runner, check_calibration
from vdla.graph.equalize import equalize
from vdla.graph.graph import Graph
from vdla.graph.interp import evaluate
from vdla.graph.qerror import ERROR_BATCHES, ErrorSums, with_errors
from vdla.graph.quantize import QuantOptions, QuantReport, quant_options, quantize_model

HOLDOUT_MIN_BATCHES = 16  # from this many model batches of calibration data on, the search holds some out
PRUNE_MIN = 16  # the greedy prune tries up to this many layers, or half the layers ranked where more


class AutoFloatError(QuantizationError):
    """An auto-float target that cannot be reached, or a bad target (named)."""


def check_target(target: float) -> float:
    """``target`` as a float in (0, 1], else refused."""
    try:
        t = float(target)
    except (TypeError, ValueError):
        raise AutoFloatError(f"auto_float: the target is a cosine in (0, 1], got {target!r}") from None
    if not 0.0 < t <= 1.0 or math.isnan(t):
        raise AutoFloatError(f"auto_float: the target is a cosine in (0, 1], got {target!r}")
    return t


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the search: the layers it kept in float (beyond the user's), the cosine of the model's
    outputs against the float model's, and the search phase (``int8``, ``grow``, ``all``, ``bisect``,
    ``prune``)."""

    kept: tuple[str, ...]
    cosine: float
    phase: str


@dataclass(frozen=True)
class AutoFloatReport:
    """What ``--auto-float`` did. ``kept``: the layers it keeps in float (the user's ``keep_float`` are in
    ``user_kept``), each with its op and MACs (``macs``; ``total_macs`` the model's, both filled by the model
    compiler); ``cosine_before`` with every layer int8 (but the user's), ``cosine_after`` with ``kept`` float
    (both on the QDQ graph evaluated in float), ``artifact_cosine`` the compiled artifact's on ``backend``
    (None until measured); ``ranking`` each layer with the model-output SQNR (dB) it alone adds, worst first;
    ``calib_samples`` calibrated the scales, ``eval_samples`` measured the cosines (``held_out``: different
    samples, else the first calibration samples)."""

    target: float
    kept: tuple[str, ...]
    ops: Mapping[str, str] = field(hash=False)
    cosine_before: float
    cosine_after: float
    evaluations: tuple[Evaluation, ...]
    ranking: tuple[tuple[str, float], ...]
    user_kept: tuple[str, ...]
    calib_samples: int
    eval_samples: int
    held_out: bool
    seconds: float
    pruned: tuple[str, ...] = ()
    prune_skipped: bool = False
    rank_seconds: float = 0.0  # of ``seconds``: the ranking (the per-layer errors)
    macs: Mapping[str, int] = field(default_factory=dict, hash=False)
    total_macs: int = 0
    artifact_cosine: float | None = None
    backend: str = "sim"

    @property
    def reached(self) -> bool:
        return self.cosine_after >= self.target

    @property
    def float_macs(self) -> int:
        return sum(self.macs.get(name, 0) for name in self.kept)

    @property
    def float_share(self) -> float:
        """The share of the model's MACs the kept layers take off the accelerator."""
        return self.float_macs / self.total_macs if self.total_macs else 0.0

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "kept": [
                {
                    "name": k,
                    "op": self.ops.get(k, ""),
                    "macs": self.macs.get(k, 0),
                    "share": self.macs.get(k, 0) / self.total_macs if self.total_macs else 0.0,
                }
                for k in self.kept
            ],  # fmt: skip
            "user_kept": list(self.user_kept),
            "float_mac_share": self.float_share,
            "total_macs": self.total_macs,
            "cosine_before": self.cosine_before,
            "cosine_after": self.cosine_after,
            "artifact_cosine": self.artifact_cosine,
            "backend": self.backend,
            "evaluations": [{"kept": list(e.kept), "cosine": e.cosine, "phase": e.phase} for e in self.evaluations],
            "ranking": [{"name": n, "output_sqnr_db": _finite(db)} for n, db in self.ranking],
            "pruned": list(self.pruned),
            "prune_skipped": self.prune_skipped,
            "calib_samples": self.calib_samples,
            "eval_samples": self.eval_samples,
            "held_out": self.held_out,
            "seconds": self.seconds,
            "rank_seconds": self.rank_seconds,
        }


def _finite(x: float) -> float | str:
    return str(x) if math.isinf(x) else x


@dataclass
class AutoFloatResult:
    """:func:`auto_float`'s result: the QDQ graph and quantization report of the set found, the search report,
    and the samples the cosines were measured on with the float model's outputs for them (one dict a model
    batch), for measuring the compiled artifact alike."""

    qgraph: Graph
    quant: QuantReport
    report: AutoFloatReport
    eval_feeds: list[dict[str, np.ndarray]]
    eval_refs: list[dict[str, np.ndarray]]


def split_calibration(
    graph: Graph, data: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], bool]:
    """The calibration part, the evaluation part and whether they differ (see the module docstring, 1.)."""
    batch = next(iter(graph.inputs.values())).shape[0]
    total = next(iter(data.values())).shape[0]
    batches = total // batch
    if batches < HOLDOUT_MIN_BATCHES:
        first = min(batches, ERROR_BATCHES) * batch
        return dict(data), {k: a[:first] for k, a in data.items()}, False
    cut = (batches - min(ERROR_BATCHES, batches // 4)) * batch
    return {k: a[:cut] for k, a in data.items()}, {k: a[cut:] for k, a in data.items()}, True


def search(
    ranked: list[str], cosine_of: Callable[[tuple[str, ...]], float], target: float, prune_max: int | None = None
) -> tuple[tuple[str, ...], list[Evaluation], tuple[str, ...], bool]:
    """The fewest of ``ranked`` (worst first) to keep in float for ``cosine_of(kept) >= target``: the geometric
    search and bisection over prefixes, then the greedy prune (the module docstring, 3. and 4.). Returns the
    set, every evaluation in order, the layers pruned and whether the prune was skipped (more than
    ``prune_max`` candidates; by default ``max(PRUNE_MIN, len(ranked) // 2)``).
    Raises :class:`AutoFloatError` when every layer in float misses the target."""
    evals: list[Evaluation] = []

    def ev(kept: Iterable[str], phase: str) -> float:
        kept = tuple(kept)
        c = cosine_of(kept)
        evals.append(Evaluation(kept, c, phase))
        return c

    if ev((), "int8") >= target:
        return (), evals, (), False
    n = len(ranked)
    lo, hi, k = 0, None, 1  # lo: a prefix known to miss; hi: the shortest known to reach
    while k < n and hi is None:
        if ev(ranked[:k], "grow") >= target:
            hi = k
        else:
            lo, k = k, 2 * k
    if hi is None:
        best = ev(ranked, "all") if n else evals[0].cosine
        if best < target:
            raise AutoFloatError(
                f"auto_float: cosine {target:g} cannot be reached: with every one of the {n} quantized layers in "
                f"float the model's outputs reach cosine {best:.6f} against the float model; lower the target"
            )
        hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ev(ranked[:mid], "bisect") >= target:
            hi = mid
        else:
            lo = mid
    kept = list(ranked[:hi])
    candidates = kept[-2::-1]  # without the last the prefix misses (lo); least harmful first
    if len(candidates) > (max(PRUNE_MIN, n // 2) if prune_max is None else prune_max):
        return tuple(kept), evals, (), True
    pruned = []
    for name in candidates:
        trial = [k for k in kept if k != name]
        if ev(trial, "prune") >= target:
            kept = trial
            pruned.append(name)
    return tuple(kept), evals, tuple(pruned), False


def auto_float(
    graph: Graph,
    data: Mapping[str, np.ndarray],
    target: float,
    options: QuantOptions | None = None,
    *,
    runner: Runner | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
    **option_fields: Any,
) -> AutoFloatResult:
    """Quantize the float ``graph`` on ``data`` with the fewest layers kept in float (besides ``options``'
    ``keep_float``) that reach cosine >= ``target`` (see the module docstring); ``options`` (and its fields as
    keywords), ``runner`` and ``progress`` are :func:`~vdla.graph.quantize.quantize_model`'s."""
    target = check_target(target)
    opts = quant_options(options, option_fields)
    log = log or (lambda msg: None)
    t0 = time.perf_counter()
    data = check_calibration(graph.inputs, data)
    calib, held, held_out = split_calibration(graph, data)
    user = tuple(dict.fromkeys(opts.keep_float))
    cache: dict = {}
    source, equalized = graph, None
    if opts.equalize:  # once, on the calibration part: every evaluation quantizes the same equalized graph
        graph, equalized = equalize(graph, calib, runner)
        opts = opts.updated(equalize=False)

    def quantize(extra: tuple[str, ...], prog: Progress | None = None) -> tuple[Graph, QuantReport]:
        kept = opts.updated(keep_float=(*user, *extra))
        return quantize_model(graph, calib, kept, runner=runner, progress=prog, stats_cache=cache)

    qgraph, qreport = quantize((), progress)
    batch = next(iter(graph.inputs.values())).shape[0]
    total = next(iter(held.values())).shape[0]
    feeds = [{k: a[s : s + batch] for k, a in held.items()} for s in range(0, total, batch)]
    refs = [evaluate(source, f) for f in feeds]
    log(f"auto-float: ranking {len(qreport.layers)} layers by the error each adds to the model's outputs")
    t_rank = time.perf_counter()
    ranked_layers = with_errors(qreport, graph, qgraph, held, len(feeds)).layers
    rank_seconds = time.perf_counter() - t_rank
    order = sorted(ranked_layers, key=lambda layer: (layer.output_sqnr_db, layer.output_cosine))
    ranking = tuple((layer.name, layer.output_sqnr_db) for layer in order)
    found: dict[tuple[str, ...], tuple[Graph, QuantReport]] = {(): (qgraph, qreport)}

    def cosine_of(kept: tuple[str, ...]) -> float:
        key = tuple(sorted(kept))
        if key not in found:
            found.clear()  # keep one graph only (the last): each is a model's worth of parameters
            found[key] = quantize(kept)
        log(f"auto-float: {len(kept)} layers in float")
        sums = ErrorSums()
        for f, ref in zip(feeds, refs, strict=True):
            got = evaluate(found[key][0], f)
            for o in graph.outputs:
                sums.add(ref[o], got[o])
        return sums.cosine

    kept, evals, pruned, skipped = search([name for name, _ in ranking], cosine_of, target)
    key = tuple(sorted(kept))
    qgraph, qreport = found[key] if key in found else quantize(kept)
    qreport = replace(qreport, equalization=equalized)  # measured against the float graph (vdla.graph.qerror)
    after = next(e.cosine for e in reversed(evals) if set(e.kept) == set(kept))
    report = AutoFloatReport(
        target=target,
        kept=tuple(name for name, _ in ranking if name in kept),
        ops={layer.name: layer.op for layer in order},
        cosine_before=evals[0].cosine,
        cosine_after=after,
        evaluations=tuple(evals),
        ranking=ranking,
        user_kept=user,
        calib_samples=next(iter(calib.values())).shape[0],
        eval_samples=total,
        held_out=held_out,
        seconds=time.perf_counter() - t0,
        pruned=pruned,
        prune_skipped=skipped,
        rank_seconds=rank_seconds,
    )
    return AutoFloatResult(qgraph, qreport, report, feeds, refs)
