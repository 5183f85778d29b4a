"""CPU kernels of the reductions on any axes, the layer/RMS normalizations, the cumulative sum, top-k, the
triangle masks and the negative log-likelihood, registered with :func:`vdla.cpu_fallback.kernels.emit`
(importing this module registers them; :mod:`vdla.cpu_fallback.jit` does).

Reductions coalesce the axes into runs that are all reduced or all kept (unit axes dropped), so that the
loops walk memory in order. When the last run is reduced, each output element keeps its accumulator in a
register while the inner loop walks its contiguous reduced elements (a vectorizable reduction); when the
last run is kept, a row of accumulators in the scratch buffer is updated by an inner loop over contiguous
elements of both (vectorizable too). Float sums and products accumulate in float64 (what the oracle
computes, rounded once); max and min propagate NaN; argmax/argmin keep the first (or last) extreme, NaN
counting as the extreme, as numpy's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from vdla.cpu_fallback.codegen import REASSOC, KernelBuilder
from vdla.cpu_fallback.ew_emit import broadcast_strides
from vdla.cpu_fallback.kernels import coalesce, contiguous_strides, register_emitter, scratch_elements
from vdla.cpu_fallback.lltypes import F32, I32, I64, LL_TYPES, i64
from vdla.cpu_fallback.specs import CumSumSpec, NllLossSpec, NormSpec, ReduceSpec, TopKSpec, TriluSpec
from vdla.graph.types import INT_RANGE, is_float

F64 = ir.DoubleType()
SLOT_BYTES = 8  # every accumulator slot of the scratch buffer holds up to 8 bytes per element


def _at(kb: KernelBuilder, ty: ir.Type, ptr: ir.Value, index: ir.Value) -> ir.Value:
    return kb.b.gep(ptr, [index], source_etype=ty, inbounds=True)


def _load(kb: KernelBuilder, ty: ir.Type, ptr: ir.Value, index: ir.Value) -> ir.Value:
    return kb.b.load(_at(kb, ty, ptr, index), typ=ty)


def _store(kb: KernelBuilder, value: ir.Value, ptr: ir.Value, index: ir.Value) -> None:
    kb.b.store(value, _at(kb, value.type, ptr, index))


# ---------------------------------------------------------------------------------------------------------
# Reductions


def reduce_runs(shape: tuple[int, ...], axes: tuple[int, ...]) -> list[tuple[int, bool]]:
    """(extent, reduced) of each run of adjacent non-unit axes that are all reduced or all kept."""
    runs: list[tuple[int, bool]] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        red = i in axes
        if runs and runs[-1][1] == red:
            runs[-1] = (runs[-1][0] * d, red)
        else:
            runs.append((d, red))
    return runs


def _column_width(spec: ReduceSpec) -> int:
    """The extent of the trailing kept run when a reduction runs column-wise (0: it runs row-wise)."""
    runs = reduce_runs(spec.x.shape, spec.axes)
    return runs[-1][0] if runs and not runs[-1][1] and any(r for _, r in runs) else 0


@dataclass(frozen=True)
class _Slot:
    """One accumulator: its LLVM type and initial value."""

    ty: ir.Type
    init: float | int


def reduce_slots(kind: str, dtype: str, last: bool = False) -> list[_Slot]:
    """The accumulators of a reduction ``kind`` of ``dtype`` elements: the running extreme (and, for
    argmax/argmin, the int32 index of its first or ``last`` occurrence), the float64 (int32) sum or product,
    or for log-sum-exp the maximum and the float64 sum of exponentials."""
    vt, fl = LL_TYPES[dtype], is_float(dtype)
    lo, hi = (float("-inf"), float("inf")) if fl else INT_RANGE[dtype]
    if kind in ("max", "argmax"):
        first = _Slot(vt, lo)
    elif kind in ("min", "argmin"):
        first = _Slot(vt, hi)
    elif kind == "log_sum_exp":
        return [_Slot(F32, lo), _Slot(F64, 0.0)]
    else:
        first = _Slot(F64 if fl else I32, 1 if kind == "prod" else 0)
    return [first, _Slot(I32, -1 if last else INT_RANGE["int32"][1])] if kind in ("argmax", "argmin") else [first]


class _Reducer:
    """What one reduction kind does to its accumulators (:func:`reduce_slots`): the update with one element
    ``v`` at position ``pos`` along the reduced axis (:meth:`step`, in pass ``p``: log-sum-exp makes two
    passes, the maximum first; argmax/argmin too, the extreme first, then the least (greatest) position
    holding it, NaN matching NaN, so that both passes are vectorizable reductions) and the output value
    (:meth:`result`)."""

    def __init__(self, kb: KernelBuilder, spec: ReduceSpec) -> None:
        self.kb, self.b, self.kind, self.dt = kb, kb.b, spec.kind, spec.x.dtype
        self.fl = is_float(self.dt)
        self.count = math.prod(spec.x.shape[a] for a in spec.axes)
        self.passes = 2 if spec.kind in ("log_sum_exp", "argmax", "argmin") else 1
        self.last = spec.select_last_index
        self.slots = reduce_slots(spec.kind, spec.x.dtype, self.last)

    def step(self, p: int, acc: list[ir.Value], v: ir.Value, pos: ir.Value) -> list[ir.Value]:
        kb, b, k = self.kb, self.b, self.kind
        if k in ("max", "min") or (k in ("argmax", "argmin") and p == 0):
            if self.fl:
                return [kb.fmax(acc[0], v) if k.endswith("max") else kb.fmin(acc[0], v), *acc[1:]]
            return [kb.smax(acc[0], v) if k.endswith("max") else kb.smin(acc[0], v), *acc[1:]]
        if k in ("argmax", "argmin"):
            candidate = b.select(self._matches(v, acc[0]), b.trunc(pos, I32), ir.Constant(I32, self.slots[1].init))
            return [acc[0], kb.smax(acc[1], candidate) if self.last else kb.smin(acc[1], candidate)]
        if k == "log_sum_exp":
            if p == 0:
                return [kb.fmax(acc[0], v), acc[1]]
            e = kb.exp(b.fsub(v, self._finite(acc[0])))
            return [acc[0], b.fadd(acc[1], b.fpext(e, F64), flags=REASSOC)]
        if not self.fl:
            return [b.mul(acc[0], v) if k == "prod" else b.add(acc[0], v)]
        w = b.fpext(v, F64)
        if k == "prod":
            return [b.fmul(acc[0], w, flags=REASSOC)]
        if k == "l1":
            w = kb.call("llvm.fabs.f64", F64, w)
        elif k in ("l2", "sum_square"):
            w = b.fmul(w, w)
        return [b.fadd(acc[0], w, flags=REASSOC)]

    def _matches(self, v: ir.Value, extreme: ir.Value) -> ir.Value:
        """Whether ``v`` is the extreme (NaN is, when the extreme is NaN: the first NaN wins, as numpy's)."""
        b = self.b
        if not self.fl:
            return b.icmp_signed("==", v, extreme)
        both_nan = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", extreme, extreme))
        return b.or_(b.fcmp_ordered("==", v, extreme), both_nan)

    def _finite(self, m: ir.Value) -> ir.Value:
        """``m`` where finite, else 0 (the shift of log-sum-exp)."""
        finite = self.b.fcmp_ordered("<", self.kb.fabs(m), ir.Constant(F32, float("inf")))
        return self.b.select(finite, m, ir.Constant(F32, 0.0))

    def result(self, acc: list[ir.Value]) -> ir.Value:
        kb, b, k = self.kb, self.b, self.kind
        if k in ("argmax", "argmin"):
            return acc[1]
        if k in ("max", "min") or not self.fl:
            return acc[0]
        if k == "log_sum_exp":
            return b.fadd(kb.log(b.fptrunc(acc[1], F32)), self._finite(acc[0]))
        v = acc[0]
        if k == "mean":
            v = b.fdiv(v, ir.Constant(F64, float(self.count)))
        elif k == "l2":
            v = kb.call("llvm.sqrt.f64", F64, v)
        v = b.fptrunc(v, F32)
        return kb.log(v) if k == "log_sum" else v


@scratch_elements.register
def _(spec: ReduceSpec) -> int:
    return _column_width(spec) * len(reduce_slots(spec.kind, spec.x.dtype, spec.select_last_index)) * SLOT_BYTES // 4


@register_emitter
def _reduce(spec: ReduceSpec, kb: KernelBuilder) -> None:
    """Row-wise (the accumulators in registers, one output element at a time) or column-wise (a row of
    accumulators in the scratch buffer per outer index), see the module docstring."""
    runs = reduce_runs(spec.x.shape, spec.axes)
    strides = contiguous_strides(tuple(e for e, _ in runs))
    kept = [(e, s) for (e, r), s in zip(runs, strides, strict=True) if not r]
    red = [(e, s) for (e, r), s in zip(runs, strides, strict=True) if r]
    reducer = _Reducer(kb, spec)
    slots = reducer.slots
    (x,), y, b = kb.inputs, kb.out, kb.b
    width = _column_width(spec)
    if width:
        kept = kept[:-1]
    out_strides = [s * max(width, 1) for s in contiguous_strides(tuple(e for e, _ in kept))]

    def update(p: int, off: ir.Value, pos: ir.Value, cells: list[tuple[ir.Value, ir.Value]]) -> None:
        """One element (at ``off``, position ``pos`` along the reduced axis) into the accumulators ``cells``."""
        acc = [_load(kb, sl.ty, *cell) for sl, cell in zip(slots, cells, strict=True)]
        for value, cell in zip(reducer.step(p, acc, kb.load(spec.x.dtype, x, off), pos), cells, strict=True):
            _store(kb, value, *cell)

    def accumulate(base: ir.Value, where: Callable[[ir.Value | None], list[tuple[ir.Value, ir.Value]]]) -> None:
        """Every reduced element into the accumulators at ``where(j)`` (pointer, index) for column ``j``."""
        for p in range(reducer.passes):
            with kb.loops([e for e, _ in red]) as ridx:
                off = kb.linear(ridx, [s for _, s in red], base)
                pos = ridx[0] if ridx else i64(0)
                if not width:
                    update(p, off, pos, where(None))
                    continue
                with kb.loop(0, width) as j:
                    update(p, b.add(off, j), pos, where(j))

    with kb.loops([e for e, _ in kept]) as kidx:
        base = kb.linear(kidx, [s for _, s in kept])
        out0 = kb.linear(kidx, out_strides)
        if not width:
            cells = [kb.alloca_of(sl.ty) for sl in slots]  # promoted to registers
            for cell, sl in zip(cells, slots, strict=True):
                b.store(ir.Constant(sl.ty, sl.init), cell)
            accumulate(base, lambda j: [(cell, i64(0)) for cell in cells])
            acc = [_load(kb, sl.ty, cell, i64(0)) for cell, sl in zip(cells, slots, strict=True)]
            kb.store(reducer.result(acc), spec.out.dtype, y, out0)
        else:
            rows = [kb.gep("float32", kb.scratch, i * width * SLOT_BYTES // 4) for i in range(len(slots))]
            with kb.loop(0, width) as j:
                for row, sl in zip(rows, slots, strict=True):
                    _store(kb, ir.Constant(sl.ty, sl.init), row, j)
            accumulate(base, lambda j: [(row, j) for row in rows])
            with kb.loop(0, width) as j:
                acc = [_load(kb, sl.ty, row, j) for row, sl in zip(rows, slots, strict=True)]
                kb.store(reducer.result(acc), spec.out.dtype, y, b.add(out0, j))


# ---------------------------------------------------------------------------------------------------------
# Layer and RMS normalization


@register_emitter
def _norm(spec: NormSpec, kb: KernelBuilder) -> None:
    """Per row (the normalized trailing axes, contiguous): the float64 mean and mean of squared deviations
    (or of squares, RMS) in vectorizable passes, then ``(x - mean) / sqrt(var + eps)`` in float64 times the
    scale plus the bias at their broadcast offsets, rounded once."""
    b, (x, *affine), y = kb.b, kb.inputs, kb.out
    shape, axis = spec.x.shape, spec.axis
    n = math.prod(shape[axis:])
    strides = [contiguous_strides(shape), *(broadcast_strides(t.shape, shape) for t in spec.affine)]
    outer, o_strides = coalesce(shape[:axis], [s[:axis] for s in strides])
    inner, i_strides = coalesce(shape[axis:], [s[axis:] for s in strides])
    center = spec.kind == "layer_norm"
    total = kb.alloca_of(F64)
    f64 = lambda v: ir.Constant(F64, v)  # noqa: E731

    def row_sum(row: ir.Value, term: Callable[[ir.Value], ir.Value]) -> ir.Value:
        b.store(f64(0.0), total)
        with kb.loop(0, n) as t:
            v = b.fpext(kb.load("float32", x, b.add(row, t)), F64)
            b.store(b.fadd(b.load(total), term(v), flags=REASSOC), total)
        return b.fdiv(b.load(total), f64(float(n)))

    with kb.loops(outer) as oidx:
        rows = [kb.linear(oidx, s) for s in o_strides]
        mean = row_sum(rows[0], lambda v: v) if center else f64(0.0)
        var = row_sum(rows[0], lambda v: b.fmul(b.fsub(v, mean), b.fsub(v, mean)))
        eps = f64(float(spec.epsilon))
        inv = b.fdiv(f64(1.0), kb.call("llvm.sqrt.f64", F64, b.fadd(var, eps)))
        with kb.loops(inner) as iidx:
            offs = [kb.linear(iidx, s, row) for s, row in zip(i_strides, rows, strict=True)]
            v = b.fmul(b.fsub(b.fpext(kb.load("float32", x, offs[0]), F64), mean), inv)
            if len(affine) > 0:
                v = b.fmul(v, b.fpext(kb.load("float32", affine[0], offs[1]), F64))
            if len(affine) > 1:
                v = b.fadd(v, b.fpext(kb.load("float32", affine[1], offs[2]), F64))
            kb.store(b.fptrunc(v, F32), "float32", y, offs[0])


# ---------------------------------------------------------------------------------------------------------
# Cumulative sum, top-k, triangles


def _split(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(outer, n, inner): the extents before, along and after ``axis``."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])


@register_emitter
def _cumsum(spec: CumSumSpec, kb: KernelBuilder) -> None:
    """Along the axis in order (from the end when ``reverse``), each step adding the previous sum and one
    element (the previous one when ``exclusive``) for all ``inner`` positions at once (contiguous); with
    ``product`` multiplying, from 1."""
    b, (x,), y, dt = kb.b, kb.inputs, kb.out, spec.x.dtype
    outer, n, inner = _split(spec.x.shape, spec.axis)
    fl = is_float(dt)
    zero = ir.Constant(LL_TYPES[dt], (1.0 if fl else 1) if spec.product else (0.0 if fl else 0))
    combine = (b.fmul if fl else b.mul) if spec.product else (b.fadd if fl else b.add)
    step = -inner if spec.reverse else inner  # element offset from one sum to the next
    with kb.loop(0, outer) as o:
        start = b.add(b.mul(o, i64(n * inner)), i64((n - 1) * inner if spec.reverse else 0))
        with kb.loop(0, inner) as i:
            first = b.add(start, i)
            kb.store(zero if spec.exclusive else kb.load(dt, x, first), dt, y, first)
        with kb.loop(1, n) as a, kb.loop(0, inner) as i:
            off = b.add(b.add(start, b.mul(a, i64(step))), i)
            prev = b.sub(off, i64(step))
            term = kb.load(dt, x, prev if spec.exclusive else off)
            acc = kb.load(dt, y, prev)
            kb.store(combine(acc, term), dt, y, off)


@scratch_elements.register
def _(spec: TopKSpec) -> int:
    return 2 * spec.k  # the k best values (4 bytes or less each) and their int32 indices


@register_emitter
def _topk(spec: TopKSpec, kb: KernelBuilder) -> None:
    """Per row along the axis: a sorted list of the best ``k`` elements so far (values and indices in the
    scratch buffer); an element better than the list's last (or while the list is short) is inserted by one
    pass that shifts the worse entries down. Ties keep the lower index first; NaN is the largest."""
    b, (x,), y, dt = kb.b, kb.inputs, kb.out, spec.x.dtype
    outer, n, inner = _split(spec.x.shape, spec.axis)
    k, fl, vt = spec.k, is_float(dt), LL_TYPES[dt]
    values, index = kb.scratch, kb.gep("float32", kb.scratch, k)
    count = kb.alloca_of(I64)

    def better(v: ir.Value, w: ir.Value) -> ir.Value:
        op = ">" if spec.largest else "<"
        if not fl:
            return b.icmp_signed(op, v, w)
        v_nan, w_nan = b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", w, w)
        nan = b.and_(v_nan, b.not_(w_nan)) if spec.largest else b.and_(b.not_(v_nan), w_nan)
        return b.or_(b.fcmp_ordered(op, v, w), nan)

    with kb.loop(0, outer) as o, kb.loop(0, inner) as i:
        base = kb.linear([o, i], [n * inner, 1])
        b.store(i64(0), count)
        with kb.loop(0, n) as a:
            v = kb.load(dt, x, b.add(base, b.mul(a, i64(inner))))
            c = b.load(count)
            full = b.icmp_signed("==", c, i64(k))
            worst = _load(kb, vt, values, i64(k - 1))
            with b.if_then(b.or_(b.not_(full), better(v, worst))):
                # entry j (from the end) takes entry j - 1 while v is better than it, else v once
                with kb.loop(0, k) as t:
                    j = b.sub(i64(k - 1), t)
                    filled = lambda m: b.icmp_signed("<", m, c)  # noqa: E731
                    at_or_before = lambda m: b.or_(  # noqa: E731
                        b.not_(filled(m)), better(v, _load(kb, vt, values, m))
                    )
                    has_prev = b.icmp_signed(">", j, i64(0))
                    prev = b.select(has_prev, b.sub(j, i64(1)), i64(0))
                    shift = b.and_(has_prev, at_or_before(prev))
                    here = at_or_before(j)
                    new_v = b.select(shift, _load(kb, vt, values, prev), b.select(here, v, _load(kb, vt, values, j)))
                    new_i = b.select(
                        shift, _load(kb, I32, index, prev), b.select(here, b.trunc(a, I32), _load(kb, I32, index, j))
                    )
                    _store(kb, new_v, values, j)
                    _store(kb, new_i, index, j)
                b.store(b.select(full, c, b.add(c, i64(1))), count)
        with kb.loop(0, k) as t:
            out = kb.linear([o, t, i], [k * inner, inner, 1])
            if spec.indices:
                kb.store(_load(kb, I32, index, t), "int32", y, out)
            else:
                kb.store(_load(kb, vt, values, t), dt, y, out)


@register_emitter
def _trilu(spec: TriluSpec, kb: KernelBuilder) -> None:
    """Per row ``r`` of each matrix: the kept columns are one run ``[lo, hi)`` (``j >= r + k`` or
    ``j <= r + k``, clamped to the row), copied; the others are zero."""
    b, (x,), y, dt = kb.b, kb.inputs, kb.out, spec.x.dtype
    *batch, rows, cols = spec.x.shape
    zero = ir.Constant(LL_TYPES[dt], 0.0 if is_float(dt) else 0)

    def clamp(v: ir.Value) -> ir.Value:
        return kb.smin(kb.smax(v, i64(0)), i64(cols))

    with kb.loop(0, math.prod(batch) * rows) as br:
        r = b.srem(br, i64(rows))
        edge = clamp(b.add(r, i64(spec.k if spec.upper else spec.k + 1)))
        lo, hi = (edge, i64(cols)) if spec.upper else (i64(0), edge)
        row = b.mul(br, i64(cols))
        with kb.loop(0, lo) as j:
            kb.store(zero, dt, y, b.add(row, j))
        with kb.loop(lo, hi) as j:
            kb.store(kb.load(dt, x, b.add(row, j)), dt, y, b.add(row, j))
        with kb.loop(hi, cols) as j:
            kb.store(zero, dt, y, b.add(row, j))


# ---------------------------------------------------------------------------------------------------------
# Negative log-likelihood


@register_emitter
def _nll_loss(spec: NllLossSpec, kb: KernelBuilder) -> None:
    """Per (n, d): the class index ``t``, clamped for the load, then ``-x[n, t, d] * weight[t]``, 0 where ``t``
    is ``ignore_index`` and NaN where it lies outside the classes."""
    b, y = kb.b, kb.out
    x, target, *weight = kb.inputs
    n, c = spec.x.shape[:2]
    d = math.prod(spec.x.shape[2:])
    f32 = lambda v: ir.Constant(F32, v)  # noqa: E731
    with kb.loop(0, n) as i, kb.loop(0, d) as j:
        t = b.sext(kb.load("int32", target, kb.linear([i, j], [d, 1])), I64)
        tc = kb.smin(kb.smax(t, i64(0)), i64(c - 1))
        loss = b.fneg(kb.load("float32", x, kb.linear([i, tc, j], [c * d, d, 1])))
        if weight:
            loss = b.fmul(loss, kb.load("float32", weight[0], tc))
        loss = b.select(b.icmp_signed("==", t, tc), loss, f32(float("nan")))
        if spec.ignore_index is not None:
            loss = b.select(b.icmp_signed("==", t, i64(spec.ignore_index)), f32(0.0), loss)
        kb.store(loss, "float32", y, kb.linear([i, j], [d, 1]))
