"""Building each virtual thread's blocks of a tensorized conv2d, one per (tile, reduction step).

For a :class:`~vdla.compiler.schedule.Schedule` that fits (:class:`~vdla.compiler.conv_lowering.ConvLowering`
decides what fits and where each thread's share lies), :func:`conv_threads` builds, per thread, one
:class:`~vdla.compiler.blocks.Block` per (tile, reduction step) with a :class:`ThreadBuilder`, and
:func:`conv_prologue` the compute-stage work ahead of every thread:

* loads: the input window of the step (one LOAD per input-channel block, borders zero filled by the
  LOAD pad fields, or one merged LOAD when unpadded; a kernel one row or one column wide reads only every
  ``sh``-th row or ``sw``-th column, its column-subsampled LOADs one element wide) and the weights, each
  skipped when the thread's buffer share still holds them (weights of all input channels stay resident
  when they fit); with ``Schedule.res_inp`` the last step also loads the tile's int8 residual into the
  thread's INP share, after its input windows;
* compute: on the first step an EPI (OUT mirror mode, the tile's first bias row) and the step's GEMM
  with ``init`` (the accumulators start from their bias rows, or zero), a plain GEMM on the other
  steps, the epilogue's passes (if any) on the last step: ALU instructions and, with ``res_inp``, the
  residual GEMM against the identity weights (:mod:`vdla.compiler.epilogue_passes`); without it, a residual is
  LOADed into the accumulator buffer after the tile (a compute-stage LOAD) and added by an ALU ADD;
* stores: the output tile on the last step.

A tile of several batch groups (``Schedule.tn``, a dense layer's tokens: :attr:`ConvLowering.token_tiles`) loads
its window in one 2-D LOAD per step (its groups' blocks, image-major), or takes it from the input shared by the
threads (:meth:`ConvLowering.inputs_shared`); its GEMM loops over the groups, and its accumulators sit
batch-group-major (:class:`~vdla.compiler.conv_lowering.Tile`), so one STORE writes it; a thread's last block splits
by groups of tokens.

With a fused max pool (:mod:`vdla.compiler.fused_pool`), tiles span every column and whole pooled rows; on
the last step the pool's passes reduce the tile into a pooled region after it (the carried rows of its first
pooled row from the carry region below the per-channel rows), and the epilogue and the STOREs work on the
pooled tile only.

With a residual add after the layer's activation table (``EpilogueSpec.post``), the last step loads the add's
other operand into INP after its windows and goes on after the epilogue: EPIs of the add's OUT mode (with
``src_out`` where a GEMM reads the tile's tabled int8 results from OUT) and GEMMs against the identity block
that copy the add's input into a post region after the tile and its residual into a region after that, or add
the residual after the add's passes where it is an int8 residual as it is; then the add's passes, and the
STOREs write the post region. Every other step's GEMM then follows an EPI of the layer's own OUT mode (the
threads' blocks take turns, and the EPI state is global).

With a gated input (``EpilogueSpec.gate``: squeeze-excite's channel scale fused into the 1x1 layer reading it),
the prologue loads the int8 gate of every input-channel block (a compute-stage LOAD ACC_8BIT of the ``gate``
tensor) above the per-channel rows and multiplies it by the scale's multiplier row (``gatemul``); each step then
copies its input window into a scratch region after the thread's tile (an ``init`` GEMM against the identity block,
its outer loop the window's channel blocks) under an EPI whose OUT mirror multiplies each write by its channel
block's gate row with the scale's shift and clamps it (EPI ``mul`` and ``req``), and the step's GEMMs read that
window from OUT (EPI ``src_out``).

Invariant: a thread's blocks touch only its shares and the shared regions above them
(:class:`~vdla.compiler.conv_lowering.ConvLowering`).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from vdla.compiler.blocks import Alu, Block, Epi, Gemm, Load, Op, Store
from vdla.compiler.conv_lowering import ConvLowering, Tile, ranges, window_transfers
from vdla.compiler.epilogue_passes import AluPass
from vdla.compiler.identity import identity_gemm, load_identity
from vdla.compiler.microcode import MicroKernel, lower_nest
from vdla.compiler.schedule import Schedule
from vdla.compiler.spec import MASK, TABLE, CompileError
from vdla.compiler.transfer import plan_transfers
from vdla.compiler.vthreads import prologue_block
from vdla.isa import AluOp, MemType

TAIL_PARTS = 8  # a thread's last block hands its output channels to the store stage in up to this many parts
TOKEN_TAIL_PARTS = 4  # or its batch groups in up to this many (each issues the GEMM and every pass again)
CLAMP_FROM_OUT = Epi(True, False, 0, None, src_out=True)  # later GEMMs read OUT, their writes only clamped to int8


def tail_parts(t: Tile) -> list[tuple[Tile, int]]:
    """The parts of tile ``t`` a split block hands to the store stage one by one, each with its first accumulator
    element relative to the tile's: groups of its batch groups where it spans several (its accumulators are
    batch-group-major, so each group's are dense), else of its output-channel blocks."""
    if t.nn > 1:
        per = t.noc * t.noh * t.now
        return [(replace(t, ng=t.ng + n0, nn=n), n0 * per) for n0, n in ranges(t.nn, -(-t.nn // TOKEN_TAIL_PARTS))]
    return [(replace(t, ob=t.ob + o0, noc=n), o0 * t.pixels) for o0, n in ranges(t.noc, -(-t.noc // TAIL_PARTS))]


def _span(first: int, n: int, extent: int, step: int) -> tuple[int, int]:
    """[lo, hi): the window positions ``i < n`` whose input index ``first + i * step`` lies inside [0, extent)."""
    return max(0, -(first // step)), min(n, -(-(extent - first) // step))


def conv_threads(low: ConvLowering, s: Schedule) -> list[list[Block]]:
    """Every thread's blocks, tiles dealt round-robin."""
    problems = low.problems(s)
    if problems:
        raise CompileError(f"schedule {s.describe()} does not fit: {'; '.join(problems)}")
    tiles, steps, fresh = low.tiles(s), low.steps(s), low.residency(s)
    out = [ThreadBuilder(low, s, t).blocks(tiles[t :: s.vthreads], steps, fresh[t]) for t in range(s.vthreads)]
    first, extra = out[0][0], []  # the stream's first block: all compute runs after its loads
    if s.res_inp or low.post or low.gate or low.pair_gemm:
        extra.append(load_identity(low.eye))
    if low.epi.mask:
        n = len(low.epi.mask) * low.ob
        extra.append(Load(MemType.WGT, low.mask_base, MASK, 0, 1, n, n))
    out[0][0] = replace(first, loads=(*extra, *first.loads))
    return out


def conv_prologue(low: ConvLowering, threads: list[list[Block]]) -> Block:
    """Compute-stage work ahead of every thread: load the rows of all output-channel blocks, and make the
    program's micro-kernels resident (:func:`~vdla.compiler.vthreads.prologue_block`)."""
    ops: list[Op] = low.rows_loads()
    if low.epi.table:  # the activation table, once per layer (it stays until the next LOAD LUT)
        n = low.cfg.lut_depth
        ops.append(Load(MemType.LUT, 0, TABLE, 0, 1, n, n))
    return prologue_block(ops + low.gate_prologue(), threads, low.cfg.uop_depth)


class ThreadBuilder:
    """Builds one thread's blocks in its share of the buffers."""

    def __init__(self, low: ConvLowering, s: Schedule, thread: int):
        self.low, self.s, self.thread = low, s, thread
        inp, wgt, acc = low.thread_shares(s)
        self.inp0 = low.shared_inp_elems(s) + thread * inp
        self.wgt0 = 0 if low.weights_shared else thread * wgt
        self.resident = low.weights_resident(s)
        self.by_columns = low.by_columns(s)
        tile = s.toc * s.tn * s.toh * s.tow
        # after the tile: the residual, the pool's results, or each pixel twice (row_pairs), never two of them
        after = thread * acc + tile
        self.acc = {"tile": thread * acc, "res": after, "pool": after, "pairs": after}
        if low.post:  # the post add's tile, then its residual
            self.acc.update(post=after, res=after + tile)
        self.acc["gate"] = thread * acc + low.footprint(s)[2] - low.gate_elems(s)  # the share's last elements
        self.acc["mask"] = self.acc["gate"] - (s.toc * s.tow if low.epi.mask else 0)  # just below them
        self.res_inp0 = self.inp0 + low.window_elems(s)  # the residual tile in INP (res_inp)

    def blocks(self, tiles: list[Tile], steps: list[tuple[int, int]], fresh: np.ndarray) -> list[Block]:
        """The blocks of ``tiles``; ``fresh`` (from :meth:`ConvLowering.residency`) says which loads each needs.
        The thread's last block is split in up to TAIL_PARTS parts: the stream ends with every thread's last
        stores, which then overlap the last GEMMs instead of queueing behind them."""
        pairs = [(tile, k) for tile in tiles for k in range(len(steps))]
        return [
            self.block(tile, k, steps[k], len(steps), *f, split=j == len(pairs) - 1)
            for j, ((tile, k), f) in enumerate(zip(pairs, fresh.tolist()))
        ]

    def block(
        self,
        t: Tile,
        k: int,
        step: tuple[int, int],
        nsteps: int,
        inp: bool = True,
        wgt: bool = True,
        split: bool = False,
    ) -> Block:
        """One step of a tile; ``inp``/``wgt`` say whether its input window and weights must be loaded. With
        ``split``, the tile's last step hands each part (:func:`tail_parts`) to the store stage as soon as its
        GEMM is done."""
        ib0, nic = step
        low = self.low
        loads: list[Load] = []
        if inp:
            loads += self.input_loads(t, ib0, nic)
        wic, w_ic0 = self.wgt_span(ib0, nic)
        if wgt:
            loads += [
                Load(MemType.WGT, self.wgt_base(t, ib0, nic) + tr.sram, "wgt", tr.offset, tr.y, tr.x, tr.stride)
                for tr in plan_transfers(
                    0, (t.ob * low.ib + w_ic0) * low.taps, [(t.noc, low.ib * low.taps), (wic, low.taps), (low.taps, 1)]
                )
            ]
        if (self.s.res_inp or low.post) and k == nsteps - 1:
            loads += self.residual_inp_loads(t)
        parts = tail_parts(t) if split and k == nsteps - 1 else [(t, 0)]
        compute: list[Op] = self.gate_ops(t, ib0, nic) if low.gate else []
        stores: list[Store] = []
        cuts = []
        for sub, off in parts:
            c, st = self.step_ops(t, k, step, nsteps, sub, off)
            compute += c
            stores += st
            cuts.append((len(compute), len(stores)))
        return Block(self.thread, tuple(loads), tuple(compute), tuple(stores), tuple(cuts) if len(cuts) > 1 else ())

    def wgt_span(self, ib0: int, nic: int) -> tuple[int, int]:
        """(input-channel blocks, first block) of the weights the thread's WGT layout holds for a step."""
        return (self.low.ib, 0) if self.resident else (nic, ib0)

    def wgt_base(self, t: Tile, ib0: int, nic: int) -> int:
        """Where the weights of the tile's output channels for the step starting at ``ib0`` begin."""
        low = self.low
        return low.ob * ib0 * low.taps + t.ob * nic * low.taps if low.weights_shared else self.wgt0

    def step_ops(
        self, t: Tile, k: int, step: tuple[int, int], nsteps: int, sub: Tile, off: int
    ) -> tuple[list[Op], list[Store]]:
        """Compute and store operations of the step for the part ``sub`` of tile ``t`` whose accumulators begin
        ``off`` elements after the tile's (:func:`tail_parts`; the whole tile at 0)."""
        ib0, nic = step
        low = self.low
        o0 = sub.ob - t.ob
        acc = self.acc["tile"] + off
        wic, w_ic0 = self.wgt_span(ib0, nic)
        wgt0 = self.wgt_base(sub, ib0, nic) + (0 if low.weights_shared else o0 * wic * low.taps)
        nest = low.step_nest(sub.noc, t.noh, t.now, ib0, nic, self.resident, self.by_columns, sub.nn)
        gated = low.gate is not None  # the window read from OUT, where gate_ops left it
        window = nic * low.in_rows(t.noh) * low.in_cols(t.now)  # a batch group's, in INP (window_layout)
        src = self.acc["gate"] if gated else self.step_inp0(t, ib0, nic) + (sub.ng - t.ng) * window
        base = (acc, src, wgt0 + (ib0 - w_ic0) * low.taps)
        gemms = self.init_gemms if k == 0 else self.step_gemms
        compute = [self.skip_zero(op, sub.ob, ib0, wic, base[2]) for op in gemms(sub, nest, base, src_out=gated)]
        if k < nsteps - 1:
            return compute, []
        if gated and self.s.res_inp:  # the residual's identity GEMM reads INP again
            compute.append(low.epi_op(sub))
        if low.pool:
            pooling, sub, acc = self.pool_ops(sub, o0, acc)
            compute += pooling
        compute += self.residual_loads(sub, off) + self.epilogue_ops(sub, off, acc) + self.mask_ops(sub, acc)
        if low.post:
            post, acc = self.post_ops(sub, off, acc)
            compute += post
        stores = self.stores(sub, acc, own=True) if low.copy_view is not None else []
        if low.row_pairs:
            compute += self.pair_copy(sub, off, acc)
            acc = self.acc["pairs"] + 2 * off
        return compute, stores + self.stores(sub, acc)

    def post_ops(self, t: Tile, off: int, acc: int) -> tuple[list[Op], int]:
        """The post add of the tile part ``off`` elements into the tile (module docstring), whose tabled results sit in
        OUT at ``acc``, its other operand in INP (loaded on the load stage with the last step's windows): its
        operations and where its results sit. GEMMs against the identity block copy the add's input into the
        post region and its residual into a region of its own (``post_gemm``: add it after the passes)."""
        low, pixels = self.low, t.noh * t.now
        dst, res, inp = (base + off for base in (self.acc["post"], self.acc["res"], self.res_inp0))
        m, from_out = low.post_mode, not low.epi.post_res  # where the add's input comes from (else its residual)

        def copy(to: int, out: bool, init: bool) -> list[Op]:
            nest = ((t.noc * pixels, (1, 1)),)
            gemm = identity_gemm(nest, to, acc if out else inp, low.eye, low.limits, init=init)
            return [Epi(m.req, m.relu, m.shift, None, m.lut, src_out=out), gemm]

        ops = copy(dst, from_out, True) + ([] if low.post_gemm else copy(res, not from_out, True))
        for p in low.post_passes:
            if p.gemm:
                ops += copy(dst, not from_out, False)
            else:
                ops.append(
                    Alu(p.op, self.elementwise(t, p, res if p.dst == "res" else dst, res, post=True), p.imm, p.shift)
                )
        return ops, dst

    def stores(self, t: Tile, acc: int, own: bool = False) -> list[Store]:
        """The STOREs of the tile's outputs from the accumulators at ``acc`` (:meth:`output_transfers`): through
        the copy view into the ``copy`` tensor where the layer has one, unless ``own`` (its own output)."""
        copy = self.low.copy_view is not None and not own
        return [
            Store(acc + tr.sram, "copy" if copy else "out", tr.offset, tr.y, tr.x, tr.stride)
            for tr in self.output_transfers(t, own)
        ]

    def residual_inp_loads(self, t: Tile) -> list[Load]:
        """The load-stage LOADs of the tile's int8 residual into the thread's INP share (``res_inp``)."""
        return [
            Load(MemType.INP, self.res_inp0 + tr.sram, "res", tr.offset, tr.y, tr.x, tr.stride)
            for tr in self.residual_transfers(t)
        ]

    def mask_ops(self, t: Tile, acc: int) -> list[Op]:
        """The row mask over the tile's results at ``acc`` (:attr:`EpilogueSpec.mask`): for each masked output row
        in the tile, an ``init`` GEMM reads the row's int8 results from OUT against the row's diagonal 0/1 blocks
        (one per channel block) into a scratch row, and a second one reads them back the same way (a GEMM reading
        OUT writes no row it reads), both under an EPI that only clamps: the masked lanes become zero, the others
        stay as they were."""
        low, pixels = self.low, t.noh * t.now
        rows = [(k, y) for k, y in enumerate(low.epi.mask) if t.oy <= y < t.oy + t.noh]
        ops: list[Op] = [CLAMP_FROM_OUT] if rows else []
        for k, y in rows:
            at, wgt = acc + (y - t.oy) * t.now, low.mask_base + k * low.ob + t.ob
            for dst, src, step in ((self.acc["mask"], at, (t.now, pixels)), (at, self.acc["mask"], (pixels, t.now))):
                nest = ((t.noc, (*step, 1)), (t.now, (1, 1, 0)))
                ops.append(Gemm(lower_nest(nest, (dst, src, wgt), low.limits), init=True))
        return ops

    def pair_copy(self, t: Tile, off: int, acc: int) -> list[Op]:
        """Each of the tile's finished pixels copied twice, side by side, after the tile, so that the STOREs write
        whole rows, not single pixels two apart. With :attr:`ConvLowering.pair_gemm`, an ``init`` GEMM against the
        identity block reads the int8 results from OUT under an EPI that only clamps (shift 0, no table): one cycle
        a copy, and the OUT-path multiplier may stay on. Otherwise an ALU ADD of the source accumulator into a reset
        destination: the OUT mirror writes each copy as it wrote the source (the epilogue state is the same)."""
        low, n = self.low, t.noc * t.noh * t.now
        dst = self.acc["pairs"] + 2 * off
        if low.pair_gemm:
            gemm = identity_gemm(((n, (2, 1)), (2, (1, 0))), dst, acc, low.eye, low.limits, init=True)
            return [CLAMP_FROM_OUT, gemm]
        nest = ((n, (2, 1, 0)), (2, (1, 0, 0)))
        return [Alu(AluOp.ADD, lower_nest(nest, (dst, acc, 0), low.limits), reset=True)]

    def pool_ops(self, t: Tile, o0: int, acc: int) -> tuple[list[Op], Tile, int]:
        """The fused pool's passes after the tile's GEMMs (:mod:`vdla.compiler.fused_pool`), the pooled tile and
        the accumulators where it sits (for the epilogue and the STOREs)."""
        low = self.low
        pool, (sh, _), owp = low.pool, low.pool.stride, low.pool.out_hw[1]
        carry = low.carry_base + pool.carry_elems(t.ob)
        nph = t.noh // sh
        out = self.acc["pool"] + o0 * nph * owp
        rows = (t.oy > 0, t.oy + t.noh < low.spec.oh)
        passes = pool.passes(t.noc, t.noh, acc, carry, rows, out, low.limits)
        return passes, replace(t, oy=t.oy // sh, noh=nph, ox=0, now=owp), out

    def residual_loads(self, t: Tile, off: int) -> list[Op]:
        """The compute-stage LOAD of the residual into the accumulators after the tile (ALU form), if any."""
        if not self.low.epi.residual or self.s.res_inp:
            return []
        mem = MemType.ACC_8BIT if self.low.epi.residual == "int8" else MemType.ACC
        res = self.acc["res"] + off
        return [Load(mem, res + tr.sram, "res", tr.offset, tr.y, tr.x, tr.stride) for tr in self.residual_transfers(t)]

    def epilogue_ops(self, t: Tile, off: int, acc: int) -> list[Op]:
        """The epilogue passes over the accumulators from ``acc`` of the tile part ``off`` elements into the tile:
        ALU instructions, and the GEMM adding the residual from INP against the identity weights (``res_inp``)."""
        low = self.low
        res = self.acc["res"] + off
        ops: list[Op] = []
        for p in low.passes_of(self.s):
            if p.gemm and p.dst == "res":  # a rescaled residual copied from INP: an init GEMM without the bias
                ops.append(low.epi_op(t))
            if p.gemm:
                nest = ((t.noc * t.pixels, (1, 1)),)
                to = res if p.dst == "res" else acc
                ops.append(identity_gemm(nest, to, self.res_inp0 + off, low.eye, low.limits, init=p.dst == "res"))
            else:
                ops.append(Alu(p.op, self.elementwise(t, p, res if p.dst == "res" else acc, res), p.imm, p.shift))
        return ops

    def gate_ops(self, t: Tile, ib0: int, nic: int) -> list[Op]:
        """A gated step's input window (``nic`` channel blocks from ``ib0``) copied into the gate scratch by an
        ``init`` GEMM against the identity block, its outer loop the channel blocks, under an EPI whose OUT mirror
        multiplies each write by its block's gate row with the scale's shift and clamps it to int8 (or [0, 127])."""
        low = self.low
        shift, lo, _ = low.gate
        win = low.in_rows(t.noh) * low.in_cols(t.now)
        row = low.gate_base + t.ng * low.ib + ib0
        nest = ((nic, (win, win, 0)), (win, (1, 1, 0)))
        base = (self.acc["gate"], self.step_inp0(t, ib0, nic), low.eye)
        return [
            Epi(True, lo == 0, 0, None, mul=(row, shift)),
            Gemm(lower_nest(nest, base, low.limits, pin_outer=True), init=True),
        ]

    def skip_zero(self, op: Op, ob0: int, ib0: int, wic: int, wgt0: int) -> Op:
        """``op`` (one of a step's ops) without the micro-ops whose weight blocks are all zero at every iteration
        (:attr:`ConvLowering.zero`): they add nothing. The step's weights sit output-channel-major from ``wgt0``
        (``wic`` input-channel blocks from ``ib0``, ``taps`` each), its output-channel blocks from ``ob0``. An
        ``init`` GEMM keeps a write of every accumulator, which initialises it."""
        low = self.low
        if low.zero is None or not isinstance(op, Gemm):
            return op
        k = op.kernel
        rel = k.indices(2) - wgt0
        o, rest = np.divmod(rel, wic * low.taps)
        i, tap = np.divmod(rest, low.taps)
        drop = low.zero[ob0 + o, ib0 + i, tap].all(axis=1)
        if op.init:  # every accumulator keeps a write, which initialises it
            dst = k.indices(0)
            need = np.setdiff1d(dst, dst[~drop])
            for j in np.flatnonzero(drop):
                if need.size and np.isin(dst[j], need).any():
                    drop[j], need = False, np.setdiff1d(need, dst[j])
        return op if not drop.any() or drop.all() else replace(op, kernel=k.keep(~drop))

    def step_inp0(self, t: Tile, ib0: int, nic: int) -> int:
        """Where tile ``t``'s input window of the step of ``nic`` blocks from input-channel block ``ib0`` sits."""
        if self.low.inputs_shared(self.s):  # step-major, batch-group-major within the step
            return self.low.ng * ib0 + t.ng * nic
        if not self.low.inputs_resident(self.s):
            return self.inp0
        return self.inp0 + ib0 * self.s.tn * self.low.in_rows(self.s.toh) * self.low.in_cols(self.s.tow)

    def init_gemms(self, t: Tile, nest: tuple, base: tuple[int, int, int], src_out: bool = False) -> list[Op]:
        """The first step's EPI and GEMM with ``init``, its outer loop stepping through the tile's bias rows
        (``src_out``: the GEMM reads its input rows from OUT, :mod:`vdla.compiler.dw_pointwise`)."""
        oc, rest = self.low.oc_axis(nest, t.noc)
        return [
            self.low.epi_op(t, bias=True, src_out=src_out),
            Gemm(lower_nest((oc,) + rest, base, self.low.limits, pin_outer=True), init=True),
        ]

    def step_gemms(self, t: Tile, nest: tuple, base: tuple[int, int, int], src_out: bool = False) -> list[Op]:
        """A later step's GEMM, after an EPI of the layer's own where another thread may have left another one (a
        post add's, or its multiplier rows: the outer loop then steps through the tile's)."""
        low = self.low
        if low.out_mul:
            oc, rest = low.oc_axis(nest, t.noc)
            gemm = Gemm(lower_nest((oc,) + rest, base, low.limits, pin_outer=True))
        else:
            gemm = Gemm(lower_nest(nest, base, low.limits))
        own_epi = low.post or low.out_mul or src_out or low.pair_gemm or low.epi.mask
        return [low.epi_op(t, src_out=src_out), gemm] if own_epi else [gemm]

    def elementwise(self, t: Tile, p: AluPass, acc: int, res: int, post: bool = False) -> MicroKernel:
        """The kernel of pass ``p`` over the tile's accumulators (from ``acc``), reading its operand alongside:
        its channel blocks' rows (multipliers; ``post``: the post add's) or the residual tile (from ``res``).
        Passes with an immediate read nothing, so they share the first row's kernel: the whole epilogue runs
        from one or two micro-kernels."""
        pixels, low = t.noh * t.now, self.low
        if not p.holds_row:
            nest, src = ((t.noc * t.pixels, (1, 1, 0)),), res
        else:  # batch groups outermost in the accumulators (Tile)
            groups = ((t.nn, (t.noc * pixels, 0, 0)),) if t.nn > 1 else ()
            nest = ((t.noc, (pixels, 1, 0)), *groups, (pixels, (1, 0, 0)))
            rows, base = (low.post_rows, low.post_rows_base) if post else (low.rows, low.rows_base)
            name = p.operand or (rows[0] if rows else None)
            src = base + rows.index(name) * low.ob + t.ob if name else 0
        # a held row keeps the channel-block axis the outer loop (when it is 1 too), the pixels inner
        return lower_nest(nest, (acc, src, 0), self.low.limits, pin_outer=p.holds_row)

    def output_transfers(self, t: Tile, own: bool = False) -> list:
        """The 2-D transfers between the tile's accumulators and an output-shaped tensor (at each of the view's
        offsets: its copies store the same rows again): the copy view's where the layer has one, unless ``own``."""
        low = self.low
        view = low.view if own or low.copy_view is None else low.copy_view
        _, blocks, oh, ow = low.stored_shape(view)
        offsets, (sy, sx) = (view.offsets, view.step) if view else (((0, 0),), (1, 1))
        cols = (t.now, sx)
        if view is not None and view.row_pairs:  # whole rows of the pixels written twice (pair_copy)
            offsets, cols = [(y, 0) for y in view.row_pairs], (2 * t.now, 1)
        b0 = view.blocks[0] if view else 0
        return [
            tr
            for y0, x0 in offsets
            for tr in plan_transfers(
                0,
                ((t.ng * blocks + b0 + t.ob) * oh + y0 + t.oy * sy) * ow + x0 + t.ox * sx,
                [(t.nn, blocks * oh * ow), (t.noc, oh * ow), (t.noh, sy * ow), cols],
            )
        ]

    def residual_transfers(self, t: Tile) -> list:
        """The 2-D transfers of the tile's residual: the layer's own output shape, wherever a channel-block view
        stores the output (:meth:`~vdla.compiler.spec.OutputView.check` admits no other view with a residual)."""
        low = self.low
        oh, ow = low.out_hw
        offset = ((t.ng * low.ob + t.ob) * oh + t.oy) * ow + t.ox
        return plan_transfers(0, offset, [(t.nn, low.ob * oh * ow), (t.noc, oh * ow), (t.noh, ow), (t.now, 1)])

    def up_loads(self, t: Tile, ib0: int, nic: int) -> list[Load]:
        """The window of an upsampled step (:meth:`ConvLowering.is_up`): the tile's source pixels of ``nic`` blocks
        of the ``up`` tensor, densely (block, row, column) at the step's place in INP."""
        low, sp = self.low, self.low.spec
        up, (fh, fw) = low.up, low.up.factor
        hs, ws, rows, cols = sp.h // fh, sp.w // fw, t.noh // fh, t.now // fw
        offset = ((t.ng * up.blocks + ib0 - up.first) * hs + t.oy // fh) * ws + t.ox // fw
        lay = {"ic": (hs * ws, rows * cols), "row": (ws, cols), "col": (1, 1)}
        ext = {"ic": nic, "row": rows, "col": cols}
        base = self.step_inp0(t, ib0, nic)
        return [
            Load(MemType.INP, base + tr.sram, "up", tr.offset, tr.y, tr.x, tr.stride)
            for tr in window_transfers(lay, ext, offset)
        ]

    def input_loads(self, t: Tile, ib0: int, nic: int) -> list[Load]:
        """The input window of a tile for input-channel blocks [ib0, ib0+nic) (:meth:`ConvLowering.window_layout`),
        borders zero padded: unpadded, the fewest 2-D LOADs (:func:`window_transfers`); padded, one LOAD per
        channel block, or per column of each when the window is column-major. Rows step ``row_step`` input rows
        and columns ``col_step`` input columns: a column-subsampled LOAD reads single elements (``x`` = 1)."""
        low, sp = self.low, self.low.spec
        if low.is_up(ib0):
            return self.up_loads(t, ib0, nic)
        top, _, left, _ = sp.pad
        rows, cols = low.in_rows(t.noh), low.in_cols(t.now)
        r_first, c_first = t.oy * sp.sh - top, t.ox * sp.sw - left
        (r_lo, r_hi), (c_lo, c_hi) = _span(r_first, rows, sp.h, low.row_step), _span(c_first, cols, sp.w, low.col_step)
        offset = ((t.ng * low.ib + ib0) * sp.h + r_first + r_lo * low.row_step) * sp.w + c_first + c_lo * low.col_step
        by_columns = self.by_columns
        lay = low.window_layout(nic, rows, cols, by_columns, t.nn)
        ext = {"n": t.nn, "ic": nic, "row": r_hi - r_lo, "col": c_hi - c_lo}
        pad = (r_lo, rows - r_hi, c_lo, cols - c_hi)
        base = self.step_inp0(t, ib0, nic)
        if not any(pad):
            return [
                Load(MemType.INP, base + tr.sram, "inp", tr.offset, tr.y, tr.x, tr.stride)
                for tr in window_transfers(lay, ext, offset)
            ]
        outer = ("col", "ic") if by_columns else ("ic",)  # one padded LOAD per index: rows of x elements
        x = 1 if by_columns else ext["col"]
        return [
            Load(
                MemType.INP,
                base + sum(i * lay[a][1] for i, a in zip(idx, outer)),
                "inp",
                offset + sum(i * lay[a][0] for i, a in zip(idx, outer)),
                ext["row"],
                x,
                lay["row"][0],
                pad,
            )
            for idx in itertools.product(*(range(ext[a]) for a in outer))
        ]
