"""Operator library: the emitter registry (:func:`emit`, :data:`register_emitter`, :func:`scratch_elements`) and
the LLVM IR emitters of the compute kernels (elementwise chains, pooling, softmax, matmul, dense, convolution
and transposed convolution), for exact shapes and dtypes.

The layout and indexing emitters are in :mod:`vdla.cpu_fallback.kernels_layout`, those of the reductions
and normalizations in :mod:`vdla.cpu_fallback.kernels_reduce`: importing either registers its emitters here
(:mod:`vdla.cpu_fallback.jit` imports both).

Most emitters write scalar loop nests whose innermost loop walks contiguous output elements, with window
taps unrolled at compile time, for LLVM's vectorizer to widen. The convolution emits explicit vector code
(register-tiled accumulators, masked loads) where the vectorizer cannot find the good schedule by itself.
"""

from __future__ import annotations

import math
from functools import singledispatch

import numpy as np
from llvmlite import ir

from vdla.cpu_fallback.abi import ObjectLayout
from vdla.cpu_fallback.codegen import REASSOC, X86_TRAITS, CpuTraits, KernelBuilder
from vdla.cpu_fallback.ew_emit import ChainEmitter, broadcast_strides
from vdla.cpu_fallback.lltypes import F32, I32, I64, LL_SIZES, LL_TYPES, i64
from vdla.cpu_fallback.specs import (
    ChainSpec,
    CpuConv2dSpec,
    CpuConvTransposeSpec,
    CpuDenseSpec,
    GlobalAvgPoolSpec,
    MatMulSpec,
    Pool2dSpec,
    SoftmaxSpec,
    Spec,
    spec_inputs,
)
from vdla.graph.ew import EW
from vdla.graph.types import is_float
from vdla.graph.window import Window


@singledispatch
def scratch_elements(spec: Spec) -> int:
    """float32 scratch elements a kernel needs (passed after the output; 0: no scratch argument)."""
    return 0


@scratch_elements.register
def _(spec: CpuConv2dSpec) -> int:
    return spec.w.size if spec.x.dtype == "int8" else 0


def emit(spec: Spec, module: ir.Module, name: str, layout: ObjectLayout | None, traits: CpuTraits = X86_TRAITS) -> None:
    """Add the kernel ``name`` for ``spec`` to ``module``: args are the inputs, the output, then the scratch
    buffer if :func:`scratch_elements` asks for one. With ``layout`` None the entry is the plain C one of
    ahead-of-time code; ``traits``: the target CPU's (:class:`~vdla.cpu_fallback.codegen.CpuTraits`)."""
    scratch = scratch_elements(spec) > 0
    kb = KernelBuilder(module, name, spec_inputs(spec), spec.out, layout, scratch, traits)
    _emit(spec, kb)
    kb.finish()


@singledispatch
def _emit(spec: Spec, kb: KernelBuilder) -> None:
    raise TypeError(f"no emitter for {type(spec).__name__}")


register_emitter = _emit.register  # a decorator: the emitter of the spec type its first argument is annotated with


def contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    return [math.prod(shape[i + 1 :]) for i in range(len(shape))]


