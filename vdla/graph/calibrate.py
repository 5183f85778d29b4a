"""Calibration of a float graph: run it on sample inputs, record each observed tensor's range and a
histogram of its magnitudes, and choose each tensor's symmetric int8 quantization threshold from them.

This is the profiling half of the Glow paper's profile-guided quantization; :mod:`vdla.graph.quantize`
is the other half (the rewrite into QDQ form). Three methods choose the clipping threshold ``T`` of a
tensor (its scale is then ``T / 127``, zero point 0):

* ``minmax``: the largest magnitude seen (nothing clipped on the calibration set);
* ``percentile``: the given percentile of the magnitudes (99.99 by default);
* ``entropy``: TensorRT's KL-divergence method (also TVM's and MXNet's): the threshold whose clipped
  histogram, quantized to 128 levels, diverges least from the clipped reference histogram. Exact zeros
  are left out of its histogram: they quantize exactly at every threshold, and the spike a ReLU puts
  in the first bin would otherwise dominate the divergence and pull the threshold far down.

Invariants: a histogram has :data:`BINS` bins of equal width over ``[0, BINS * width)`` and counts
every observed element exactly once (``|x|`` in bin ``floor(|x| / width)``); when a larger magnitude
arrives the width doubles as often as needed and adjacent bins merge, so re-binning is exact (no
interpolation) and the range stays within twice the largest magnitude. Every threshold lies in
``(0, absmax]`` for a tensor that is not identically zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from vdla.errors import VdlaError
from vdla.graph.graph import Graph
from vdla.graph.interp import evaluate
from vdla.graph.types import INT_RANGE, TensorType, narrow_integers

BINS = 2048  # histogram bins over the running magnitude range
LEVELS = 128  # quantization levels of a symmetric int8 magnitude (0..127): the entropy method's target
METHODS = ("minmax", "percentile", "entropy")
DEFAULT_PERCENTILE = 99.99
RANDOM = "random"  # calibration data asked for by name: seeded random inputs (:func:`random_calibration`)
RANDOM_SAMPLES = 8  # model batches of random calibration inputs
RANDOM_WARNING = (
    "calibrated on seeded random inputs (calib 'random'): the scales fit random data, not the data the model "
    "was made for, so the accuracy of the compiled model is meaningless; pass real calibration data to deploy it"
)

Feeds = Mapping[str, np.ndarray]
Runner = Callable[[Graph], Callable[[Feeds], Mapping[str, np.ndarray]]]
Progress = Callable[[int, int], None]


class QuantizationError(VdlaError, ValueError):
    """Bad calibration data, an unknown method or node name, or a tensor that cannot be quantized (named)."""


@dataclass(frozen=True)
class TensorStats:
    """What calibration saw of one tensor: its extremes, element count and the histogram of magnitudes
    (``hist[k]`` counts elements with ``k * width <= |x| < (k + 1) * width``, the last bin also the rest)."""

    name: str
    min: float
    max: float
    count: int
    zeros: int  # elements exactly zero (in ``hist[0]``)
    width: float
    hist: np.ndarray = field(compare=False, repr=False)

    @property
    def absmax(self) -> float:
        return max(abs(self.min), abs(self.max))

    def clipped_fraction(self, threshold: float) -> float:
        """The fraction of calibration elements with ``|x| > threshold`` (interpolated within a bin)."""
        if self.width == 0.0 or threshold >= self.absmax:
            return 0.0
        pos = threshold / self.width
        k = min(int(pos), BINS - 1)
        above = self.hist[k + 1 :].sum() + self.hist[k] * (1.0 - (pos - k))
        return float(above / self.count)


class _Accumulator:
    """The running statistics of one tensor (see the module invariants)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lo, self.hi, self.count, self.zeros, self.width = math.inf, -math.inf, 0, 0, 0.0
        self.hist = np.zeros(BINS, np.int64)

    def add(self, value: np.ndarray, where: str) -> None:
        a = np.asarray(value, np.float32).ravel()
        lo, hi = float(a.min()), float(a.max())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise QuantizationError(f"tensor {self.name!r} has non-finite values on {where}: cannot calibrate it")
        self.lo, self.hi, self.count = min(self.lo, lo), max(self.hi, hi), self.count + a.size
        self.zeros += a.size - int(np.count_nonzero(a))
        self.grow(max(abs(lo), abs(hi)))
        if self.width == 0.0:  # every value so far is zero
            self.hist[0] += a.size
            return
        idx = np.minimum((np.abs(a) / np.float32(self.width)).astype(np.int64), BINS - 1)
        self.hist += np.bincount(idx, minlength=BINS)

    def grow(self, magnitude: float) -> None:
        """Widen the bins (doubling, merging pairs) until ``magnitude`` falls inside the histogram."""
        if magnitude == 0.0:
            return
        if self.width == 0.0:
            self.width = magnitude / BINS * (1 + 1e-6)  # the largest value lands in the last bin
            return
        factor = 1
        while self.width * factor * BINS <= magnitude:
            factor *= 2
        if factor == 1:
            return
        merged = np.zeros(BINS, np.int64)
        if factor >= BINS:
            merged[0] = self.hist.sum()
        else:
            merged[: BINS // factor] = self.hist.reshape(BINS // factor, factor).sum(axis=1)
        self.hist, self.width = merged, self.width * factor

    def stats(self) -> TensorStats:
        return TensorStats(self.name, self.lo, self.hi, self.count, self.zeros, self.width, self.hist.copy())


def check_calibration(inputs: Mapping[str, TensorType], data: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The calibration arrays as float32 ``(N, *shape[1:])`` per graph input (samples along the first axis;
    ``(N, *shape)`` is accepted too); an integer input's (token ids, a mask) in its integer dtype, exactly. A
    single array for a single-input graph may have any name.

    Every array is checked before anything is refused, and one :class:`QuantizationError` names each
    mismatch (the input, what it takes and what the array holds): a missing or unknown array, a non-float
    dtype for a float input or a non-integer one for an integer input, an integer outside an integer input's
    range, a wrong shape, no samples, samples that do not fill whole model batches, non-finite values (with a
    sample index), and, once each array is good, counts that differ between inputs.
    """
    data = dict(data)
    if len(inputs) == 1 and len(data) == 1:
        data = {next(iter(inputs)): next(iter(data.values()))}
    problems = [_missing(name, t) for name, t in inputs.items() if name not in data]
    problems += [_unknown(name, np.asarray(a), inputs) for name, a in data.items() if name not in inputs]
    out = {}
    for name, t in inputs.items():
        if name in data:
            try:
                out[name] = _samples(name, t, np.asarray(data[name]))
            except QuantizationError as e:
                problems.append(str(e))
    if not problems:
        counts = {name: a.shape[0] for name, a in out.items()}
        if len(set(counts.values())) > 1:
            problems.append(f"calibration arrays hold different numbers of samples: {counts}")
    if len(problems) == 1:
        raise QuantizationError(problems[0])
    if problems:
        listed = "".join(f"\n  {i}. {p}" for i, p in enumerate(problems, 1))
        raise QuantizationError(
            f"calibration data (arrays {sorted(data)}) does not match the model's inputs {sorted(inputs)}: "
            f"{len(problems)} problems{listed}"
        )
    return out


def _missing(name: str, t: TensorType) -> str:
    return f"calibration input {name!r} is missing: the model takes {_wanted(t)} (input {t})"


def _unknown(name: str, a: np.ndarray, inputs: Mapping[str, TensorType]) -> str:
    return f"calibration array {name!r} ({a.dtype} {a.shape}) is unknown: the model's inputs are {sorted(inputs)}"


def _wanted(t: TensorType) -> str:
    """What a calibration array for an input of type ``t`` holds: ``float32 Nx3x32x32``."""
    return f"{t.dtype} " + "x".join(map(str, ("N", *t.shape[1:])))


def random_calibration(
    inputs: Mapping[str, TensorType], batches: int = RANDOM_SAMPLES, seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded random calibration data for a quick trial: ``batches`` model batches per graph input, in the
    form :func:`check_calibration` takes (``(batches * shape[0], *shape[1:])``). A float input gets standard
    normal values (an image normalized by its mean and deviation), an integer one 0 or 1 (a mask, or token ids
    any vocabulary holds). Scales chosen on them fit no real data (:data:`RANDOM_WARNING`)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in inputs.items():
        shape = (batches * t.shape[0], *t.shape[1:]) if t.shape else (batches,)
        out[name] = (
            rng.integers(0, 2, shape, np.int32) if t.dtype in INT_RANGE else rng.standard_normal(shape, np.float32)
        )
    return out


def _samples(name: str, t: TensorType, a: np.ndarray) -> np.ndarray:
    """Input ``name``'s samples, checked (a wrong shape and a wrong kind of dtype are named together)."""
    per = t.shape[1:]
    shaped = a.ndim == len(t.shape) and a.shape[1:] == per
    if a.ndim == len(t.shape) + 1 and a.shape[1:] == t.shape:
        a, shaped = a.reshape(-1, *per), True
    wrong = [] if shaped else [f"shape {a.shape} does not match {'x'.join(map(str, ('N', *per)))}"]
    integer = t.dtype in INT_RANGE
    if a.dtype.kind not in ("iub" if integer else "f"):
        hint = (
            "the integer values (token ids, a mask) it reads" if integer else "float values preprocessed as it expects"
        )
        wrong.append(f"dtype {a.dtype}, the model takes {t.dtype}: pass {hint}")
    if wrong:
        raise QuantizationError(f"calibration input {name!r}: {'; '.join(wrong)} (input {t})")
    if a.shape[0] == 0:
        raise QuantizationError(f"calibration input {name!r} has no samples")
    a = _integer_samples(name, t, a) if integer else _float_samples(name, a)
    batch = t.shape[0]
    if a.shape[0] % batch:
        raise QuantizationError(
            f"calibration input {name!r}: {a.shape[0]} samples do not fill whole batches of {batch} (input {t})"
        )
    return a


def _integer_samples(name: str, t: TensorType, a: np.ndarray) -> np.ndarray:
    """Token ids or a mask for an integer input, exactly (int64 narrowed where every value fits)."""
    try:
        return narrow_integers(a, t.dtype)
    except ValueError as e:
        raise QuantizationError(f"calibration input {name!r} ({a.dtype}) for {t.dtype}: {e}") from e


def _float_samples(name: str, a: np.ndarray) -> np.ndarray:
    """Float samples as float32, every sample finite."""
    a = a.astype(np.float32)
    bad = ~np.isfinite(a).reshape(a.shape[0], -1).all(axis=1)
    if bad.any():
        raise QuantizationError(
            f"calibration input {name!r} has NaN or infinite values in sample {int(np.argmax(bad))} "
            f"({int(bad.sum())} of {a.shape[0]} samples)"
        )
    return a


def interpreter_runner(graph: Graph) -> Callable[[Feeds], Mapping[str, np.ndarray]]:
    """The default runner: the numpy interpreter (:func:`vdla.graph.interp.evaluate`) of ``graph``."""
    return lambda feeds: evaluate(graph, feeds)


def calibrate(
    graph: Graph,
    data: Mapping[str, np.ndarray],
    tensors: Iterable[str],
    runner: Runner | None = None,
    progress: Progress | None = None,
) -> dict[str, TensorStats]:
    """Run the float ``graph`` on ``data`` (checked by :func:`check_calibration`) one model batch at a time
    and return the statistics of each of ``tensors`` (graph inputs or node outputs).

    ``runner`` compiles a graph into a function of the feeds (the numpy interpreter by default; the model
    compiler passes the CPU fallback's JIT); ``progress(done, total)`` is called after each batch.
    """
    arrays = check_calibration(graph.inputs, data)
    tensors = list(dict.fromkeys(tensors))
    defined = set(graph.inputs) | {n.output for n in graph.nodes}
    unknown = [t for t in tensors if t not in defined]
    if unknown:
        raise QuantizationError(f"cannot observe {unknown}: not a node output or input of graph {graph.name!r}")
    observed = [t for t in tensors if t not in graph.inputs]
    run = (runner or interpreter_runner)(graph.copy(outputs=list(dict.fromkeys([*graph.outputs, *observed]))))
    acc = {t: _Accumulator(t) for t in tensors}
    batch = next(iter(graph.inputs.values())).shape[0]
    total = next(iter(arrays.values())).shape[0]
    for start in range(0, total, batch):
        feeds = {k: a[start : start + batch] for k, a in arrays.items()}
        values = {**run(feeds), **feeds}
        where = f"calibration sample {start}" + (f"..{start + batch - 1}" if batch > 1 else "")
        for t in tensors:
            acc[t].add(values[t], where)
        if progress is not None:
            progress(start + batch, total)
    return {t: a.stats() for t, a in acc.items()}


def choose_threshold(stats: TensorStats, method: str, percentile: float = DEFAULT_PERCENTILE) -> float:
    """The clipping threshold of a symmetric int8 quantization of the tensor ``stats`` describes (0.0 for a
    tensor that was zero on every sample)."""
    if method not in METHODS:
        raise QuantizationError(f"unknown calibration method {method!r} (one of {', '.join(METHODS)})")
    if not 0.0 < percentile <= 100.0:
        raise QuantizationError(f"percentile must lie in (0, 100], got {percentile}")
    if stats.width == 0.0:
        return 0.0
    if method == "minmax":
        return stats.absmax
    if method == "percentile":
        return float(min(percentile_threshold(stats.hist, stats.width, percentile), stats.absmax))
    nonzero = stats.hist.copy()
    nonzero[0] -= stats.zeros  # exact zeros (half of a ReLU's output) quantize exactly at any threshold
    return float(min(entropy_threshold(nonzero, stats.width), stats.absmax))


def percentile_threshold(hist: np.ndarray, width: float, percentile: float) -> float:
    """The magnitude below which ``percentile`` % of the histogram's elements lie (linear within a bin)."""
    cdf = np.cumsum(hist, dtype=np.float64)
    want = cdf[-1] * percentile / 100.0
    k = int(np.searchsorted(cdf, want, side="left"))
    below = cdf[k - 1] if k else 0.0
    return (k + (want - below) / hist[k]) * width


def entropy_threshold(hist: np.ndarray, width: float, levels: int = LEVELS) -> float:
    """TensorRT's KL-divergence threshold: for each candidate ``i`` bins (``levels`` to all), the reference
    distribution is the first ``i`` bins with every larger magnitude counted in the last; the candidate is
    those ``i`` bins merged into ``levels`` groups and spread back evenly over each group's non-empty bins.
    Both are smoothed (empty bins get a small mass) and the ``i`` of least divergence gives ``i * width``.
    """
    h = np.asarray(hist, np.float64)
    nonempty = np.flatnonzero(h)
    last = int(nonempty[-1]) + 1 if nonempty.size else 0
    if last <= levels:  # every value fits in as many bins as there are levels: no clipping helps
        return last * width
    tail = np.concatenate([np.cumsum(h[::-1])[::-1][1:], [0.0]])  # tail[i - 1]: mass at bins >= i
    best_i, best_kl = last, math.inf
    for i in range(levels, last + 1):
        kl = _divergence(h[:i], tail[i - 1], levels)
        if kl < best_kl:
            best_i, best_kl = i, kl
    return best_i * width


def _divergence(sliced: np.ndarray, outliers: float, levels: int) -> float:
    p = sliced.copy()
    p[-1] += outliers
    nonzero = p != 0
    size = p.size // levels
    starts = np.arange(levels) * size
    group = np.minimum(np.arange(p.size) // size, levels - 1)
    merged = np.add.reduceat(sliced, starts)
    occupied = np.add.reduceat(nonzero.astype(np.float64), starts)
    q = np.where(nonzero, (merged / np.maximum(occupied, 1.0))[group], 0.0)
    if not q.any():  # nothing below the threshold: every value would saturate
        return math.inf
    p, q = _smooth(p, nonzero), _smooth(q, q != 0)
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum(p * np.log(p / q)))


def _smooth(d: np.ndarray, nonzero: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Give each empty bin a small mass ``eps`` taken evenly from the others (``eps`` reduced where a bin
    holds too little to give; ``d`` has at least one non-empty bin)."""
    n_nonzero = int(nonzero.sum())
    take = eps * (d.size - n_nonzero) / n_nonzero
    least = float(d[nonzero].min())
    if take >= least:
        eps, take = eps * 0.5 * least / take, 0.5 * least
    return np.where(nonzero, d - take, eps)
