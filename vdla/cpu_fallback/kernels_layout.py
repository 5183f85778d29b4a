"""LLVM IR emitters of the indexing kernels: per-axis gathers (``take``), gathers and scatters by flat offsets,
and grid sampling (whose indices are computed from its runtime grid, each clamped into the input).

Registered on :func:`vdla.cpu_fallback.kernels.emit`'s dispatcher (imported by :mod:`vdla.cpu_fallback.jit`).
Every index these kernels read was checked when the spec was made: the per-axis tables are compile-time
constants inside the input, and flat offsets are constant parameters whose every entry the type rule
checked (:func:`vdla.graph.ops.offsets_type`), so no kernel bounds-checks at run time.
"""

from __future__ import annotations

import itertools
import math

from llvmlite import ir

from vdla.cpu_fallback.codegen import KernelBuilder
from vdla.cpu_fallback.kernels import _emit, contiguous_strides
from vdla.cpu_fallback.lltypes import F32, I64, LL_TYPES, i64
from vdla.cpu_fallback.specs import GatherSpec, GridSampleSpec, OneHotSpec, ScatterSpec, TableSpec, TakeSpec
from vdla.graph.oracle import grid_borders
from vdla.graph.types import is_float

# an offset no sum of in-bounds offsets can cancel: marks a -1 (fill) entry of a per-axis table
FILL_OFFSET = -(1 << 40)


@_emit.register
def _take(spec: TakeSpec, kb: KernelBuilder) -> None:
    """Loops over the output axes up to the trailing run of whole axes, which is one contiguous copy;
    each gathered axis adds its table's (premultiplied) input offset. With fill entries, a negative offset
    reads the fill value (the load itself reads element 0, always in bounds), the attribute or the one
    element of the fill input."""
    b, dt, x, y = kb.b, spec.x.dtype, kb.inputs[0], kb.out
    xs, ys = spec.x.shape, spec.out.shape
    src, dst = contiguous_strides(xs), contiguous_strides(ys)
    n_outer = len(xs)
    while n_outer and spec.index[n_outer - 1] is None:
        n_outer -= 1
    inner = math.prod(ys[n_outer:])
    tables = {
        ax: kb.table([i * src[ax] if i >= 0 else FILL_OFFSET for i in t])
        for ax, t in enumerate(spec.index[:n_outer])
        if t is not None
    }
    fill = any(t is not None and -1 in t for t in spec.index)
    value = ir.Constant(LL_TYPES[dt], spec.value) if spec.fill is None else kb.load(dt, kb.inputs[1], 0)
    with kb.loops(list(ys[:n_outer])) as idx:
        off = i64(0)
        for ax, i in enumerate(idx):
            off = b.add(off, tables[ax](i) if ax in tables else b.mul(i, i64(src[ax])))
        row = kb.linear(idx, dst[:n_outer])
        with kb.loop(0, inner) as j:
            o = b.add(off, j)
            if fill:
                inside = b.icmp_signed(">=", o, i64(0))
                v = b.select(inside, kb.load(dt, x, b.select(inside, o, i64(0))), value)
            else:
                v = kb.load(dt, x, o)
            kb.store(v, dt, y, b.add(row, j))


@_emit.register
def _gather(spec: GatherSpec, kb: KernelBuilder) -> None:
    """One loop over the output: load the offset, clamp it into the input (computed offsets may stray; a
    constant's were checked when compiling), load the element it names."""
    b, dt, (x, index), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    with kb.loop(0, spec.out.size) as k:
        o = b.sext(kb.load("int32", index, k), I64)
        o = kb.smin(kb.smax(o, i64(0)), i64(spec.x.size - 1))
        kb.store(kb.load(dt, x, o), dt, y, k)


@_emit.register
def _table(spec: TableSpec, kb: KernelBuilder) -> None:
    """One loop over the output: the input's byte, zero-extended, indexes the table."""
    b, (x, entries), y, dt = kb.b, kb.inputs, kb.out, spec.out.dtype
    with kb.loop(0, spec.out.size) as k:
        kb.store(kb.load(dt, entries, b.zext(kb.load("int8", x, k), I64)), dt, y, k)