def coalesce(shape: tuple[int, ...], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dims that every stride list walks linearly, and drop unit dims (fewer, longer loops)."""
    dims: list[int] = []
    out: list[list[int]] = [[] for _ in strides]
    for d, extent in enumerate(shape):
        if extent == 1:
            continue
        if dims and all(s[-1] == st[d] * extent for s, st in zip(out, strides, strict=True)):
            dims[-1] *= extent
            for s, st in zip(out, strides, strict=True):
                s[-1] = st[d]
            continue
        dims.append(extent)
        for s, st in zip(out, strides, strict=True):
            s.append(st[d])
    return dims or [1], [s or [0] for s in out]


# ---------------------------------------------------------------------------------------------------------
# Elementwise chains

ALIGN = 64  # bytes (a cache line) to which the inner loop's main part aligns the output
STREAMING_LANES = 8  # 256-bit vectors of 4-byte elements


@_emit.register
def _chain(spec: ChainSpec, kb: KernelBuilder) -> None:
    """One loop nest over the coalesced output dims.

    In a streaming chain (only steps whose :class:`~vdla.graph.ew.EwDef` is ``streaming``) whose output is
    at least as wide as the inputs its inner loop walks, an inner loop of at least 4 cache lines first runs
    the few elements that bring the output to a cache-line boundary, so that no vector store straddles two
    lines (numpy's large arrays typically start 16 bytes into one). With only 4-byte elements, the rest
    then runs on 256-bit vectors: on Zen 4, which splits 512-bit accesses in two anyway, they are faster for
    streaming (a misaligned input straddles lines on every 512-bit load, on every other 256-bit one).
    Neither paid off elsewhere (compute-bound chains, narrowing outputs), so other chains keep the
    vectorizer's plain loop.
    """
    out = spec.out
    strides = [broadcast_strides(t.shape, out.shape) for t in spec.inputs] + [contiguous_strides(out.shape)]
    dims, strides = coalesce(out.shape, strides)
    chain = ChainEmitter(kb, spec, kb.inputs)

    def body(idx: list[ir.Value]) -> None:
        offs = [kb.linear(idx, s) for s in strides]
        kb.store(chain.apply(chain.load(0, offs[0]), offs), out.dtype, kb.out, offs[-1])

    size = LL_SIZES[out.dtype]
    walked = [LL_SIZES[t.dtype] for t, s in zip(spec.inputs, strides, strict=False) if s[-1] == 1]
    streaming = all(EW[s.op].streaming for s in spec.steps)
    if not streaming or max(walked, default=0) > size or dims[-1] * size < 4 * ALIGN:
        with kb.loops(dims) as idx:
            body(idx)
        return
    lanes = STREAMING_LANES if all(LL_SIZES[t.dtype] == 4 for t in (*spec.inputs, out)) else 0
    b = kb.b
    with kb.loops(dims[:-1]) as outer:
        row = b.ptrtoint(kb.gep(out.dtype, kb.out, kb.linear(outer, strides[-1][:-1])), I64)
        peel = b.lshr(b.and_(b.neg(row), i64(ALIGN - 1)), i64(size.bit_length() - 1))
        with kb.loop(0, peel) as i:
            body([*outer, i])
        with kb.loop(peel, dims[-1], vector_width=lanes) as i:
            body([*outer, i])


# ---------------------------------------------------------------------------------------------------------
# Sliding windows (pooling and convolution)


def _tap_classes(win: Window, axis: int, size: int, n_out: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """Runs of output indices along ``axis`` sharing the same valid taps: (start, stop, taps)."""
    classes: list[tuple[int, int, tuple[int, ...]]] = []
    for o in range(n_out):
        taps = win.valid_taps(o, size, axis)
        if classes and classes[-1][2] == taps:
            classes[-1] = (classes[-1][0], o + 1, taps)
        else:
            classes.append((o, o + 1, taps))
    return classes


def _row_bounds(kb: KernelBuilder, win: Window, h: int, oh_n: int, oh: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Valid kernel-row range [lo, hi) of output row ``oh`` (tables computed at compile time; a row that
    lies entirely in the padding has an empty range)."""
    taps = [win.valid_taps(o, h, 0) for o in range(oh_n)]
    return kb.table([t[0] if t else 0 for t in taps])(oh), kb.table([t[-1] + 1 if t else 0 for t in taps])(oh)


def input_row(kb: KernelBuilder, win: Window, oh: ir.Value, kh: ir.Value, plane: ir.Value, w: int) -> ir.Value:
    """Element offset of input row ``oh * s + kh * d - pad`` in the plane starting at ``plane``."""
    b = kb.b
    ih = b.sub(b.add(b.mul(oh, i64(win.stride[0])), b.mul(kh, i64(win.dilation[0]))), i64(win.pad_before(0)))
    return b.add(plane, b.mul(ih, i64(w)))


def _col_offset(kb: KernelBuilder, win: Window, row: ir.Value, ow: ir.Value, tap: int) -> ir.Value:
    return kb.b.add(row, kb.b.add(kb.b.mul(ow, i64(win.stride[1])), i64(tap * win.dilation[1] - win.pad_before(1))))


@_emit.register
def _pool2d(spec: Pool2dSpec, kb: KernelBuilder) -> None:
    """Every (row class, column class) region gets its own loop with all valid taps unrolled."""
    b = kb.b
    n, c, h, w = spec.x.shape
    oh_n, ow_n = spec.out.shape[2:]
    win, dt = spec.window, spec.x.dtype
    (x,), y = kb.inputs, kb.out
    for r0, r1, khs in _tap_classes(win, 0, h, oh_n):
        for c0, c1, kws in _tap_classes(win, 1, w, ow_n):
            with kb.loop(0, n * c) as nc, kb.loop(r0, r1) as oh, kb.loop(c0, c1) as ow:
                plane = b.mul(nc, i64(h * w))
                vals = []
                for kh in khs:
                    row = input_row(kb, win, oh, i64(kh), plane, w)
                    vals += [kb.load(dt, x, _col_offset(kb, win, row, ow, kw)) for kw in kws]
                v = _pool_value(spec, kb, vals, len(khs) * len(kws))
                kb.store(v, dt, y, kb.linear([nc, oh, ow], [oh_n * ow_n, ow_n, 1]))


def _pool_value(spec: Pool2dSpec, kb: KernelBuilder, vals: list[ir.Value], valid: int) -> ir.Value:
    """The pooled value of one window from the ``valid`` input elements it holds."""
    b, fl = kb.b, is_float(spec.x.dtype)
    if spec.kind == "max":
        v = vals[0]
        for u in vals[1:]:
            v = kb.fmax(v, u) if fl else kb.smax(v, u)
        return v
    if spec.kind == "lp":
        powers = []
        for u in vals:
            a = kb.fabs(u)
            pw = a
            for _ in range(spec.p - 1):
                pw = b.fmul(pw, a)
            powers.append(pw)
        v = powers[0]
        for u in powers[1:]:
            v = b.fadd(v, u)
        if spec.p == 1:
            return v
        if spec.p == 2:
            return kb.sqrt(v)
        root = kb.exp(b.fmul(kb.log(v), ir.Constant(F32, 1.0 / spec.p)))
        return b.select(b.fcmp_ordered("==", v, ir.Constant(F32, 0.0)), v, root)
    v = vals[0] if fl else b.sext(vals[0], I32)
    for u in vals[1:]:
        v = b.fadd(v, u) if fl else b.add(v, b.sext(u, I32))
    count = spec.window.kernel[0] * spec.window.kernel[1] if spec.count_include_pad else valid
    return b.fdiv(v, ir.Constant(F32, float(count))) if fl else _round_div_int8(kb, v, count)


def _round_div_int8(kb: KernelBuilder, total: ir.Value, count: int) -> ir.Value:
    """int8 of floor(total / count + 1/2) (round half up) for an int32 sum of ``count`` int8 values.

    Shifting the numerator by 128 * 2count keeps it positive, so an unsigned division by a constant
    (which LLVM turns into a vectorizable multiply) gives the floor.
    """
    b = kb.b
    num = b.add(b.mul(total, ir.Constant(I32, 2)), ir.Constant(I32, 257 * count))
    q = b.udiv(num, ir.Constant(I32, 2 * count))
    return b.trunc(b.sub(q, ir.Constant(I32, 128)), LL_TYPES["int8"])


GAP_LANES = 16


@_emit.register
def _global_avg_pool(spec: GlobalAvgPoolSpec, kb: KernelBuilder) -> None:
    """Per plane: vector partial sums over full vectors plus one masked tail (the plane size is known),
    then one horizontal reduction."""
    b = kb.b
    n, c, h, w = spec.x.shape
    hw, dt, lanes = h * w, spec.x.dtype, GAP_LANES
    fl = is_float(dt)
    acc_ty = ir.VectorType(F32 if fl else I32, lanes)
    acc = kb.alloca_of(acc_ty)
    tail = ir.Constant(ir.VectorType(ir.IntType(1), lanes), [i < hw % lanes for i in range(lanes)])
    (x,), y = kb.inputs, kb.out

    def accumulate(v: ir.Value) -> None:
        total = b.load(acc)
        b.store(b.fadd(total, v, flags=REASSOC) if fl else b.add(total, b.sext(v, acc_ty)), acc)

    with kb.loop(0, n * c) as nc:
        b.store(ir.Constant(acc_ty, [0.0 if fl else 0] * lanes), acc)
        base = b.mul(nc, i64(hw))
        with kb.loop(0, hw // lanes) as i:
            accumulate(kb.load_vec(dt, x, b.add(base, b.mul(i, i64(lanes))), lanes))
        if hw % lanes:
            accumulate(kb.masked_load(dt, x, b.add(base, i64(hw - hw % lanes)), tail))
        if fl:
            total = kb.call(
                f"llvm.vector.reduce.fadd.v{lanes}f32",
                F32,
                ir.Constant(F32, 0.0),
                b.load(acc),
                fastmath=REASSOC,
            )
            v = b.fdiv(total, ir.Constant(F32, float(hw)))
        else:
            v = kb.call(f"llvm.vector.reduce.add.v{lanes}i32", I32, b.load(acc))
            v = _round_div_int8(kb, v, hw) if spec.mean else v
        kb.store(v, spec.out.dtype, y, nc)


# ---------------------------------------------------------------------------------------------------------
# Softmax


@_emit.register
def _softmax(spec: SoftmaxSpec, kb: KernelBuilder) -> None:
    """Per outer index, all ``inner`` rows along the axis at once (the inner loops walk contiguous memory):
    softmax and log-softmax in four passes (max; exp, written to the output; its sum; scale, or subtract the
    log of the sum), hardmax in two (the first maximum's index, NaN counting as the maximum; the one-hot).
    The sum runs in axis order, not reassociated: its rounding is the same on every CPU whatever its vector
    width (the exps, in their own pass, still vectorize). The softmax of int8 (``scale``) takes the maximum in
    integers and each exp from a table of ``exp(scale * d)`` for the 256 differences ``d = q - max q``."""
    b = kb.b
    shape, axis = spec.x.shape, spec.axis
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    quantized = spec.scale is not None
    mdt = "int32" if quantized else "float32"
    mx, sm = kb.alloca(mdt, inner), kb.alloca("float32", inner)
    (x,), y = kb.inputs, kb.out
    f32 = lambda v: ir.Constant(F32, v)  # noqa: E731
    if quantized:
        exps = kb.table([float(np.float32(math.exp(spec.scale * (d - 255)))) for d in range(256)], F32)

    def over_axis(o: ir.Value, body) -> None:
        with kb.loop(0, n) as a, kb.loop(0, inner) as i:
            body(i, kb.linear([o, a, i], [n * inner, inner, 1]), a)

    def running_max(i: ir.Value, off: ir.Value, a: ir.Value) -> None:
        if quantized:
            kb.store(kb.smax(kb.load(mdt, mx, i), b.sext(kb.load("int8", x, off), I32)), mdt, mx, i)
        else:
            kb.store(kb.fmax(kb.load("float32", mx, i), kb.load("float32", x, off)), "float32", mx, i)

    def exp(i: ir.Value, off: ir.Value, a: ir.Value) -> None:
        if quantized:
            d = b.sub(b.sext(kb.load("int8", x, off), I32), kb.load(mdt, mx, i))
            kb.store(exps(b.zext(b.add(d, ir.Constant(I32, 255)), I64)), "float32", y, off)
        else:
            kb.store(kb.exp(b.fsub(kb.load("float32", x, off), kb.load("float32", mx, i))), "float32", y, off)

    def add_up(i: ir.Value, off: ir.Value, a: ir.Value) -> None:
        kb.store(b.fadd(kb.load("float32", sm, i), kb.load("float32", y, off)), "float32", sm, i)

    def finish(i: ir.Value, off: ir.Value, a: ir.Value) -> None:
        if spec.kind == "softmax":
            v = b.fmul(kb.load("float32", y, off), kb.load("float32", sm, i))
        else:
            v = b.fsub(b.fsub(kb.load("float32", x, off), kb.load("float32", mx, i)), kb.load("float32", sm, i))
        kb.store(v, "float32", y, off)

    first = kb.alloca("int32", inner)  # hardmax: the index of the first maximum

    def track_first_max(i: ir.Value, off: ir.Value, a: ir.Value) -> None:
        v, m = kb.load("float32", x, off), kb.load("float32", mx, i)
        nan_over_number = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_ordered("ord", m, m))
        better = b.or_(b.fcmp_ordered(">", v, m), nan_over_number)
        kb.store(b.select(better, v, m), "float32", mx, i)
        kb.store(b.select(better, b.trunc(a, I32), kb.load("int32", first, i)), "int32", first, i)

    def one_hot(i: ir.Value, off: ir.Value, a: ir.Value) -> None:
        hot = b.icmp_signed("==", b.trunc(a, I32), kb.load("int32", first, i))
        kb.store(b.uitofp(hot, F32), "float32", y, off)

    with kb.loop(0, outer) as o:
        with kb.loop(0, inner) as i:
            kb.store(ir.Constant(I32, -128) if quantized else f32(float("-inf")), mdt, mx, i)
            kb.store(f32(0.0), "float32", sm, i)
            kb.store(ir.Constant(I32, 0), "int32", first, i)
        if spec.kind == "hardmax":
            over_axis(o, track_first_max)
            over_axis(o, one_hot)
        else:
            over_axis(o, running_max)
            over_axis(o, exp)
            over_axis(o, add_up)
            with kb.loop(0, inner) as i:
                total = kb.load("float32", sm, i)
                kb.store(kb.log(total) if spec.kind == "log_softmax" else b.fdiv(f32(1.0), total), "float32", sm, i)
            over_axis(o, finish)


# ---------------------------------------------------------------------------------------------------------
# Products: batched matmul, dense and convolution


@_emit.register
def _matmul(spec: MatMulSpec, kb: KernelBuilder) -> None:
    """Per batch and output row: the row is zeroed, then for each k the row of ``b`` scaled by ``a[m, k]``
    is added with FMAs, the inner loop walking contiguous columns of ``b`` and of the output (vectorized).
    Batch dimensions broadcast (stride 0 where an operand has size 1)."""
    b = kb.b
    *batch, m_n, n_n = spec.out.shape
    k_n = spec.a.shape[-1]
    a, bm = kb.inputs
    y = kb.out
    a_strides = [s * m_n * k_n for s in broadcast_strides(spec.a.shape[:-2], tuple(batch))]
    b_strides = [s * k_n * n_n for s in broadcast_strides(spec.b.shape[:-2], tuple(batch))]
    y_strides = [s * m_n * n_n for s in contiguous_strides(tuple(batch))]
    zero = ir.Constant(F32, 0.0)
    with kb.loops(batch) as bidx, kb.loop(0, m_n) as m:
        a_row = kb.linear([*bidx, m], [*a_strides, k_n])
        b0 = kb.linear(bidx, b_strides)
        y_row = kb.linear([*bidx, m], [*y_strides, n_n])
        with kb.loop(0, n_n) as n:
            kb.store(zero, "float32", y, b.add(y_row, n))
        with kb.loop(0, k_n) as k:
            av = kb.load("float32", a, b.add(a_row, k))
            b_row = b.add(b0, b.mul(k, i64(n_n)))
            with kb.loop(0, n_n) as n:
                out_off = b.add(y_row, n)
                acc = kb.fma(av, kb.load("float32", bm, b.add(b_row, n)), kb.load("float32", y, out_off))
                kb.store(acc, "float32", y, out_off)


def _mac(kb: KernelBuilder, acc: ir.Value, a: ir.Value, w: ir.Value, fl: bool) -> ir.Value:
    """acc + a * w (operands widened by :func:`_widened`); float sums may be reassociated."""
    b = kb.b
    if fl:
        return b.fadd(acc, b.fmul(a, w, flags=REASSOC), flags=REASSOC)
    return b.add(acc, b.mul(a, w))


def _widened(kb: KernelBuilder, dt: str, ptr: ir.Value, off: ir.Value) -> ir.Value:
    """Load one element; int8 is sign-extended to i32 (LLVM turns such dot products into pmaddwd)."""
    v = kb.load(dt, ptr, off)
    return v if is_float(dt) else kb.b.sext(v, I32)


def _epilogue_store(
    kb: KernelBuilder,
    spec: CpuDenseSpec | CpuConv2dSpec,
    chain: ChainEmitter | None,
    acc: ir.Value,
    coords: list[ir.Value],
    out_off: ir.Value,
) -> None:
    value = chain.apply(acc, chain.offsets_at(coords)) if chain else acc
    kb.store(value, spec.out.dtype, kb.out, out_off)


def _epilogue_emitter(kb: KernelBuilder, spec: CpuDenseSpec | CpuConv2dSpec) -> ChainEmitter | None:
    return ChainEmitter(kb, spec.epilogue, [None, *kb.inputs[2:]]) if spec.epilogue else None


@_emit.register
def _dense(spec: CpuDenseSpec, kb: KernelBuilder) -> None:
    b = kb.b
    m_n, k_n = spec.x.shape
    n_n = spec.w.shape[0]
    dt, acc_dt = spec.x.dtype, spec.acc.dtype
    fl = is_float(dt)
    x, w = kb.inputs[:2]
    acc = kb.alloca(acc_dt, 1)
    chain = _epilogue_emitter(kb, spec)
    with kb.loop(0, n_n) as n, kb.loop(0, m_n) as m:
        b.store(ir.Constant(LL_TYPES[acc_dt], 0.0 if fl else 0), acc)
        with kb.loop(0, k_n) as k:
            xv = _widened(kb, dt, x, kb.linear([m, k], [k_n, 1]))
            wv = _widened(kb, dt, w, kb.linear([n, k], [k_n, 1]))
            b.store(_mac(kb, b.load(acc), xv, wv, fl), acc)
        _epilogue_store(kb, spec, chain, b.load(acc), [m, n], kb.linear([m, n], [n_n, 1]))


CONV_LANES = 16  # output columns per register tile (one 512-bit vector of float32 accumulators)
# int8 x int8 products are summed in float32 (FMA throughput) in chunks of at most this many terms, which
# keeps every partial sum an integer below 2^24 = 1024 * 128 * 128, hence exact; chunks add up in int32
EXACT_INT8_TERMS = 1024


def _out_channel_block(ocg: int) -> int:
    return next(ob for ob in (8, 4, 2, 1) if ocg % ob == 0)


@_emit.register
def _conv2d(spec: CpuConv2dSpec, kb: KernelBuilder) -> None:
    """Register-tiled direct convolution.

    Each tile holds ``ob`` output channels x 16 output columns of one output row in vector accumulators
    across the reduction (input channels of the group x valid kernel rows x kernel columns). Input columns
    are read with masked vector loads (stride > 1: one wide load, then every stride-th lane), so padding and
    the last partial tile need no scalar code: masked-off lanes read as zero. int8 runs on float32 FMAs
    (weights converted once per call into the scratch buffer) with exact chunked sums, see above, or, on a
    CPU without ``CpuTraits.float_int8_dot`` (ARM), in int32 lanes (NEON's widening multiply-accumulates);
    the sums are exact either way, so every CPU gives the same accumulators.
    """
    b = kb.b
    n_n, c, h, w = spec.x.shape
    oc, icg, kh_n, kw_n = spec.w.shape
    oh_n, ow_n = spec.acc.shape[2:]
    win, g_n = spec.window, spec.groups
    ocg = oc // g_n
    ob_n = _out_channel_block(ocg)
    dt = spec.x.dtype
    fl = is_float(dt)
    lanes, sw = CONV_LANES, win.stride[1]
    wide = lanes * sw
    vec_f = ir.VectorType(F32, lanes)
    vec_i = ir.VectorType(I32, lanes)
    integer = not fl and not kb.traits.float_int8_dot
    chunk = icg if fl or integer else max(1, min(icg, EXACT_INT8_TERMS // (kh_n * kw_n)))
    x, wt = kb.inputs[:2]
    if not fl and not integer:  # float32 copy of the weights
        wf = kb.scratch
        with kb.loop(0, spec.w.size) as i:
            kb.store(b.sitofp(kb.load(dt, wt, i), F32), "float32", wf, i)
        wt = wf
    fslots = [kb.alloca_of(vec_f) for _ in range(ob_n)]  # accumulators, promoted to registers
    islots = [kb.alloca_of(vec_i) for _ in range(ob_n)]
    spills = [kb.alloca_of(vec_f if fl else vec_i) for _ in range(ob_n)]  # read lane by lane by the epilogue
    chain = _epilogue_emitter(kb, spec)
    with (
        kb.loop(0, n_n) as n,
        kb.loop(0, g_n) as g,
        kb.loop(0, ocg // ob_n) as ocb,
        kb.loop(0, oh_n) as oh,
        kb.loop(0, -(-ow_n // lanes)) as tile,
    ):
        oc0 = kb.linear([g, ocb], [ocg, ob_n])
        ow0 = b.mul(tile, i64(lanes))
        lo, hi = _row_bounds(kb, win, h, oh_n, oh)
        cols = [b.add(b.mul(ow0, i64(sw)), i64(t * win.dilation[1] - win.pad_before(1))) for t in range(kw_n)]
        masks = [kb.range_mask(col, wide, w) for col in cols]
        for slot in islots:
            b.store(ir.Constant(vec_i, [0] * lanes), slot)
        with kb.loop(0, -(-icg // chunk)) as part:
            if not integer:
                for slot in fslots:
                    b.store(ir.Constant(vec_f, [0.0] * lanes), slot)
            ic0 = b.mul(part, i64(chunk))
            with kb.loop(ic0, kb.smin(b.add(ic0, i64(chunk)), i64(icg))) as ic, kb.loop(lo, hi) as kh:
                row = input_row(kb, win, oh, kh, b.mul(kb.linear([n, g, ic], [c, icg, 1]), i64(h * w)), w)
                xs = []
                for col, mask in zip(cols, masks, strict=True):
                    v = kb.masked_load(dt, x, b.add(row, col), mask)
                    if sw > 1:
                        pick = ir.Constant(ir.VectorType(I32, lanes), list(range(0, wide, sw)))
                        v = b.shuffle_vector(v, v, pick)
                    xs.append(v if fl else b.sext(v, vec_i) if integer else b.sitofp(v, vec_f))
                wbase = kb.linear([oc0, ic, kh], [icg * kh_n * kw_n, kh_n * kw_n, kw_n])
                for ob, slot in enumerate(islots if integer else fslots):
                    acc = b.load(slot)
                    for t, xv in enumerate(xs):
                        at = b.add(wbase, i64(ob * icg * kh_n * kw_n + t))
                        if integer:
                            acc = b.add(acc, b.mul(xv, kb.splat(b.sext(kb.load(dt, wt, at), I32), lanes)))
                            continue
                        wv = kb.splat(kb.load("float32", wt, at), lanes)
                        # int8 products and sums are exact in float32, fused or not; float32 ones are rounded
                        # twice, product then sum, on every CPU (a fused one costs ~15 scalar float64 operations
                        # on a Cortex-A9, which has no FMA)
                        acc = kb.muladd(xv, wv, acc) if fl else kb.call(f"llvm.fmuladd.v{lanes}f32", vec_f, xv, wv, acc)
                    b.store(acc, slot)
            if not integer:  # the chunk's exact float sums into the int32 accumulators
                for fslot, islot in zip(fslots, islots, strict=True):
                    b.store(b.add(b.load(islot), b.fptosi(b.load(fslot), vec_i)), islot)
        valid = kb.smin(b.sub(i64(ow_n), ow0), i64(lanes))
        for ob, spill in enumerate(spills):
            b.store(b.load(fslots[ob] if fl else islots[ob]), spill)
            o_c = b.add(oc0, i64(ob))
            obase = b.add(kb.linear([n, o_c, oh], [oc * oh_n * ow_n, oh_n * ow_n, ow_n]), ow0)
            with kb.loop(0, valid) as j:
                acc = b.load(b.gep(spill, [i64(0), j], source_etype=spill.type.pointee), typ=LL_TYPES[spec.acc.dtype])
                _epilogue_store(kb, spec, chain, acc, [n, o_c, oh, b.add(ow0, j)], b.add(obase, j))


def _reach(k: int, s: int, d: int, pad: int, n_in: int, n_out: int) -> tuple[int, int]:
    """The input indices ``[lo, hi)`` that kernel tap ``k`` carries inside an output of ``n_out``:
    ``0 <= i*s + k*d - pad < n_out``."""
    lo = max(0, -(-(pad - k * d) // s))
    return lo, max(lo, min(n_in, (n_out - 1 + pad - k * d) // s + 1))


@_emit.register
def _conv_transpose(spec: CpuConvTransposeSpec, kb: KernelBuilder) -> None:
    """Scatter form: the output starts at the bias (or zero), then every input pixel under every kernel tap
    adds ``x * w`` to the output pixel it lands on (int32 wrapping, or float32). The input rows and columns
    each kernel row and column carries inside the output are compile-time tables, so the inner loops, along
    the input row, need no bounds checks."""
    b = kb.b
    n_n, c, h, w = spec.x.shape
    _, ocg, kh_n, kw_n = spec.w.shape
    oc, oh_n, ow_n = spec.out.shape[1:]
    win, g_n = spec.window, spec.groups
    icg, dt, acc_dt = c // g_n, spec.x.dtype, spec.out.dtype
    fl = is_float(dt)
    x, wt = kb.inputs[:2]
    y = kb.out
    (sh, sw), (dh, dw) = win.stride, win.dilation
    top, _, left, _ = win.pads
    rows = [_reach(k, sh, dh, top, h, oh_n) for k in range(kh_n)]
    cols = [_reach(k, sw, dw, left, w, ow_n) for k in range(kw_n)]
    r_lo, r_hi = kb.table([r[0] for r in rows]), kb.table([r[1] for r in rows])
    c_lo, c_hi = kb.table([r[0] for r in cols]), kb.table([r[1] for r in cols])
    with kb.loops([n_n, oc]) as (n, o):
        start = kb.load(acc_dt, kb.inputs[2], o) if spec.bias is not None else ir.Constant(LL_TYPES[acc_dt], 0)
        base = kb.linear([n, o], [oc * oh_n * ow_n, oh_n * ow_n])
        with kb.loop(0, oh_n * ow_n) as p:
            kb.store(start, acc_dt, y, b.add(base, p))
    with kb.loops([n_n, g_n, ocg, icg, kh_n, kw_n]) as (n, g, o, ic, ky, kx):
        wv = _widened(
            kb,
            dt,
            wt,
            kb.linear([g, ic, o, ky, kx], [icg * ocg * kh_n * kw_n, ocg * kh_n * kw_n, kh_n * kw_n, kw_n, 1]),
        )
        x_plane = kb.linear([n, g, ic], [c * h * w, icg * h * w, h * w])
        y_plane = kb.linear([n, g, o], [oc * oh_n * ow_n, ocg * oh_n * ow_n, oh_n * ow_n])
        ox0 = b.sub(b.mul(kx, i64(dw)), i64(left))
        with kb.loop(r_lo(ky), r_hi(ky)) as iy:
            oy = b.sub(b.add(b.mul(iy, i64(sh)), b.mul(ky, i64(dh))), i64(top))
            x_row = b.add(x_plane, b.mul(iy, i64(w)))
            y_row = b.add(b.add(y_plane, b.mul(oy, i64(ow_n))), ox0)
            with kb.loop(c_lo(kx), c_hi(kx)) as ix:
                off = b.add(y_row, b.mul(ix, i64(sw)))
                xv = _widened(kb, dt, x, b.add(x_row, ix))
                kb.store(_mac(kb, kb.load(acc_dt, y, off), xv, wv, fl), acc_dt, y, off)
