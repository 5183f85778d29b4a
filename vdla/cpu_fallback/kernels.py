"""Operator library: LLVM IR emitters for every kernel spec, for exact shapes and dtypes.

Most emitters write scalar loop nests whose innermost loop walks contiguous output elements, with window
taps unrolled at compile time, for LLVM's vectorizer to widen. The layout conversions and the convolution
emit explicit vector code (register transposes, register-tiled accumulators, masked loads) where the
vectorizer cannot find the good schedule by itself.
"""

from __future__ import annotations

import itertools
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
    ConcatSpec,
    CpuConv2dSpec,
    CpuConvTransposeSpec,
    CpuDenseSpec,
    GlobalAvgPoolSpec,
    Im2colSpec,
    InterleaveSpec,
    MatMulSpec,
    PackSpec,
    PadSpec,
    Pool2dSpec,
    ResizeSpec,
    SliceSpec,
    SoftmaxSpec,
    Spec,
    TransposeSpec,
    UnpackSpec,
    spec_inputs,
)
from vdla.graph.ew import EW
from vdla.graph.oracle import resize_taps
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


def _input_row(kb: KernelBuilder, win: Window, oh: ir.Value, kh: ir.Value, plane: ir.Value, w: int) -> ir.Value:
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
                    row = _input_row(kb, win, oh, i64(kh), plane, w)
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
# Layout


TRANSPOSE_TILE = 16


