"""One attention head of a QDQ model compiled entirely on the accelerator (issue 53, docs/transformers.md):
exactly :func:`vdla.graph.oracle.attention_qdq` of the spec's :class:`~vdla.graph.attention.QdqAttention`, whose
probabilities are quantized to int8 before ``P V`` (onnxruntime's quantizer puts a quantize/dequantize pair after
the softmax).

The views, blocks and padding are :mod:`vdla.compiler.attention`'s (``L`` = ``block_out`` tokens a block, ``UB``
key blocks, ``CB`` channel blocks). The softmax runs in the transposed layout, keys by rows and queries by lanes,
where a query's maximum, row sum and reciprocal are lanes of one row: no value crosses lanes.

The setup (:meth:`QdqAttentionLowering.setup`): ``K`` and ``V`` into the weight layout by the identity copy, with
a mask the selection rows (``keep`` as the diagonal of each key block's identity: ``sel_k``; ``real - keep``:
``sel_m``) from the keep vector, ``V^T`` by the identity's rows against ``V``'s tiles, stored as weight tiles
(channel block, key block).

Then the queries in tiles of ``TB`` query blocks, in ten blocks (:meth:`QdqAttentionLowering.blocks`):

1. the scores by GEMMs of the tile's ``Q`` rows against ``K``'s tiles (query block, key block, query), an ALU MUL
   by the score multiplier with its rounding shift under EPI ``req`` and ``lut``: the OUT mirror holds the kept
   softmax input ``x = kept[s]``; with a mask a copy under the masked table; stored as weight tiles;
2. a wait; 3. the tiles loaded as WGT and ``X^T`` (query block, key block, key; lanes the queries) by GEMMs of
   the selection rows against them (``sel_k`` against the kept tiles, ``sel_m`` against the masked ones; without
   a mask the identity's rows; with the row maximum the padding rows of -128 against the ones block: a padded
   key's ``x`` is below -1900); with the row maximum, the maximum ``M`` of each query block's rows by ALU MAX and
   ``d = X - M`` (with a fixed reference ``d`` is ``x`` and the table is by ``x``); the exp table's nonzero planes
   (:func:`~vdla.graph.attention.qdq_planes` of its two ranges, :func:`~vdla.graph.attention.qdq_exp_ranges`):
   the first by ``d``'s own last writes under its table, each other by a copy of ``d`` (``d + 128`` for the far
   range) under its table: the OUT mirrors hold the int8 planes, stored as rows;
4. a wait; 5. the planes' rows loaded as INP and summed by Horner's rule, ``e = 2^16 p0 + 2^8 p1 + p2``, by GEMMs
   against the identity block (a MUL by 256 between the planes), a padded key's ``e`` set to 0; ``Z`` the sum of
   each query block's rows; the per-row division of :mod:`vdla.compiler.attention` (``k``, ``1 / m`` by
   :data:`~vdla.graph.attention.QDQ_ITERATIONS` Newton steps, ``q = r a 2^-H``, ``2^(30 - k)``); ``P^T =
   MUL(MUL(e, q) >> FRAC, 2^(30 - k)) >> (30 - H)`` under EPI ``req``, stored as weight tiles (query block, key
   block);
6. a wait; 7. the tiles loaded as WGT and ``P`` (query, key block) by the identity's rows against them, stored;
8. a wait; 9. ``P``'s rows loaded as INP and ``O`` (query, channel block) by GEMMs against ``V^T``'s tiles, an ALU
   MUL by the output multiplier under EPI ``req``, the real queries' rows stored into the output view.

On a config whose GEMMs read OUT rows (``src_out``) the planes and ``P`` are read where they are, in their
regions' OUT mirrors: each plane in turn looked up into region 1 and added into ``e`` (region 2) by a GEMM
reading its mirror (:meth:`QdqAttentionLowering.planes_summed`), so that a tile takes three or four regions
whatever the planes; 3 and 5 in one block, 7 and 9 in another, two round trips less.

A head alone runs on one virtual thread, on all the buffers; a block's heads together
(:class:`QdqAttentionHeads`) on two or three (the faster, :class:`HeadsSearch`), head ``h`` on thread ``h % n``
in its share of ACC, INP and WGT, so that each thread's round trips run under the others' work. A padded key's
``e`` is 0, so it adds nothing to ``Z`` nor ``O``; a padded query is a lane of ``X^T``, ``e``, ``Z`` and ``P^T``
(values of no meaning, wrapping int32 arithmetic) and a row of ``P`` and ``O`` never stored.

Invariant: bit for bit :func:`~vdla.graph.oracle.attention_qdq` on every backend; ``block_in == block_out`` and
batch 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vdla.compiler.attention import (
    EYE,
    ONES,
    AttentionHeads,
    AttentionLowering,
    AttentionSpec,
    CompiledAttention,
    HeadTile,
    compile_attention,
    compile_attention_heads,
)
from vdla.compiler.blocks import WAIT, Alu, Block, Epi, Gemm, Load, Op, Store, alu_held, gemm_nest
from vdla.compiler.cache import ScheduleCache
from vdla.compiler.identity import identity_fits, identity_gemm, identity_weights
from vdla.compiler.microcode import Limits
from vdla.compiler.search import cached_fastest
from vdla.compiler.spec import CompileError
from vdla.compiler.vthreads import Stream, lower_vthreads, prologue_block
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.graph import attention as att
from vdla.graph.attention import QdqAttention
from vdla.isa import AluOp, MemType

# the constant rows after the zero bias rows: score multiplier, seed (c1, c2), 2, the probabilities' multiplier,
# 2^30, 256, the output multiplier
CONSTS = ("sm", "c1", "c2", "two", "mo", "p", "c256", "po")
# the rows of a query block after O: the maximum (then its negation), then the division's rows
BLOCK_ROWS = ("m", "z", "w", "k", "t", "nm", "r")


@dataclass(frozen=True)
class _Tile(HeadTile):
    """A tile of ``r`` query tokens (:class:`~vdla.compiler.attention.HeadTile`): ACC rows from ``a`` (``regions``
    regions of :attr:`n` rows, then ``O``, then the per-block rows), INP rows from ``i`` (``Q``, then ``P``)."""

    regions: int = 1

    @property
    def cb(self) -> int:
        return self.d // self.lanes

    @property
    def n(self) -> int:
        """Rows of a region: (query block, key block, token)."""
        return self.planes

    def region(self, k: int) -> int:
        return self.a + k * self.n

    @property
    def o(self) -> int:
        return self.region(self.regions)

    def row(self, name: str) -> int:
        return self.o + self.tb * self.lanes * self.cb + BLOCK_ROWS.index(name) * self.tb

    @property
    def p_rows(self) -> int:
        """INP rows of ``P`` after ``Q``'s."""
        return self.i + self.tb * self.lanes * self.cb

    def runs(self) -> list[tuple[int, int, int]]:
        """Every query block whole (:meth:`AttentionLowering.scores`)."""
        return [(0, self.tb, self.lanes)]


