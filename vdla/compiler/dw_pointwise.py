"""A depthwise convolution and the 1x1 convolution reading it, fused: the depthwise output never reaches DRAM.

In an inverted residual block (MobileNets) a depthwise layer writes E channels that the 1x1 (pointwise, project)
layer after it reads once. Run apart, that tensor goes to DRAM and comes back: 2 x E bytes a pixel, the largest
traffic of such networks. Fused, the GEMM core reads it from OUT, where the depthwise epilogue left it
(EPI ``src_out``, docs/isa.md).

A tile is ``toh`` output rows x every column x every output channel of the pointwise layer; its reduction over
the E channels runs in steps of ``tic`` channel blocks. One block per step:

* load stage: LOAD INP of the step's channel blocks' depthwise input windows (as
  :class:`~vdla.compiler.depthwise.DepthwiseLowering` loads them) into the thread's INP share, and the step's
  pointwise weights where they are not all resident;
* compute: an EPI sets the depthwise mode and the depthwise epilogue's OUT mode; one ``init`` GEMM per output row
  writes the step's depthwise outputs into the thread's D region of ACC (channel block, row, column: the layout a
  1x1 convolution's input window has in INP) and the depthwise MUL pass, if any, requantizes them into OUT; then
  an EPI with ``src_out`` and the pointwise OUT mode, and the pointwise GEMM reads those int8 rows from OUT (with
  ``init`` from the bias rows on the first step);
* the last step: the pointwise epilogue (residual and passes, exactly a conv2d tile's:
  :class:`~vdla.compiler.conv_emit.ThreadBuilder`) and the STOREs.

Buffers: each thread's INP share holds a step's windows; its ACC share the pointwise tile (P) and its residual
(when the layer adds one); D (and X, below) is one scratch region all threads share, since only one block's
compute writes and reads it, never a LOAD or a STORE; the per-channel rows of the layers sit at the top of ACC
(the pointwise layer's above the depthwise layer's, above the expand layer's); WGT holds the depthwise window
weights from 0, the expand weights after them, then every pointwise weight when they all fit, step-major (each
step's weights loaded once, by the first band's block of that step), else each thread's share holds a step's.

With an *expand* layer (the 1x1 convolution before the depthwise one in an inverted residual block), the whole
block runs fused and the expanded tensor never reaches DRAM either. The load stage brings the band's rows of the
block's input (every channel block of it, every column: the expand layer's input) into the thread's INP share
with the band's first step; each step then computes its channel blocks' depthwise input windows on chip: an ALU
pass zeroes the window's border (the depthwise layer's zero padding) in X, an ``init`` GEMM runs the expand
layer's 1x1 convolution over the window's rows into X with its epilogue in the OUT mirror (bias by ``init``, the
multiplier by EPI ``mul``: the expand layer may need no ALU pass), and the depthwise GEMMs read their windows
from X's OUT rows (EPI ``src_out``). Consecutive bands share ``k - s`` window rows, which each band computes
again.

Invariant: the program computes exactly the pointwise layer's oracle on the depthwise layer's int8 output
(:func:`dw_pointwise_oracle`), bit for bit, on every backend.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from vdla.compiler.blocks import Block, Epi, Gemm, Load, Op
from vdla.compiler.cache import ScheduleCache
from vdla.compiler.conv2d import _constants, rows_tensor
from vdla.compiler.conv_emit import ThreadBuilder
from vdla.compiler.conv_lowering import ConvLowering, Tile
from vdla.compiler.depthwise import DepthwiseLowering, DepthwiseSpec, DwPasses, depthwise_oracle
from vdla.compiler.epilogue_passes import normalize, residual_gemm_fits
from vdla.compiler.identity import EYE, identity_weights, load_identity
from vdla.compiler.microcode import Limits, lower_nest
from vdla.compiler.run import LayerRun, run_bound
from vdla.compiler.schedule import Schedule
from vdla.compiler.search import cached_fastest, emit_program
from vdla.compiler.spec import ROWS, TABLE, CompileError, Conv2dSpec, EpilogueSpec, OutputView, refusal
from vdla.compiler.tiling import BandTile, band_tiles, halvings
from vdla.compiler.transfer import plan_transfers
from vdla.compiler.vthreads import Stream, lower_vthreads, prologue_block
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.graph import oracle
from vdla.graph.epilogue import Epilogue
from vdla.graph.layout import pack_activation, pack_weights, unpack_activation
from vdla.isa import Insn, MemType
from vdla.runtime.device import Device

MAX_VTHREADS = 2
DW_ROWS = {"bias": "dwbias", "mult": "dwmult"}  # the depthwise layer's constants, renamed beside the pointwise's
EX = "ex"  # the prefix of the expand layer's constants (weights and per-channel rows)


@dataclass(frozen=True)
class FusedSchedule:
    """Tile: ``toh`` output rows (every column, every output channel); ``tic`` channel blocks a reduction step;
    ``vthreads`` threads, dealt the tiles round-robin; ``res_inp``: the int8 residual comes into INP on the load
    stage and a GEMM against the identity block adds it (else a compute-stage LOAD into ACC and an ALU ADD), as
    :class:`~vdla.compiler.schedule.Schedule` has it. ``split``: one band (``toh`` every output row), whose steps
    the threads take in turn: a step's loads overlap the step before it, and the threads share the band's one
    pointwise tile, its residual and (with an expand layer) its input rows."""

    toh: int
    tic: int
    vthreads: int
    res_inp: bool = False
    split: bool = False

    def describe(self) -> str:
        return f"oh{self.toh} ic{self.tic} vt{self.vthreads}" + " res-inp" * self.res_inp + " split" * self.split


def dw_pointwise_oracle(
    x: np.ndarray, dw_w: np.ndarray, dw_spec: DepthwiseSpec, dw_ep: Epilogue, pw_w: np.ndarray, pw_ep: Epilogue,
    residual: np.ndarray | None = None, expand: tuple[np.ndarray, Epilogue] | None = None,
) -> np.ndarray:  # fmt: skip
    """The numpy definition of the fused layer: with ``expand`` (weights, epilogue), the 1x1 expand layer's int8
    output of ``x`` first; the depthwise layer's int8 output; then the 1x1 layer on it."""
    if expand is not None:
        ew, eep = expand
        x = oracle.conv2d_oracle(x, ew, Conv2dSpec.make(x.shape, ew.shape[0], (1, 1)), eep)
        x = x if eep.table is None else oracle.table(x, eep.table)
    mid = depthwise_oracle(x, dw_w, dw_spec, dw_ep)
    out = oracle.conv2d_oracle(mid, pw_w, Conv2dSpec.make(mid.shape, pw_w.shape[0], (1, 1)), pw_ep, residual)
    return out if pw_ep.table is None else oracle.table(out, pw_ep.table)


