"""Fitting a tensorized conv2d onto the on-chip buffers: what a schedule's tiles need and whether they fit.

:class:`ConvLowering` holds a conv2d layer with its fused epilogue, tensorized for one hardware config,
and decides, for a :class:`~vdla.compiler.schedule.Schedule`, what its tiles need on chip: each thread's
share of every buffer (input windows, weights, accumulators, a residual in INP or ACC, a fused pool's
region, a post add's regions, a gated input's scratch), the regions every thread shares (the per-channel
rows at the top of the accumulator buffer, the identity weight block at the top of WGT), the order of the
tiles and the reduction steps, and which loads a step can skip. The blocks themselves are built by
:mod:`vdla.compiler.conv_emit`.

Tiles are dealt to the threads round-robin; each thread owns ``1/vthreads`` of every buffer, except the
per-channel rows (bias, multipliers) of all output channels, which a prologue loads once into the top of
the accumulator buffer for every thread to read, for a layer whose residual a GEMM can add, the
identity weight block at the top of the WGT buffer (loaded by the stream's first block, on the load stage,
when the schedule uses it), weights that all fit WGT (:attr:`ConvLowering.weights_shared`) and the whole input of
a token-tiled schedule where it fits INP (:meth:`ConvLowering.inputs_shared`, from INP element 0).

Invariants: a thread's blocks touch only its shares and the shared regions above; a schedule fits
(:meth:`ConvLowering.problems` empty) exactly when its full-size tile's :meth:`ConvLowering.footprint`
(residual included, in INP or ACC) fits the shares and its GEMM kernel fits the UOP buffer.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass

import numpy as np

from vdla.compiler.blocks import Alu, Epi, Load, Op
from vdla.compiler.epilogue_passes import (
    AluPass,
    alu_passes,
    out_mode,
    out_mul_fits,
    residual_gemm_fits,
    residual_inp_fits,
)
from vdla.compiler.fused_pool import FusedPool
from vdla.compiler.identity import EYE, identity_bytes, identity_fits
from vdla.compiler.intrinsic import GemmIntrinsic, conv2d_contraction, tensorize
from vdla.compiler.microcode import Limits, fits_loop, lower_nest, uop_count
from vdla.compiler.schedule import Schedule
from vdla.compiler.spec import MASK, ROWS, TABLE, CompileError, Conv2dSpec, EpilogueSpec, InputUpsample, OutputView
from vdla.compiler.transfer import MAX_STRIDE, plan_transfers
from vdla.compiler.vthreads import round_robin
from vdla.config import HwConfig
from vdla.isa import AluOp, MemType

GEMM_ORDER = ("oc", "b", "oh", "ow", "ic", "ky", "kx")
UNIT_AXIS = (1, (0, 0, 0))
POST = "post_"  # the DRAM tensors of the post add's per-channel rows: its own row names after this prefix
GATE = "gate"  # the DRAM tensor of a gated input's int8 gate (N, C, 1, 1), packed; its multiplier row: "gatemul"


def epilogue_rows(epi: EpilogueSpec) -> list[str]:
    """The per-channel rows an epilogue reads from the accumulator buffer, in their order there."""
    return ["bias"] * epi.bias + ["mult"] * (epi.multiplier == "row") + ["mult_y", "mult_k"] * bool(epi.rescale)


@dataclass(frozen=True)
class Tile:
    """An output tile: batch groups [ng, ng+nn), output-channel blocks [ob, ob+noc), rows [oy, oy+noh), cols
    [ox, ox+now). Its accumulators sit densely as the output's DRAM layout orders them: batch group, channel
    block, row, column (several batch groups only where each is one pixel: :attr:`ConvLowering.token_tiles`)."""

    ng: int
    ob: int
    noc: int
    oy: int
    noh: int
    ox: int
    now: int
    nn: int = 1

    @property
    def pixels(self) -> int:
        """Pixels of the tile per output-channel block, over all its batch groups."""
        return self.nn * self.noh * self.now


def ranges(total: int, size: int) -> list[tuple[int, int]]:
    """(start, length) of each run of ``size`` (the last one shorter) cutting ``total``."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def _changed(*keys: np.ndarray) -> np.ndarray:
    """True at the first position and wherever any key differs from the previous position."""
    diff = np.zeros(len(keys[0]), bool)
    if len(diff):
        diff[0] = True
    for a in keys:
        diff[1:] |= a[1:] != a[:-1]
    return diff


def window_transfers(layout: dict[str, tuple[int, int]], ext: dict[str, int], offset: int) -> list:
    """The fewest 2-D transfers of an unpadded input window (:meth:`ConvLowering.window_layout`) of ``ext``
    elements per axis from DRAM element ``offset``."""
    return plan_transfers(0, offset, [(ext[a], dram) for a, (dram, _) in layout.items()])