@_emit.register
def _transpose(spec: TransposeSpec, kb: KernelBuilder) -> None:
    """Copy in output order. When the output's innermost dim is strided in the input, (input-contiguous
    dim q) x (output-contiguous last dim) is walked in 16 x 16 tiles transposed in registers."""
    b, dt, t = kb.b, spec.x.dtype, TRANSPOSE_TILE
    (x,), y = kb.inputs, kb.out
    src = contiguous_strides(spec.x.shape)
    dims, (ss, ds) = coalesce(spec.out.shape, [[src[p] for p in spec.perm], contiguous_strides(spec.out.shape)])
    last = len(dims) - 1
    if ss[last] <= 1 or 1 not in ss:  # rows already contiguous on both sides (or nothing to tile)
        with kb.loops(dims) as idx:
            kb.store(kb.load(dt, x, kb.linear(idx, ss)), dt, y, kb.linear(idx, ds))
        return
    q = ss.index(1)
    others = [d for d in range(len(dims)) if d not in (q, last)]
    q_full, l_full = dims[q] - dims[q] % t, dims[last] - dims[last] % t

    def region(q_range: tuple[int, int], l_range: tuple[int, int], tiled: bool) -> None:
        with kb.loops([dims[d] for d in others]) as idx:
            s0 = kb.linear(idx, [ss[d] for d in others])
            d0 = kb.linear(idx, [ds[d] for d in others])
            if not tiled:
                with kb.loop(*q_range) as qi, kb.loop(*l_range) as li:
                    v = kb.load(dt, x, kb.linear([qi, li], [1, ss[last]], s0))
                    kb.store(v, dt, y, kb.linear([qi, li], [ds[q], 1], d0))
                return
            with kb.loop(0, q_full // t) as tq, kb.loop(0, l_full // t) as tl:
                q0, l0 = b.mul(tq, i64(t)), b.mul(tl, i64(t))
                s_tile, d_tile = kb.linear([q0, l0], [1, ss[last]], s0), kb.linear([q0, l0], [ds[q], 1], d0)
                rows = [kb.load_vec(dt, x, b.add(s_tile, i64(r * ss[last])), t) for r in range(t)]
                for j, col in enumerate(kb.transpose(rows)):
                    kb.store_vec(col, dt, y, b.add(d_tile, i64(j * ds[q])))

    region((0, q_full), (0, l_full), tiled=True)
    region((0, q_full), (l_full, dims[last]), tiled=False)
    region((q_full, dims[q]), (0, dims[last]), tiled=False)


def _block_copy(kb: KernelBuilder, dt: str, n: int, c: int, hw: int, batch: int, block: int, pack: bool) -> None:
    """Copy between NCHW (n images, c channels) and the blocked (ceil(n/bn), ceil(c/B), HW, bn, B).

    Image ``i`` sits in batch lane ``i % bn`` of image block ``i // bn``, so a pixel's B channels of one
    image are contiguous and consecutive pixels are ``bn * B`` apart. Pixels go in tiles of B, each a
    B x B transpose done in registers (B a power of two); the remaining pixels (and other block sizes)
    are copied one channel lane at a time. Packing zero-fills padded channels and padded images.
    """
    b = kb.b
    cb_n = -(-c // block)
    (x,), y = kb.inputs, kb.out
    full = c // block
    pix = batch * block  # elements from one pixel to the next in the blocked layout
    tiles = hw // block if block >= 2 and block & (block - 1) == 0 else 0
    zero = ir.Constant(LL_TYPES[dt], 0.0 if is_float(dt) else 0)
    zeros = ir.Constant(ir.VectorType(LL_TYPES[dt], block), [zero.constant] * block)
    for start, stop, lanes in ((0, full, block), (full, cb_n, c - full * block)):
        if start == stop:
            continue
        with kb.loop(0, n) as ni, kb.loop(start, stop) as cb:
            group, lane0 = b.udiv(ni, i64(batch)), b.urem(ni, i64(batch))
            blocked = b.add(kb.linear([group, cb], [cb_n * hw * pix, hw * pix]), b.mul(lane0, i64(block)))
            plain = kb.linear([ni, cb], [c * hw, block * hw])
            with kb.loop(0, tiles) as t:
                p0 = b.mul(t, i64(block))
                b_tile = b.add(blocked, b.mul(p0, i64(pix)))
                if pack:
                    rows = [
                        kb.load_vec(dt, x, b.add(plain, b.add(p0, i64(lane * hw))), block) if lane < lanes else zeros
                        for lane in range(block)
                    ]
                    for j, col in enumerate(kb.transpose(rows)):
                        kb.store_vec(col, dt, y, b.add(b_tile, i64(j * pix)))
                else:
                    rows = [kb.load_vec(dt, x, b.add(b_tile, i64(j * pix)), block) for j in range(block)]
                    for lane, col in enumerate(kb.transpose(rows)[:lanes]):
                        kb.store_vec(col, dt, y, b.add(plain, b.add(p0, i64(lane * hw))))
            with kb.loop(tiles * block, hw) as p:
                for lane in range(block if pack else lanes):
                    b_off = b.add(blocked, b.add(b.mul(p, i64(pix)), i64(lane)))
                    p_off = b.add(plain, b.add(p, i64(lane * hw)))
                    if not pack:
                        kb.store(kb.load(dt, x, b_off), dt, y, p_off)
                    else:
                        kb.store(kb.load(dt, x, p_off) if lane < lanes else zero, dt, y, b_off)
    if pack:
        _zero_padded_images(kb, dt, n, cb_n * hw, batch, block)


def _zero_padded_images(kb: KernelBuilder, dt: str, n: int, pixels: int, batch: int, block: int) -> None:
    """Zero the batch lanes of the images past ``n`` in the last image block of a blocked tensor whose image
    blocks hold ``pixels`` pixels (channel blocks x H x W) of ``batch x block`` elements each."""
    if n % batch == 0:
        return
    b = kb.b
    zeros = ir.Constant(ir.VectorType(LL_TYPES[dt], block), [0.0 if is_float(dt) else 0] * block)
    with kb.loop(n, -(-n // batch) * batch) as ni, kb.loop(0, pixels) as q:
        lane0 = b.mul(b.urem(ni, i64(batch)), i64(block))
        base = kb.linear([q], [batch * block], b.add(i64((n // batch) * pixels * batch * block), lane0))
        kb.store_vec(zeros, dt, kb.out, base)


@_emit.register
def _pack(spec: PackSpec, kb: KernelBuilder) -> None:
    n, c, h, w = spec.x.shape
    _block_copy(kb, spec.x.dtype, n, c, h * w, spec.batch, spec.block, pack=True)


@_emit.register
def _unpack(spec: UnpackSpec, kb: KernelBuilder) -> None:
    _, _, h, w, batch, block = spec.x.shape
    _block_copy(kb, spec.x.dtype, spec.images, spec.channels, h * w, batch, block, pack=False)


@_emit.register
def _concat(spec: ConcatSpec, kb: KernelBuilder) -> None:
    axis, out = spec.axis, spec.out
    outer = math.prod(out.shape[:axis])
    row = math.prod(out.shape[axis:])
    offset = 0
    for t, src in zip(spec.inputs, kb.inputs, strict=True):
        chunk = math.prod(t.shape[axis:])
        with kb.loop(0, outer) as o, kb.loop(0, chunk) as j:
            v = kb.load(t.dtype, src, kb.linear([o, j], [chunk, 1]))
            kb.store(v, t.dtype, kb.out, kb.linear([o, j], [row, 1], offset))
        offset += chunk


@_emit.register
def _pad(spec: PadSpec, kb: KernelBuilder) -> None:
    b = kb.b
    shape, pads = list(spec.x.shape), list(spec.pads)
    while len(shape) > 1 and pads[-1] == (0, 0):  # fold unpadded trailing dims into longer rows
        inner = shape.pop()
        pads.pop()
        shape[-1] *= inner
        pads[-1] = (pads[-1][0] * inner, pads[-1][1] * inner)
    out_shape = [d + p0 + p1 for d, (p0, p1) in zip(shape, pads, strict=True)]
    dt, (x,), y = spec.x.dtype, kb.inputs, kb.out
    value = ir.Constant(LL_TYPES[dt], spec.value)
    width, (left, _) = out_shape[-1], pads[-1]

    def fill(row: ir.Value, start: int, stop: int) -> None:
        with kb.loop(start, stop) as j:
            kb.store(value, dt, y, b.add(row, j))

    with kb.loops(out_shape[:-1]) as idx:
        row = kb.linear(idx, contiguous_strides(tuple(out_shape))[:-1])
        inside = ir.Constant(ir.IntType(1), 1)
        for i, (p0, _), d in zip(idx, pads[:-1], shape[:-1], strict=True):
            inside = b.and_(inside, b.and_(b.icmp_signed(">=", i, i64(p0)), b.icmp_signed("<", i, i64(p0 + d))))
        with b.if_else(inside) as (then, otherwise):
            with then:
                src = kb.linear(
                    [b.sub(i, i64(p0)) for i, (p0, _) in zip(idx, pads[:-1], strict=True)],
                    contiguous_strides(tuple(shape))[:-1],
                )
                fill(row, 0, left)
                with kb.loop(0, shape[-1]) as j:
                    kb.store(kb.load(dt, x, b.add(src, j)), dt, y, b.add(row, b.add(j, i64(left))))
                fill(row, left + shape[-1], width)
            with otherwise:
                fill(row, 0, width)


@_emit.register
def _im2col(spec: Im2colSpec, kb: KernelBuilder) -> None:
    """One output plane per (image and input channel, kernel row, kernel column): the output rows and
    columns whose tap falls inside the input (ranges from compile-time tables per kernel row and column)
    copy input elements ``stride`` apart, the rest are zero."""
    if spec.packed is not None:
        _im2col_packed(spec, kb)
        return
    b, dt, (x,), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    n, c, h, w = spec.x.shape
    oh_n, ow_n = spec.out.shape[2:]
    win = spec.window
    (kh_n, kw_n), sw, dw = win.kernel, win.stride[1], win.dilation[1]
    rows = [win.valid_taps(o, h, 0) for o in range(oh_n)]
    cols = [win.valid_taps(o, w, 1) for o in range(ow_n)]

    def span(valid: list[tuple[int, ...]], k: int) -> tuple[int, int]:
        """The output indices [lo, hi) where tap ``k`` is valid (a run: the window moves monotonically)."""
        inside = [o for o, taps in enumerate(valid) if k in taps]
        return (inside[0], inside[-1] + 1) if inside else (0, 0)

    row_lo, row_hi = zip(*(span(rows, k) for k in range(kh_n)), strict=True)
    col_lo, col_hi = zip(*(span(cols, k) for k in range(kw_n)), strict=True)
    row_lo, row_hi, col_lo, col_hi = (kb.table(list(t)) for t in (row_lo, row_hi, col_lo, col_hi))
    zero = ir.Constant(LL_TYPES[dt], 0)

    def fill(start: ir.Value, stop: ir.Value) -> None:
        with kb.loop(start, stop) as i:
            kb.store(zero, dt, y, i)

    with kb.loop(0, n * c) as nc, kb.loop(0, kh_n) as ky, kb.loop(0, kw_n) as kx:
        r0, r1, c0, c1 = row_lo(ky), row_hi(ky), col_lo(kx), col_hi(kx)
        plane = kb.linear([nc, ky, kx], [kh_n * kw_n * oh_n * ow_n, kw_n * oh_n * ow_n, oh_n * ow_n])
        fill(plane, b.add(plane, b.mul(r0, i64(ow_n))))
        with kb.loop(r0, r1) as oh:
            row = b.add(plane, b.mul(oh, i64(ow_n)))
            fill(row, b.add(row, c0))
            src = _input_row(kb, win, oh, ky, b.mul(nc, i64(h * w)), w)
            src = b.add(src, b.sub(b.mul(kx, i64(dw)), i64(win.pad_before(1))))
            with kb.loop(c0, c1) as ow:
                kb.store(kb.load(dt, x, b.add(src, b.mul(ow, i64(sw)))), dt, y, b.add(row, ow))
            fill(b.add(row, c1), b.add(row, i64(ow_n)))
        fill(b.add(plane, b.mul(r1, i64(ow_n))), b.add(plane, i64(oh_n * ow_n)))


def _im2col_packed(spec: Im2colSpec, kb: KernelBuilder) -> None:
    """im2col written in the blocked layout (N/bn, C*KH*KW/B, OH, OW, bn, B): per output pixel and channel
    block, the B lanes are gathered (lane ``k`` is input channel ``k // (KH*KW)`` under tap ``k % (KH*KW)``)
    and stored as one vector. Pixels whose whole window lies inside the input (the interior rectangle) load
    every lane at a constant offset from the window's corner; the border's lanes check their tap."""
    b, dt, (x,), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    n_img, c, h, w = spec.x.shape
    _, cb_n, oh_n, ow_n, bn, block = spec.out.shape
    win = spec.window
    (kh_n, kw_n), (sh, sw), (dh, dw) = win.kernel, win.stride, win.dilation
    taps = [(ci, ky, kx) for ci in range(c) for ky in range(kh_n) for kx in range(kw_n)]
    rows = [o for o in range(oh_n) if len(win.valid_taps(o, h, 0)) == kh_n]
    cols = [o for o in range(ow_n) if len(win.valid_taps(o, w, 1)) == kw_n]
    r0, r1 = (rows[0], rows[-1] + 1) if rows else (0, 0)
    c0, c1 = (cols[0], cols[-1] + 1) if cols else (0, 0)
    vec = ir.VectorType(LL_TYPES[dt], block)
    zero = ir.Constant(LL_TYPES[dt], 0)
    pixel = bn * block

    def gather(cb: int, image: ir.Value, oh: ir.Value, ow: ir.Value, checked: bool) -> ir.Value:
        iy0 = b.sub(b.mul(oh, i64(sh)), i64(win.pad_before(0)))
        ix0 = b.sub(b.mul(ow, i64(sw)), i64(win.pad_before(1)))
        corner = b.add(image, b.add(b.mul(iy0, i64(w)), ix0))
        v = ir.Constant(vec, None)
        for lane in range(block):
            k = cb * block + lane
            if k >= len(taps):
                value = zero
            else:
                ci, ky, kx = taps[k]
                offset = b.add(corner, i64(ci * h * w + ky * dh * w + kx * dw))
                if checked:
                    iy, ix = b.add(iy0, i64(ky * dh)), b.add(ix0, i64(kx * dw))
                    inside = b.and_(
                        b.and_(b.icmp_signed(">=", iy, i64(0)), b.icmp_signed("<", iy, i64(h))),
                        b.and_(b.icmp_signed(">=", ix, i64(0)), b.icmp_signed("<", ix, i64(w))),
                    )
                    value = b.select(inside, kb.load(dt, x, b.select(inside, offset, i64(0))), zero)
                else:
                    value = kb.load(dt, x, offset)
            v = b.insert_element(v, value, ir.Constant(I32, lane))
        return v

    def pixels(cb, image, plane, rows_, cols_, checked):
        with kb.loop(*rows_) as oh, kb.loop(*cols_) as ow:
            dst = b.add(plane, b.mul(b.add(b.mul(oh, i64(ow_n)), ow), i64(pixel)))
            kb.store_vec(gather(cb, image, oh, ow, checked), dt, y, dst)

    with kb.loop(0, n_img) as ni:
        image = b.mul(ni, i64(c * h * w))
        image_block = b.mul(b.udiv(ni, i64(bn)), i64(cb_n * oh_n * ow_n * pixel))
        lane0 = b.add(image_block, b.mul(b.urem(ni, i64(bn)), i64(block)))
        for cb in range(cb_n):
            plane = b.add(lane0, i64(cb * oh_n * ow_n * pixel))
            regions = [((0, oh_n), (0, ow_n), True)]  # no interior: every pixel checks its taps
            if rows and cols:
                regions = [((0, r0), (0, ow_n), True), ((r1, oh_n), (0, ow_n), True), ((r0, r1), (0, c0), True)]
                regions += [((r0, r1), (c0, c1), False), ((r0, r1), (c1, ow_n), True)]
            for rows_, cols_, checked in regions:
                if rows_[0] < rows_[1] and cols_[0] < cols_[1]:
                    pixels(cb, image, plane, rows_, cols_, checked)
    _zero_padded_images(kb, dt, n_img, cb_n * oh_n * ow_n, bn, block)


@_emit.register
def _slice(spec: SliceSpec, kb: KernelBuilder) -> None:
    """A strided copy: output index ``o`` of axis ``i`` reads ``starts[i] + o * steps[i]``, dims that both
    sides walk linearly coalesced into one loop (a slice along the outer axes copies whole rows)."""
    dt, (x,), y = spec.x.dtype, kb.inputs, kb.out
    src = contiguous_strides(spec.x.shape)
    base = sum(a * s for a, s in zip(spec.starts, src, strict=True))
    walk = [st * s for st, s in zip(spec.steps, src, strict=True)]
    dims, (ss, ds) = coalesce(spec.out.shape, [walk, contiguous_strides(spec.out.shape)])
    with kb.loops(dims) as idx:
        kb.store(kb.load(dt, x, kb.linear(idx, ss, base)), dt, y, kb.linear(idx, ds))


@_emit.register
def _resize(spec: ResizeSpec, kb: KernelBuilder) -> None:
    """Per output element: the input offsets of its taps come from compile-time tables (one per resized
    axis and tap, offsets premultiplied by the axis stride); linear and cubic modes blend the taps of the
    interpolated axes (the product of one tap per axis) with float32 weights from tables too. Where
    tf_crop_and_resize reads outside the input, per-axis tables flag the extrapolation value. The leading
    axes the resize leaves alone form one loop."""
    b, dt, (x,), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    xs, ys = spec.x.shape, spec.out.shape
    src = contiguous_strides(xs)
    taps = [resize_taps(n, m, s, f) for n, m, s, f in zip(xs, ys, spec.scales, spec.filters, strict=True)]
    moved = [
        ax
        for ax, (idx, _, inside) in enumerate(taps)
        if xs[ax] != ys[ax] or idx.shape[1] > 1 or np.any(idx[:, 0] != np.arange(ys[ax])) or not inside.all()
    ]
    first = moved[0] if moved else len(xs)
    offsets = {ax: [kb.table([int(i) * src[ax] for i in taps[ax][0][:, k]]) for k in range(taps[ax][0].shape[1])]
               for ax in moved}  # fmt: skip
    weights = {ax: [kb.table([float(w) for w in taps[ax][1][:, k]], F32) for k in range(taps[ax][1].shape[1])]
               for ax in moved if taps[ax][0].shape[1] > 1}  # fmt: skip
    flagged = {ax: kb.table([int(not v) for v in taps[ax][2]]) for ax in moved if not taps[ax][2].all()}
    in_block, out_block = math.prod(xs[first:]), math.prod(ys[first:])
    with kb.loop(0, math.prod(ys[:first])) as o, kb.loops(list(ys[first:])) as idx:
        coords = dict(zip(range(first, len(ys)), idx, strict=True))
        base = b.mul(o, i64(in_block))
        for ax in coords:
            if ax not in moved:
                base = b.add(base, b.mul(coords[ax], i64(src[ax])))
            elif ax not in weights:
                base = b.add(base, offsets[ax][0](coords[ax]))
        value = None
        for pick in itertools.product(*(range(len(weights[ax])) for ax in weights)):
            off, weight = base, None
            for ax, k in zip(weights, pick, strict=True):
                off = b.add(off, offsets[ax][k](coords[ax]))
                w = weights[ax][k](coords[ax])
                weight = w if weight is None else b.fmul(weight, w)
            v = kb.load(dt, x, off)
            if weight is not None:
                v = b.fmul(v, weight)
            value = v if value is None else b.fadd(value, v)
        if flagged:
            out_of_input = i64(0)
            for ax, table in flagged.items():
                out_of_input = b.or_(out_of_input, table(coords[ax]))
            fill = ir.Constant(LL_TYPES[dt], spec.extrapolation_value)
            value = b.select(b.icmp_signed("!=", out_of_input, i64(0)), fill, value)
        kb.store(value, dt, y, kb.linear(idx, contiguous_strides(ys)[first:], b.mul(o, i64(out_block))))


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


# ---------------------------------------------------------------------------------------------------------
# Dense and convolution


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
                row = _input_row(kb, win, oh, kh, b.mul(kb.linear([n, g, ic], [c, icg, 1]), i64(h * w)), w)
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


@_emit.register
def _interleave(spec: InterleaveSpec, kb: KernelBuilder) -> None:
    """One strided copy per phase: phase (py, px) row ``j`` lands on output row ``j*sh + py``, its columns
    every ``sw``-th from ``px``."""
    b = kb.b
    n, c, j_n, i_n = spec.inputs[0].shape
    (sh, sw), (oh, ow) = spec.stride, spec.out.shape[2:]
    dt = spec.out.dtype
    for p, src in enumerate(kb.inputs):
        py, px = divmod(p, sw)
        with kb.loop(0, n * c) as nc, kb.loop(0, j_n) as j:
            row_in = kb.linear([nc, j], [j_n * i_n, i_n])
            row_out = kb.linear([nc, j], [oh * ow, sh * ow], py * ow + px)
            with kb.loop(0, i_n) as i:
                kb.store(kb.load(dt, src, b.add(row_in, i)), dt, kb.out, b.add(row_out, b.mul(i, i64(sw))))
