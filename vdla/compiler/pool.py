"""Pooling on the ALU: max pooling (MAX over the window taps) and average pooling (ADD over the taps, then
the requantizing multiplier and shift), on packed int8 activations in DRAM.

A tile is ``toc`` channel blocks x ``toh`` output rows x every output column. Per tile: on the load stage,
LOAD INP brings the input window (the borders zero filled by the LOAD pad fields) into the thread's INP share,
overlapping the other thread's compute; on the compute stage, one ``init`` GEMM by the identity weight block
(:mod:`vdla.compiler.identity`, loaded once, at WGT 0) copies it into the accumulators exactly (acc = x, one
cycle per element, half the cycles of a LOAD ACC_8BIT and off the bus); for a max pool whose input may be
negative, one ADD-with-reset per padded side writes the int8 minimum over the zeros; then the window is
reduced separably, along the schedule's ``first`` axis, then the other:

* ``first`` "rows": ``H[r, j] = op over t < kw of in[r, j*sw + t]`` for every input row held, then
  ``out[i, j] = op over t < kh of H[i*sh + t, j]``;
* ``first`` "cols": ``V[i, c] = op over t < kh of in[i*sh + t, c]`` for every output row and input column,
  then ``out[i, j] = op over t < kw of V[i, j*sw + t]`` (fewer two-operand passes for a 3x3/2 max pool: the
  rows between output rows are only read);
* the first pass runs in place at each result's first tap when the kernel spans at most twice the stride
  along that axis (the tap ``t = stride``, the only one landing on another result's first tap, runs first and
  reads it before that result's own pass writes it, iterations running in program order), else into a
  separate region after a copy (ADD with reset); the second pass writes a dense tile that the STOREs read,
  its first tap a copy;
* a max over 4 or more taps at stride 1 (YOLO's SPPF) runs by :func:`doubling` along that axis instead, in
  place (the first pass over the window itself): MAX passes with the element 1, 2, 4, ... ahead, then the final
  offset (into the output tile for the second pass, as a copy and one MAX);
* average only: MUL by the multiplier row with the shift (the exact 64-bit product rounded once,
  :func:`vdla.isa.arith.mul_shift`), then CLIP.

The OUT mirror truncates (the prologue's EPI: no requantization, no bias): every result is already an int8
value; an average clipped to int8 (or [0, 127]) lets the EPI's requantization with shift 0 clamp it instead of a
CLIP pass (:func:`requantize_passes`). Two-operand passes cost ``alu_ii`` cycles per element, copies and immediates one.
Tiles go round-robin to virtual threads (:mod:`vdla.compiler.vthreads`): the loads of one tile and the
STOREs of another overlap the compute; the schedule (tile, threads, pass order) is the fastest candidate on
the timing-only simulator.

Invariant: the program computes exactly :func:`pool_oracle` of the spec (bit for bit, on every
backend); padded taps read the int8 minimum (max) unless ``pad_min`` is off, which is exact only for
inputs known to be >= 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from vdla.compiler.blocks import Alu, Block, Epi, Gemm, Load, Op, Store
from vdla.compiler.cache import ScheduleCache
from vdla.compiler.identity import EYE, identity_bytes, identity_fits, identity_gemm, identity_weights, load_identity
from vdla.compiler.microcode import Limits
from vdla.compiler.run import run_band
from vdla.compiler.search import cached_fastest, emit_program
from vdla.compiler.spec import CompileError, EpilogueSpec, OutputView, WindowSpec, check_requantization, mirror_relu
from vdla.compiler.tiling import BandLowering, BandTile, band_sizes
from vdla.compiler.transfer import plan_transfers
from vdla.compiler.vthreads import Stream, lower_vthreads, prologue_block
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.graph import oracle
from vdla.graph.layout import pack_channels
from vdla.isa import AluOp, Insn, MemType, clip_imm
from vdla.isa.arith import INT8_MAX, INT8_MIN, requantize
from vdla.runtime.device import Device

POOL_KINDS = ("max", "avg")
MAX_VTHREADS = 2


@dataclass(frozen=True)
class PoolSpec(WindowSpec):
    """A 2-D pooling of an int8 NCHW tensor ``shape`` over ``window``.

    ``kind`` "max": the window maximum (padded taps read ``INT8_MIN``, or 0 without ``pad_min``). "avg": the
    window sum (no padding: every window holds ``kh*kw`` taps) times ``multiplier`` rounded right by
    ``shift`` (``mul_shift``), clamped to ``clip``. Frozen: a spec is the cache key of its program.
    """

    kind: str = "max"
    pad_min: bool = True
    multiplier: int = 1
    shift: int = 0
    clip: tuple[int, int] = (INT8_MIN, INT8_MAX)

    @classmethod
    def make(cls, shape, kernel, stride=None, padding=0, kind: str = "max", **kw) -> PoolSpec:
        """A checked spec; raises CompileError naming the limit."""
        if kind not in POOL_KINDS:
            raise CompileError(f"pool kind must be one of {POOL_KINDS}, got {kind!r}")
        win = cls.window_of("pool", f"{kind}_pool2d", shape, kernel, stride or kernel, padding)
        spec = cls(tuple(int(d) for d in shape), win, kind, **kw)
        spec.check()
        return spec

    @classmethod
    def global_avg(cls, shape, multiplier: int, shift: int, clip=(INT8_MIN, INT8_MAX)) -> PoolSpec:
        """The sum over all H x W pixels, requantized: a global average pool."""
        return cls.make(shape, tuple(shape[2:]), kind="avg", multiplier=multiplier, shift=shift, clip=clip)

    def check(self) -> None:
        self.check_loads("pool")
        if self.kind == "avg" and any(self.window.pads):
            raise CompileError(f"an average pool with padding {self.window.pads} divides by varying counts")
        check_requantization(self.multiplier, self.shift, self.clip)

    @property
    def requantizes(self) -> bool:
        return self.kind != "max" and (self.multiplier, self.shift) != (1, 0)

    def describe(self) -> str:
        (kh, kw), sh = self.window.kernel, self.window.stride[0]
        return f"{self.kind} {kh}x{kw}/{sh} pad{list(self.window.pads)} {list(self.shape)}"

    def key(self) -> str:
        """A stable text key of the pooling (schedule cache)."""
        (lo, hi) = self.clip
        return f"pool:{self.describe()}:{int(self.pad_min)}:m{self.multiplier}s{self.shift}c{lo}_{hi}"


def pool_oracle(x: np.ndarray, spec: PoolSpec) -> np.ndarray:
    """The numpy definition of what the program computes (int8 in, int8 out)."""
    if spec.kind == "max":
        fill = INT8_MIN if spec.pad_min else 0
        return oracle.windows(x, spec.window, fill).max(axis=(4, 5)).astype(np.int8)
    total = oracle.windows(x.astype(np.int64), spec.window, 0).sum(axis=(4, 5))
    return requantize(total, spec.multiplier, spec.shift, *spec.clip)


FIRST = ("rows", "cols")


def requantize_passes(kernel, nest, at: int, mult_row: int | None, shift: int, clip: tuple[int, int]) -> list[Alu]:
    """The requantization of int32 sums in ACC (an average's, a channel scale's products), the ALU layers' and the
    depthwise layer's fused average's one tail: a MUL of the elements of ``nest`` (axes of (extent, (dst stride,
    0)), from row ``at``) by the multiplier row ``mult_row`` (None: no multiplier) rounded by ``shift`` (the
    exact product rounded once, :func:`vdla.isa.arith.mul_shift`), then a CLIP to ``clip`` unless the OUT
    mirror's requantization clamps them (:func:`~vdla.compiler.spec.mirror_relu`: int8's or ReLU's bounds, the
    caller's EPI ``req`` with shift 0). ``kernel``: the lowering's ALU micro-kernel of a nest
    (:meth:`~vdla.compiler.tiling.BandLowering.kernel`)."""
    ops = []
    if mult_row is not None:
        ops.append(Alu(AluOp.MUL, kernel(nest, (at, mult_row), pin_outer=True), shift=shift))
    if mirror_relu(clip) is None:
        ops.append(Alu(AluOp.CLIP, kernel(nest, (at, 0)), imm=clip_imm(*clip)))
    return ops


def doubling(taps: int) -> tuple[list[int], int]:
    """A max over ``taps`` consecutive elements by doubling: ``(offsets, final)``. A MAX with the element ``d``
    ahead for each offset ``d`` (1, 2, 4, ...) leaves each element the max over twice as many, while twice the
    span stays under ``taps``; the final MAX with the element ``final = taps - span`` ahead completes it (the two
    spans overlap: max is idempotent). 4 taps in 2 passes, 5 in 3, 13 in 4, against ``taps - 1``."""
    offsets, span = [], 1
    while 2 * span < taps:
        offsets.append(span)
        span *= 2
    return offsets, taps - span


@dataclass(frozen=True)
class PoolSchedule:
    """Tile: ``toc`` channel blocks x ``toh`` output rows (all columns); ``vthreads`` threads; ``first`` the
    window axis reduced first: "rows" (each input row over the ``kw`` column taps, then the ``kh`` row results)
    or "cols" (each column over the ``kh`` row taps, then the ``kw`` column results)."""

    toc: int
    toh: int
    vthreads: int
    first: str = "rows"

    def __post_init__(self) -> None:
        if self.first not in FIRST:
            raise CompileError(f"pool schedule: first must be one of {FIRST}, got {self.first!r}")

    def describe(self) -> str:
        return f"oc{self.toc} oh{self.toh} vt{self.vthreads} {self.first}"


class AluBandLowering(BandLowering):
    """What the ALU's layers share (pooling; the channel scale, :mod:`vdla.compiler.channel_scale`): on one
    config, tiles of ``toc`` channel blocks x ``toh`` output rows (every column) dealt round-robin to up to
    :data:`MAX_VTHREADS` threads; each tile's input window LOADed into its thread's INP share and copied into its
    accumulators by an ``init`` GEMM with the identity weights (acc = x exactly, one cycle per element), ALU
    passes there, and the STOREs of its results; the multiplier row of a requantization (:attr:`mult_row`) at the
    top of ACC. A subclass gives the ACC elements of a tile's channel block (:meth:`per_block`) and its passes
    (:meth:`block`).

    Each thread owns ``1/vthreads`` of the INP buffer (its tiles' input windows) and of the accumulators below
    the multiplier row; the identity weight block sits at WGT 0, shared by every thread and never overwritten.
    """

    firsts: tuple[str, ...] = FIRST  # the first axes a schedule may reduce (PoolSchedule.first)

    def __init__(self, spec: WindowSpec, cfg: HwConfig, view: OutputView | None = None):
        """``view``: the layer's channel blocks are blocks of a larger tensor (one part of a channel
        concatenation, :attr:`OutputView.blocks`); it takes no other view."""
        if not identity_fits(cfg):
            raise CompileError(
                f"the ALU's layers copy packed activations into the accumulators: config {cfg.name!r} has "
                f"block_in={cfg.block_in} != block_out={cfg.block_out}"
            )
        self.spec, self.cfg, self.view = spec, cfg, view
        n, c, self.h, self.w = spec.shape
        self.oh, self.ow = spec.out_hw
        self.ng, self.cb = -(-n // cfg.batch), -(-c // cfg.block_out)
        (self.kh, self.kw), (self.sh, self.sw) = spec.window.kernel, spec.window.stride
        self.cols = (self.ow - 1) * self.sw + self.kw
        self.limits = Limits.of(cfg)
        self.rows_base = cfg.acc_depth - int(self.mult_row)  # the multiplier row sits at the top
        if view is not None and view != OutputView((self.oh, self.ow), blocks=view.blocks):
            raise CompileError(f"an ALU layer stores into a view of whole channel blocks only, not {view}")
        if view is not None:
            view.check((self.oh, self.ow), EpilogueSpec(), self.cb)
        self.out_block0, self.out_blocks = (view.blocks[0], view.out_blocks(self.cb)) if view else (0, self.cb)

    @property
    def mult_row(self) -> bool:
        """Whether the layer multiplies by a multiplier row (``spec.multiplier``, at ACC's top)."""
        raise NotImplementedError

    @property
    def epi_clamps(self) -> bool:
        """Whether the OUT mirror's requantization (EPI ``req`` with shift 0) does the final clamp: results
        clipped to int8, or to [0, 127]. The last write of each output then leaves it clamped in OUT for the
        STOREs, and no CLIP pass is needed."""
        return mirror_relu(self.spec.clip) is not None

    def in_rows(self, noh: int) -> int:
        return (noh - 1) * self.sh + self.kh

    def per_block(self, noh: int, first: str = "rows") -> tuple[int, int, int]:
        """ACC elements of one channel block of a tile of ``noh`` output rows: (input window, intermediate
        results, output rows)."""
        raise NotImplementedError

    def fits(self, toc: int, toh: int, vthreads: int, first: str) -> bool:
        """Whether ``toc`` channel blocks of ``toh`` output rows fit a thread's ACC and INP shares."""
        acc, inp = self.share(vthreads)
        per = self.per_block(toh, first)
        return toc * sum(per) <= acc and toc * per[0] <= inp

    def share(self, vthreads: int) -> tuple[int, int]:
        """(ACC, INP) elements of one thread's share."""
        return self.rows_base // vthreads, self.cfg.inp_depth // vthreads

    def check_minimal(self) -> None:
        """Raise CompileError, naming the limit, when one output row of one channel block does not fit."""
        if any(self.fits(1, 1, 1, f) for f in self.firsts):
            return
        acc, inp = self.share(1)
        room = min(acc // (self.in_rows(1) + 2), inp // self.in_rows(1))
        raise CompileError(
            f"one output row of a {self.spec.describe()} layer needs {sum(self.per_block(1))} ACC and "
            f"{self.per_block(1)[0]} INP elements ({self.in_rows(1)} input rows of {self.cols}), the buffers hold "
            f"{acc} and {inp}: inputs up to {room} pixels wide fit"
        )

    def candidates(self) -> list[PoolSchedule]:
        """Per thread count and first axis, the most output rows that fit; with whole images, the most
        channel blocks (and half as many)."""
        self.check_minimal()
        return [
            PoolSchedule(toc, toh, v, first)
            for v in range(1, MAX_VTHREADS + 1)
            for first in self.firsts
            for toc, toh in band_sizes(lambda n, t, v=v, f=first: self.fits(n, t, v, f), self.cb, self.oh)
        ]

    def tensor_bytes(self) -> dict[str, int]:
        c = self.cfg
        out = {
            **self.io_bytes(),
            EYE: identity_bytes(c),
            "out": self.ng * self.out_blocks * self.oh * self.ow * c.out_elem_bytes,  # its view's tensor
        }
        if self.mult_row:
            out["mult"] = c.acc_elem_bytes
        return out

    def constants(self) -> dict[str, np.ndarray]:
        """The identity weight block (the window copy) and the multiplier row, if any."""
        c = self.cfg
        out = {EYE: identity_weights(c)}
        if self.mult_row:
            out["mult"] = pack_channels(np.full(c.block_out, self.spec.multiplier), c.batch, c.block_out)
        return out

    # ---- one tile ---------------------------------------------------------------------------------
    def block(self, thread: int, t: BandTile, s: PoolSchedule, eye: bool = False) -> Block:
        """The loads, passes and stores of one tile (:meth:`window_copy`, then the layer's passes)."""
        raise NotImplementedError

    def window_copy(self, thread: int, t: BandTile, s: PoolSchedule, eye: bool) -> tuple[int, list[Load], Gemm, tuple]:
        """(its thread's first accumulator, the loads, the copy GEMM, the window's padded border) of tile ``t``:
        its input window LOADed into the thread's INP share (load stage) and copied into its accumulators by a
        GEMM with the identity weights (``init``: acc = x exactly, one cycle per element). ``eye``: the stream's
        first block, which also loads the identity block (the load stage runs in order, so every later block
        finds it resident)."""
        acc0, inp0 = (thread * n for n in self.share(s.vthreads))
        win = self.per_block(s.toh, s.first)[0]
        loads, pad = self.window_loads(t, inp0, win)
        if eye:
            loads = [load_identity(0), *loads]
        copy = ((t.noc, (win, win)), (self.in_rows(t.noh) * self.cols, (1, 1)))
        return acc0, loads, identity_gemm(copy, acc0, inp0, 0, self.limits, init=True), pad

    def stores(self, t: BandTile, obase: int, ob: int) -> list[Store]:
        offset = ((t.ng * self.out_blocks + self.out_block0 + t.cb) * self.oh + t.oy) * self.ow
        axes = [(t.noc, self.oh * self.ow), (t.noh, self.ow), (self.ow, 1)]
        if ob != t.noh * self.ow:  # a short last row tile: the channel blocks' rows are ob apart
            return [
                Store(obase + j * ob + tr.sram, "out", tr.offset, tr.y, tr.x, tr.stride)
                for j in range(t.noc)
                for tr in plan_transfers(0, offset + j * self.oh * self.ow, axes[1:])
            ]
        return [
            Store(obase + tr.sram, "out", tr.offset, tr.y, tr.x, tr.stride) for tr in plan_transfers(0, offset, axes)
        ]

    # ---- the stream -------------------------------------------------------------------------------
    def stream(self, s: PoolSchedule) -> Stream:
        if not self.fits(s.toc, s.toh, s.vthreads, s.first):
            raise CompileError(
                f"schedule {s.describe()} needs {s.toc * sum(self.per_block(s.toh, s.first))} ACC and "
                f"{s.toc * self.per_block(s.toh, s.first)[0]} INP elements per thread, the shares hold "
                f"{self.share(s.vthreads)}"
            )
        tiles = self.tiles(s)
        threads = [
            [b for i, tile in enumerate(tiles[v :: s.vthreads]) for b in self.tile_blocks(v, tile, s, v == i == 0)]
            for v in range(s.vthreads)
        ]
        return lower_vthreads(threads, self.prologue(threads))

    def tile_blocks(self, thread: int, t: BandTile, s: PoolSchedule, eye: bool) -> list[Block]:
        """The blocks of one tile on ``thread`` (``eye``: the stream's first, which loads the identity block)."""
        return [self.block(thread, t, s, eye)]

    def prologue(self, threads: list[list[Block]]) -> Block:
        """The epilogue state (truncation, no bias: an ``init`` GEMM starts from zero), the multiplier row and
        every distinct micro-kernel made resident (:func:`~vdla.compiler.vthreads.prologue_block`)."""
        ops: list[Op] = [Epi(self.epi_clamps, self.epi_clamps and self.spec.clip[0] == 0, 0, None)]
        if self.mult_row:
            ops.append(Load(MemType.ACC, self.rows_base, "mult", 0, 1, 1, 1))
        return prologue_block(ops, threads, self.cfg.uop_depth)


class PoolLowering(AluBandLowering):
    """A pooling spec on one config (:class:`AluBandLowering`): each tile's window reduced in ACC by the
    separable passes of the module docstring, an average's sums requantized."""

    spec: PoolSpec

    @property
    def mult_row(self) -> bool:
        return self.spec.requantizes

    @property
    def epi_clamps(self) -> bool:
        """Whether the OUT mirror clamps (:meth:`AluBandLowering.epi_clamps`): an average's results only (a max
        pool's are its inputs' values)."""
        return self.spec.kind != "max" and super().epi_clamps

    def inplace(self, first: str) -> bool:
        """Whether the first pass reduces in place at each result's first tap: its taps reach at most the
        first tap of the result after next (``k <= 2 * stride`` along the axis reduced)."""
        return self.kw <= 2 * self.sw if first == "rows" else self.kh <= 2 * self.sh

    def doubled(self, axis: str) -> bool:
        """Whether a max pool reduces along ``axis`` ("rows": each row over the column taps, "cols": each column
        over the row taps) by :func:`doubling` in place: stride 1 and at least 4 taps."""
        k, stride = (self.kw, self.sw) if axis == "rows" else (self.kh, self.sh)
        return self.spec.kind == "max" and stride == 1 and k >= 4

    def per_block(self, noh: int, first: str = "rows") -> tuple[int, int, int]:
        """ACC elements of one channel block of a tile: (input window, first-pass results, output rows)."""
        rows = self.in_rows(noh)
        alone = self.inplace(first) or self.doubled(first)  # the first pass runs over the window itself
        mid = 0 if alone else rows * self.ow if first == "rows" else noh * self.cols
        return rows * self.cols, mid, noh * self.ow

    def block(self, thread: int, t: BandTile, s: PoolSchedule, eye: bool = False) -> Block:
        """The loads, passes and stores of one tile: its window copied into its accumulators
        (:meth:`window_copy`), reduced there by ALU passes (an average's sums requantized) and stored."""
        acc0, loads, copy, pad = self.window_copy(thread, t, s, eye)
        win, mb, ob = self.per_block(s.toh, s.first)
        mbase, obase = acc0 + t.noc * win, acc0 + t.noc * (win + mb)
        compute: list[Op] = [copy]
        if self.spec.kind == "max" and self.spec.pad_min:  # the padded border reads INT8_MIN, not zero
            compute += self.border_fill(t, acc0, win, pad, INT8_MIN)
        compute += self.reduce(t, s, acc0, mbase, obase, self.in_rows(t.noh))
        if self.spec.kind != "max":
            compute += self.requantize(t, obase, ob)
        return Block(thread, tuple(loads), tuple(compute), tuple(self.stores(t, obase, ob)))

    def reduce(self, t: BandTile, s: PoolSchedule, base: int, mbase: int, obase: int, win_rows: int) -> list[Op]:
        """The separable reduction: the first pass over ``s.first`` (in place at each result's first tap when
        :meth:`inplace`, the tap landing on the next result's first tap first, read before that result's own
        pass writes it as iterations run in program order; else into ``mbase`` after a copy), then the other
        axis into the dense output tile at ``obase`` (the first tap a copy)."""
        win, mb, ob = self.per_block(s.toh, s.first)
        op = AluOp.MAX if self.spec.kind == "max" else AluOp.ADD
        if s.first == "rows":  # results (row r < win_rows, output column j), tap k at column j*sw + k
            ext, strides, (taps, stride, tap_step) = (win_rows, self.ow), (self.cols, self.sw), (self.kw, self.sw, 1)
        else:  # results (output row i, column c), tap k at row i*sh + k
            ext, strides = (t.noh, self.cols), (self.sh * self.cols, 1)
            taps, stride, tap_step = self.kh, self.sh, self.cols
        ops: list[Op] = []
        if self.doubled(s.first):  # over the window itself: each row's (column's) taps doubled in place
            m_at, m_strides, order = base, (win, *strides), []
            n, other, axis = (self.ow, win_rows, 2) if s.first == "rows" else (t.noh, self.cols, 1)
            ops += self.doubling_passes(t.noc, n, other, m_strides, base, axis, taps, tap_step, final=True)
        elif self.inplace(s.first):
            m_at, m_strides = base, (win, *strides)
            order = sorted(range(1, taps), key=lambda k: k != stride)
        else:
            m_at, m_strides = mbase, (mb, ext[1], 1)
            order = list(range(taps))
        for k in order:
            nest = tuple(zip((t.noc, *ext), zip(m_strides, (win, *strides))))
            first = not self.inplace(s.first) and k == 0
            ops.append(Alu(AluOp.ADD if first else op, self.kernel(nest, (m_at, base + k * tap_step)), reset=first))
        # the other axis: out[i, j] over the first pass's results
        if s.first == "rows":  # H[i*sh + k, j]
            taps, src = self.kh, (m_strides[0], self.sh * m_strides[1], m_strides[2])
            step, second, n, other, axis = m_strides[1], "cols", t.noh, self.ow, 1
        else:  # V[i, j*sw + k]
            taps, src = self.kw, (m_strides[0], m_strides[1], self.sw * m_strides[2])
            step, second, n, other, axis = m_strides[2], "rows", self.ow, t.noh, 2
        offsets: Sequence[int] = range(taps)
        if self.doubled(second):  # the results' taps doubled in place; the output a copy and the final MAX
            ops += self.doubling_passes(t.noc, n, other, m_strides, m_at, axis, taps, step, final=False)
            offsets = (0, doubling(taps)[1])
        for i, k in enumerate(offsets):
            nest = tuple(zip((t.noc, t.noh, self.ow), zip((ob, self.ow, 1), src)))
            ops.append(Alu(AluOp.ADD if i == 0 else op, self.kernel(nest, (obase, m_at + k * step)), reset=i == 0))
        return ops

    def doubling_passes(
        self, noc: int, n: int, other: int, strides: tuple[int, int, int], at: int, axis: int, taps: int, step: int,
        final: bool,
    ) -> list[Op]:  # fmt: skip
        """The in-place MAX passes of :func:`doubling` over the elements at ``at`` (``strides``: per channel block,
        row, column; ``axis`` 1 reduces along rows, 2 along columns, taps ``step`` apart; ``other`` elements along
        the other axis): afterwards each of the first ``n`` along ``axis`` holds the max over its ``taps`` (with
        ``final``; else over the span the final MAX then completes, for the first ``n`` plus that offset). Each
        pass covers what the next reads; iterations run in program order, so an element is read before the pass
        writes it."""
        offsets, last = doubling(taps)
        need, extents = n + last, []
        for d in reversed(offsets):
            extents.append(need)
            need += d
        passes = [*zip(offsets, reversed(extents)), *([(last, n)] if final else [])]
        ops: list[Op] = []
        for d, size in passes:
            sizes = (noc, size, other) if axis == 1 else (noc, other, size)
            nest = tuple(zip(sizes, zip(strides, strides)))
            ops.append(Alu(AluOp.MAX, self.kernel(nest, (at, at + d * step))))
        return ops

    def requantize(self, t: BandTile, obase: int, ob: int) -> list[Alu]:
        """An average's :func:`requantize_passes` over the tile's outputs (``ob`` elements a channel block from
        ``obase``)."""
        nest = ((t.noc, (ob, 0)), (t.noh * self.ow, (1, 0)))
        mult = self.rows_base if self.spec.requantizes else None
        return requantize_passes(self.kernel, nest, obase, mult, self.spec.shift, self.spec.clip)


class GlobalSumLowering(PoolLowering):
    """A global average (the window is the whole input, no padding) summed by the GEMM core: for each tile of
    ``toc`` channel blocks, bands of ``toh`` input rows (every column) are LOADed in turn and one GEMM per band
    adds every pixel of each channel block into that block's one accumulator (``dst`` repeated, ``src`` over
    the pixels, the identity weights: one cycle per pixel, exact int32 sums), the first band's with ``init``
    (from zero). The last band's block then requantizes (MUL by the multiplier row, the EPI's clamp or a CLIP)
    and stores the tile's ``toc`` results. A tile's bands are consecutive blocks of one thread, so its
    accumulators persist across them; no window need fit the buffers, only a band of one row.

    In a :class:`PoolSchedule` here ``toh`` counts input rows per band (``oh`` is 1)."""

    def per_block(self, noh: int, first: str = "rows") -> tuple[int, int, int]:
        """(band, 0, one accumulator) of a channel block for a band of ``noh`` input rows."""
        return noh * self.w, 0, 1

    def in_rows(self, noh: int) -> int:
        return noh

    def candidates(self) -> list[PoolSchedule]:
        """Per thread count, the most input rows a band holds, with the most channel blocks (and half as
        many) when whole images fit."""
        self.check_minimal()
        return [
            PoolSchedule(toc, toh, v)
            for v in range(1, MAX_VTHREADS + 1)
            for toc, toh in band_sizes(lambda n, t, v=v: self.fits(n, t, v, "rows"), self.cb, self.h)
        ]

    def tile_blocks(self, thread: int, t: BandTile, s: PoolSchedule, eye: bool) -> list[Block]:
        """The blocks of one channel tile (its one output row): one per band of input rows (see the class
        docstring)."""
        acc0, inp0 = (thread * n for n in self.share(s.vthreads))
        band = s.toh * self.w
        blocks = []
        for r0 in range(0, self.h, s.toh):
            rows = min(s.toh, self.h - r0)
            offset = ((t.ng * self.cb + t.cb) * self.h + r0) * self.w
            loads = [
                Load(MemType.INP, inp0 + j * band + tr.sram, "inp", tr.offset, tr.y, tr.x, tr.stride)
                for j in range(t.noc)
                for tr in plan_transfers(0, offset + j * self.h * self.w, [(rows * self.w, 1)])
            ]
            if eye and r0 == 0:
                loads = [load_identity(0), *loads]
            nest = ((t.noc, (1, band)), (rows * self.w, (0, 1)))
            compute: list[Op] = [identity_gemm(nest, acc0, inp0, 0, self.limits, init=r0 == 0)]
            last = r0 + s.toh >= self.h
            if last:
                compute += self.requantize(t, acc0, 1)
            stores = self.stores(t, acc0, 1) if last else []
            blocks.append(Block(thread, tuple(loads), tuple(compute), tuple(stores)))
        return blocks


def pool_lowering(spec: PoolSpec, cfg: HwConfig, view: OutputView | None = None) -> PoolLowering:
    """The lowering of ``spec``: a global average sums on the GEMM core (:class:`GlobalSumLowering`), every other
    pooling reduces on the ALU (:class:`PoolLowering`); ``view`` as :class:`PoolLowering` takes it."""
    whole = spec.window.kernel == tuple(spec.shape[2:]) and not any(spec.window.pads)
    return GlobalSumLowering(spec, cfg, view) if spec.kind == "avg" and whole else PoolLowering(spec, cfg, view)


class CompiledAluLayer:
    """An ALU layer (its lowering, :class:`AluBandLowering`: pooling, channel scale) compiled for one config: the
    chosen schedule (fastest on the timing-only simulator among the lowering's candidates, or ``schedule`` as
    given, kept in ``cache`` under the keys of the spec and the view), its stream and constants."""

    def __init__(self, low: AluBandLowering, schedule: PoolSchedule | None = None, cache: ScheduleCache | None = None):
        self.spec, self.cfg, self.lowering = low.spec, low.cfg, low
        key = low.spec.key() + (f":{low.view.key()}" if low.view else "")
        self.search = cached_fastest(low, low.candidates, PoolSchedule, key, cache, schedule)
        self.schedule, self.stream = self.search.schedule, self.search.stream

    @cached_property
    def constants(self) -> dict[str, np.ndarray]:
        return self.lowering.constants()

    def program(self, dev: Device | None = None) -> list[Insn]:
        return emit_program(self.lowering, self.stream, dev or Device(self.cfg))


class CompiledPool(CompiledAluLayer):
    """A pooling compiled for one config (:class:`CompiledAluLayer`)."""

    spec: PoolSpec

    def run(self, dev: Device, x: np.ndarray, max_cycles: int | None = None):
        """Run on ``dev``: ``x`` int8 NCHW; returns a :class:`~vdla.compiler.run.LayerRun`."""
        return run_band(dev, self.lowering, self.stream, self.constants, x, "pool", max_cycles=max_cycles)


def compile_pool(
    spec: PoolSpec,
    config=DEFAULT_PRESET,
    schedule: PoolSchedule | None = None,
    out_view: OutputView | None = None,
    cache: ScheduleCache | None = None,
) -> CompiledPool:
    """Compile a pooling for ``config`` (see the module docstring); ``out_view``: store the pooled channel blocks
    into their blocks of a larger tensor (a concatenation's part); ``cache`` keeps the schedule chosen (or
    ``schedule`` is taken as given)."""
    return CompiledPool(pool_lowering(spec, load_config(config), out_view), schedule, cache)