@dataclass(frozen=True)
class _Table:
    """A LUT pass: ``kind`` ``chain`` (the softmax input), ``near`` or ``far`` (an exp plane of that range), its
    plane (0: the high), its 256 entries by int8 index."""

    kind: str
    plane: int
    values: np.ndarray


class QdqAttentionLowering(AttentionLowering):
    """The program of one attention head of a QDQ model on one config (module docstring)."""

    def __init__(
        self, spec: AttentionSpec, cfg: HwConfig, head: tuple[int, int] = (0, 1), thread: tuple[int, int] = (0, 1)
    ):
        """``head``: (index, count) of the head among those of one program, whose scratch tensors hold each head's
        part in turn; ``thread``: (its virtual thread, threads), each thread its own share of ACC, INP and WGT
        (the constant rows in ACC are every thread's)."""
        if not isinstance(spec.head, QdqAttention):
            raise CompileError("attention: a QDQ lowering of a head without QDQ parameters")
        self.spec, self.cfg, self.limits = spec, cfg, Limits.of(cfg)
        (self.index, self.count), (self.thread, self.threads) = head, thread
        self.private, self.kth = False, 0
        self.check_views()
        self.blocks_of_views()
        self.chains = self.chain_tables()
        self.planes = self.plane_tables()
        lanes, ub = self.lanes, self.ub
        # ACC from c0: zero bias rows (ub), CONSTS, real (ub), keep (ub), real - keep (ub), identity rows (lanes)
        self.c0 = cfg.acc_depth - 4 * ub - len(CONSTS) - lanes
        t, n = self.thread, self.threads
        self.acc0, self.acc_n = t * (self.c0 // n), self.c0 // n  # the thread's share of each buffer
        self.inp0, self.inp_end = t * (cfg.inp_depth // n), (t + 1) * (cfg.inp_depth // n)
        self.wgt0, self.wgt_end = t * (cfg.wgt_depth // n), (t + 1) * (cfg.wgt_depth // n)
        self.ones, self.eye = self.wgt0 + ONES, self.wgt0 + EYE  # WGT: ones, identity, K's, V^T's, the tile's
        self.kt = self.wgt0 + 2
        self.vtw = self.kt + self.cb * self.ub
        self.w0 = self.vtw + self.cb * self.ub
        self.eye_rows = self.inp0 + EYE * lanes  # INP: ones, identity, sel_k, sel_m, padding rows, the tile's
        self.masked = len(self.chains) > 1  # the selection rows (else the identity's) and the padding rows
        self.padded = not spec.head.fixed and self.up > spec.tokens  # (with the row maximum) where needed
        self.sel = self.inp0 + 2 * lanes
        self.pad = self.sel + 2 * self.up * self.masked
        self.i0 = self.pad + self.up * self.padded
        self.const = {name: self.c0 + ub + i for i, name in enumerate(CONSTS)}
        self.real_row = self.c0 + ub + len(CONSTS)
        self.keep_row, self.mk_row = self.real_row + ub, self.real_row + 2 * ub
        self.eye_acc = self.real_row + 3 * ub
        self.src_out = cfg.src_out_refusal() is None  # GEMMs read the planes and P from OUT: two round trips less
        far = any(t.kind == "far" for t in self.planes)
        # ACC regions: d (its mirror the first plane), the other planes (src_out: d, the plane, e, d + 128 for the
        # far range); the chains' scores first
        self.regions = max(3 + far if self.src_out else max(len(self.planes), 2), len(self.chains))
        self.e_at = 2 if self.src_out else 1  # the region of e and P^T
        self.tb = self.tile_blocks(1)
        self.check_fits()

    # ------------------------------------------------------------------------------------------------------
    # tables and limits

    def chain_tables(self) -> list[_Table]:
        """The softmax input's tables: the kept keys', and with a mask the masked keys'."""
        p = self.spec.head
        masked = p.masked is not None and (self.spec.runtime_mask or self.spec.keep is not None)
        return [_Table("chain", 0, np.asarray(t, np.int64)) for t in ((p.kept, p.masked) if masked else (p.kept,))]

    def plane_tables(self) -> list[_Table]:
        """The exp table's nonzero planes, high to low (Horner's order), the near range's before the far's; with a
        fixed reference, the planes of the table by ``x`` itself (``near``)."""
        if self.spec.head.fixed:
            planes = att.qdq_planes(np.asarray(self.spec.head.exp, np.int64))
            return [_Table("near", k, plane.astype(np.int64)) for k, plane in enumerate(planes) if np.any(plane)]
        near, far = att.qdq_exp_ranges(self.spec.head.exp)
        planes = [
            _Table(kind, k, plane.astype(np.int64))
            for kind, table in (("near", near), ("far", far))
            for k, plane in enumerate(att.qdq_planes(table))
            if np.any(plane)
        ]
        return sorted(planes, key=lambda t: t.plane)

    def tile_blocks(self, threads: int = 1) -> int:
        """Query blocks a tile: the most whose regions, ``O`` and per-block rows fit ACC, whose ``Q`` and ``P``
        rows fit INP and whose tiles fit WGT."""
        lanes, ub, cb = self.lanes, self.ub, self.cb
        acc = self.acc_n // (self.regions * ub * lanes + lanes * cb + len(BLOCK_ROWS))
        rows = cb if self.src_out else max(cb + ub, len(self.planes) * ub)  # Q's, P's, the planes' rows
        inp = (self.inp_end - self.i0) // (lanes * rows)
        wgt = (self.wgt_end - self.w0) // (ub * len(self.chains))
        return min(acc, inp, wgt, ub)

    def fits(self, private: bool = False) -> bool:
        """Whether the setup (``K``, ``V`` and the selection rows in ACC, their rows in INP, ``V``'s tiles in WGT)
        and one query block fit."""
        n = self.cb * self.up
        setup = n + 2 * self.up <= self.acc_n and n <= self.inp_end - self.i0
        return setup and self.cb * self.ub <= self.wgt_end - self.w0 and self.tile_blocks() >= 1

    def check_fits(self) -> None:
        if self.fits():
            return
        cfg, t, d = self.cfg, self.spec.tokens, self.spec.d
        raise CompileError(
            f"attention: {t} tokens of a head of {d} do not fit {cfg.name}'s buffers (K {self.cb * self.up} INP rows "
            f"of {self.inp_end - self.i0}, {2 * self.cb * self.ub} weight blocks of {self.wgt_end - self.wgt0}, a "
            f"query block's {self.regions * self.up + d + len(BLOCK_ROWS)} ACC rows of {self.acc_n})"
        )

    # ------------------------------------------------------------------------------------------------------
    # tensors

    @property
    def tiles(self) -> int:
        return -(-self.ub // self.tb)

    @property
    def SCRATCH(self) -> tuple[str, ...]:  # noqa: N802 (the lowerings' name for their scratch tensors)
        """The scratch tensors this program stores to and loads back (:meth:`scratch_rows`)."""
        return tuple(name for name, rows in self.scratch_rows().items() if rows)

    def scratch_rows(self) -> dict[str, int]:
        """OUT rows of each scratch tensor: ``K``'s tiles then ``V``'s, ``V^T``, and each tile's part of the chain
        tiles, the planes and ``P`` (their round trips: none with ``src_out``), ``P^T``; the selection rows (with a
        mask)."""
        n, tiles, per = self.cb * self.up, self.tiles, self.tb * self.up
        trips = not self.src_out
        return {
            "kw": 2 * n,
            "vt": n,
            "ch": tiles * len(self.chains) * per,
            "ex": tiles * len(self.planes) * per * trips,
            "pt": tiles * per,
            "pr": tiles * per * trips,
            "sel": 2 * self.up * self.masked,
        }

    def tensor_bytes(self) -> dict[str, int]:
        cfg, t = self.cfg, self.spec.tokens
        tables = len(self.chains) + len(self.planes)
        return {
            "inp": t * self.ib * cfg.inp_elem_bytes,
            "out": t * self.ob * cfg.out_elem_bytes,
            "wgt": 2 * cfg.wgt_elem_bytes,
            **{name: rows * cfg.out_elem_bytes * self.count for name, rows in self.scratch_rows().items() if rows},
            "lut": tables * cfg.lut_depth * cfg.batch * cfg.block_out,
            "consts": (self.ub + len(CONSTS) + self.ub) * cfg.acc_elem_bytes,
            "padc": self.up * self.lanes,
            "keep": self.up,
        }

    def constants(self) -> dict[str, np.ndarray]:
        """The ones and identity blocks, the tables (entry ``i`` for the int8 whose byte is ``i``), the zero bias
        rows, the constant rows and the ``real`` rows (1 for a key, 0 for padding), the padding rows (-128 in every
        lane of a padded key's row)."""
        cfg, p, lanes, f = self.cfg, self.spec.head, self.lanes, att.FRAC
        eye = identity_weights(cfg)
        byte = np.arange(256).astype(np.uint8).view(np.int8).astype(np.int64) + 128
        tables = [t.values[byte] for t in (*self.chains, *self.planes)]
        c1, c2 = (round(c * (1 << f)) for c in att.SEED)
        rows = [p.score_multiplier, c1, c2, 2 << f, p.prob_multiplier, 1 << att.P_BITS, 256, p.out_multiplier]
        real = (np.arange(self.up) < self.spec.tokens).astype(np.int64)
        consts = np.concatenate([
            np.zeros((self.ub, lanes), np.int64),
            np.repeat(np.array(rows)[:, None], lanes, axis=1),
            real.reshape(self.ub, lanes),
        ])  # fmt: skip
        pad = np.repeat(np.where(real == 0, -128, 0)[:, None], lanes, axis=1)
        return {
            "wgt": np.concatenate([np.ones_like(eye), eye]),
            "lut": np.concatenate(tables).astype(np.int8),
            "consts": consts.astype(np.int32),
            "padc": pad.astype(np.int8),
        }

    def keep_vector(self, keep: np.ndarray | None) -> np.ndarray:
        """The keep vector as int8 0/1 over the padded keys (padding 0): ``keep`` for a run-time mask, the spec's
        constant mask otherwise (None: every key)."""
        if keep is None and self.spec.keep is not None:
            keep = np.asarray(self.spec.keep, bool)
        return super().keep_vector(keep)

    # ------------------------------------------------------------------------------------------------------
    # kernels

    def lut_pass(self, k: int) -> list[Op]:
        """LOAD LUT of table ``k`` (chains, then planes) into the first table and the EPI looking it up."""
        n = self.cfg.lut_depth
        return [Load(MemType.LUT, 0, "lut", k * n, 1, n, n), Epi(True, False, 0, None, lut=True, lut_table=0)]

    def copy(self, dst: int, src: int, rows: int, **kw) -> Alu:
        return self.alu(AluOp.ADD, ((rows, (1, 1)),), dst, src, reset=True, **kw)

    def per_block(self, tile: _Tile, op: AluOp, dst: int, row: str, **kw) -> Alu:
        """``op`` over each query block's rows of a region from ``dst`` with the block's row ``row`` (held)."""
        rows = self.ub * self.lanes
        return self.alu(op, ((tile.tb, (rows, 1)), (rows, (1, 0))), dst, tile.row(row), **kw)

    def reduce(self, tile: _Tile, op: AluOp, row: str, src: int) -> list[Alu]:
        """Each query block's row ``row`` as ``op`` over that block's rows of a region from ``src``."""
        rows = self.ub * self.lanes
        return [
            self.alu(AluOp.ADD, ((tile.tb, (1, rows)),), tile.row(row), src, reset=True),
            self.alu(op, ((tile.tb, (1, rows)), (rows - 1, (0, 1))), tile.row(row), src + 1),
        ]

    def select(self, tile: _Tile) -> list[Gemm]:
        """``X^T`` (query block, key block, key) in region 0: the selection rows against the chain tiles (WGT
        ``tile.w``: chain, query block, key block; without a mask the identity's rows against the one chain's);
        with the row maximum, the padded keys' rows of -128 against the ones block (a padded key's ``x`` then below
        any other; its ``e`` is set to 0 after the sum in any case, :meth:`horner_end`)."""
        ub, lanes, n = self.ub, self.lanes, tile.tb * self.ub
        block = lanes if self.masked else 0  # each key block's selection rows, or the identity's for every one
        nest = ((tile.tb, (ub * lanes, 0, ub)), (ub, (lanes, block, 1)), (lanes, (1, 1, 0)))
        sel = self.sel if self.masked else self.eye_rows
        gemms = [
            gemm_nest(nest, (tile.region(0), sel + c * self.up, tile.w + c * n), self.limits, init=c == 0)
            for c in range(len(self.chains))
        ]
        pad, first = self.up - self.spec.tokens, self.spec.tokens - (ub - 1) * lanes  # in the last key block
        if self.padded:
            rows = ((tile.tb, (ub * lanes, 0, 0)), (pad, (1, 1, 0)))
            at = (ub - 1) * lanes + first
            gemms.append(gemm_nest(rows, (tile.region(0) + at, self.pad + at, self.ones), self.limits, init=False))
        return gemms

    def first_lookup(self) -> list[Op]:
        """With a fixed reference, the first plane's table before ``X^T``'s GEMMs (:meth:`select`): their writes,
        the last to region 0, leave the plane in its OUT mirror."""
        return self.lut_pass(len(self.chains)) if self.spec.head.fixed else []

    def reference(self, tile: _Tile) -> list[Op]:
        """``d = X - M`` in region 0, its OUT mirror the first plane (its table looked up by the ADD's writes); with
        a fixed reference ``d`` is ``X`` (:meth:`first_lookup`)."""
        if self.spec.head.fixed:
            return []
        return [
            Epi(False, False, 0, None),
            *self.reduce(tile, AluOp.MAX, "m", tile.region(0)),
            self.rows(tile, AluOp.MUL, "m", imm=-1),
            *self.lut_pass(len(self.chains)),
            self.per_block(tile, AluOp.ADD, tile.region(0), "m"),
        ]

    def exp_planes(self, tile: _Tile, rank: int | None = None) -> list[Op]:
        """``d`` (:meth:`reference`: the first plane in region 0's OUT mirror), then each other plane by a copy under
        its table into region ``k`` (a far plane's from ``d + 128``: the first far plane's region adds 128, the
        others copy it)."""
        n, far = tile.n, None
        ops = self.reference(tile)
        for k, table in enumerate(self.planes[1:], 1):
            dst = tile.region(k)
            ops += self.lut_pass(len(self.chains) + k)
            if table.kind == "near":
                ops.append(self.copy(dst, tile.region(0), n))
            elif far is None:
                far = dst
                ops += [self.copy(dst, tile.region(0), n), self.alu(AluOp.ADD, ((n, (1, 1)),), dst, 0, imm=128)]
            else:
                ops.append(self.copy(dst, far, n))
        return ops

    def exp_sum(self, tile: _Tile) -> list[Op]:
        """The planes' rows (INP from ``tile.i``, loaded back from ``ex``) summed into region ``e_at`` by Horner's
        rule, ``e = 2^16 p0 + 2^8 p1 + p2`` over both ranges: GEMMs against the identity block, accumulating, a MUL
        by 256 between the planes."""
        n = tile.n
        ops: list[Op] = [Epi(False, False, 0, None)]
        e, level = tile.region(self.e_at), self.planes[0].plane
        for k, table in enumerate(self.planes):
            level = self.horner_level(ops, e, n, level, table.plane)
            ops.append(identity_gemm(((n, (1, 1)),), e, tile.i + k * n, self.eye, self.limits, init=k == 0))
        return ops + self.horner_end(tile, e, level)

    def planes_summed(self, tile: _Tile) -> list[Op]:
        """With ``src_out``: ``d`` (:meth:`reference`: the first plane in region 0's OUT mirror), then each other
        plane by a copy of ``d`` (of ``d + 128`` in region 3 for the far range) under its table into region 1, each
        added into ``e`` (region 2) by a GEMM reading its region's OUT mirror against the identity block (Horner's
        rule as :meth:`exp_sum`): one plane's rows at a time, no round trip."""
        n = tile.n
        x, plane, e, far = (tile.region(k) for k in range(4))
        ops = self.reference(tile)
        if any(t.kind == "far" for t in self.planes):
            ops += [self.copy(far, x, n), self.alu(AluOp.ADD, ((n, (1, 1)),), far, 0, imm=128)]
        level = self.planes[0].plane
        for k, table in enumerate(self.planes):
            if k:
                ops += [*self.lut_pass(len(self.chains) + k), self.copy(plane, x if table.kind == "near" else far, n)]
            ops.append(Epi(False, False, 0, None, src_out=True))
            level = self.horner_level(ops, e, n, level, table.plane)
            ops.append(identity_gemm(((n, (1, 1)),), e, plane if k else x, self.eye, self.limits, init=k == 0))
        return ops + self.horner_end(tile, e, level)

    def horner_level(self, ops: list[Op], e: int, n: int, level: int, plane: int) -> int:
        """``e`` times 256 for each plane level from ``level`` to ``plane`` (MULs appended to ``ops``): the new
        level."""
        for _ in range(level, plane):
            ops.append(alu_held(AluOp.MUL, n, e, self.const["c256"], self.limits))
        return max(level, plane)

    def horner_end(self, tile: _Tile, e: int, level: int) -> list[Op]:
        """``e`` times 256 for each plane level after ``level``, and a padded key's ``e`` set to 0 (the table's at
        -128 with a fixed reference)."""
        ops: list[Op] = []
        self.horner_level(ops, e, tile.n, level, att.QDQ_PLANES - 1)
        pad, real = self.up - self.spec.tokens, self.spec.tokens % self.lanes
        if pad:
            nest = ((tile.tb, (self.ub * self.lanes, 0)), (pad, (1, 0)))
            ops.append(self.alu(AluOp.ADD, nest, e + (self.ub - 1) * self.lanes + real, 0, imm=0, reset=True))
        return ops

    def probabilities(self, tile: _Tile) -> list[Op]:
        """``Z``, the division's rows, then ``P^T`` over region ``e_at`` with the OUT mirror requantizing."""
        h, e = self.spec.head.prob_exponent, tile.region(self.e_at)
        return [
            *self.reduce(tile, AluOp.ADD, "z", e),
            *self.exponent(tile),
            *self.reciprocal(tile),
            self.per_block(tile, AluOp.MUL, e, "r", shift=att.FRAC),
            Epi(True, False, 0, None),
            self.per_block(tile, AluOp.MUL, e, "w", shift=att.P_BITS - h),
        ]

    def division(self) -> tuple[int, int]:
        """(the shift of ``q = MUL(r, multiplier) >> shift``, Newton steps) of the per-row division."""
        return self.spec.head.prob_shift, att.QDQ_ITERATIONS

    def untranspose_p(self, tile: _Tile) -> Gemm:
        """``P`` (query, key block) into region 0 from ``P^T``'s tiles (WGT ``tile.w``: query block, key block)
        against the identity rows (query ``t``: row ``e_(t % L)``)."""
        ub, lanes = self.ub, self.lanes
        nest = ((tile.tb, (lanes * ub, 0, ub)), (lanes, (ub, 1, 0)), (ub, (1, 0, 1)))
        return gemm_nest(nest, (tile.region(0), self.eye_rows, tile.w), self.limits)

    def product(self, tile: _Tile) -> list[Op]:
        """``O`` (query, channel block) from ``P``'s rows (from OUT, region 0's mirror, with ``src_out``; else INP)
        against ``V^T``'s tiles, requantized by the output multiplier under EPI ``req``."""
        ub, cb, rows = self.ub, self.cb, tile.tb * self.lanes
        nest = ((rows, (cb, ub, 0)), (cb, (1, 0, ub)), (ub, (0, 1, 1)))
        n = rows * cb
        p_rows = tile.region(0) if self.src_out else tile.p_rows
        return [
            Epi(False, False, 0, None, src_out=self.src_out),
            gemm_nest(nest, (tile.o, p_rows, self.vtw), self.limits),
            Epi(True, False, 0, None),
            alu_held(AluOp.MUL, n, tile.o, self.const["po"], self.limits, shift=self.spec.head.out_shift),
        ]

    # ------------------------------------------------------------------------------------------------------
    # the program

    def selection(self, acc: int) -> list[Op]:
        """``sel_k`` (key block, j: ``keep e_j``) and ``sel_m`` (``(real - keep) e_j``) rows from ACC ``acc``."""
        ub, lanes, up = self.ub, self.lanes, self.up
        ops: list[Op] = []
        for c, by in enumerate((self.keep_row, self.mk_row)[: len(self.chains)]):
            at = acc + c * up
            ops += [
                self.alu(AluOp.ADD, ((ub, (lanes, 0)), (lanes, (1, 1))), at, self.eye_acc, reset=True),
                self.alu(AluOp.MUL, ((ub, (lanes, 1)), (lanes, (1, 0))), at, by),
            ]
        return ops

    def kv_copy(self, acc: int, inp: int) -> Gemm:
        """``K``'s or ``V``'s rows copied in (block, token) order (:meth:`AttentionLowering.kv_copy`) against the
        thread's identity block."""
        t = self.spec.tokens
        return identity_gemm(((self.cb, (t, 1)), (t, (1, self.cb))), acc, inp, self.eye, self.limits, init=True)

    def at(self, name: str) -> int:
        """The first OUT row of this head's part of scratch tensor ``name``."""
        return self.index * self.scratch_rows()[name]

    def setup(self) -> list[Block]:
        """``K`` in the weight layout (stored); ``V`` and the selection rows (stored) in the same rows; a wait;
        ``V^T`` (stored); a wait."""
        _, _, k_at, v_at, _, _ = self.spec.views
        t, blk, n, tiles, lanes = self.spec.tokens, self.cfg.block_in, self.cb * self.up, self.cb * self.ub, self.lanes
        a, kw, chains = self.acc0, self.at("kw"), len(self.chains)
        rows = {at: Load(MemType.INP, self.i0, "inp", at // blk, t, self.cb, self.ib) for at in (k_at, v_at)}
        consts = (
            Load(MemType.WGT, self.wgt0, "wgt", 0, 1, 2, 2),
            Load(MemType.INP, self.inp0, "wgt", 0, 1, 2 * lanes, 2 * lanes),
        )
        sel = Store(a + n, "sel", self.at("sel"), 1, chains * self.up, chains * self.up)
        v_tiles = Load(MemType.WGT, self.w0, "kw", (kw + n) // lanes, 1, tiles, tiles)
        transpose = self.transpose(a, self.eye_rows, self.w0, range(tiles))
        th = self.thread
        return [
            Block(th, (rows[k_at], *consts), (*WAIT, self.kv_copy(a, self.i0)), (self.kv_store(a, kw),)),
            Block(th, (rows[v_at],), (Epi(True, False, 0, None), self.kv_copy(a, self.i0),
                                      *(self.selection(a + n) if self.masked else ())),
                  (self.kv_store(a, kw + n), *((sel,) if self.masked else ()))),
            Block(th, (), WAIT, ()),
            Block(th, (v_tiles,), (*WAIT, transpose), (Store(a, "vt", self.at("vt"), 1, n, n),)),
            Block(th, (), WAIT, ()),
        ]  # fmt: skip

    def shared(self) -> tuple[Load, ...]:
        """``K``'s and ``V^T``'s tiles, the selection and padding rows where there are: what every tile reads."""
        tiles, rows = self.cb * self.ub, len(self.chains) * self.up
        sel = Load(MemType.INP, self.sel, "sel", self.at("sel"), 1, rows, rows)
        pad = Load(MemType.INP, self.pad, "padc", 0, 1, self.up, self.up)
        return (
            Load(MemType.WGT, self.kt, "kw", self.at("kw") // self.lanes, 1, tiles, tiles),
            Load(MemType.WGT, self.vtw, "vt", self.at("vt") // self.lanes, 1, tiles, tiles),
            *((sel,) if self.masked else ()),
            *((pad,) if self.padded else ()),
        )

    def tile(self, k: int, thread: int = 0) -> _Tile:
        r = min(self.tb * self.lanes, self.spec.tokens - k * self.tb * self.lanes)
        tb = -(-r // self.lanes)
        return _Tile(r, tb, self.acc0, self.i0, self.w0, self.ub, self.spec.d, self.lanes, self.regions)

    def blocks(self, k: int, thread: int = 0, first: bool = False, rank: int | None = None) -> list[Block]:
        """Query tile ``k`` (module docstring); ``first`` loads what every tile reads."""
        _, q_at, _, _, _, out_at = self.spec.views
        blk, lanes, cb, ub = self.cfg.block_in, self.lanes, self.cb, self.ub
        t0, tile = k * self.tb * lanes, self.tile(k)
        per, chains, planes = self.tb * self.up, len(self.chains), len(self.planes)
        parts = (("ch", chains), ("ex", len(self.planes)), ("pt", 1), ("pr", 1))
        at = {name: self.at(name) + k * per * m for name, m in parts}
        n, tiles = tile.n, tile.tb * ub
        loads = [Load(MemType.INP, tile.i, "inp", t0 * self.ib + q_at // blk, tile.r, cb, self.ib)]
        loads += list(self.shared()) if first else []
        chain: list[Op] = [Epi(False, False, 0, self.c0), *self.scores(tile), *self.lut_pass(0)]
        chain.append(alu_held(AluOp.MUL, n, tile.region(0), self.const["sm"], self.limits,
                              shift=self.spec.head.score_shift))  # fmt: skip
        if chains > 1:
            chain += [*self.lut_pass(1), self.copy(tile.region(1), tile.region(0), n)]
        out = Store(tile.o, "out", t0 * self.ob + out_at // blk, tile.r, cb, self.ob)
        th = self.thread
        chain_tiles = Load(MemType.WGT, tile.w, "ch", at["ch"] // lanes, 1, chains * tiles, chains * tiles)
        pt_tiles = Load(MemType.WGT, tile.w, "pt", at["pt"] // lanes, 1, tiles, tiles)
        pt = Store(tile.region(self.e_at), "pt", at["pt"], 1, n, n)
        if self.src_out:  # the planes and P read from OUT where they are: two round trips less
            return [
                Block(
                    th,
                    tuple(loads),
                    tuple(chain),
                    tuple(Store(tile.region(c), "ch", at["ch"] + c * n, 1, n, n) for c in range(chains)),
                ),
                Block(th, (), WAIT, ()),
                Block(
                    th,
                    (chain_tiles,),
                    (
                        *WAIT,
                        *self.first_lookup(),
                        *self.select(tile),
                        *self.planes_summed(tile),
                        *self.probabilities(tile),
                    ),
                    (pt,),
                ),
                Block(th, (), WAIT, ()),
                Block(
                    th, (pt_tiles,), (Epi(True, False, 0, None), self.untranspose_p(tile), *self.product(tile)), (out,)
                ),
            ]
        return [
            Block(th, tuple(loads), tuple(chain), tuple(
                Store(tile.region(c), "ch", at["ch"] + c * n, 1, n, n) for c in range(chains))),
            Block(th, (), WAIT, ()),
            Block(th, (chain_tiles,), (*WAIT, *self.first_lookup(), *self.select(tile), *self.exp_planes(tile)), tuple(
                Store(tile.region(j), "ex", at["ex"] + j * n, 1, n, n) for j in range(len(self.planes)))),
            Block(th, (), WAIT, ()),
            Block(th, (Load(MemType.INP, tile.i, "ex", at["ex"], 1, planes * n, planes * n),),
                  (*self.exp_sum(tile), *self.probabilities(tile)), (pt,)),
            Block(th, (), WAIT, ()),
            Block(th, (pt_tiles,), (Epi(True, False, 0, None), self.untranspose_p(tile)),
                  (Store(tile.region(0), "pr", at["pr"], 1, n, n),)),
            Block(th, (), WAIT, ()),
            Block(th, (Load(MemType.INP, tile.p_rows, "pr", at["pr"], 1, n, n),), tuple(self.product(tile)), (out,)),
        ]  # fmt: skip

    def prologue(self) -> list[Op]:
        """The constant rows, the keep vector, ``real - keep`` and the identity rows in ACC."""
        ub, lanes = self.ub, self.lanes
        width = 2 * ub + len(CONSTS)
        each = ((ub, (1, 1)),)
        return [
            Load(MemType.ACC, self.c0, "consts", 0, 1, width, width),
            Load(MemType.ACC_8BIT, self.keep_row, "keep", 0, 1, ub, ub),
            Load(MemType.ACC_8BIT, self.eye_acc, "wgt", EYE * lanes, 1, lanes, lanes),
            self.alu(AluOp.ADD, each, self.mk_row, self.keep_row, reset=True),
            self.alu(AluOp.MUL, each, self.mk_row, 0, imm=-1),
            self.alu(AluOp.ADD, each, self.mk_row, self.real_row),
        ]

    def head_blocks(self) -> list[Block]:
        """The head's setup, then its tiles in turn, on its thread."""
        blocks = self.setup()
        for k in range(self.tiles):
            blocks += self.blocks(k, first=k == 0)
        return blocks

    def stream(self) -> Stream:
        """The head alone on one thread."""
        blocks = self.head_blocks()
        return lower_vthreads([blocks], prologue_block(self.prologue(), [blocks], self.cfg.uop_depth))


class QdqAttentionHeads(AttentionHeads):
    """Several heads of a QDQ model's block (one token count, parameters and mask; each its own views) in one
    program on ``threads`` virtual threads (at most one a head): head ``h`` on thread ``h % threads``, in its
    thread's share of the buffers, each thread's heads in turn; the threads share no buffer row but the constant
    rows, so that one thread's work runs under the others' stores and loads. Raises :class:`CompileError` where a
    head does not fit its share."""

    @property
    def SCRATCH(self) -> tuple[str, ...]:  # noqa: N802
        return self.heads[0].SCRATCH

    def __init__(self, specs: Sequence[AttentionSpec], cfg: HwConfig, threads: int = 2):
        self.threads = min(threads, len(specs))
        super().__init__(specs, cfg)

    def lower(self, specs: Sequence[AttentionSpec]) -> list[AttentionLowering]:
        n = self.threads
        return [QdqAttentionLowering(s, self.cfg, (h, len(specs)), (h % n, n)) for h, s in enumerate(specs)]

    def fits(self) -> bool:
        return True  # each head checked its share when lowered

    def stream(self) -> Stream:
        threads: list[list[Block]] = [[] for _ in range(self.threads)]
        for low in self.heads:
            threads[low.thread] += low.head_blocks()
        return lower_vthreads(threads, prologue_block(self.heads[0].prologue(), threads, self.cfg.uop_depth))


@dataclass(frozen=True)
class HeadsThreads:
    """The virtual threads a QDQ block's heads program deals its heads to (:class:`QdqAttentionHeads`)."""

    threads: int


MAX_THREADS = 3  # more threads, smaller shares: tiles too small to pay (measured on 3 heads of 65 x 64)


class HeadsSearch:
    """A QDQ block's heads programs by thread count (:func:`~vdla.compiler.search.cached_fastest`'s lowering)."""

    def __init__(self, specs: Sequence[AttentionSpec], cfg: HwConfig):
        self.specs, self.cfg = specs, cfg
        self.built: dict[HeadsThreads, QdqAttentionHeads] = {}

    def program(self, choice: HeadsThreads) -> QdqAttentionHeads:
        if choice not in self.built:
            self.built[choice] = QdqAttentionHeads(self.specs, self.cfg, choice.threads)
        return self.built[choice]

    def stream(self, choice: HeadsThreads) -> Stream:
        return self.program(choice).stream()

    def tensor_bytes(self) -> dict[str, int]:
        """Room for each tensor of every program built (the timing runs bind one set of buffers)."""
        sizes: dict[str, int] = {}
        for program in self.built.values():
            for name, n in program.tensor_bytes().items():
                sizes[name] = max(sizes.get(name, 0), n)
        return sizes

    def candidates(self) -> list[HeadsThreads]:
        """The thread counts from 2 whose shares every head fits."""
        found = []
        for n in range(2, min(len(self.specs), MAX_THREADS) + 1):
            try:
                self.program(HeadsThreads(n))
            except CompileError:
                break
            found.append(HeadsThreads(n))
        return found

    def key(self) -> str:
        """A stable text key of what the programs' timing depends on (schedule cache): the shapes, the views'
        widths, the heads, the mask's tables, the exp planes and the reference."""
        low = QdqAttentionLowering(self.specs[0], self.cfg)
        sp, planes = low.spec, "".join(f"{t.kind[0]}{t.plane}" for t in low.planes)
        c, _, _, _, oc, _ = sp.views
        heads = f"h{len(self.specs)}:c{len(low.chains)}:{planes}:f{int(sp.head.fixed)}"
        return f"attention_qdq:{sp.tokens}x{sp.d}:in{c}:out{oc}:{heads}"


def compile_attention_qdq(spec: AttentionSpec, config=DEFAULT_PRESET) -> CompiledAttention:
    """Compile a QDQ model's attention head for ``config`` (module docstring)."""
    cfg = load_config(config)
    if not identity_fits(cfg):
        raise CompileError(f"attention: needs block_in == block_out on {cfg.name}")
    low = QdqAttentionLowering(spec, cfg)
    return CompiledAttention(low, low.stream())


# ---------------------------------------------------------------------------------------------------------
# either attention


def attention_lowering(spec: AttentionSpec, cfg: HwConfig) -> AttentionLowering:
    """The lowering of one head on ``cfg``: a QDQ model's or the integer attention's
    (:mod:`vdla.compiler.attention`); raises :class:`CompileError` naming the limit it does not fit."""
    return (QdqAttentionLowering if isinstance(spec.head, QdqAttention) else AttentionLowering)(spec, cfg)


def compile_attention_programs(
    specs: Sequence[AttentionSpec], config=DEFAULT_PRESET, cache: ScheduleCache | None = None
) -> list[CompiledAttention]:
    """The programs of an attention block's heads (one after the other): the heads in one program where they fit
    (:func:`~vdla.compiler.attention.compile_attention_heads`; :class:`QdqAttentionHeads` on the thread count of
    :class:`HeadsSearch` the timing-only simulator finds fastest, kept in ``cache``), else each head's own."""
    if isinstance(specs[0].head, QdqAttention):
        search = HeadsSearch(specs, load_config(config))
        options = search.candidates() if len(specs) > 1 else []
        if options:  # the fastest thread count on the timing-only simulator, kept in the cache
            choice = cached_fastest(search, lambda: options, HeadsThreads, search.key(), cache)
            return [CompiledAttention(search.program(choice.schedule), choice.stream)]
        return [compile_attention_qdq(spec, config) for spec in specs]
    together = compile_attention_heads(specs, config)
    return [together] if together else [compile_attention(spec, config) for spec in specs]