@_emit.register
def _scatter(spec: ScatterSpec, kb: KernelBuilder) -> None:
    """Copy the input, then apply the updates one after the other in order (a later update of the same
    element sees the earlier one)."""
    b, dt, (x, index, updates), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    fl = is_float(dt)
    with kb.loop(0, spec.x.size) as k:
        kb.store(kb.load(dt, x, k), dt, y, k)
    combine = {
        "add": b.fadd if fl else b.add,
        "mul": b.fmul if fl else b.mul,
        "max": kb.fmax if fl else kb.smax,
        "min": kb.fmin if fl else kb.smin,
    }
    with kb.loop(0, spec.updates.size) as k:
        o = b.sext(kb.load("int32", index, k), I64)
        u = kb.load(dt, updates, k)
        if spec.reduction != "none":
            u = combine[spec.reduction](kb.load(dt, y, o), u)
        kb.store(u, dt, y, o)


@_emit.register
def _one_hot(spec: OneHotSpec, kb: KernelBuilder) -> None:
    """Loops (outer indices, position along the new axis, inner indices): on where the index, truncated and
    wrapped, equals the position (a NaN index never does; the conversion saturates)."""
    b, (indices, values), y = kb.b, kb.inputs, kb.out
    dt, depth, shape = spec.values.dtype, spec.depth, spec.indices.shape
    outer, inner = math.prod(shape[: spec.axis]), math.prod(shape[spec.axis :])
    off, on = kb.load(dt, values, 0), kb.load(dt, values, 1)
    with kb.loop(0, outer) as o, kb.loop(0, depth) as d, kb.loop(0, inner) as i:
        raw = kb.load(spec.indices.dtype, indices, b.add(b.mul(o, i64(inner)), i))
        if is_float(spec.indices.dtype):
            index, valid = _to_index(kb, raw), b.fcmp_ordered("==", raw, raw)
        else:
            index, valid = b.sext(raw, I64), ir.Constant(ir.IntType(1), 1)
        index = b.select(b.icmp_signed("<", index, i64(0)), b.add(index, i64(depth)), index)
        hot = b.and_(valid, b.icmp_signed("==", index, d))
        kb.store(b.select(hot, on, off), dt, y, kb.linear([o, d, i], [depth * inner, inner, 1]))


# ---------------------------------------------------------------------------------------------------------
# Grid sampling


def _reflect(kb: KernelBuilder, v: ir.Value, lo: float, hi: float) -> ir.Value:
    """float32 ``v`` reflected by the near border of [lo, hi] until inside (:func:`vdla.graph.oracle.grid_reflect`)."""
    b = kb.b
    f = lambda c: ir.Constant(F32, c)  # noqa: E731
    span = hi - lo
    below, above = b.fcmp_ordered("<", v, f(lo)), b.fcmp_ordered(">", v, f(hi))
    dx = b.select(below, b.fsub(f(lo), v), b.select(above, b.fsub(v, f(hi)), f(0.0)))
    n = kb.call("llvm.floor.f32", F32, b.fdiv(dx, f(span)))
    r = b.fsub(dx, b.fmul(n, f(span)))
    half = kb.call("llvm.floor.f32", F32, b.fmul(n, f(0.5)))
    even = b.fcmp_ordered("==", b.fmul(half, f(2.0)), n)
    from_lo, from_hi = b.fadd(f(lo), r), b.fsub(f(hi), r)
    return b.select(below, b.select(even, from_lo, from_hi), b.select(above, b.select(even, from_hi, from_lo), v))