class ConvLowering:
    """A conv2d layer with its epilogue, tensorized for one hardware config."""

    def __init__(
        self,
        spec: Conv2dSpec,
        epi: EpilogueSpec,
        cfg: HwConfig,
        mul_imm: int = 1,
        view: OutputView | None = None,
        post_imm: int = 1,
        acc_top: int | None = None,
        copy_view: OutputView | None = None,
        up: InputUpsample | None = None,
        zero: np.ndarray | None = None,
    ):
        """``acc_top``: the ACC rows from it up belong to other layers of a fused step
        (:mod:`vdla.compiler.dw_pointwise`); the per-channel rows sit right below it (default: ACC's top).
        ``copy_view``: the layer also stores its output into a second tensor (role ``copy``) through this view,
        e.g. the phases of a nearest upsampling that another layer reads (its own output stays where ``view``
        says: a tensor of its own or channel blocks of a larger one). ``up``: some input-channel blocks are read
        from the tensor they are a nearest upsampling of (:class:`~vdla.compiler.spec.InputUpsample`). ``zero``:
        (ob, ib, taps) bool, the weight blocks that are all zero: the GEMMs skip their micro-ops (a row-paired layer's
        halves that never meet, :mod:`vdla.graph.rowpair`)."""
        self.spec, self.epi, self.cfg = spec, epi, cfg
        acc_end = cfg.acc_depth if acc_top is None else acc_top
        self.view = view  # where the output pixels sit in a larger tensor (None: a tensor of their own)
        self.copy_view = copy_view
        self.up = up
        self.zero = zero if zero is not None and zero.any() else None
        self.intrinsic = GemmIntrinsic.from_config(cfg)
        top, _, left, _ = spec.pad
        self.tensorized = tensorize(
            conv2d_contraction(
                spec.n, spec.c, spec.oc, spec.oh, spec.ow, spec.kh, spec.kw, spec.sh, spec.sw, top, left
            ),
            self.intrinsic,
        )
        ext = self.tensorized.blocked_extents
        self.ng, self.ib, self.ob = ext["b"], ext["ic"], ext["oc"]
        self.gate = epi.gate  # a channel scale of the input (module docstring): its rows sit at the top of ACC
        self.gate_base = acc_end - self.gate_rows  # every image's gate rows, then the multiplier row
        self.acc_top = self.gate_base  # the layer's own per-channel rows lie below them
        self.taps = spec.kh * spec.kw
        self.limits = Limits.of(cfg)
        # the OUT mirror multiplies the last GEMM's writes (EPI mul): nothing but STOREs may follow that GEMM
        # whole-row pairs are copied by a GEMM reading OUT where the config can (else an ALU pass reading ACC)
        self.pair_gemm = bool(self.row_pairs) and identity_fits(cfg) and cfg.src_out_refusal() is None
        self.out_mul = cfg.out_multiplier and out_mul_fits(epi) and not (self.row_pairs and not self.pair_gemm)
        self.passes: tuple[AluPass, ...] = alu_passes(epi, mul_imm, out_mul=self.out_mul)  # residual on the ALU
        self.residual_gemm = residual_inp_fits(epi) and identity_fits(cfg)  # may a schedule use res_inp?
        self.gemm_passes = alu_passes(epi, mul_imm, residual_gemm=True) if self.residual_gemm else self.passes
        self.out_mode = out_mode(epi, self.out_mul)
        self.rows = epilogue_rows(epi)
        self.post = epi.post  # a residual add after the table, its input read back from OUT
        # the add's int8 residual as it is: a second identity GEMM adds it (else the ALU, from a region of its own)
        self.post_gemm = bool(epi.post) and residual_gemm_fits(epi.post)
        self.post_passes = alu_passes(epi.post, post_imm, self.post_gemm) if epi.post else ()
        self.post_mode = out_mode(epi.post) if epi.post else None
        self.post_rows = epilogue_rows(epi.post) if epi.post else []
        self.row_step = spec.sh if spec.kh == 1 else 1  # one-row kernels read every sh-th input row only
        self.col_step = spec.sw if spec.kw == 1 else 1  # one-column kernels read every sw-th input column only
        self._nests: dict[tuple, tuple] = {}
        self.pool = FusedPool.make(epi.pool, (spec.oh, spec.ow)) if epi.pool else None
        if view is not None:
            view.check(self.out_hw, epi, self.ob)
        if copy_view is not None:
            copy_view.check(self.out_hw, epi, self.ob)
            if view is not None and (view.copies or view.row_pairs):
                raise CompileError(f"a layer storing copies through {view} stores no further copy")
        if up is not None and (why := self.up_refusal()):
            raise CompileError(f"{spec.key()}: no upsampled input read in place: {why}")
        if epi.mask and (why := cfg.src_out_refusal()):
            raise CompileError(f"{spec.key()}: no row mask: {why}")
        if epi.post is not None and (why := self.post_refusal()):
            raise CompileError(f"{spec.key()}: no residual add after the activation table: {why}")
        if self.gate is not None and (why := self.gate_refusal()):
            raise CompileError(f"{spec.key()}: no channel scale fused before the layer: {why}")
        if self.row_step * spec.w > MAX_STRIDE:
            raise CompileError(
                f"input rows of {spec.w} elements (row stride {self.row_step * spec.w}) exceed the "
                f"16-bit LOAD x_stride field: widths up to {MAX_STRIDE // self.row_step} fit"
            )

    # ---- geometry -------------------------------------------------------------------------------
    @property
    def token_refusal(self) -> str | None:
        """Why a tile may not span several batch groups (None: it may). It may for a 1x1 layer of stride 1 over
        1x1 images (a dense layer's tokens, each an image of the token-major layout) without a fused pool, a view,
        a post add, a gate, a row mask or an upsampled input: each group's window and output are single elements,
        so a tile of ``tn`` groups loads its inputs in one 2-D LOAD (``tn`` rows of ``tic`` blocks, ``ib`` apart) and
        its GEMM loops over the groups."""
        sp, epi = self.spec, self.epi
        if (sp.h, sp.w, sp.kh, sp.kw, sp.sh, sp.sw) != (1, 1, 1, 1, 1, 1) or any(sp.pad):
            return f"{sp.key()} is not a 1x1 layer of stride 1 over 1x1 images"
        if self.view or self.copy_view or self.up or self.gate or epi.pool or epi.post or epi.mask:
            return "the layer has an output view, an upsampled or gated input, a fused pool, a post add or a row mask"
        return None

    @property
    def token_tiles(self) -> bool:
        """Whether a tile may span several batch groups (:meth:`token_refusal`)."""
        return self.token_refusal is None

    @property
    def out_hw(self) -> tuple[int, int]:
        """Rows and columns of the stored output: the convolution's, or the fused pool's."""
        return self.pool.out_hw if self.pool else (self.spec.oh, self.spec.ow)

    @property
    def row_pairs(self) -> tuple[int, ...]:
        """The rows of pixels the layer stores twice side by side (:attr:`OutputView.row_pairs` of its copy view,
        else of its view; empty: none)."""
        view = self.copy_view or self.view
        return view.row_pairs if view else ()

    def stored_shape(self, view: OutputView | None) -> tuple[int, int, int, int]:
        """(image groups, channel blocks, rows, columns) of the tensor the layer stores into through ``view`` (None:
        a tensor of its own output's shape)."""
        return (self.ng, view.out_blocks(self.ob), *view.full_hw) if view else (self.ng, self.ob, *self.out_hw)

    @property
    def out_blocks(self) -> int:
        """Channel blocks of the output tensor the layer stores into (its view's, or its own)."""
        return self.stored_shape(self.view)[1]

    @property
    def out_tensor_hw(self) -> tuple[int, int]:
        """Rows and columns of the output tensor the layer stores into (its view's, or its own)."""
        return self.stored_shape(self.view)[2:]

    def in_rows(self, noh: int) -> int:
        """Input rows (padding included) held for ``noh`` output rows: every ``row_step``-th row of the input."""
        return (noh - 1) * self.spec.sh // self.row_step + self.spec.kh

    def in_cols(self, now: int) -> int:
        """Input columns (padding included) held for ``now`` output columns: every ``col_step``-th column."""
        return (now - 1) * self.spec.sw // self.col_step + self.spec.kw

    def by_columns(self, s: Schedule) -> bool:
        """Whether the schedule's input windows sit column-major in INP (:meth:`window_layout`) and are loaded
        column by column; otherwise row-major, loaded row by row or in one 2-D LOAD.

        Only a column-subsampled window (``col_step > 1``) may be: its LOADs read single elements, ``col_step``
        apart along a row or ``row_step * W`` apart down a column (every element its own burst), so it takes one
        LOAD per row or per column of each channel block, one per column for all of them when the full-size
        window spans the input's height; the layout needing fewer LOADs for the full-size window wins (each
        LOAD waits for the DRAM read latency), row-major on a tie. Padded rows need the LOADs' y_pad fields,
        so a layer with a top or bottom border is loaded by columns whatever the tile (a kernel one column wide
        has no left or right border: these windows' columns are never padded)."""
        top, bottom = self.spec.pad[:2]
        if self.col_step == 1 or top + bottom:
            return self.col_step > 1
        rows, cols = self.in_rows(s.toh), self.in_cols(s.tow)
        ext = {"n": 1, "ic": s.tic, "row": rows, "col": cols}
        loads = [len(window_transfers(self.window_layout(s.tic, rows, cols, by), ext, 0)) for by in (False, True)]
        return loads[1] < loads[0]

    def window_layout(
        self, nic: int, rows: int, cols: int, by_columns: bool, nn: int = 1
    ) -> dict[str, tuple[int, int]]:
        """(DRAM element stride, INP element stride) of each axis of a step's input window of ``nn`` batch groups
        (outermost) of ``nic`` channel blocks of ``rows`` x ``cols`` elements, outer to inner as it sits, densely,
        in INP: channel block, row, column (row-major) or column, channel block, row (column-major: a LOAD down a
        column of a window spanning the input's height continues into the next channel block's column at the
        same stride)."""
        sp = self.spec
        dram = {"n": self.ib * sp.h * sp.w, "ic": sp.h * sp.w, "row": self.row_step * sp.w, "col": self.col_step}
        ext = {"n": nn, "ic": nic, "row": rows, "col": cols}
        order = ("n", "col", "ic", "row") if by_columns else ("n", "ic", "row", "col")
        inp, inner = {}, 1
        for a in reversed(order):
            inp[a], inner = inner, inner * ext[a]
        return {a: (dram[a], inp[a]) for a in order}

    def up_refusal(self) -> str | None:
        """Why the layer cannot read its :attr:`up` blocks from the tensor they upsample (None if it can)."""
        sp, up = self.spec, self.up
        (fh, fw), last = up.factor, up.first + up.blocks
        if (sp.kh, sp.kw, sp.sh, sp.sw) != (1, 1, 1, 1) or any(sp.pad):
            return "the layer is not a 1x1 convolution of stride 1 without padding"
        if fh < 1 or fw < 1 or sp.h % fh or sp.w % fw:
            return f"its {sp.h}x{sp.w} pixels are not a multiple of the factor {up.factor}"
        if up.first < 0 or up.blocks < 1 or last > self.ib:
            return f"blocks {up.first}..{last - 1} are not among its {self.ib} input-channel blocks"
        if self.gate is not None:
            return "the layer's input is gated"
        return None

    @property
    def zero_key(self) -> str:
        """A stable text key of the zero weight blocks (schedule cache; empty: none)."""
        if self.zero is None:
            return ""
        digest = hashlib.sha1(np.packbits(self.zero).tobytes() + str(self.zero.shape).encode())
        return "z" + digest.hexdigest()[:12]

    def is_up(self, ib0: int) -> bool:
        """Whether the reduction step starting at input-channel block ``ib0`` reads the upsampled tensor."""
        return self.up is not None and self.up.covers(ib0)

    def step_nest(
        self, toc: int, toh: int, tow: int, ib0: int, nic: int, resident: bool, by_columns: bool, nn: int = 1
    ) -> tuple:
        """The GEMM loop nest of a (toc, toh, tow) tile's reduction step of ``nic`` input blocks from ``ib0`` over
        ``nn`` batch groups: an upsampled step's (:meth:`up_nest`) or :meth:`gemm_nest`, the weights of all input
        blocks held where they are ``resident``."""
        wic = self.ib if resident else nic
        if self.is_up(ib0):
            return self.up_nest(toc, toh, tow, nic, wic)
        return self.gemm_nest(toc, toh, tow, nic, wic, by_columns, nn)

    def up_nest(self, toc: int, toh: int, tow: int, tic: int, wic: int) -> tuple:
        """The GEMM loop nest of an upsampled step (:meth:`is_up`): output rows and columns split into (source
        pixel, repeat), the repeats reading the same element of the window of ``toh / fh x tow / fw`` pixels."""
        (fh, fw), rows, cols = self.up.factor, toh // self.up.factor[0], tow // self.up.factor[1]
        axes = (
            (toc, (toh * tow, 0, wic)),
            (rows, (fh * tow, cols, 0)),
            (fh, (tow, 0, 0)),
            (cols, (fw, 1, 0)),
            (fw, (1, 0, 0)),
            (tic, (0, rows * cols, 1)),
        )
        return tuple(a for a in axes if a[0] > 1)

    def post_refusal(self) -> str | None:
        """Why the layer cannot take its ``post`` add (None if it can)."""
        epi, post, cfg = self.epi, self.epi.post, self.cfg
        if post.residual != "int8" or post.bias or post.pool or post.post:
            return "the add takes an int8 residual, and no bias, pool or further add"
        if epi.residual or epi.pool or self.row_pairs:
            return "the layer has a residual, a fused pool or stores whole-row pairs of its own"
        if post.table and epi.table:
            return "both need an activation table, and the LUT holds one"
        return cfg.src_out_refusal()

    def gate_refusal(self) -> str | None:
        """Why the layer cannot take a gated input (None if it can)."""
        sp, epi, cfg = self.spec, self.epi, self.cfg
        if (sp.kh, sp.kw, sp.sh, sp.sw) != (1, 1, 1, 1) or any(sp.pad):
            return "the layer is not a 1x1 convolution of stride 1 without padding"
        if epi.pool or epi.post or self.row_pairs:
            return "the layer has a fused pool, a residual add after its table or stores whole-row pairs"
        if not cfg.out_multiplier:
            return f"the OUT mirror multiplies the input by its gate: config {cfg.name!r} has no OUT-path multiplier"
        return cfg.src_out_refusal()

    @property
    def gate_rows(self) -> int:
        """ACC rows of a gated input's gate (every image's input-channel blocks) and its multiplier row."""
        return self.ng * self.ib + 1 if self.gate is not None else 0

    def gate_elems(self, s: Schedule) -> int:
        """ACC elements of a gated input's scratch: one step's input window (full-size tile)."""
        return s.tic * self.in_rows(s.toh) * self.in_cols(s.tow) if self.gate is not None else 0

    def epi_op(self, t: Tile, bias: bool = False, src_out: bool = False) -> Epi:
        """The EPI of the layer's GEMMs over tile ``t``: its OUT mode, with ``bias`` its first bias row (for
        ``init``), with :attr:`out_mul` its first multiplier row, the GEMM's outer loop stepping through both."""
        m = self.out_mode
        row = {name: self.rows_base + i * self.ob + t.ob for i, name in enumerate(self.rows)}
        mul = (row["mult"], m.mul) if m.mul is not None else None
        return Epi(m.req, m.relu, m.shift, row.get("bias") if bias else None, m.lut, src_out=src_out, mul=mul)

    @property
    def rows_base(self) -> int:
        """Start of the per-channel rows (bias, multipliers) of every output-channel block, shared by all
        threads at the top of the accumulator buffer (below the post add's rows, on top)."""
        return self.acc_top - self.ob * (len(self.rows) + len(self.post_rows))

    @property
    def post_tiles(self) -> int:
        """Tiles of ACC the post add takes after the layer's: its own, and its residual's unless a GEMM adds it."""
        return 0 if not self.post else 1 + (not self.post_gemm)

    @property
    def post_rows_base(self) -> int:
        """Start of the post add's per-channel rows (:attr:`post`), the top of the accumulator buffer."""
        return self.acc_top - self.ob * len(self.post_rows)

    @property
    def eye(self) -> int | None:
        """The WGT element of the identity block (the top one) for a layer whose residual a GEMM can add, whose
        post add reads its results back from OUT, or whose whole-row pairs a GEMM copies (:attr:`pair_gemm`)."""
        return self.cfg.wgt_depth - 1 if self.residual_gemm or self.post or self.gate or self.pair_gemm else None

    @property
    def mask_base(self) -> int:
        """The WGT element of the first row-mask block (:attr:`EpilogueSpec.mask`: ``ob`` blocks per masked row,
        in row order), below the identity block."""
        return self.cfg.wgt_depth - (self.eye is not None) - len(self.epi.mask) * self.ob

    @property
    def wgt_free(self) -> int:
        """WGT elements for weights: all but the identity block's and the row masks'."""
        return self.mask_base

    def passes_of(self, s: Schedule) -> tuple[AluPass, ...]:
        """The epilogue passes of the schedule's residual form."""
        return self.gemm_passes if s.res_inp else self.passes

    @property
    def carry_base(self) -> int:
        """Start of a fused pool's carry region (:mod:`vdla.compiler.fused_pool`), below the per-channel rows
        and shared by all threads; the threads' shares lie below it."""
        return self.rows_base - (self.pool.carry_elems(self.ob) if self.pool else 0)

    def shares(self, vthreads: int, shared_inp: int = 0) -> tuple[int, int, int]:
        """(INP, WGT, ACC) elements of one thread's buffer share (``shared_inp``: INP elements from 0 that every
        thread shares, :meth:`inputs_shared`)."""
        c = self.cfg
        inp = (c.inp_depth - shared_inp) // vthreads
        return inp, self.wgt_free // vthreads, max(self.carry_base, 0) // vthreads

    def thread_shares(self, s: Schedule) -> tuple[int, int, int]:
        """(INP, WGT, ACC) elements of one thread's share under schedule ``s`` (after a shared input)."""
        return self.shares(s.vthreads, self.shared_inp_elems(s))

    def inputs_shared(self, s: Schedule) -> bool:
        """Whether the whole input sits once in INP from element 0, shared by every thread: for token tiles
        (``s.tn > 1``) when it fits beside every thread's residual. It sits step-major (reduction step k's blocks
        of every batch group from ``ng * ib0(k)``, batch-group-major), and each step's blocks of a token tile are
        loaded once, by the first block in stream order that uses them: every later user's compute follows that
        block's in the in-order compute stream, which waited for the load, and nothing overwrites them (as with
        :attr:`weights_shared`)."""
        return s.tn > 1 and self.ng * self.ib + s.vthreads * self.res_elems(s) <= self.cfg.inp_depth

    def shared_inp_elems(self, s: Schedule) -> int:
        """INP elements of the shared input (:meth:`inputs_shared`; 0 without one)."""
        return self.ng * self.ib if self.inputs_shared(s) else 0

    @property
    def weights_shared(self) -> bool:
        """Whether all the layer's weights fit the WGT buffer: then they are shared by every thread, step-major
        (the blocks of reduction step k, output-channel-major, from ``ob * ib0(k) * taps``), and each step's
        weights of an output-channel tile are loaded once, by the first block of any thread using them."""
        return self.ob * self.ib * self.taps <= self.wgt_free

    def weights_resident(self, s: Schedule) -> bool:
        """Whether the thread keeps the weights of all input channels of its output-channel tile in its share."""
        return not self.weights_shared and s.toc * self.ib * self.taps <= self.shares(s.vthreads)[1]

    def inputs_resident(self, s: Schedule) -> bool:
        """Whether the thread keeps the input windows of all reduction steps of its spatial tile, each step's
        at its own place, so that they are loaded once per spatial tile."""
        window = s.tn * self.in_rows(s.toh) * self.in_cols(s.tow)
        if self.inputs_shared(s) or s.tic >= self.ib:
            return False
        return self.ib * window + self.res_elems(s) <= self.thread_shares(s)[0]

    def res_elems(self, s: Schedule) -> int:
        """INP elements of the full-size tile's residual (0 unless ``res_inp``), or of the post add's operand."""
        return s.toc * s.tn * s.toh * s.tow if s.res_inp or self.post else 0

    def window_elems(self, s: Schedule) -> int:
        """INP elements of the thread's input windows (all reduction steps' when resident, none in its share when
        the input is shared); the residual of a ``res_inp`` schedule follows them."""
        if self.inputs_shared(s):
            return 0
        steps = self.ib if self.inputs_resident(s) else s.tic
        return steps * s.tn * self.in_rows(s.toh) * self.in_cols(s.tow)

    def footprint(self, s: Schedule) -> tuple[int, int, int]:
        """(INP, WGT, ACC) elements one thread needs for the schedule's full-size tile (no WGT share when the
        weights are shared); a residual takes a tile's worth of INP (``res_inp``) or of ACC."""
        wic = self.ib if self.weights_resident(s) else s.tic
        tile = s.toc * s.tn * s.toh * s.tow
        acc = tile * (2 if self.epi.residual and (self.epi.rescale or not s.res_inp) else 1)
        acc += self.pool.acc_elems(s.toc, s.toh) if self.pool else 0
        acc += 2 * tile * bool(self.row_pairs)  # each pixel twice, for whole-row stores (OutputView.row_pairs)
        acc += tile * self.post_tiles  # the post add's tile (and its residual's)
        acc += self.gate_elems(s)  # the gated input window, read from OUT
        acc += s.toc * s.tow if self.epi.mask else 0  # one masked row of the tile, in passing (mask_ops)
        wgt = 0 if self.weights_shared else s.toc * wic * self.taps
        return self.window_elems(s) + self.res_elems(s), wgt, acc

    def gemm_nest(self, toc: int, toh: int, tow: int, tic: int, wic: int, by_columns: bool, nn: int = 1) -> tuple:
        """The GEMM loop nest of one reduction step of a (toc, toh, tow) tile of ``nn`` batch groups over ``tic``
        input blocks, its input window column-major when ``by_columns`` (:meth:`window_layout`)."""
        key = (toc, toh, tow, tic, wic, by_columns, nn)
        if key not in self._nests:
            self._nests[key] = self._gemm_nest(*key)
        return self._nests[key]

    def _gemm_nest(self, toc: int, toh: int, tow: int, tic: int, wic: int, by_columns: bool, nn: int) -> tuple:
        window = self.window_layout(tic, self.in_rows(toh), self.in_cols(tow), by_columns, nn)
        inp = {a: stride for a, (_, stride) in window.items()}
        tile = {"oc": toc, "b": nn, "oh": toh, "ow": tow, "ic": tic, "ky": self.spec.kh, "kx": self.spec.kw}
        layouts = {  # the accumulators batch-group-major (Tile)
            "out": ((toc * toh * tow, 1), (toh * tow, 1), (tow, 1), (1, 1)),
            "lhs": ((inp["n"], 1), (inp["ic"], 1), (inp["row"], self.row_step), (inp["col"], self.col_step)),
            "rhs": ((wic * self.taps, 1), (self.taps, 1), (self.spec.kw, 1), (1, 1)),
        }
        return self.tensorized.nest(tile, layouts, GEMM_ORDER)

    @staticmethod
    def oc_axis(nest: tuple, noc: int) -> tuple[tuple, tuple]:
        """(output-channel axis, the other axes) of a GEMM nest; the nest omits unit axes."""
        return (nest[0], nest[1:]) if noc > 1 else (UNIT_AXIS, nest)

    def buffer_problems(self, s: Schedule) -> list[str]:
        """Buffers the schedule's tile overflows (empty if it fits)."""
        return [
            f"{buf} needs {need} elements per thread, the share holds {have}"
            for buf, need, have in zip(("INP", "WGT", "ACC"), self.footprint(s), self.thread_shares(s))
            if need > have
        ]

    def problems(self, s: Schedule) -> list[str]:
        """Why a schedule does not fit (empty if it does)."""
        if s.toc > self.ob or s.tic > self.ib or s.toh > self.spec.oh or s.tow > self.spec.ow or s.tn > self.ng:
            return [
                f"tile {s.describe()} exceeds the layer ({self.ob} output / {self.ib} input channel blocks, "
                f"{self.ng} batch groups of {self.spec.oh}x{self.spec.ow} pixels)"
            ]
        if s.tn > 1 and (why := self.token_refusal):
            return [f"tile {s.describe()} spans {s.tn} batch groups: {why}"]
        if s.res_inp and not self.residual_gemm:
            return [self.no_residual_gemm()]
        if self.pool and (pool := self.pool_problems(s)):
            return pool
        if self.up and (s.toh % self.up.factor[0] or s.tow % self.up.factor[1]):
            return [f"tile {s.describe()}: an upsampled input takes tiles of whole source pixels {self.up.factor}"]
        out = self.buffer_problems(s)
        if out:
            return out
        resident, by_columns = self.weights_resident(s), self.by_columns(s)
        tile = (s.toc, s.toh, s.tow)
        nests = dict.fromkeys(self.step_nest(*tile, b0, n, resident, by_columns, s.tn) for b0, n in self.steps(s))
        for oc, rest in (self.oc_axis(nest, s.toc) for nest in nests):
            if not fits_loop(oc, self.limits):
                return [
                    f"the tile's output-channel loop (strides {oc[1]}) does not fit the GEMM loop fields "
                    f"{self.limits.max_factor} that step the bias rows"
                ]
            if (n := uop_count((oc,) + rest, self.limits, pin_outer=True)) > self.cfg.uop_depth:
                return [f"the GEMM micro-kernel needs {n} micro-ops, the UOP buffer holds {self.cfg.uop_depth}"]
        return []

    def pool_problems(self, s: Schedule) -> list[str]:
        """Why a schedule cannot carry the fused pool (:mod:`vdla.compiler.fused_pool`): its tiles must span
        every column and whole pooled rows."""
        sp, sh = self.spec, self.pool.stride[0]
        if s.tow != sp.ow or s.toh % sh:
            return [f"tile {s.describe()}: a fused pool takes tiles of every column ({sp.ow}), {sh} rows a pooled row"]
        return []

    def no_residual_gemm(self) -> str:
        """Why a ``res_inp`` schedule does not apply to this layer."""
        if not residual_inp_fits(self.epi):
            form = "no residual" if not self.epi.residual else f"a {self.epi.residual} residual"
            return f"res-inp brings an int8 residual through INP, the layer has {form}"
        return (
            f"res-inp needs block_in == block_out for the identity weights, config {self.cfg.name!r} has "
            f"{self.cfg.block_in} and {self.cfg.block_out}"
        )

    def minimal_needs(self) -> list[tuple[int, int, int]]:
        """(INP, WGT, ACC) elements of the smallest tile (one block of each) in each residual form: in ACC,
        then in INP where a GEMM can add it."""
        if self.pool:  # whole rows: one pooled row of one channel block
            sh, ow = self.pool.stride[0], self.spec.ow
            return [(self.in_rows(sh) * self.in_cols(ow), self.taps, sh * ow + self.pool.out_hw[1])]
        window, gate = self.in_rows(1) * self.in_cols(1), self.gate is not None
        needs = [(window + bool(self.post), self.taps, (2 if self.epi.residual else 1 + self.post_tiles) + gate)]
        in_acc = 2 if self.epi.rescale else 1  # a rescaled residual is copied into ACC for the ALU
        return needs + [(window + 1, self.taps, in_acc + gate)] * self.residual_gemm

    def check_minimal(self, vthreads: int) -> None:
        """Raise CompileError, naming the limit, if even the smallest tile (in either residual form) does not fit
        ``vthreads`` threads."""
        needs = self.minimal_needs()
        need = tuple(min(n[i] for n in needs) for i in range(3))  # each buffer's least need
        rows, cols = (self.pool.stride[0], self.spec.ow) if self.pool else (1, 1)
        what = {
            "INP": f"a {self.in_rows(rows)}x{self.in_cols(cols)} input window",
            "WGT": f"a {self.spec.kh}x{self.spec.kw} kernel",
            "ACC": "one output element with its epilogue operands",
        }
        if self.carry_base < need[2]:
            raise CompileError(
                f"{self.ob} output-channel blocks need {self.ob * len(self.rows)} accumulator rows "
                f"for {' and '.join(self.rows)}, leaving {max(self.rows_base, 0)} of the "
                f"{self.cfg.acc_depth} ACC elements for tiles (at least {need[2]} needed): at most "
                f"{(self.cfg.acc_depth - need[2]) // len(self.rows) * self.cfg.block_out} output "
                "channels fit"
            )
        depths = (self.cfg.inp_depth, self.wgt_free, self.carry_base)
        for buf, n, depth in zip(("INP", "WGT", "ACC"), need, depths):
            if n > depth:
                raise CompileError(
                    f"{what[buf]} needs {n} {buf} elements even in the smallest tile, but the {buf} "
                    f"buffer of config {self.cfg.name!r} holds {depth}: at most {depth} fit"
                )
        most = max(min(d // n for n, d in zip(form, depths)) for form in needs)
        if vthreads > most:
            tiles = " or ".join(map(str, needs)) + " with the residual in INP" * (len(needs) > 1)
            raise CompileError(
                f"vthreads={vthreads} splits the buffers into shares of {self.shares(vthreads)} "
                f"(INP, WGT, ACC) elements, too small for the smallest tile {tiles}: at most "
                f"vthreads={most} fits"
            )

    # ---- tiles and blocks -----------------------------------------------------------------------
    def tile_order(self, s: Schedule) -> tuple[np.ndarray, np.ndarray]:
        """(output-channel tile index, spatial tile index) of every tile in execution order."""
        n_oc = -(-self.ob // s.toc)
        n_sp = -(-self.ng // s.tn) * -(-self.spec.oh // s.toh) * -(-self.spec.ow // s.tow)
        if s.order == "oc":
            return np.repeat(np.arange(n_oc), n_sp), np.tile(np.arange(n_sp), n_oc)
        return np.tile(np.arange(n_oc), n_sp), np.repeat(np.arange(n_sp), n_oc)

    def tile_sizes(self, s: Schedule) -> tuple[np.ndarray, np.ndarray]:
        """Output-channel blocks of each output-channel tile, pixels of each spatial tile (by tile index; of all
        its batch groups)."""
        rows, cols = ranges(self.spec.oh, s.toh), ranges(self.spec.ow, s.tow)
        pixels = [n * h * w for (_, n), (_, h), (_, w) in itertools.product(ranges(self.ng, s.tn), rows, cols)]
        return np.array([n for _, n in ranges(self.ob, s.toc)]), np.array(pixels)

    def tiles(self, s: Schedule) -> list[Tile]:
        """Every output tile, in execution order."""
        ocs = ranges(self.ob, s.toc)
        sps = list(itertools.product(ranges(self.ng, s.tn), ranges(self.spec.oh, s.toh), ranges(self.spec.ow, s.tow)))
        return [
            Tile(sps[p][0][0], *ocs[o], *sps[p][1], *sps[p][2], nn=sps[p][0][1]) for o, p in zip(*self.tile_order(s))
        ]

    def steps(self, s: Schedule) -> list[tuple[int, int]]:
        """The reduction steps: (first input-channel block, blocks), split where the upsampled blocks begin and
        end (:attr:`up`: a step reads one tensor)."""
        if self.up is None:
            return ranges(self.ib, s.tic)
        bounds = {self.up.first, self.up.first + self.up.blocks}
        out = []
        for lo, n in ranges(self.ib, s.tic):
            cuts = sorted({lo, lo + n} | {b for b in bounds if lo < b < lo + n})
            out += [(a, b - a) for a, b in zip(cuts, cuts[1:])]
        return out

    def residency(self, s: Schedule) -> list[np.ndarray]:
        """Per thread, per block (tile-major, step-minor): must it load its input window, its weights?
        Each is skipped when the thread's share still holds it from the thread's previous block; shared
        weights (a shared input) are loaded by the first block in stream order that uses them."""
        oc, sp = self.tile_order(s)
        n = len(self.steps(s))
        out, chunks = [], {0: [], 1: []}  # per thread, each block's (spatial tile, step) and (oc tile, step)
        for t in range(s.vthreads):
            o, p = np.repeat(oc[t :: s.vthreads], n), np.repeat(sp[t :: s.vthreads], n)
            k = np.tile(np.arange(n), len(oc[t :: s.vthreads]))
            wgt = _changed(o) if self.weights_resident(s) else _changed(o, k)
            inp = np.repeat(_changed(p[::n]), n) if self.inputs_resident(s) else _changed(p, k)
            out.append(np.stack([inp, wgt], axis=1))
            chunks[0].append((p * n + k).tolist())
            chunks[1].append((o * n + k).tolist())
        for col in [c for c, shared in ((0, self.inputs_shared(s)), (1, self.weights_shared)) if shared]:
            seen: set[int] = set()
            for t, i in round_robin([len(c) for c in chunks[col]]):
                out[t][i, col] = chunks[col][t][i] not in seen
                seen.add(chunks[col][t][i])
        return out

    @property
    def row_names(self) -> list[str]:
        """The per-channel rows the layer's constant :data:`~vdla.compiler.spec.ROWS` holds, in their ACC order
        from :attr:`rows_base` (``ob`` rows each): the epilogue's, then the post add's."""
        return [*self.rows, *(POST + r for r in self.post_rows)]

    def rows_loads(self, name: str = ROWS) -> list[Load]:
        """The LOADs of every per-channel row (the tensor ``name``) into the accumulators: one transfer where it
        fits one, so the prologue pays the DRAM latency once."""
        n = self.ob * len(self.row_names)
        return [
            Load(MemType.ACC, self.rows_base + tr.sram, name, tr.offset, tr.y, tr.x, tr.stride)
            for tr in (plan_transfers(0, 0, [(n, 1)]) if n else [])
        ]

    def gate_prologue(self) -> list[Op]:
        """A gated input's rows: every image's int8 gate (LOAD ACC_8BIT) times the multiplier row (one MUL holding
        it), the products exact in int32 (:class:`~vdla.compiler.spec.ChannelScaleSpec`'s invariant)."""
        if self.gate is None:
            return []
        n, base = self.ng * self.ib, self.gate_base
        return [
            Load(MemType.ACC_8BIT, base, GATE, 0, 1, n, n),
            Load(MemType.ACC, base + n, GATE + "mul", 0, 1, 1, 1),
            Alu(AluOp.MUL, lower_nest(((n, (1, 0, 0)),), (base, base + n, 0), self.limits)),
        ]

    def tensor_bytes(self) -> dict[str, int]:
        """DRAM bytes of every tensor the program touches."""
        c, sp = self.cfg, self.spec
        pixels_out = self.ng * self.ob * self.out_tensor_hw[0] * self.out_tensor_hw[1]
        out = {
            "inp": self.ng * self.ib * sp.h * sp.w * c.inp_elem_bytes,
            "wgt": self.ob * self.ib * self.taps * c.wgt_elem_bytes,
            "out": int(np.prod(self.stored_shape(self.view))) * c.out_elem_bytes,
        }
        if self.up is not None:
            (fh, fw) = self.up.factor
            out["up"] = self.ng * self.up.blocks * (sp.h // fh) * (sp.w // fw) * c.inp_elem_bytes
        if self.copy_view is not None:
            out["copy"] = int(np.prod(self.stored_shape(self.copy_view))) * c.out_elem_bytes
        if self.row_names:
            out[ROWS] = self.ob * len(self.row_names) * c.acc_elem_bytes
        if self.epi.table:
            out[TABLE] = c.lut_depth * c.out_elem_bytes
        if self.eye is not None:
            out[EYE] = identity_bytes(c)
        if self.epi.mask:
            out[MASK] = len(self.epi.mask) * self.ob * c.wgt_elem_bytes
        residual = self.epi.residual or (self.post.residual if self.post else None)
        if residual:
            out["res"] = pixels_out * (c.out_elem_bytes if residual == "int8" else c.acc_elem_bytes)
        if self.gate is not None:
            out[GATE] = self.ng * self.ib * c.out_elem_bytes
            out[GATE + "mul"] = c.acc_elem_bytes
        return out
