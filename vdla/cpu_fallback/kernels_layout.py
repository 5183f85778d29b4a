"""LLVM IR emitters of the layout and indexing kernels: the layout conversions (transpose, the accelerator's
blocked layout both ways, concatenation, constant padding, strided slices, the phase interleave of a
transposed convolution, im2col), the per-axis gathers (``take``), gathers and scatters by flat offsets, byte
tables, one-hot, resizing, and grid sampling (whose indices are computed from its runtime grid, each clamped
into the input).

Registered with :func:`vdla.cpu_fallback.kernels.register_emitter` on :func:`~vdla.cpu_fallback.kernels.emit`'s
dispatcher (importing this module registers them; :mod:`vdla.cpu_fallback.jit` does). Transposes and the
blocked layout's pixel tiles are transposed in registers, a schedule the vectorizer does not find by itself.
Every index these kernels read was checked when the spec was made: the per-axis and resize tables are
compile-time constants inside the input, and constant flat offsets are parameters whose every entry the
type rule checked (:func:`vdla.graph.ops.offsets_type`); only a gather's offsets computed at run time are
clamped into the input.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from llvmlite import ir

from vdla.cpu_fallback.codegen import KernelBuilder
from vdla.cpu_fallback.kernels import coalesce, contiguous_strides, input_row, register_emitter
from vdla.cpu_fallback.lltypes import F32, I32, I64, LL_TYPES, i64
from vdla.cpu_fallback.specs import (
    ConcatSpec,
    GatherSpec,
    GridSampleSpec,
    Im2colSpec,
    InterleaveSpec,
    OneHotSpec,
    PackSpec,
    PadSpec,
    ResizeSpec,
    ScatterSpec,
    SliceSpec,
    TableSpec,
    TakeSpec,
    TransposeSpec,
    UnpackSpec,
)
from vdla.graph.oracle import grid_borders, resize_taps
from vdla.graph.types import is_float

# ---------------------------------------------------------------------------------------------------------
# Layout conversions


TRANSPOSE_TILE = 16


@register_emitter
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


@register_emitter
def _pack(spec: PackSpec, kb: KernelBuilder) -> None:
    n, c, h, w = spec.x.shape
    _block_copy(kb, spec.x.dtype, n, c, h * w, spec.batch, spec.block, pack=True)


@register_emitter
def _unpack(spec: UnpackSpec, kb: KernelBuilder) -> None:
    _, _, h, w, batch, block = spec.x.shape
    _block_copy(kb, spec.x.dtype, spec.images, spec.channels, h * w, batch, block, pack=False)


@register_emitter
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


@register_emitter
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


@register_emitter
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
            src = input_row(kb, win, oh, ky, b.mul(nc, i64(h * w)), w)
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


@register_emitter
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


@register_emitter
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


# ---------------------------------------------------------------------------------------------------------
# Indexing: per-axis gathers, gathers and scatters by flat offsets, one-hot

# an offset no sum of in-bounds offsets can cancel: marks a -1 (fill) entry of a per-axis table
FILL_OFFSET = -(1 << 40)


@register_emitter
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


@register_emitter
def _gather(spec: GatherSpec, kb: KernelBuilder) -> None:
    """One loop over the output: load the offset, clamp it into the input (computed offsets may stray; a
    constant's were checked when compiling), load the element it names."""
    b, dt, (x, index), y = kb.b, spec.x.dtype, kb.inputs, kb.out
    with kb.loop(0, spec.out.size) as k:
        o = b.sext(kb.load("int32", index, k), I64)
        o = kb.smin(kb.smax(o, i64(0)), i64(spec.x.size - 1))
        kb.store(kb.load(dt, x, o), dt, y, k)


@register_emitter
def _table(spec: TableSpec, kb: KernelBuilder) -> None:
    """One loop over the output: the input's byte, zero-extended, indexes the table."""
    b, (x, entries), y, dt = kb.b, kb.inputs, kb.out, spec.out.dtype
    with kb.loop(0, spec.out.size) as k:
        kb.store(kb.load(dt, entries, b.zext(kb.load("int8", x, k), I64)), dt, y, k)


@register_emitter
def _scatter(spec: ScatterSpec, kb: KernelBuilder) -> None:
    """Copy the input, then apply the updates one after the other in order (a later update of the same
    element sees the earlier one), each offset clamped into the input (computed offsets may stray)."""
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
        o = kb.smin(kb.smax(o, i64(0)), i64(spec.x.size - 1))
        u = kb.load(dt, updates, k)
        if spec.reduction != "none":
            u = combine[spec.reduction](kb.load(dt, y, o), u)
        kb.store(u, dt, y, o)


@register_emitter
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
# Resizing and grid sampling


@register_emitter
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


@register_emitter
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