def _grid_taps(kb: KernelBuilder, spec: GridSampleSpec, g: ir.Value, size: int) -> list[tuple]:
    """The taps of one axis at normalised coordinate ``g``: (clamped index, weight, reads-the-input flag)
    each, as :func:`vdla.graph.oracle.grid_axis_taps` computes them."""
    b, mode = kb.b, spec.mode
    f = lambda c: ir.Constant(F32, c)  # noqa: E731
    g1 = b.fadd(g, f(1.0))
    if spec.align_corners:
        u = b.fmul(b.fdiv(g1, f(2.0)), f(size - 1.0))
    else:
        u = b.fdiv(b.fsub(b.fmul(g1, f(float(size))), f(1.0)), f(2.0))
    if mode == "nearest":
        u = kb.rint(u)
    lo, hi = grid_borders(size, spec.align_corners)
    if spec.padding_mode == "border":
        outside = b.or_(b.fcmp_unordered("<", u, f(lo)), b.fcmp_ordered(">", u, f(hi)))
        u = b.select(outside, kb.fmin(kb.fmax(u, f(0.0)), f(size - 1.0)), u)
    elif spec.padding_mode == "reflection":
        u = _reflect(kb, u, lo, hi)
    if mode == "nearest":
        raw = [(_to_index(kb, u), f(1.0))]
    else:
        base = kb.call("llvm.floor.f32", F32, u)
        t = b.fsub(u, base)
        first = _to_index(kb, base)
        offsets = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
        raw = []
        for k in offsets:
            d = kb.fabs(b.fsub(f(float(k)), t))
            w = b.fsub(f(1.0), d) if mode == "linear" else _keys(kb, d)
            raw.append((b.add(first, i64(k)), w))
    taps = []
    for i, w in raw:
        reads = ir.Constant(ir.IntType(1), 1)
        if spec.padding_mode == "zeros":
            reads = b.and_(b.icmp_signed(">=", i, i64(0)), b.icmp_signed("<", i, i64(size)))
        elif spec.padding_mode == "reflection":
            i = _to_index(kb, _reflect(kb, b.sitofp(i, F32), lo, hi))
        taps.append((kb.smin(kb.smax(i, i64(0)), i64(size - 1)), w, reads))
    return taps


def _to_index(kb: KernelBuilder, v: ir.Value) -> ir.Value:
    """float32 -> i64 toward zero, saturating (NaN gives 0): defined for any grid value, the index being
    clamped into the input afterwards."""
    return kb.call("llvm.fptosi.sat.i64.f32", I64, v)


def _keys(kb: KernelBuilder, d: ir.Value, a: float = -0.75) -> ir.Value:
    """Keys' cubic kernel at distance ``d`` >= 0 (:func:`vdla.graph.oracle.cubic_weights`)."""
    b = kb.b
    f = lambda c: ir.Constant(F32, c)  # noqa: E731
    near = b.fadd(b.fmul(b.fmul(b.fsub(b.fmul(f(a + 2), d), f(a + 3)), d), d), f(1.0))
    far = b.fsub(b.fmul(b.fadd(b.fmul(b.fsub(b.fmul(f(a), d), f(5 * a)), d), f(8 * a)), d), f(4 * a))
    return b.select(b.fcmp_ordered("<=", d, f(1.0)), near, b.select(b.fcmp_ordered("<", d, f(2.0)), far, f(0.0)))


@_emit.register
def _grid_sample(spec: GridSampleSpec, kb: KernelBuilder) -> None:
    """Per image and output point: the taps of every spatial axis from its grid coordinate, then per channel
    the weighted sum of the product of the axes' taps (a tap that reads outside adds nothing)."""
    b, (x, grid), y = kb.b, kb.inputs, kb.out
    n, c, *dims = spec.x.shape
    r, points = len(dims), math.prod(spec.grid.shape[1:-1])
    strides = contiguous_strides(tuple(dims))
    plane = math.prod(dims)
    with kb.loop(0, n) as ni, kb.loop(0, points) as p:
        at = b.mul(b.add(b.mul(ni, i64(points)), p), i64(r))
        taps = [_grid_taps(kb, spec, kb.load("float32", grid, b.add(at, i64(r - 1 - a))), dims[a]) for a in range(r)]
        combos = []
        for pick in itertools.product(*taps):
            off, weight, reads = i64(0), None, ir.Constant(ir.IntType(1), 1)
            for (i, w, ok), stride in zip(pick, strides, strict=True):
                off = b.add(off, b.mul(i, i64(stride)))
                weight = w if weight is None else b.fmul(weight, w)
                reads = b.and_(reads, ok)
            combos.append((off, weight, reads))
        with kb.loop(0, c) as ci:
            image = b.mul(b.add(b.mul(ni, i64(c)), ci), i64(plane))
            total = ir.Constant(F32, 0.0)
            for off, weight, reads in combos:
                v = b.fmul(kb.load("float32", x, b.add(image, off)), weight)
                total = b.fadd(total, b.select(reads, v, ir.Constant(F32, 0.0)))
            kb.store(total, "float32", y, b.add(b.mul(b.add(b.mul(ni, i64(c)), ci), i64(points)), p))
