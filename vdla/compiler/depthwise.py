"""Depthwise convolution on the GEMM core's depthwise mode (EPI ``dw``, docs/isa.md), with its fused epilogue.

A depthwise convolution (groups = channels, one filter per channel) of an int8 NCHW tensor, square kernel
``k <= DW_MAX_K``, equal strides ``s <= min(k, 3)``, zero padding up to 15. A tile is ``toc`` channel blocks x
``toh`` output rows x every output column. Per tile: on the load stage, LOAD INP brings each channel block's
input window (``(toh - 1) * s + k`` rows of ``cols = (ow - 1) * s + k`` pixels, the borders zero filled by the
LOAD pad fields) into the thread's INP share, overlapping the other thread's compute; on the compute stage an
EPI sets the depthwise mode (kernel, stride, pitch ``cols``) and the tile's first bias row, then one ``init``
GEMM per output row runs the channel blocks (outer loop: each accumulator starts from its block's bias row)
by the row's columns (inner loop: the window moves by ``s``), then the epilogue's passes, and the STOREs.

The window weights of every channel block stay resident in WGT (``2 * dw_groups(k)`` elements a block, one
per pass, loaded by the stream's first block); the bias rows and multiplier rows (one a channel block) sit at
the top of ACC, loaded by the prologue with the activation table. The epilogue (:class:`vdla.graph.epilogue.Epilogue`):
bias by ``init``; a multiplier (per channel or scalar) by an ALU MUL of its row with the rounding shift (the
exact product, rounded once); a shift alone by the OUT mirror's requantization; the clamp by the mirror
(int8, ReLU) or, for other bounds, merged into the activation table (EPI ``lut``: the clamp, then the layer's
own table if any), so no CLIP pass. A residual is refused (CompileError).

With a fused global average of the output (``gap``: squeeze-excite's pool, read from the layer's own results),
each tile also sums its int8 outputs into one accumulator per image and channel block (a GEMM against the identity
block reading the tile's OUT rows, EPI ``src_out``, ``dst`` repeated over the pixels, the first band's with
``init``), rows shared by the threads below the per-channel rows; the last band of a channel block requantizes
its sums (MUL by the average's multiplier row with its shift, the EPI's clamp or a CLIP) and stores them to the
``pool`` tensor, so the output is not read back from DRAM to be averaged.

Invariant: the program computes exactly :func:`depthwise_oracle` (bit for bit, on every backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from vdla.compiler.blocks import Alu, Block, Epi, Gemm, Load, Op, Store
from vdla.compiler.cache import ScheduleCache
from vdla.compiler.identity import EYE, identity_bytes, identity_weights, load_identity
from vdla.compiler.microcode import Limits, MicroKernel, lower_nest
from vdla.compiler.pool import PoolSpec, requantize_passes
from vdla.compiler.run import LayerRun, run_band
from vdla.compiler.search import cached_fastest, emit_program
from vdla.compiler.spec import TABLE, CompileError, WindowSpec, mirror_relu, refusal
from vdla.compiler.tiling import BandLowering, BandTile, band_sizes
from vdla.compiler.transfer import plan_transfers
from vdla.compiler.vthreads import Stream, lower_vthreads, prologue_block
from vdla.config import DEFAULT_PRESET, DW_MAX_K, LUT_ENTRIES, HwConfig, load_config
from vdla.graph import oracle
from vdla.graph.epilogue import Epilogue
from vdla.graph.layout import pack_channels, unpack_activation
from vdla.graph.window import pair
from vdla.isa import AluOp, Insn, MemType
from vdla.runtime.device import Device

MAX_STRIDE_DW = 3  # the EPI dw_stride field is 2 bits
MAX_VTHREADS = 2
OP = "depthwise_conv2d"


@dataclass(frozen=True)
class DepthwiseSpec(WindowSpec):
    """A depthwise convolution of an int8 NCHW tensor ``shape`` over ``window``."""

    @classmethod
    def make(cls, shape, kernel: int, stride: int = 1, padding=0) -> DepthwiseSpec:
        """A checked spec; raises CompileError naming the limit."""
        win = cls.window_of("depthwise", OP, shape, kernel, stride, padding)
        spec = cls(tuple(int(d) for d in shape), win)
        spec.check()
        return spec

    def check(self) -> None:
        (kh, kw), (sh, sw) = self.window.kernel, self.window.stride
        if kh != kw or kh > DW_MAX_K:
            raise CompileError(f"depthwise kernel {kh}x{kw}: the window holds square kernels up to {DW_MAX_K}")
        if sh != sw or not 1 <= sh <= min(kh, MAX_STRIDE_DW):
            raise CompileError(f"depthwise stride {sh}x{sw}: equal strides from 1 to min(kernel, {MAX_STRIDE_DW})")
        self.check_loads("depthwise")

    @property
    def k(self) -> int:
        return self.window.kernel[0]

    @property
    def stride(self) -> int:
        return self.window.stride[0]

    @property
    def macs(self) -> int:
        return self.shape[0] * self.shape[1] * self.out_hw[0] * self.out_hw[1] * self.k * self.k

    def describe(self) -> str:
        return f"depthwise {self.k}x{self.k}/{self.stride} pad{list(self.window.pads)} {list(self.shape)}"


def depthwise_oracle(x: np.ndarray, w: np.ndarray, spec: DepthwiseSpec, ep: Epilogue | None) -> np.ndarray:
    """The numpy definition of what the program computes: int8 NCHW ``x``, int8 (C, 1, k, k) ``w``."""
    acc = oracle.conv2d(x, w, spec.window, groups=spec.shape[1])
    out = oracle.epilogue(acc, ep)
    return out if ep is None or ep.table is None else oracle.table(out, ep.table)


@dataclass(frozen=True)
class DepthwiseSchedule:
    """Tile: ``toc`` channel blocks x ``toh`` output rows (all columns); ``vthreads`` threads."""

    toc: int
    toh: int
    vthreads: int

    def describe(self) -> str:
        return f"oc{self.toc} oh{self.toh} vt{self.vthreads}"


@dataclass(frozen=True, eq=False)
class DwPasses:
    """How the epilogue runs: a MUL by the multiplier rows (with the shift) when the multiplier is not 1; the
    OUT mirror's requantization (by the shift, or 0 after the MUL) clamping to int8 (or ReLU); then the
    activation table, which also takes any other clamp (``table[b] = entries[clamp(b)]``): no CLIP pass."""

    mul: bool
    relu: bool
    shift: int
    table: np.ndarray | None
    out_mul: bool = False  # the OUT mirror multiplies (EPI mul) instead of a MUL pass

    def key(self) -> str:
        """The passes' structure as a text key (schedule cache)."""
        return f"m{int(self.mul)}o{int(self.out_mul)}r{int(self.relu)}s{self.shift}t{int(self.table is not None)}"

    @classmethod
    def of(cls, ep: Epilogue, out_mul: bool = False) -> DwPasses:
        """The passes of ``ep``; ``out_mul``: the config has the OUT-path multiplier, which then applies the
        multiplier rows (the layer's GEMMs write its final sums)."""
        if ep.residual is not None or ep.rescale is not None:
            raise CompileError("a depthwise layer's epilogue with a residual add is not supported (run it apart)")
        mul = np.ndim(ep.multiplier) > 0 or int(ep.multiplier) != 1
        shift = 0 if mul else ep.shift
        relu = mirror_relu(ep.clip)
        if relu is not None:
            return cls(mul, relu, shift, ep.table, out_mul and mul)
        byte = np.arange(LUT_ENTRIES).astype(np.uint8).view(np.int8)
        clamped = np.clip(byte, *ep.clip).astype(np.int8)
        entries = clamped if ep.table is None else np.asarray(ep.table, np.int8)[clamped.view(np.uint8)]
        return cls(mul, False, shift, entries, out_mul and mul)


