"""The tilings the schedule search considers: a coarse grid of near-balanced tile sizes per thread count,
each with the most output rows that fit the buffers (for a layer whose tiles may span several batch groups,
:attr:`~vdla.compiler.conv_lowering.ConvLowering.token_tiles`, the most batch groups: a dense layer's tokens),
in each residual form the layer allows (the residual in the accumulators, or in INP for the identity GEMM: its
tile takes INP instead of ACC, so the most rows that fit differ); and, for the most promising, the same with the
most rows (batch groups) of at most half as many."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from vdla.compiler.blocks import Alu, Load
from vdla.compiler.conv_lowering import ConvLowering
from vdla.compiler.microcode import Limits, MicroKernel, lower_nest
from vdla.compiler.schedule import ORDERS, Schedule
from vdla.compiler.spec import WindowSpec
from vdla.compiler.transfer import plan_transfers
from vdla.config import HwConfig
from vdla.isa import AluOp, MemType

MAX_PARTS = 8  # output channels and columns are split into at most about this many tiles


def halvings(total: int, parts: int | None = None) -> list[int]:
    """Tile sizes ceil(total / 2^j), largest first, down to 1 or to ``parts`` tiles: a coarse grid of
    near-balanced tilings."""
    out = {total}
    while min(out) > 1 and (parts is None or -(-total // min(out)) < parts):
        out.add(-(-min(out) // 2))
    return sorted(out, reverse=True)


def balanced(total: int) -> list[int]:
    """Distinct tile sizes ceil(total / k) for k = 1..total, largest first: the tilings with the least raggedness."""
    return sorted({-(-total // k) for k in range(1, total + 1)}, reverse=True)


def grid_sizes(low: ConvLowering) -> tuple[list[int], list[int]]:
    """(column counts, row counts) of the coarse grid's tiles, largest first."""
    if low.pool:  # every column, whole pooled rows (vdla.compiler.fused_pool)
        return [low.spec.ow], [n * low.pool.stride[0] for n in balanced(low.out_hw[0])]
    if low.up:  # whole source pixels of an upsampled input
        (fh, fw), sp = low.up.factor, low.spec
        return [n * fw for n in halvings(sp.ow // fw, MAX_PARTS)], [n * fh for n in balanced(sp.oh // fh)]
    return halvings(low.spec.ow, MAX_PARTS), balanced(low.spec.oh)


def spans(low: ConvLowering) -> list[tuple[int, int]]:
    """(output rows, batch groups) of the coarse grid's tiles, largest first: the row counts of one group, or,
    where tiles may span several groups (:attr:`ConvLowering.token_tiles`: one pixel each), the group counts."""
    if low.token_tiles:
        return [(1, n) for n in balanced(low.ng)]
    return [(toh, 1) for toh in grid_sizes(low)[1]]


def candidate_tiles(low: ConvLowering, vthreads: int, skip_idle: bool = False) -> list[Schedule]:
    """The tilings of the coarse grid that fit ``vthreads`` threads, each with the most output rows that fit
    (``skip_idle``: not those leaving a thread without tiles, which the same tiling on fewer threads matches),
    for each residual form (:attr:`ConvLowering.residual_gemm`: also with the residual in INP)."""
    out = []
    forms = (False, True) if low.residual_gemm else (False,)
    cols = grid_sizes(low)[0]
    grid = itertools.product(halvings(low.ib), halvings(low.ob, MAX_PARTS), cols, forms)
    for tic, toc, tow, res_inp in grid:
        for toh, tn in spans(low):
            if low.problems(Schedule(toc, toh, tow, tic, vthreads, res_inp=res_inp, tn=tn)):
                continue
            spatial_tiles = -(-low.ng // tn) * -(-low.spec.oh // toh) * -(-low.spec.ow // tow)
            if skip_idle and vthreads > spatial_tiles * -(-low.ob // toc):
                break
            # walking pixels outermost only pays when inputs can stay resident: one step, several oc tiles
            orders = ORDERS if tic == low.ib and toc < low.ob and spatial_tiles > 1 and not low.pool else ("oc",)
            out += [Schedule(toc, toh, tow, tic, vthreads, order, res_inp, tn) for order in orders]
            break
    return out


def half_rows(low: ConvLowering, s: Schedule) -> Schedule | None:
    """``s`` with the most output rows (batch groups, where its tiles span several) that fit of at most half its
    own (shorter tiles fill and drain the pipeline sooner and hand the next layer its first rows earlier), or None
    where none fits (``s`` of one row)."""
    for toh, tn in spans(low):
        have, want = (s.tn, tn) if s.tn > 1 else (s.toh, toh)
        if 2 * want <= have + 1 and want < have and not low.problems(half := replace(s, toh=toh, tn=tn)):
            return half
    return None


@dataclass(frozen=True)
class BandTile:
    """A tile of the channel-block x output-row tilings (pooling, depthwise): image group ``ng``, channel blocks
    ``cb .. cb + noc``, output rows ``oy .. oy + noh``, every column."""

    ng: int
    cb: int
    noc: int
    oy: int
    noh: int


def band_tiles(groups: int, blocks: int, rows: int, toc: int, toh: int) -> list[BandTile]:
    """The tiles of ``toc`` channel blocks x ``toh`` output rows covering ``groups`` image groups of ``blocks``
    channel blocks and ``rows`` output rows, each once, the last of each axis ragged."""
    return [
        BandTile(g, cb, min(toc, blocks - cb), oy, min(toh, rows - oy))
        for g in range(groups)
        for cb in range(0, blocks, toc)
        for oy in range(0, rows, toh)
    ]


def band_sizes(fits: Callable[[int, int], bool], blocks: int, rows: int) -> list[tuple[int, int]]:
    """(toc, toh) candidates of a band tiling where ``fits(toc, toh)``: the most output rows one channel block
    fits; with whole images, also the most channel blocks (and half as many). Empty when one row does not fit."""
    toh = max((t for t in range(1, rows + 1) if fits(1, t)), default=0)
    if not toh:
        return []
    toc = max(n for n in range(1, blocks + 1) if fits(n, toh)) if toh == rows else 1
    return [(toc, toh)] + ([(-(-toc // 2), toh)] if toc > 1 else [])


class BandLowering:
    """What the lowerings of band tilings share (pooling, depthwise): their tiles, the LOADs of a tile's input
    window and the bytes of their int8 input and output tensors. A subclass sets ``cfg``, ``spec`` (a
    :class:`~vdla.compiler.spec.WindowSpec`) and the geometry: ``ng`` image groups, ``cb`` channel blocks,
    ``h`` x ``w`` input and ``oh`` x ``ow`` output pixels, ``cols`` input pixels of a window row (padding
    included), and ``in_rows(noh)``, the input rows of ``noh`` output rows."""

    cfg: HwConfig
    spec: WindowSpec
    limits: Limits
    ng: int
    cb: int
    h: int
    w: int
    oh: int
    ow: int
    cols: int

    def in_rows(self, noh: int) -> int:
        raise NotImplementedError

    def kernel(self, nest, base: tuple[int, int], pin_outer: bool = False) -> MicroKernel:
        """The ALU micro-kernel of ``nest``, axes of (extent, (dst, src) strides) from rows ``base`` = (dst, src)
        (``pin_outer``: its first axis on the outer loop, so that a row the rest of the nest holds is read once
        per outer iteration, and the inner loop pipelines a MUL, :mod:`vdla.isa.pipe`)."""
        return lower_nest(tuple((e, (d, s, 0)) for e, (d, s) in nest), (*base, 0), self.limits, pin_outer)

    def tiles(self, s) -> list[BandTile]:
        """The tiles of schedule ``s`` (its ``toc`` channel blocks x ``toh`` output rows)."""
        return band_tiles(self.ng, self.cb, self.oh, s.toc, s.toh)

    def io_bytes(self) -> dict[str, int]:
        """The packed int8 input ("inp") and output ("out") in bytes."""
        c = self.cfg
        return {
            "inp": self.ng * self.cb * self.h * self.w * c.inp_elem_bytes,
            "out": self.ng * self.cb * self.oh * self.ow * c.out_elem_bytes,
        }

    def window_border(self, t: BandTile) -> tuple[int, tuple[int, int, int, int]]:
        """(the input row of tile ``t``'s first window row, which may lie above the input; the window's border
        outside the input: its (top, bottom) rows and (left, right) columns)."""
        top, _, left, _ = self.spec.window.pads
        rows = self.in_rows(t.noh)
        r_first = t.oy * self.spec.window.stride[0] - top
        r_lo, r_hi = max(0, -r_first), min(rows, self.h - r_first)
        c_lo, c_hi = max(0, left), min(self.cols, self.w + left)
        return r_first, (r_lo, rows - r_hi, c_lo, self.cols - c_hi)

    def border_fill(self, t: BandTile, base: int, win: int, pad, value: int) -> list[Alu]:
        """ADD-with-reset writes of ``value`` over the border ``pad`` (:meth:`window_border`) of tile ``t``'s windows
        in ACC (``win`` elements a channel block from ``base``, rows of ``cols``)."""
        top, bottom, left, right = pad
        rows = self.in_rows(t.noh)
        mid = rows - top - bottom
        regions = [
            (0, ((top * self.cols, (1, 0)),)),
            ((rows - bottom) * self.cols, ((bottom * self.cols, (1, 0)),)),
            (top * self.cols, ((mid, (self.cols, 0)), (left, (1, 0)))),
            (top * self.cols + self.cols - right, ((mid, (self.cols, 0)), (right, (1, 0)))),
        ]
        return [
            Alu(AluOp.ADD, self.kernel(((t.noc, (win, 0)), *nest), (base + at, 0)), imm=value, reset=True)
            for at, nest in regions
            if all(e for e, _ in nest)
        ]

    def window_loads(self, t: BandTile, base: int, win: int) -> tuple[list[Load], tuple[int, int, int, int]]:
        """LOAD INP of tile ``t``'s input window per channel block (``win`` elements apart from ``base``), the
        borders zero filled, and the pads; one set of transfers for all blocks where nothing is padded and the
        blocks' windows lie back to back."""
        left = self.spec.window.pads[2]
        rows = self.in_rows(t.noh)
        r_first, pad = self.window_border(t)
        r_lo, r_hi, c_lo, c_hi = pad[0], rows - pad[1], pad[2], self.cols - pad[3]
        offset = ((t.ng * self.cb + t.cb) * self.h + r_first + r_lo) * self.w + c_lo - left
        if any(pad) or win != rows * self.cols:  # one LOAD per channel block, each at its own region
            loads = [
                Load(MemType.INP, base + j * win, "inp", offset + j * self.h * self.w, r_hi - r_lo, c_hi - c_lo,
                     self.w, pad)
                for j in range(t.noc)
            ]  # fmt: skip
            return loads, pad
        axes = [(t.noc, self.h * self.w), (r_hi - r_lo, self.w), (c_hi - c_lo, 1)]
        transfers = plan_transfers(base, offset, axes)
        return [Load(MemType.INP, tr.sram, "inp", tr.offset, tr.y, tr.x, tr.stride) for tr in transfers], pad