def pair_refusal(dw_spec: DepthwiseSpec, dw_ep: Epilogue, pw_spec: Conv2dSpec, pw_ep: EpilogueSpec) -> str | None:
    """Why a depthwise layer and the 1x1 convolution after it cannot fuse (whatever the buffers), or None."""
    if (pw_spec.kh, pw_spec.kw, pw_spec.sh, pw_spec.sw) != (1, 1, 1, 1) or any(pw_spec.pad):
        return "the pointwise layer is not a 1x1 convolution of stride 1 without padding"
    if (pw_spec.n, pw_spec.c, pw_spec.h, pw_spec.w) != dw_spec.out_shape:
        return f"the pointwise layer reads {pw_spec.n, pw_spec.c, pw_spec.h, pw_spec.w}, not {dw_spec.out_shape}"
    if pw_ep.pool:
        return "the pointwise layer has a fused pool"
    if DwPasses.of(dw_ep).table is not None and pw_ep.table:  # a clamp the mirror lacks is a table too
        return "both layers need an activation table, and the LUT holds one"
    return None


def expand_refusal(ex: ConvLowering, dw_spec: DepthwiseSpec, tables: int) -> str | None:
    """Why an expand layer (lowered as ``ex``) cannot run fused before the depthwise layer ``dw_spec``, or None;
    ``tables``: how many of the three layers need the activation table."""
    sp = ex.spec
    if (sp.kh, sp.kw, sp.sh, sp.sw) != (1, 1, 1, 1) or any(sp.pad):
        return "the expand layer is not a 1x1 convolution of stride 1 without padding"
    if (sp.n, sp.oc, sp.oh, sp.ow) != dw_spec.shape:
        return f"the expand layer writes {sp.n, sp.oc, sp.oh, sp.ow}, the depthwise layer reads {dw_spec.shape}"
    if ex.passes or ex.epi.residual or ex.epi.pool or ex.epi.post:
        return "the expand layer's epilogue needs ALU passes (only what the OUT mirror applies fuses)"
    if tables > 1:
        return "more than one of the three layers needs an activation table, and the LUT holds one"
    return None