class DepthwiseLowering(BandLowering):
    """A depthwise spec and its epilogue on one config: tile geometry, buffer fit and the block stream.

    Each thread owns ``1/vthreads`` of the INP buffer (its tiles' input windows) and of the accumulators below
    the bias and multiplier rows (its output tiles); the window weights sit at WGT 0, shared and never
    overwritten.
    """

    def __init__(
        self, spec: DepthwiseSpec, ep: Epilogue, cfg: HwConfig, acc_top: int | None = None, gap: PoolSpec | None = None
    ):
        """``acc_top``: the ACC rows from it up belong to another layer (a fused pair's,
        :mod:`vdla.compiler.dw_pointwise`); the bias and multiplier rows sit right below it (default: ACC's top).
        ``gap``: a global average of the output fused into the tiles (module docstring)."""
        if not cfg.dw_supported:
            raise CompileError(cfg.dw_refusal())
        self.spec, self.ep, self.cfg = spec, ep, cfg
        self.passes = DwPasses.of(ep, cfg.out_multiplier)
        n, c, self.h, self.w = spec.shape
        self.oh, self.ow = spec.out_hw
        self.ng, self.cb = n, -(-c // cfg.block_out)
        self.k, self.s = spec.k, spec.stride
        self.cols = (self.ow - 1) * self.s + self.k  # input pixels of a window row (padding included)
        self.elements = 2 * cfg.dw_groups(self.k)  # WGT elements a channel block: one per pass
        self.limits = Limits.of(cfg)
        top = cfg.acc_depth if acc_top is None else acc_top
        self.mult0 = top - self.cb * self.passes.mul  # per-channel rows at the top of ACC
        self.bias0 = self.mult0 - self.cb
        self.gap = gap
        if gap is not None and (why := self.gap_refusal(gap)):
            raise CompileError(f"{spec.describe()}: no global average fused into the layer: {why}")
        self.sum0 = self.bias0 - self.gap_rows  # the average's sums (every image's blocks), then its multiplier row
        self.eye = cfg.wgt_depth - 1 if gap is not None else None  # the identity block the sums' GEMMs read
        if self.cb * self.elements > cfg.wgt_depth - (gap is not None) or self.sum0 < 1:
            raise CompileError(
                f"{spec.describe()}: {self.cb} channel blocks need {self.cb * self.elements} WGT elements and "
                f"{self.cb * (1 + self.passes.mul)} ACC rows resident, the buffers hold {cfg.wgt_depth} and "
                f"{cfg.acc_depth}: up to {min(cfg.wgt_depth // self.elements, cfg.acc_depth // 3) * cfg.block_out}"
                " channels fit"
            )

    def gap_refusal(self, gap: PoolSpec) -> str | None:
        """Why ``gap`` cannot be fused into the layer (None if it can)."""
        n, c = self.spec.shape[:2]
        if gap.kind != "avg" or gap.window.kernel != (self.oh, self.ow) or any(gap.window.pads):
            return f"a {gap.describe()} is not a global average"
        if gap.shape != (n, c, self.oh, self.ow):
            return f"it averages {gap.shape}, the layer writes {(n, c, self.oh, self.ow)}"
        return self.cfg.src_out_refusal()

    @property
    def gap_rows(self) -> int:
        """ACC rows of a fused global average: one sum per image and channel block, and its multiplier row."""
        return self.ng * self.cb + 1 if self.gap is not None else 0

    def in_rows(self, noh: int) -> int:
        return (noh - 1) * self.s + self.k

    def per_block(self, noh: int) -> tuple[int, int]:
        """(INP, ACC) elements of one channel block of a tile of ``noh`` output rows."""
        return self.in_rows(noh) * self.cols, noh * self.ow

    def share(self, vthreads: int) -> tuple[int, int]:
        """(INP, ACC) elements of one thread's share."""
        return self.cfg.inp_depth // vthreads, self.sum0 // vthreads

    def fits(self, toc: int, toh: int, vthreads: int) -> bool:
        inp, acc = self.share(vthreads)
        pi, pa = self.per_block(toh)
        factors_fit = toc == 1 or max(pi, pa) <= min(self.limits.max_factor[:2])
        return toc * pi <= inp and toc * pa <= acc and factors_fit

    def check_minimal(self) -> None:
        """Raise CompileError, naming the limit, when one output row of one channel block does not fit."""
        if self.fits(1, 1, 1):
            return
        inp, acc = self.share(1)
        raise CompileError(
            f"one output row of a {self.spec.describe()} layer needs {self.per_block(1)[0]} INP elements "
            f"({self.k} input rows of {self.cols}) and {self.ow} ACC, the buffers hold {inp} and {acc}: inputs "
            f"up to {(inp // self.k - self.k) // self.s + 1} output columns wide fit"
        )

    def candidates(self) -> list[DepthwiseSchedule]:
        """Per thread count the most output rows that fit; with whole images, the most channel blocks (and
        half as many)."""
        self.check_minimal()
        return [
            DepthwiseSchedule(toc, toh, v)
            for v in range(1, MAX_VTHREADS + 1)
            for toc, toh in band_sizes(lambda n, t, v=v: self.fits(n, t, v), self.cb, self.oh)
        ]

    def tensor_bytes(self) -> dict[str, int]:
        c = self.cfg
        out = {
            **self.io_bytes(),
            "dwwgt": self.cb * self.elements * c.wgt_elem_bytes,
            "bias": self.cb * c.acc_elem_bytes,
        }
        if self.passes.mul:
            out["mult"] = self.cb * c.acc_elem_bytes
        if self.passes.table is not None:
            out[TABLE] = c.lut_depth * c.out_elem_bytes
        if self.gap is not None:
            out.update(pool=self.ng * self.cb * c.out_elem_bytes, gapmul=c.acc_elem_bytes, **{EYE: identity_bytes(c)})
        return out

    def constants(self, w: np.ndarray) -> dict[str, np.ndarray]:
        """The window weights of (C, 1, k, k) int8 ``w``, the bias and multiplier rows and the table."""
        c, ep, ch = self.cfg, self.ep, self.spec.shape[1]
        bias = np.zeros(ch, np.int64) if ep.bias is None else np.asarray(ep.bias, np.int64)
        weights = window_weights(w, self.elements // 2, c.block_in)
        out = {"dwwgt": weights, "bias": pack_channels(bias, c.batch, c.block_out)}
        if self.passes.mul:
            mult = np.broadcast_to(np.asarray(ep.multiplier, np.int64), (ch,))
            out["mult"] = pack_channels(mult, c.batch, c.block_out)
        if self.passes.table is not None:
            out[TABLE] = np.asarray(self.passes.table, np.int8).reshape(c.lut_depth, c.batch, c.block_out)
        if self.gap is not None:
            mult = np.full(c.block_out, self.gap.multiplier, np.int64)
            out.update(gapmul=pack_channels(mult, c.batch, c.block_out), **{EYE: identity_weights(c)})
        return out

    # ---- one tile ---------------------------------------------------------------------------------
    def block(self, thread: int, t: BandTile, s: DepthwiseSchedule, weights: bool = False) -> Block:
        """The loads, GEMMs, passes and stores of one tile. ``weights``: the stream's first block, which also
        loads every channel block's window weights (the load stage runs in order)."""
        inp0, acc0 = (thread * n for n in self.share(s.vthreads))
        win, ob = self.per_block(s.toh)
        loads = self.window_loads(t, inp0, win)[0]
        if weights:
            n = self.cb * self.elements
            eye = [load_identity(self.eye)] if self.gap is not None else []
            loads = [Load(MemType.WGT, 0, "dwwgt", 0, 1, n, n), *eye, *loads]
        compute = self.gemms(t, acc0, inp0, ob, win) + self.epilogue(t, acc0, ob)
        stores = self.stores(t, acc0, ob)
        if self.gap is not None:
            compute += self.gap_ops(t, acc0, ob)
            stores += self.gap_stores(t)
        return Block(thread, tuple(loads), tuple(compute), tuple(stores))

    def gap_ops(self, t: BandTile, acc0: int, ob: int) -> list[Op]:
        """The tile's int8 outputs (OUT rows from ``acc0``, ``ob`` apart by channel block) summed into their
        blocks' accumulators by a GEMM against the identity block (``init`` on the first band); on the last band,
        the sums requantized (:func:`~vdla.compiler.pool.requantize_passes`: MUL by the multiplier row with the shift,
        clamped by the EPI's requantization or a CLIP)."""
        gap, row = self.gap, self.sum0 + t.ng * self.cb + t.cb
        nest = ((t.noc, (1, ob, 0)), (t.noh * self.ow, (0, 1, 0)))
        gemm = Gemm(lower_nest(nest, (row, acc0, self.eye), self.limits, pin_outer=True), init=t.oy == 0)
        ops: list[Op] = [Epi(False, False, 0, None, src_out=True), gemm]
        if t.oy + t.noh < self.oh:
            return ops
        relu = mirror_relu(gap.clip)
        mult = self.sum0 + self.ng * self.cb
        tail = requantize_passes(self.kernel, ((t.noc, (1, 0)),), row, mult, gap.shift, gap.clip)
        return [*ops, Epi(relu is not None, bool(relu), 0, None), *tail]

    def gap_stores(self, t: BandTile) -> list[Store]:
        """The STORE of a channel tile's averages, after its last band."""
        if t.oy + t.noh < self.oh:
            return []
        row = t.ng * self.cb + t.cb
        return [Store(self.sum0 + row, "pool", row, 1, t.noc, t.noc)]

    def gemms(self, t: BandTile, acc0: int, inp0: int, ob: int, win: int, src_out: bool = False) -> list[Op]:
        """The tile's EPI (the depthwise mode, its first bias and multiplier rows) and one ``init`` GEMM per output
        row: channel blocks outer (``ob`` accumulators and ``win`` INP elements apart; their bias and multiplier
        rows), the row's columns inner (the window moving by the stride). ``src_out``: the windows are OUT rows
        from ``inp0`` (an expand layer's results, :mod:`vdla.compiler.dw_pointwise`), not INP's."""
        p = self.passes
        mul = (self.mult0 + t.cb, self.ep.shift) if p.out_mul else None
        table = p.table is not None
        ops: list[Op] = [Epi(True, p.relu, p.shift, self.bias0 + t.cb, table, self.dw, src_out=src_out, mul=mul)]
        for r in range(t.noh):
            base = (acc0 + r * self.ow, inp0 + r * self.s * self.cols, t.cb * self.elements)
            kernel = MicroKernel(np.array([base], np.int64), t.noc, self.ow, (ob, win, self.elements), (1, self.s, 0))
            ops.append(Gemm(kernel, init=True))
        return ops

    @property
    def dw(self) -> tuple[int, int, int]:
        return self.k, self.s, self.cols

    def epilogue(self, t: BandTile, acc0: int, ob: int) -> list[Op]:
        """The MUL by the multiplier rows with the shift over the tile's outputs, if the layer has one and the OUT
        mirror does not apply it (``DwPasses.out_mul``, the GEMMs' EPI mul): channel blocks on the outer loop (even
        one), so that the pixels are the inner loop, which holds the block's multiplier row and is pipelined
        (:mod:`vdla.isa.pipe`)."""
        if not self.passes.mul or self.passes.out_mul:
            return []
        nest = ((t.noc, (ob, 1)), (t.noh * self.ow, (1, 0)))
        return [Alu(AluOp.MUL, self.kernel(nest, (acc0, self.mult0 + t.cb), pin_outer=True), shift=self.ep.shift)]

    def stores(self, t: BandTile, obase: int, ob: int) -> list[Store]:
        offset = ((t.ng * self.cb + t.cb) * self.oh + t.oy) * self.ow
        axes = [(t.noh, self.ow), (self.ow, 1)]
        return [
            Store(obase + j * ob + tr.sram, "out", tr.offset, tr.y, tr.x, tr.stride)
            for j in range(t.noc)
            for tr in plan_transfers(0, offset + j * self.oh * self.ow, axes)
        ]

    # ---- the stream -------------------------------------------------------------------------------
    def stream(self, s: DepthwiseSchedule) -> Stream:
        if not self.fits(s.toc, s.toh, s.vthreads):
            raise CompileError(
                f"depthwise schedule {s.describe()} needs {s.toc * self.per_block(s.toh)[0]} INP and "
                f"{s.toc * self.per_block(s.toh)[1]} ACC elements per thread, the shares hold {self.share(s.vthreads)}"
            )
        tiles = self.tiles(s)
        threads = [
            [self.block(v, tile, s, weights=v == i == 0) for i, tile in enumerate(tiles[v :: s.vthreads])]
            for v in range(s.vthreads)
        ]
        return lower_vthreads(threads, self.prologue(threads))

    def prologue(self, threads: list[list[Block]]) -> Block:
        """The bias and multiplier rows, the activation table, every distinct micro-kernel made resident."""
        ops: list[Op] = [Load(MemType.ACC, self.bias0, "bias", 0, 1, self.cb, self.cb)]
        if self.passes.mul:
            ops.append(Load(MemType.ACC, self.mult0, "mult", 0, 1, self.cb, self.cb))
        if self.passes.table is not None:
            n = self.cfg.lut_depth
            ops.append(Load(MemType.LUT, 0, TABLE, 0, 1, n, n))
        if self.gap is not None:
            ops.append(Load(MemType.ACC, self.sum0 + self.ng * self.cb, "gapmul", 0, 1, 1, 1))
        return prologue_block(ops, threads, self.cfg.uop_depth)


def window_weights(w: np.ndarray, groups: int, block: int) -> np.ndarray:
    """(C, 1, k, k) int8 filters -> (channel blocks * 2 * groups, block, block) WGT elements, one per pass:
    element ``(j * groups + g) * 2 + h`` row ``l`` (a lane of half ``h``) column ``i`` holds channel
    ``j * block + l``'s tap at window position ``p = g * block + i`` (``p = ky * DW_MAX_K + DW_MAX_K - k + kx``),
    zero where no tap sits and in the other half's rows."""
    c, _, k, _ = w.shape
    cb, half = -(-c // block), block // 2
    filt = np.zeros((cb * block, k, k), np.int8)
    filt[:c] = w[:, 0]
    pos = np.zeros((cb, groups * block, block), np.int8)  # (block, position, channel)
    for ky in range(k):
        for kx in range(k):
            pos[:, ky * DW_MAX_K + DW_MAX_K - k + kx, :] = filt[:, ky, kx].reshape(cb, block)
    out = np.zeros((cb, groups, 2, block, block), np.int8)
    for h in range(2):
        lanes = slice(h * half, (h + 1) * half)
        out[:, :, h, lanes, :] = pos.reshape(cb, groups, block, block)[..., lanes].transpose(0, 1, 3, 2)
    return out.reshape(cb * 2 * groups, block, block)


class CompiledDepthwise:
    """A depthwise convolution compiled for one config: the fastest schedule on the timing-only simulator
    among :meth:`DepthwiseLowering.candidates`, its stream and constants."""

    def __init__(
        self,
        spec: DepthwiseSpec,
        w: np.ndarray,
        ep: Epilogue,
        cfg: HwConfig,
        schedule: DepthwiseSchedule | None,
        cache: ScheduleCache | None = None,
        gap: PoolSpec | None = None,
    ):
        if w.dtype != np.int8 or w.shape != (spec.shape[1], 1, spec.k, spec.k):
            raise CompileError(
                f"depthwise weights must be int8 of shape {(spec.shape[1], 1, spec.k, spec.k)}, got {w.dtype} {w.shape}"
            )
        self.spec, self.weights, self.epilogue, self.cfg = spec, w, ep, cfg
        self.lowering = low = DepthwiseLowering(spec, ep, cfg, gap=gap)
        key = f"dw:{spec.describe()}:{low.passes.key()}"
        key += f":gap{gap.shift}_{gap.clip[0]}_{gap.clip[1]}" if gap is not None else ""
        self.search = cached_fastest(low, low.candidates, DepthwiseSchedule, key, cache, schedule)
        self.schedule, self.stream = self.search.schedule, self.search.stream

    @cached_property
    def constants(self) -> dict[str, np.ndarray]:
        return self.lowering.constants(self.weights)

    def program(self, dev: Device | None = None) -> list[Insn]:
        return emit_program(self.lowering, self.stream, dev or Device(self.cfg))

    def run(self, dev: Device, x: np.ndarray, max_cycles: int | None = None) -> LayerRun:
        """Run on ``dev``: ``x`` int8 NCHW; returns a :class:`~vdla.compiler.run.LayerRun` (with a fused global
        average, its (N, C, 1, 1) int8 result as ``extra["pool"]``)."""
        low, cfg = self.lowering, self.cfg
        pool = {"pool": (low.ng, low.cb, 1, 1, cfg.batch, cfg.block_out)} if low.gap is not None else {}
        run = run_band(dev, low, self.stream, self.constants, x, "depthwise", max_cycles=max_cycles, extra=pool)
        if pool:
            run.extra["pool"] = unpack_activation(run.extra["pool"], *self.spec.shape[:2])
        return run


def mode_refusal(in_shape, weights: np.ndarray, stride, padding, dilation, ep: Epilogue, cfg: HwConfig) -> str | None:
    """Why a depthwise layer (``weights`` (C, 1, k, k) int8, an NCHW ``in_shape``) cannot run on ``cfg``'s
    depthwise mode, naming the limit, or None when :func:`compile_depthwise` takes it: the config has the mode,
    no dilation, a window and epilogue the mode and its passes take, and one output row fits the buffers."""

    def check() -> None:
        if pair(OP, "dilation", dilation) != (1, 1):
            raise CompileError(f"dilation {dilation}: the depthwise mode's window reads adjacent pixels")
        (sh, sw), (kh, kw) = pair(OP, "stride", stride), weights.shape[2:]
        if sh != sw or kh != kw:
            raise CompileError(
                f"kernel {kh}x{kw}, stride {sh}x{sw}: the depthwise mode takes square kernels and equal strides"
            )
        DepthwiseLowering(DepthwiseSpec.make(in_shape, kh, sh, padding), ep, cfg).check_minimal()

    return refusal(check)


def compile_depthwise(
    in_shape,
    weights: np.ndarray,
    *,
    stride: int = 1,
    padding=0,
    epilogue: Epilogue | None = None,
    config=DEFAULT_PRESET,
    schedule: DepthwiseSchedule | None = None,
    cache: ScheduleCache | None = None,
    gap: PoolSpec | None = None,
) -> CompiledDepthwise:
    """Compile a depthwise convolution (``weights`` (C, 1, k, k) int8) with its epilogue for ``config``; ``cache``
    keeps the schedule chosen (or ``schedule`` is taken as given). ``gap``: a global average of the output
    (:meth:`~vdla.compiler.pool.PoolSpec.global_avg`) fused into the tiles, its result a second output."""
    spec = DepthwiseSpec.make(in_shape, int(weights.shape[-1]), stride, padding)
    return CompiledDepthwise(spec, weights, epilogue or Epilogue(), load_config(config), schedule, cache, gap)
