"""Pooling on the ALU: max pooling (MAX over the window taps) and average pooling (ADD over the taps, then
the requantizing multiplier and shift), on packed int8 activations in DRAM.

A tile is ``toc`` channel blocks x ``toh`` output rows x every output column. Per tile, on the compute
stage: LOAD ACC_8BIT brings the input window (sign-extended int8, the borders zero filled by the LOAD pad
fields); for a max pool whose input may be negative, one ADD-with-reset per padded side writes the int8
minimum over the zeros; then the window is reduced separably:

* rows: ``H[r, j] = op over t < kw of in[r, j*sw + t]``, in place at ``in[r, j*sw]`` when ``kw <= 2*sw``
  (the tap ``t = sw``, the only one landing on another output's first tap, runs first and reads it
  before that output's own pass writes it, iterations running in program order), else into a separate
  region after a copy (ADD with reset);
* columns: ``out[i, j] = op over t < kh of H[i*sh + t, j]``, the first tap a copy, into a dense tile
  that the STOREs read;
* average only: MUL by the multiplier row with the shift (the exact 64-bit product rounded once,
  :func:`vdla.isa.arith.mul_shift`), then CLIP.

The OUT mirror truncates (no EPI): every result is already an int8 value. Cost per output element
of a max pool with ``kw <= 2*sw``: ``(kw-1) * alu_ii`` per input row held, plus ``1 + (kh-1) * alu_ii``;
two-operand passes cost ``alu_ii`` cycles per element, copies and immediates one. Tiles go round-robin
to virtual threads (:mod:`vdla.compiler.vthreads`): the STOREs of one tile overlap the next tile's work.

Invariant: the program computes exactly :func:`pool_reference` of the spec (bit for bit, on every
backend); padded taps read the int8 minimum (max) unless ``pad_min`` is off, which is exact only for
inputs known to be >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from vdla.compiler.blocks import Alu, Block, Load, Op, PreloadKernel, Store
from vdla.compiler.conv2d import LayerRun
from vdla.compiler.epilogue import clip_imm
from vdla.compiler.microcode import Limits, MicroKernel, lower_nest
from vdla.compiler.search import emit_program, timed
from vdla.compiler.spec import CompileError
from vdla.compiler.transfer import MAX_STRIDE, plan_transfers
from vdla.compiler.vthreads import Stream, interleave, lower_vthreads
from vdla.config import HwConfig, load_config
from vdla.graph import oracle
from vdla.graph.layout import pack_activation, pack_channels, unpack_activation
from vdla.graph.types import UnsupportedError
from vdla.graph.window import Window, make_window
from vdla.isa import AluOp, Insn, MemType
from vdla.isa.arith import INT8_MAX, INT8_MIN, mul_shift
from vdla.runtime.device import Device

POOL_OPS = ("max", "avg")
MAX_PAD = 15  # the LOAD pad fields are 4 bits
MAX_VTHREADS = 2


@dataclass(frozen=True)
class PoolSpec:
    """A 2-D pooling of an int8 NCHW tensor ``shape`` over ``window``.

    ``op`` "max": the window maximum (padded taps read ``INT8_MIN``, or 0 without ``pad_min``). "avg": the
    window sum (no padding: every window holds ``kh*kw`` taps) times ``multiplier`` rounded right by
    ``shift`` (``mul_shift``), clamped to ``clip``. Frozen: a spec is the cache key of its program.
    """

    shape: tuple[int, int, int, int]
    window: Window
    op: str = "max"
    pad_min: bool = True
    multiplier: int = 1
    shift: int = 0
    clip: tuple[int, int] = (INT8_MIN, INT8_MAX)

    @classmethod
    def make(cls, shape, kernel, stride=None, padding=0, op: str = "max", **kw) -> PoolSpec:
        """A checked spec; raises CompileError naming the limit."""
        if op not in POOL_OPS:
            raise CompileError(f"pool op must be one of {POOL_OPS}, got {op!r}")
        if len(shape) != 4 or min(shape) < 1:
            raise CompileError(f"pool input must be NCHW with every dimension >= 1, got {shape}")
        try:
            win, _ = make_window(f"{op}_pool2d", tuple(shape[2:]), kernel, stride or kernel, 1, padding)
        except UnsupportedError as e:
            raise CompileError(str(e)) from e
        spec = cls(tuple(int(d) for d in shape), win, op, **kw)
        spec.check()
        return spec

    @classmethod
    def global_avg(cls, shape, multiplier: int, shift: int, clip=(INT8_MIN, INT8_MAX)) -> PoolSpec:
        """The sum over all H x W pixels, requantized: a global average pool."""
        return cls.make(shape, tuple(shape[2:]), op="avg", multiplier=multiplier, shift=shift, clip=clip)

    def check(self) -> None:
        if max(self.window.pads) > MAX_PAD:
            raise CompileError(f"pool padding {self.window.pads} exceeds the LOAD pad fields: at most {MAX_PAD}")
        if self.op == "avg" and any(self.window.pads):
            raise CompileError(f"an average pool with padding {self.window.pads} divides by varying counts")
        if not INT8_MIN <= self.clip[0] <= self.clip[1] <= INT8_MAX:
            raise CompileError(f"clip bounds {self.clip} must lie within int8")
        if not (-(1 << 31) <= self.multiplier < 1 << 31 and 0 <= self.shift <= 63):
            raise CompileError(f"multiplier {self.multiplier} must fit int32 and shift {self.shift} lie in [0, 63]")
        if self.shape[3] > MAX_STRIDE:
            raise CompileError(f"input rows of {self.shape[3]} pixels exceed the LOAD x_stride: {MAX_STRIDE} fit")

    @property
    def out_hw(self) -> tuple[int, int]:
        return self.window.out_size(*self.shape[2:])

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (*self.shape[:2], *self.out_hw)

    @property
    def requantizes(self) -> bool:
        return self.op == "avg" and (self.multiplier, self.shift) != (1, 0)

    def describe(self) -> str:
        (kh, kw), sh = self.window.kernel, self.window.stride[0]
        return f"{self.op} {kh}x{kw}/{sh} pad{list(self.window.pads)} {list(self.shape)}"


def pool_reference(x: np.ndarray, spec: PoolSpec) -> np.ndarray:
    """The numpy definition of what the program computes (int8 in, int8 out)."""
    if spec.op == "max":
        fill = INT8_MIN if spec.pad_min else 0
        return oracle.windows(x, spec.window, fill).max(axis=(4, 5)).astype(np.int8)
    total = oracle.windows(x.astype(np.int64), spec.window, 0).sum(axis=(4, 5))
    return np.clip(mul_shift(total, spec.multiplier, spec.shift), *spec.clip).astype(np.int8)


@dataclass(frozen=True)
class PoolSchedule:
    """Tile: ``toc`` channel blocks x ``toh`` output rows (all columns); ``vthreads`` threads."""

    toc: int
    toh: int
    vthreads: int

    def describe(self) -> str:
        return f"oc{self.toc} oh{self.toh} vt{self.vthreads}"


@dataclass(frozen=True)
class PoolTile:
    ng: int
    cb: int
    noc: int
    oy: int
    noh: int


class PoolLowering:
    """A pooling spec on one config: tile geometry, buffer fit and the block stream."""

    def __init__(self, spec: PoolSpec, cfg: HwConfig):
        if cfg.block_in != cfg.block_out:
            raise CompileError(
                f"pooling reads packed activations into the accumulators: config {cfg.name!r} has "
                f"block_in={cfg.block_in} != block_out={cfg.block_out}"
            )
        self.spec, self.cfg = spec, cfg
        n, c, self.h, self.w = spec.shape
        self.oh, self.ow = spec.out_hw
        self.ng, self.cb = -(-n // cfg.batch), -(-c // cfg.block_out)
        (self.kh, self.kw), (self.sh, self.sw) = spec.window.kernel, spec.window.stride
        self.cols = (self.ow - 1) * self.sw + self.kw
        self.inplace = self.kw <= 2 * self.sw
        self.limits = Limits.of(cfg)
        self.rows_base = cfg.acc_depth - int(spec.requantizes)  # the multiplier row sits at the top

    def in_rows(self, noh: int) -> int:
        return (noh - 1) * self.sh + self.kh

    def per_block(self, noh: int) -> tuple[int, int, int]:
        """ACC elements of one channel block of a tile: (input window, row results, output rows)."""
        rows = self.in_rows(noh)
        return rows * self.cols, 0 if self.inplace else rows * self.ow, noh * self.ow

    def footprint(self, s: PoolSchedule) -> int:
        return s.toc * sum(self.per_block(s.toh))

    def share(self, vthreads: int) -> int:
        return self.rows_base // vthreads

    def check_minimal(self) -> None:
        """Raise CompileError, naming the limit, when one output row of one channel block does not fit."""
        need = sum(self.per_block(1))
        if need > self.share(1):
            raise CompileError(
                f"one output row of a {self.spec.describe()} pool needs {need} ACC elements ({self.in_rows(1)} "
                f"input rows of {self.cols}), the accumulator buffer holds {self.share(1)}: inputs up to "
                f"{self.share(1) // (self.in_rows(1) + 2)} pixels wide fit"
            )

    def candidates(self) -> list[PoolSchedule]:
        """The most output rows that fit per thread count; with whole images, the most channel blocks."""
        self.check_minimal()
        out = []
        for v in range(1, MAX_VTHREADS + 1):
            share = self.share(v)
            toh = max((t for t in range(1, self.oh + 1) if sum(self.per_block(t)) <= share), default=0)
            if not toh:
                continue
            toc = min(self.cb, share // sum(self.per_block(toh))) if toh == self.oh else 1
            out.append(PoolSchedule(toc, toh, v))
            if toc > 1:
                out.append(PoolSchedule(-(-toc // 2), toh, v))
        return out

    def tiles(self, s: PoolSchedule) -> list[PoolTile]:
        return [
            PoolTile(g, cb, min(s.toc, self.cb - cb), oy, min(s.toh, self.oh - oy))
            for g in range(self.ng)
            for cb in range(0, self.cb, s.toc)
            for oy in range(0, self.oh, s.toh)
        ]

    def tensor_bytes(self) -> dict[str, int]:
        c = self.cfg
        out = {
            "inp": self.ng * self.cb * self.h * self.w * c.inp_elem_bytes,
            "out": self.ng * self.cb * self.oh * self.ow * c.out_elem_bytes,
        }
        if self.spec.requantizes:
            out["mult"] = c.acc_elem_bytes
        return out

    def constants(self) -> dict[str, np.ndarray]:
        if not self.spec.requantizes:
            return {}
        return {
            "mult": pack_channels(np.full(self.cfg.block_out, self.spec.multiplier), self.cfg.batch, self.cfg.block_out)
        }

    # ---- one tile ---------------------------------------------------------------------------------
    def kernel(self, nest, base: tuple[int, int]) -> MicroKernel:
        return lower_nest(tuple((e, (d, s, 0)) for e, (d, s) in nest), (*base, 0), self.limits)

    def block(self, thread: int, base: int, t: PoolTile, s: PoolSchedule) -> Block:
        """The loads, passes and stores of one tile in the thread's accumulators from ``base``."""
        win, hb, ob = self.per_block(s.toh)
        win_rows = self.in_rows(t.noh)
        hbase, obase = base + t.noc * win, base + t.noc * (win + hb)
        loads, pad = self.window_loads(t, base, win)
        compute: list[Op] = list(loads) + self.pad_fill(t, base, win, win_rows, pad)
        op = AluOp.MAX if self.spec.op == "max" else AluOp.ADD
        # rows: H[r, j] over the kw taps of row r
        if self.inplace:
            h_at, h_strides = base, (win, self.cols, self.sw)
            taps = sorted(range(1, self.kw), key=lambda k: k != self.sw)
        else:
            h_at, h_strides = hbase, (hb, self.ow, 1)
            taps = range(self.kw)
        src_strides = (win, self.cols, self.sw)
        for k in taps:
            nest = tuple(zip((t.noc, win_rows, self.ow), zip(h_strides, src_strides)))
            first = not self.inplace and k == 0
            compute.append(Alu(AluOp.ADD if first else op, self.kernel(nest, (h_at, base + k)), reset=first))
        # columns: out[i, j] over the kh row results
        for k in range(self.kh):
            nest = (
                (t.noc, (ob, h_strides[0])),
                (t.noh, (self.ow, self.sh * h_strides[1])),
                (self.ow, (1, h_strides[2])),
            )
            kern = self.kernel(nest, (obase, h_at + k * h_strides[1]))
            compute.append(Alu(AluOp.ADD if k == 0 else op, kern, reset=k == 0))
        if self.spec.op == "avg":
            compute += self.requantize(t, obase, ob)
        return Block(thread, (), tuple(compute), tuple(self.stores(t, obase, ob)))

    def window_loads(self, t: PoolTile, base: int, win: int) -> tuple[list[Load], tuple[int, int, int, int]]:
        """LOAD ACC_8BIT of the tile's input window per channel block, the borders zero filled; and the pads."""
        top, _, left, _ = self.spec.window.pads
        rows = self.in_rows(t.noh)
        r_first = t.oy * self.sh - top
        r_lo, r_hi = max(0, -r_first), min(rows, self.h - r_first)
        c_lo, c_hi = max(0, left), min(self.cols, self.w + left)
        pad = (r_lo, rows - r_hi, c_lo, self.cols - c_hi)
        offset = ((t.ng * self.cb + t.cb) * self.h + r_first + r_lo) * self.w + c_lo - left
        if any(pad) or win != rows * self.cols:  # one LOAD per channel block, each at its own region
            loads = [
                Load(MemType.ACC_8BIT, base + j * win, "inp", offset + j * self.h * self.w, r_hi - r_lo,
                     c_hi - c_lo, self.w, pad)
                for j in range(t.noc)
            ]  # fmt: skip
            return loads, pad
        axes = [(t.noc, self.h * self.w), (r_hi - r_lo, self.w), (c_hi - c_lo, 1)]
        transfers = plan_transfers(base, offset, axes)
        return [Load(MemType.ACC_8BIT, tr.sram, "inp", tr.offset, tr.y, tr.x, tr.stride) for tr in transfers], pad

    def pad_fill(self, t: PoolTile, base: int, win: int, rows: int, pad) -> list[Op]:
        """ADD-with-reset writes of INT8_MIN over the zero-padded border (max pools whose input may be < 0)."""
        if self.spec.op != "max" or not self.spec.pad_min:
            return []
        top, bottom, left, right = pad
        mid = rows - top - bottom
        regions = [
            (0, ((top * self.cols, (1, 0)),)),
            ((rows - bottom) * self.cols, ((bottom * self.cols, (1, 0)),)),
            (top * self.cols, ((mid, (self.cols, 0)), (left, (1, 0)))),
            (top * self.cols + self.cols - right, ((mid, (self.cols, 0)), (right, (1, 0)))),
        ]
        return [
            Alu(AluOp.ADD, self.kernel(((t.noc, (win, 0)), *nest), (base + at, 0)), imm=INT8_MIN, reset=True)
            for at, nest in regions
            if all(e for e, _ in nest)
        ]

    def requantize(self, t: PoolTile, obase: int, ob: int) -> list[Op]:
        """MUL by the multiplier row with the shift, then CLIP, over the tile's outputs."""
        nest = ((t.noc, (ob, 0)), (t.noh * self.ow, (1, 0)))
        ops: list[Op] = []
        if self.spec.requantizes:
            ops.append(Alu(AluOp.MUL, self.kernel(nest, (obase, self.rows_base)), shift=self.spec.shift))
        ops.append(Alu(AluOp.CLIP, self.kernel(nest, (obase, 0)), imm=clip_imm(*self.spec.clip)))
        return ops

    def stores(self, t: PoolTile, obase: int, ob: int) -> list[Store]:
        offset = ((t.ng * self.cb + t.cb) * self.oh + t.oy) * self.ow
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
        if self.footprint(s) > self.share(s.vthreads):
            raise CompileError(
                f"pool schedule {s.describe()} needs {self.footprint(s)} ACC elements per thread, "
                f"the share holds {self.share(s.vthreads)}"
            )
        tiles = self.tiles(s)
        share = self.share(s.vthreads)
        threads = [[self.block(v, v * share, tile, s) for tile in tiles[v :: s.vthreads]] for v in range(s.vthreads)]
        return lower_vthreads(threads, self.prologue(threads))

    def prologue(self, threads: list[list[Block]]) -> Block:
        """The multiplier row and every distinct micro-kernel made resident, in first-use order."""
        ops: list[Op] = []
        if self.spec.requantizes:
            ops.append(Load(MemType.ACC, self.rows_base, "mult", 0, 1, 1, 1))
        seen, room = set(), self.cfg.uop_depth
        for v, i in interleave([len(b) for b in threads]):
            for op in threads[v][i].compute:
                if isinstance(op, Alu) and op.kernel.uops.tobytes() not in seen:
                    seen.add(op.kernel.uops.tobytes())
                    room -= len(op.kernel.uops)
                    if room < 0:
                        return Block(-1, (), tuple(ops), ())
                    ops.append(PreloadKernel(op.kernel))
        return Block(-1, (), tuple(ops), ())