class DwPointwiseLowering:
    """The fused pair on one config: geometry, buffer fit and the block stream (module docstring)."""

    def __init__(
        self,
        dw_spec: DepthwiseSpec,
        dw_ep: Epilogue,
        pw_spec: Conv2dSpec,
        pw_epi: EpilogueSpec,
        cfg: HwConfig,
        mul_imm: int = 1,
        view: OutputView | None = None,
        expand: tuple[Conv2dSpec, EpilogueSpec, int] | None = None,
    ):
        """``expand``: (spec, epilogue spec, immediate multiplier) of the 1x1 layer fused before the depthwise one."""
        why = pair_refusal(dw_spec, dw_ep, pw_spec, pw_epi)
        why = why or cfg.src_out_refusal()
        if why is None and view is not None and view.copies:
            why = "its output view stores copies (a layer's own tiles write them: conv2d)"
        if why:
            raise CompileError(f"{dw_spec.describe()} -> 1x1 conv: cannot fuse: {why}")
        self.cfg, self.limits = cfg, Limits.of(cfg)
        self.pw = ConvLowering(pw_spec, pw_epi, cfg, mul_imm, view)
        self.dw = DepthwiseLowering(dw_spec, dw_ep, cfg, acc_top=self.pw.rows_base)
        self.ex = None
        if expand is not None:
            ex_spec, ex_epi, ex_imm = expand
            self.ex = ConvLowering(ex_spec, ex_epi, cfg, ex_imm, acc_top=self.dw.bias0)
            tables = sum((self.ex.out_mode.lut, self.dw.passes.table is not None, bool(pw_epi.table)))
            if why := expand_refusal(self.ex, dw_spec, tables):
                raise CompileError(f"1x1 conv -> {dw_spec.describe()} -> 1x1 conv: cannot fuse: {why}")
        self.spec = dw_spec
        self.cb, self.oh, self.ow = self.dw.cb, self.dw.oh, self.dw.ow
        self.dw_elems = self.cb * self.dw.elements
        self.ex_elems = 0 if self.ex is None else self.cb * self.ex.ib  # the expand weights, resident after them
        self.ex_top = self.dw.bias0 if self.ex is None else self.ex.rows_base  # the threads' ACC lies below it
        self.wgt_free = self.pw.wgt_free - self.dw_elems - self.ex_elems  # WGT for the 1x1 weights (identity on top)
        self.wgt_shared = self.pw.ob * self.pw.ib <= self.wgt_free
        self.residual = bool(pw_epi.residual)

    # ---- fit --------------------------------------------------------------------------------------
    def share(self, vthreads: int) -> tuple[int, int, int]:
        """(INP, WGT, ACC) elements of one thread's share (no WGT share when the pointwise weights are resident); the
        ACC share before the scratch (:meth:`scratch`) is taken from it."""
        c = self.cfg
        wgt = 0 if self.wgt_shared else max(self.wgt_free, 0) // vthreads
        return c.inp_depth // vthreads, wgt, max(self.ex_top, 0) // vthreads

    def windows(self, toh: int, tic: int) -> int:
        """INP elements of a full-size tile's inputs: a step's depthwise windows, or with an expand layer the
        band's rows of its input (every channel block)."""
        if self.ex is None:
            return tic * self.dw.per_block(toh)[0]
        return self.ex.ib * self.dw.in_rows(toh) * self.dw.w

    def scratch(self, toh: int, tic: int) -> int:
        """ACC elements of a step's depthwise outputs (D) and, with an expand layer, its depthwise windows (X).
        Both are written and read by one block's compute alone (never loaded or stored), and the compute stage runs
        one block's instructions after another's: the threads share one scratch region, below the resident rows."""
        return toh * self.ow * tic + (0 if self.ex is None else tic * self.dw.per_block(toh)[0])

    def need(self, toh: int, tic: int, res_inp: bool = False) -> tuple[int, int, int]:
        """(INP, WGT, ACC) elements one thread needs for a full-size tile, besides the shared scratch: the
        residual's tile takes INP (``res_inp``) or ACC."""
        tile = toh * self.ow * self.pw.ob
        wgt = 0 if self.wgt_shared else self.pw.ob * tic
        return self.windows(toh, tic) + tile * res_inp, wgt, tile * (1 + (self.residual and not res_inp))

    @property
    def residual_inp(self) -> bool:
        """Whether the pointwise layer's residual may come through INP (``res_inp``): an int8 residual added as it
        is, by the identity GEMM. A rescaled one would need a region of its own in ACC, which the fused tile does
        not keep (the pointwise tile's residual region is its own accumulators)."""
        return self.pw.residual_gemm and residual_gemm_fits(self.pw.epi)

    def fits(self, toh: int, tic: int, vthreads: int, res_inp: bool = False, split: bool = False) -> bool:
        """Whether a schedule's tiles fit the buffers; ``split`` (:class:`FusedSchedule`): one band, one tile (and
        residual) in ACC for every thread, and with an expand layer the band's input rows in the whole of INP."""
        if res_inp and not self.residual_inp:
            return False
        pixels = toh * self.ow
        factors = max(pixels, self.dw.per_block(toh)[0]) <= min(self.limits.max_factor[:2]) or tic == 1
        if split and toh != self.oh:
            return False
        (inp, wgt, acc), (hi, hw, _) = self.need(toh, tic, res_inp), self.share(vthreads)
        if split and self.ex is not None:
            hi = self.cfg.inp_depth
        tiles = 1 if split else vthreads
        return factors and inp <= hi and wgt <= hw and tiles * acc + self.scratch(toh, tic) <= self.ex_top

    def check_minimal(self) -> None:
        """Raise CompileError, naming the limit, when one output row of one channel block does not fit."""
        if self.fits(1, 1, 1) and self.wgt_free >= 0:
            return
        need, have = self.need(1, 1), self.share(1)
        first = "1x1 conv -> " * (self.ex is not None)
        raise CompileError(
            f"{first}{self.spec.describe()} -> 1x1 conv to {self.pw.ob} channel blocks: one output row needs (INP, "
            f"WGT, ACC) {need} elements and {self.scratch(1, 1)} ACC of scratch, the buffers hold {have} after the "
            f"resident rows and {self.dw_elems + self.ex_elems} resident weights (WGT {self.cfg.wgt_depth})"
        )

    def candidates(self) -> list[FusedSchedule]:
        """Per step of ``tic`` channel blocks (halvings), residual form and thread count, the most output rows that
        fit. With an expand layer one thread's taller bands may win: they compute fewer window rows twice, while
        its loads wait for its compute."""
        self.check_minimal()
        out = []
        forms = (False, True) if self.residual_inp else (False,)
        for tic, res_inp in itertools.product(halvings(self.cb), forms):
            for v in range(MAX_VTHREADS, 0, -1):  # two threads where a row fits them (one waits for its loads)
                toh = max((t for t in range(1, self.oh + 1) if self.fits(t, tic, v, res_inp)), default=0)
                if toh:
                    out.append(FusedSchedule(toh, tic, v, res_inp))
                    if self.ex is None:
                        break
            steps = -(-self.cb // tic)
            if steps > 1 and self.fits(self.oh, tic, MAX_VTHREADS, res_inp, split=True):
                out.append(FusedSchedule(self.oh, tic, MAX_VTHREADS, res_inp, split=True))
        return out

    # ---- tensors ----------------------------------------------------------------------------------
    def tensor_bytes(self) -> dict[str, int]:
        dw = {DW_ROWS.get(k, k): n for k, n in self.dw.tensor_bytes().items() if k != "out"}
        out = {**self.pw.tensor_bytes(), **dw}
        if self.ex is not None:  # the block's input is the expand layer's
            ex = self.ex.tensor_bytes()
            out.update({EX + k: n for k, n in ex.items() if k not in ("inp", "out", TABLE)}, inp=ex["inp"])
            out.update({TABLE: ex[TABLE]} if TABLE in ex else {})
        return out

    def constants(
        self, dw_w: np.ndarray, pw_w: np.ndarray, pw_ep: Epilogue, expand: tuple[np.ndarray, Epilogue] | None = None
    ) -> dict[str, np.ndarray]:
        c, pw = self.cfg, self.pw
        out = {DW_ROWS.get(k, k): a for k, a in self.dw.constants(dw_w).items()}
        if expand is not None:
            ew, eep = expand
            rows = _constants(eep, self.ex.epi, self.ex.spec.oc, c)
            out.update({EX + k: a for k, a in rows.items()}, exwgt=pack_weights(ew, c.block_out, c.block_in))
            rows_tensor(out, [EX + r for r in self.ex.row_names], EX + ROWS)
            if eep.table is not None:
                out[TABLE] = np.asarray(eep.table, np.int8).reshape(c.lut_depth, c.batch, c.block_out)
        out.update(_constants(pw_ep, pw.epi, pw.spec.oc, c), wgt=pack_weights(pw_w, c.block_out, c.block_in))
        rows_tensor(out, pw.row_names)
        if pw.residual_gemm:  # the identity block a res_inp schedule's residual GEMM reads
            out[EYE] = identity_weights(c)
        if pw_ep.table is not None:
            out[TABLE] = np.asarray(pw_ep.table, np.int8).reshape(c.lut_depth, c.batch, c.block_out)
        return out

    # ---- blocks -----------------------------------------------------------------------------------
    def regions(self, thread: int, s: FusedSchedule) -> tuple[int, int, int, int]:
        """(INP, P, residual, D) bases of the thread's share (the residual's in INP after the windows with
        ``res_inp``, else in ACC after P); D is the shared scratch's (:meth:`scratch`), right below the resident
        rows."""
        inp = self.share(s.vthreads)[0]
        d = self.ex_top - self.scratch(s.toh, s.tic)
        tile, acc = self.pw.ob * s.toh * self.ow, d // s.vthreads
        p = 0 if s.split else thread * acc
        inp0 = 0 if s.split and self.ex is not None else thread * inp  # split: the band's input rows are shared
        if s.res_inp:
            return inp0, p, inp0 + self.windows(s.toh, s.tic), d
        return inp0, p, p + tile, d

    def x_base(self, s: FusedSchedule) -> int:
        """Start of the X region (a step's depthwise windows, computed by the expand layer), after D."""
        return self.regions(0, s)[3] + s.toh * self.ow * s.tic

    def block(self, thread: int, band: BandTile, k: int, s: FusedSchedule, tb: ThreadBuilder, first: bool) -> Block:
        """Step ``k`` (channel blocks ``k * tic ..``) of the tile of output rows ``band``; ``first``: a block of the
        stream's first band, which also loads the resident weights of its channel blocks (the first band's blocks
        come first on the load and compute stages, so every later block using them finds them)."""
        dw, pw = self.dw, self.pw
        c0 = k * s.tic
        n, last = min(s.tic, self.cb - c0), c0 + s.tic >= self.cb
        inp0, p0, _, d0 = self.regions(thread, s)
        win, pix = dw.per_block(s.toh)[0], band.noh * self.ow
        step = BandTile(band.ng, c0, n, band.oy, band.noh)
        w0 = self.dw_elems + self.ex_elems  # the pointwise weights: resident step-major, or a step's in the share
        wbase = w0 + (pw.ob * c0 if self.wgt_shared else thread * self.share(s.vthreads)[1])
        if self.ex is None:
            loads = dw.window_loads(step, inp0, win)[0]
            compute = dw.gemms(step, d0, inp0, pix, win)
        else:  # the band's input rows once, with its first step; each step's windows computed into X
            x0 = self.x_base(s)
            loads = self.expand_loads(band, inp0) if k == 0 else []
            compute = self.expand(step, inp0, x0, win) + dw.gemms(step, d0, x0, pix, win, src_out=True)
        if first:  # the step's resident weights first: the compute waits for them, not for the whole layer's
            el = dw.elements
            resident = [Load(MemType.WGT, c0 * el, "dwwgt", c0 * el, 1, n * el, n * el)]
            if self.ex is not None:
                m = self.ex.ib
                resident.append(Load(MemType.WGT, self.dw_elems + c0 * m, EX + "wgt", c0 * m, 1, n * m, n * m))
            loads = resident + [load_identity(pw.eye)] * (s.res_inp and k == 0) + loads
        if first or not self.wgt_shared:
            loads += [
                Load(MemType.WGT, wbase + tr.sram, "wgt", tr.offset, tr.y, tr.x, tr.stride)
                for tr in plan_transfers(0, c0, [(pw.ob, pw.ib), (n, 1)])
            ]
        tile = Tile(band.ng, 0, pw.ob, band.oy, band.noh, 0, self.ow)
        compute += dw.epilogue(step, d0, pix)
        compute += self.pointwise(k, n, tile, tb, (p0, d0, wbase))
        if not last:
            return Block(thread, tuple(loads), tuple(compute), ())
        if s.res_inp:  # the residual into INP; the identity GEMM reads INP again
            loads += tb.residual_inp_loads(tile)
            compute.append(pw.epi_op(tile))
        compute += tb.residual_loads(tile, 0) + tb.epilogue_ops(tile, 0, p0)
        return Block(thread, tuple(loads), tuple(compute), tuple(tb.stores(tile, p0)))

    def input_rows(self, band: BandTile) -> tuple[int, int]:
        """(first input row, rows) of the band's depthwise windows inside the input."""
        r_first, (top, bottom, _, _) = self.dw.window_border(band)
        return r_first + top, self.dw.in_rows(band.noh) - top - bottom

    def expand_loads(self, band: BandTile, inp0: int) -> list[Load]:
        """LOAD INP of the band's window rows inside the input, every column and channel block of the expand
        layer's input, densely from ``inp0`` (channel block, row, column)."""
        ex, (r0, n) = self.ex, self.input_rows(band)
        h, w = self.dw.h, self.dw.w
        axes = [(ex.ib, h * w), (n, w), (w, 1)]
        offset = (band.ng * ex.ib * h + r0) * w
        return [
            Load(MemType.INP, tr.sram, "inp", tr.offset, tr.y, tr.x, tr.stride)
            for tr in plan_transfers(inp0, offset, axes)
        ]

    def expand(self, step: BandTile, inp0: int, x0: int, win: int) -> list[Op]:
        """A step's depthwise windows computed into X (``win`` elements a channel block from ``x0``, rows of
        ``cols``): the border zeroed (a plain EPI, then ALU ADDs of 0 onto reset rows), then the expand layer's EPI
        and its ``init`` GEMM over the window's rows inside the input: channel blocks outer (stepping the bias and
        multiplier rows), a row's columns inner, the rows and the input's channel blocks as micro-ops."""
        ex, dw, n = self.ex, self.dw, step.noc
        top, _, left, _ = pad = dw.window_border(step)[1]
        rows = self.input_rows(step)[1]
        ops: list[Op] = [Epi(False, False, 0, None), *dw.border_fill(step, x0, win, pad, 0)]
        nest = ((n, (win, 0, ex.ib)), (rows, (dw.cols, dw.w, 0)), (dw.w, (1, 1, 0)), (ex.ib, (0, rows * dw.w, 1)))
        base = (x0 + top * dw.cols + left, inp0, self.dw_elems + step.cb * ex.ib)
        ops.append(ex.epi_op(Tile(step.ng, step.cb, n, 0, 0, 0, 0), bias=True))
        ops.append(Gemm(lower_nest(nest, base, self.limits, pin_outer=True), init=True))
        return ops

    def pointwise(self, k: int, n: int, tile: Tile, tb: ThreadBuilder, base: tuple[int, int, int]) -> list[Op]:
        """The EPI (``src_out``, the pointwise OUT mode, its bias rows on the first step) and the pointwise GEMM
        of a step over ``n`` channel blocks read from OUT at D, accumulating into P."""
        pw = self.pw
        nest = pw.gemm_nest(pw.ob, tile.noh, self.ow, n, n, False)
        return (tb.init_gemms if k == 0 else tb.step_gemms)(tile, nest, base, src_out=True)

    # ---- the stream -------------------------------------------------------------------------------
    def stream(self, s: FusedSchedule) -> Stream:
        if s.res_inp and not self.residual_inp:
            raise CompileError(
                f"fused schedule {s.describe()}: res-inp adds an int8 residual as it is, the pointwise layer's is "
                f"{'rescaled' if self.pw.epi.rescale else 'not one'}"
            )
        if not self.fits(s.toh, s.tic, s.vthreads, s.res_inp, s.split):
            band = " (split: one band of every output row)" if s.split else ""
            raise CompileError(
                f"fused schedule {s.describe()} needs {self.need(s.toh, s.tic, s.res_inp)} (INP, WGT, ACC) elements "
                f"per thread and {self.scratch(s.toh, s.tic)} ACC of scratch, the shares hold "
                f"{self.share(s.vthreads)}{band}"
            )
        threads: list[list[Block]] = [[] for _ in range(s.vthreads)]
        builders = [self.thread_builder(v, s) for v in range(s.vthreads)]
        steps = -(-self.cb // s.tic)
        for i, band in enumerate(band_tiles(self.dw.ng, 1, self.oh, 1, s.toh)):
            for k in range(steps):  # a band per thread in turn, or with split the band's steps
                v = (k if s.split else i) % s.vthreads
                threads[v].append(self.block(v, band, k, s, builders[v], i == 0))
        return lower_vthreads(threads, self.prologue(threads))

    def thread_builder(self, v: int, s: FusedSchedule) -> ThreadBuilder:
        """Thread ``v``'s builder of the pointwise tile's GEMMs, epilogue and stores, in its regions."""
        tb = ThreadBuilder(self.pw, Schedule(self.pw.ob, s.toh, self.ow, s.tic, s.vthreads, res_inp=s.res_inp), v)
        _, p0, r0, _ = self.regions(v, s)
        tb.acc = {"tile": p0, "res": p0 if s.res_inp else r0, "pool": p0, "pairs": p0}  # no pool, no pairs
        tb.res_inp0 = r0  # read only with res_inp
        return tb

    def prologue(self, threads: list[list[Block]]) -> Block:
        """Both layers' per-channel rows, the activation table, every distinct micro-kernel made resident."""
        pw, dw = self.pw, self.dw
        ops: list[Op] = pw.rows_loads()
        ops.append(Load(MemType.ACC, dw.bias0, "dwbias", 0, 1, self.cb, self.cb))
        if dw.passes.mul:
            ops.append(Load(MemType.ACC, dw.mult0, "dwmult", 0, 1, self.cb, self.cb))
        if self.ex is not None:
            ex = self.ex
            ops += ex.rows_loads(EX + ROWS)
        if dw.passes.table is not None or pw.epi.table or (self.ex is not None and self.ex.out_mode.lut):
            ops.append(Load(MemType.LUT, 0, TABLE, 0, 1, self.cfg.lut_depth, self.cfg.lut_depth))
        return prologue_block(ops, threads, self.cfg.uop_depth)


class CompiledDwPointwise:
    """The fused pair (or, with an expand layer, the fused inverted residual block) compiled for one config: the
    fastest of :meth:`DwPointwiseLowering.candidates` on the timing-only simulator, its stream and constants."""

    def __init__(
        self,
        dw_spec: DepthwiseSpec,
        dw_w: np.ndarray,
        dw_ep: Epilogue,
        pw_w: np.ndarray,
        pw_ep: Epilogue,
        cfg: HwConfig,
        view: OutputView | None = None,
        schedule: FusedSchedule | None = None,
        cache: ScheduleCache | None = None,
        expand: tuple[np.ndarray, Epilogue] | None = None,
        in_shape: tuple[int, ...] | None = None,
    ):
        """``expand``: the 1x1 expand layer's int8 weights (E, C, 1, 1) and epilogue, reading ``in_shape``."""
        pw_spec, self.epilogue, imm = _pointwise(dw_spec, dw_w, pw_w, pw_ep)
        self.spec, self.pw_spec, self.cfg = dw_spec, pw_spec, cfg
        self.ex_spec, ex = None, None
        if expand is not None:
            expand = (expand[0], normalize(expand[1]))
            self.ex_spec, ex = _expand(in_shape, dw_spec, *expand)
        self.in_shape = dw_spec.shape if expand is None else tuple(in_shape)
        self.lowering = DwPointwiseLowering(dw_spec, dw_ep, pw_spec, self.epilogue, cfg, imm, view, ex)
        self.constants = self.lowering.constants(dw_w, pw_w, normalize(pw_ep), expand)
        low = self.lowering
        key = f"dwpw:{dw_spec.describe()}:{low.dw.passes.key()}:{pw_spec.key()}:{self.epilogue.key()}"
        key += f":{view.key()}" if view else ""
        key += f":ex:{ex[0].key()}:{ex[1].key()}" if ex else ""
        self.search = cached_fastest(low, low.candidates, FusedSchedule, key, cache, schedule)
        self.schedule, self.stream = self.search.schedule, self.search.stream

    @property
    def macs(self) -> int:
        return self.spec.macs + self.pw_spec.macs + (self.ex_spec.macs if self.ex_spec else 0)

    def program(self, dev: Device | None = None) -> list[Insn]:
        return emit_program(self.lowering, self.stream, dev or Device(self.cfg))

    def run(self, dev: Device, x: np.ndarray, residual: np.ndarray | None = None, max_cycles: int | None = None):
        """Run on ``dev``: ``x`` int8 NCHW (the expand layer's input, if any, else the depthwise layer's),
        ``residual`` (the pointwise output's shape) exactly when the layer adds one; returns a
        :class:`~vdla.compiler.run.LayerRun` of the pointwise output."""
        cfg, low = self.cfg, self.lowering
        if x.dtype != np.int8 or x.shape != self.in_shape:
            raise CompileError(f"input must be int8 of shape {self.in_shape}, got {x.dtype} {x.shape}")
        arrays = dict(self.constants, inp=pack_activation(x, cfg.batch, cfg.block_in))
        if bool(self.epilogue.residual) != (residual is not None):
            raise CompileError("a residual is given exactly when the pointwise layer adds one")
        if residual is not None:
            arrays["res"] = pack_activation(residual, cfg.batch, cfg.block_out)
        pw = low.pw
        shape = (pw.ng, pw.out_blocks, *pw.out_tensor_hw, cfg.batch, cfg.block_out)
        packed, result = run_bound(dev, low, self.stream, arrays, shape, max_cycles=max_cycles)
        return LayerRun(unpack_activation(packed, self.pw_spec.n, self.pw_spec.oc), result)


def _pointwise(dw_spec: DepthwiseSpec, dw_w: np.ndarray, pw_w: np.ndarray, pw_ep: Epilogue):
    """The pointwise layer's spec, its epilogue's spec and immediate multiplier; checks both weights."""
    c, k = dw_spec.shape[1], dw_spec.k
    if dw_w.dtype != np.int8 or dw_w.shape != (c, 1, k, k):
        raise CompileError(f"depthwise weights must be int8 of shape {(c, 1, k, k)}, got {dw_w.dtype} {dw_w.shape}")
    if pw_w.dtype != np.int8 or pw_w.ndim != 4 or pw_w.shape[1:] != (c, 1, 1):
        raise CompileError(f"pointwise weights must be int8 of shape (OC, {c}, 1, 1), got {pw_w.dtype} {pw_w.shape}")
    ep = normalize(pw_ep)
    epi = EpilogueSpec.of(ep)
    imm = int(ep.multiplier) if epi.multiplier == "imm" else 1
    return Conv2dSpec.make(dw_spec.out_shape, pw_w.shape[0], (1, 1)), epi, imm


def _expand(in_shape, dw_spec: DepthwiseSpec, ex_w: np.ndarray, ex_ep: Epilogue):
    """(the expand layer's spec, (spec, epilogue spec, immediate multiplier)); checks its weights and shapes."""
    n, c, h, w = (int(d) for d in in_shape)
    e = dw_spec.shape[1]
    if ex_w.dtype != np.int8 or ex_w.shape != (e, c, 1, 1):
        raise CompileError(f"expand weights must be int8 of shape {(e, c, 1, 1)}, got {ex_w.dtype} {ex_w.shape}")
    if (n, e, h, w) != dw_spec.shape:
        raise CompileError(f"the expand layer writes {[n, e, h, w]}, the depthwise layer reads {list(dw_spec.shape)}")
    spec, epi = Conv2dSpec.make((n, c, h, w), e, (1, 1)), EpilogueSpec.of(ex_ep)
    return spec, (spec, epi, int(ex_ep.multiplier) if epi.multiplier == "imm" else 1)


def _dw_spec(in_shape, dw_w: np.ndarray, stride, padding, expand) -> DepthwiseSpec:
    """The depthwise layer's spec: it reads ``in_shape``, or the expand layer's output of it."""
    n, _, h, w = in_shape
    shape = in_shape if expand is None else (n, int(expand[0].shape[0]), h, w)
    return DepthwiseSpec.make(shape, int(dw_w.shape[-1]), stride, padding)


def dw_pointwise_refusal(
    in_shape, dw_w: np.ndarray, stride, padding, dw_ep: Epilogue, pw_w: np.ndarray, pw_ep: Epilogue, cfg: HwConfig,
    expand: tuple[np.ndarray, Epilogue] | None = None,
) -> str | None:  # fmt: skip
    """Why :func:`compile_dw_pointwise` cannot take the pair (with ``expand``, the block) on ``cfg`` (naming the
    limit), or None."""

    def check() -> None:
        dw_spec = _dw_spec(in_shape, dw_w, stride, padding, expand)
        pw_spec, epi, imm = _pointwise(dw_spec, dw_w, pw_w, pw_ep)
        ex = None if expand is None else _expand(in_shape, dw_spec, expand[0], normalize(expand[1]))[1]
        DwPointwiseLowering(dw_spec, dw_ep, pw_spec, epi, cfg, imm, expand=ex).check_minimal()

    return refusal(check)


def compile_dw_pointwise(
    in_shape,
    dw_weights: np.ndarray,
    pw_weights: np.ndarray,
    *,
    stride: int = 1,
    padding=0,
    dw_epilogue: Epilogue | None = None,
    pw_epilogue: Epilogue | None = None,
    out_view: OutputView | None = None,
    config=DEFAULT_PRESET,
    schedule: FusedSchedule | None = None,
    cache: ScheduleCache | None = None,
    expand: tuple[np.ndarray, Epilogue | None] | None = None,
) -> CompiledDwPointwise:
    """Compile a depthwise convolution (``dw_weights`` (C, 1, k, k) int8) and the 1x1 convolution reading its
    output (``pw_weights`` (OC, C, 1, 1) int8), each with its epilogue, as one fused layer for ``config``.
    ``expand`` (weights (C, C_in, 1, 1) int8, epilogue): the 1x1 convolution computing the depthwise layer's input
    from ``in_shape`` (an inverted residual block), fused before them."""
    if expand is not None:
        expand = (expand[0], expand[1] or Epilogue())
    spec = _dw_spec(in_shape, dw_weights, stride, padding, expand)
    cfg = load_config(config)
    dw_ep, pw_ep = dw_epilogue or Epilogue(), pw_epilogue or Epilogue()
    return CompiledDwPointwise(
        spec, dw_weights, dw_ep, pw_weights, pw_ep, cfg, out_view, schedule, cache, expand, tuple(in_shape)
    )