@dataclass(frozen=True)
class PoolSearch:
    schedule: PoolSchedule
    cycles: int
    candidates: int


class CompiledPool:
    """A pooling compiled for one config: the chosen schedule (fastest on the timing-only simulator among
    :meth:`PoolLowering.candidates`), its stream and constants."""

    def __init__(self, spec: PoolSpec, cfg: HwConfig, schedule: PoolSchedule | None = None):
        self.spec, self.cfg = spec, cfg
        self.lowering = PoolLowering(spec, cfg)
        cands = [schedule] if schedule else self.lowering.candidates()
        timings = [(timed(self.lowering, self.lowering.stream(s)).cycles, i) for i, s in enumerate(cands)]
        cycles, best = min(timings)
        self.search = PoolSearch(cands[best], cycles, len(cands))
        self.schedule = cands[best]
        self.stream = self.lowering.stream(self.schedule)

    @cached_property
    def constants(self) -> dict[str, np.ndarray]:
        return self.lowering.constants()

    def program(self, dev: Device | None = None) -> list[Insn]:
        return emit_program(self.lowering, self.stream, dev or Device(self.cfg))

    def run(self, dev: Device, x: np.ndarray, max_cycles: int | None = None):
        """Run on ``dev``: ``x`` int8 NCHW; returns a :class:`~vdla.compiler.conv2d.LayerRun`."""
        sp, cfg, low = self.spec, self.cfg, self.lowering
        if x.dtype != np.int8 or x.shape != sp.shape:
            raise CompileError(f"pool input must be int8 of shape {sp.shape}, got {x.dtype} {x.shape}")
        arrays = dict(self.constants, inp=pack_activation(x, cfg.batch, cfg.block_in))
        buffers = {name: dev.array(a) for name, a in arrays.items()}
        buffers["out"] = dev.alloc(low.tensor_bytes()["out"])
        try:
            result = dev.run_program(emit_program(low, self.stream, dev, buffers), max_cycles=max_cycles)
            shape = (low.ng, low.cb, low.oh, low.ow, cfg.batch, cfg.block_out)
            packed = buffers["out"].read(np.int8, shape)
        finally:
            for buf in buffers.values():
                buf.free()
        return LayerRun(unpack_activation(packed, sp.shape[0], sp.shape[1]), result)


def compile_pool(spec: PoolSpec, config="pynq", schedule: PoolSchedule | None = None) -> CompiledPool:
    """Compile a pooling for ``config`` (see the module docstring)."""
    return CompiledPool(spec, load_config(config), schedule)
