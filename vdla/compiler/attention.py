"""One attention head compiled entirely on the accelerator, softmax included (issue 53, docs/transformers.md):
exactly :func:`vdla.graph.oracle.attention_int` of the spec's :class:`~vdla.graph.attention.IntAttention`.

``Q``, ``K`` and ``V`` (T, d) are channel-block views of one int8 token-major tensor in DRAM (a QKV
projection's output: ``C`` channels a token, each view ``d`` of them from its own offset); the output (T, d)
goes into a channel-block view of another (the concatenated heads). ``L`` = ``block_out`` tokens a block,
``UB = ceil(T / L)`` key blocks, ``CB = d / L`` channel blocks. The products run transposed, ``O^T = V^T P^T``,
so that a token's row sum and its reciprocal sit in the token's own lane (16 tokens an accumulator row) beside
its output column: the division is a per-row ALU program on ``T / L`` rows, no value crosses lanes.

First the setup, on two virtual threads (:meth:`AttentionLowering.setup`):

* ``K`` and ``V`` into the weight layout with no CPU step, one on each thread: each copied into ACC by an
  identity GEMM in the order (channel block, token) (the ``T`` tokens), so that one STORE (a row of ``T`` a
  channel block) puts token ``u``'s block ``c`` at row ``u % L`` of weight tile ``(c, u // L)``;
* after a block that waits for the store (store -> compute), ``V``'s tiles loaded as WGT and ``V^T`` by GEMMs
  of the identity's rows ``e_j`` as input against them (``out[j, o] = V[u0 + o, j]``), stored; another wait.
  A ``private`` setup keeps its rows in its thread's own INP share, after the rows of the thread's first
  ``Q``, which the setup's last block loads.

Then the queries in tiles of ``TB`` query blocks (:meth:`AttentionLowering.tile_blocks`) on the two threads in
turn (a thread's share of ACC, INP and WGT); the first tile of the thread that put ``K`` loads ``K``'s tiles,
the other thread's first tile ``V^T``'s rows, which every tile reads (:meth:`AttentionLowering.blocks`):

* LOAD INP of the tile's ``Q`` rows; the scores by GEMMs against ``K``'s tiles with ``init`` from the bias rows
  (the key mask, per key block: the outer loop), in the order (query block, key block, query) so that their
  OUT rows are ``P^T``'s weight tiles: one GEMM over the whole query blocks, one over a partial last block's
  real queries, their rows packed (key block, query); in the next block, over the real queries' rows, an ALU
  MUL by the score multiplier row with its rounding shift under EPI ``req`` (the clamp to int8) and ``lut``
  with one exp table: the OUT mirror holds one plane; an ALU copy under the other table: the other plane (the
  tables take turns, :meth:`AttentionLowering.exp_planes`); both stored, a partial block's packed rows into
  the first rows of its weight tiles;
* after a wait, the planes loaded as WGT: ``O^T`` by GEMMs of ``V^T``'s rows against the high plane's tiles and
  ``Z`` (a token's row sum in its lane) of the ones row, an ALU MUL by 256, the same GEMMs on the low plane
  accumulating: ``U^T = 256 (V^T hi^T) + V^T lo^T`` and ``Z``;
* the per-row ALU program on the ``Z`` rows (:data:`~vdla.graph.attention.K_STEPS` search of the leading one,
  the seed and the Newton steps of ``1 / m``, ``q = r a 2^-H`` and ``2^(30 - k)``), then over ``U^T``'s rows
  (each query block's two rows held across the inner loop): MUL by ``q``, MUL by ``2^(30 - k)`` under EPI
  ``req``: the int8 ``O^T``, stored as weight tiles; after a wait, loaded as WGT and transposed back by GEMMs
  of the identity rows (the real queries', split as the scores): ``O``, stored into the output view.

The schedule (:func:`heads_stream`): the scores, the exp planes, ``U^T`` and ``Z``, the division with ``O^T``,
each a block of its own; every store is followed by one wait block and every load by two blocks of
work before the next wait, thread 0 two blocks late, so that the other thread's work runs under each round
trip. Several heads of one shape make one program (:class:`AttentionHeads`): each head's blocks after the
previous head's on each thread, its setup beside the previous head's last tiles.

The bias rows (a constant mask, or a run-time keep vector by LOAD ACC_8BIT, ADD -1 and SHR by
``-mask_shift``) and the constant rows are one load ahead of the blocks. The padding (``T`` to ``UB L``
tokens) is loaded and computed nowhere a row of its own costs an iteration: a padded key's ``K`` and ``V``
rows and a padded query's score rows hold whatever the buffers held. A padded key's bias is the mask's, which
takes any int8 ``K`` row's accumulator to the score -128, whose exp planes are exactly 0: it adds 0 to every
real query's ``U`` and ``Z`` whatever its ``V`` row. A padded query is a row of the scores, of their exp planes
and of ``O`` (not computed, not stored) and a lane everywhere else: its rows of the planes' weight tiles (what
the scratch tensor held), ``U^T`` and ``Z`` lanes and ``O^T`` lane hold values of no meaning (wrapping int32
arithmetic, no fault) that no real query's lane reads; the transposes back read only a real query's own lane.
Where padded tokens are lanes (``V^T``'s key lanes, the products' query lanes, the per-query program) they
cost nothing of their own.

Invariant: bit for bit :func:`~vdla.graph.oracle.attention_int` on every backend; ``block_in == block_out`` and
batch 1; no optional unit (OUT-path multiplier, ``src_out``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from vdla.compiler.blocks import WAIT, Alu, Block, Epi, Gemm, Load, Op, Store, alu_held, alu_nest, gemm_nest
from vdla.compiler.identity import identity_fits, identity_gemm, identity_weights
from vdla.compiler.microcode import Limits
from vdla.compiler.run import LayerRun, run_bound, scratch_arrays
from vdla.compiler.spec import CompileError
from vdla.compiler.vthreads import Stream, lower_vthreads, prologue_block
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.graph import attention as att
from vdla.graph.attention import IntAttention
from vdla.isa import AluOp, MemType
from vdla.runtime.device import Device

ONES, EYE = 0, 1  # WGT blocks (and their rows as INP rows): all ones (row sums) and the identity (copies)
# the constant rows after the bias rows: score multiplier, seed (c1, c2), 2, output multiplier, 2^30, 256
CONSTS = ("sm", "c1", "c2", "two", "mo", "p", "c256")
# the rows of a query block after U^T: Z, the search's copy of Z (then 2^(30 - k)), k, scratch, -m, r (then q)
BLOCK_ROWS = ("z", "w", "k", "t", "nm", "r")


@dataclass(frozen=True)
class AttentionSpec:
    """One head of ``head.d`` channels over ``tokens`` tokens (batch 1). ``Q``/``K``/``V`` are the channels from
    ``q_at``/``k_at``/``v_at`` of an int8 input of ``in_channels`` a token (0: ``3 d``, the views ``0, d, 2 d``:
    a QKV projection's output); the output goes to channels from ``out_at`` of an output of ``out_channels``
    (0: ``d``). The key mask: ``keep`` per key (a constant; None: every key) or, with ``runtime_mask``, a keep
    vector given to each run. Frozen: the cache key of its program."""

    tokens: int
    head: IntAttention
    in_channels: int = 0
    q_at: int = 0
    k_at: int | None = None
    v_at: int | None = None
    out_channels: int = 0
    out_at: int = 0
    keep: tuple[bool, ...] | None = None
    runtime_mask: bool = False

    @property
    def d(self) -> int:
        return self.head.d

    @property
    def views(self) -> tuple[int, int, int, int, int, int]:
        """(in_channels, q_at, k_at, v_at, out_channels, out_at) with the defaults filled in."""
        d = self.d
        k_at = d if self.k_at is None else self.k_at
        v_at = 2 * d if self.v_at is None else self.v_at
        return self.in_channels or 3 * d, self.q_at, k_at, v_at, self.out_channels or d, self.out_at


@dataclass(frozen=True)
class HeadTile:
    """A tile of ``r`` query tokens (``tb`` query blocks of ``lanes``) on a thread: its ACC rows from ``a``, INP rows
    from ``i`` and WGT blocks from ``w``; ``ub`` key blocks, ``d`` channels."""

    r: int
    tb: int
    a: int
    i: int
    w: int
    ub: int
    d: int
    lanes: int

    @property
    def planes(self) -> int:
        """Rows (and weight-tile rows) of one exp plane: query block, key block, query."""
        return self.tb * self.ub * self.lanes

    @property
    def scored(self) -> int:
        """ACC rows of one exp plane's real queries from its first row: the whole blocks' rows, then a partial last
        block's packed (key block, query), ``r`` rows a key block (:meth:`runs`)."""
        return self.ub * self.r

    @property
    def o(self) -> int:
        """``U^T`` (query block, channel), then ``O^T``, then ``O`` (query, channel block); the per-block rows after."""
        return self.a + 2 * self.planes

    def row(self, name: str) -> int:
        return self.o + self.tb * self.d + BLOCK_ROWS.index(name) * self.tb

    def runs(self) -> list[tuple[int, int, int]]:
        """The real queries as (first block, blocks, queries a block): the whole blocks, then a partial last
        block's queries, whose score rows are packed (key block, query) in ACC; a padded query's row is in
        none."""
        whole, rest = divmod(self.r, self.lanes)
        return [run for run in ((0, whole, self.lanes), (whole, 1, rest)) if run[1] and run[2]]


def _lut_epi(table: int) -> Epi:
    """The EPI that requantizes the OUT mirror (``req``) and looks it up in exp table ``table``."""
    return Epi(True, False, 0, None, lut=True, lut_table=table)


class AttentionLowering:
    """The program of one attention head on one config (module docstring)."""

    SCRATCH = ("kw", "vt", "ot", "ex")  # K's and V's weight tiles, V^T, O^T, the exp planes: DRAM round trips

    def __init__(self, spec: AttentionSpec, cfg: HwConfig, head: tuple[int, int] = (0, 1), private: bool = False):
        """``head``: (index, count) of the head among those of one program (:class:`AttentionHeads`), whose scratch
        tensors hold each head's part in turn; ``private``: each thread's setup in its own share only, so that a
        head's setup may run beside another head's tiles."""
        self.spec, self.cfg, self.limits = spec, cfg, Limits.of(cfg)
        (self.index, self.count), self.private = head, private
        self.kth = self.index % 2 if private else 0  # the thread putting K in the weight layout (:meth:`setup`)
        self.check_views()
        self.blocks_of_views()
        self.kt, self.w0 = 2, 2 + self.cb * self.ub  # WGT: ones, identity, K's tiles, then the threads' shares
        self.vt = 2 * self.lanes  # INP: the ones and identity rows, V^T's rows (channel block, key block, j)
        self.i0 = self.vt + self.cb * self.up  # then the threads' shares
        self.c0 = cfg.acc_depth - self.ub - len(CONSTS)  # ACC: the threads' shares, the bias rows, the constants
        self.const = {name: self.c0 + self.ub + i for i, name in enumerate(CONSTS)}
        self.check_fits()
        self.tb = self.tile_blocks(2)

    def blocks_of_views(self) -> None:
        """``lanes`` a block, ``cb`` channel blocks a head, ``ub`` key (and query) blocks, ``up`` tokens padded to
        whole blocks, ``ib``/``ob`` channel blocks a token of the input and the output."""
        sp, self.lanes = self.spec, self.cfg.block_out
        self.cb, self.ub = sp.d // self.lanes, -(-sp.tokens // self.lanes)
        self.up = self.ub * self.lanes
        self.ib, self.ob = sp.views[0] // self.lanes, sp.views[4] // self.lanes

    # ------------------------------------------------------------------------------------------------------
    # limits

    def check_views(self) -> None:
        sp, cfg = self.spec, self.cfg
        if not identity_fits(cfg) or cfg.batch != 1:
            raise CompileError(f"attention: needs batch 1 and block_in == block_out on {cfg.name} (batch {cfg.batch}, "
                               f"block_in {cfg.block_in}, block_out {cfg.block_out})")  # fmt: skip
        c, q, k, v, oc, o = sp.views
        blk = cfg.block_in
        if any(x % blk for x in (sp.d, c, q, k, v, oc, o)) or max(q, k, v) + sp.d > c or o + sp.d > oc:
            raise CompileError(
                f"attention: a head of {sp.d} channels at q {q}, k {k}, v {v} of {c} and out {o} of {oc} needs "
                f"whole blocks of {blk} inside the tensors"
            )
        if not 1 <= sp.tokens <= att.MAX_TOKENS:
            raise CompileError(f"attention: {sp.tokens} tokens; U and Z are exact in int32 up to {att.MAX_TOKENS}")
        if sp.keep is not None and (len(sp.keep) != sp.tokens or sp.runtime_mask):
            raise CompileError(
                f"attention: a constant mask of {len(sp.keep)} keys for {sp.tokens} (and no run-time one)"
            )

    def share(self, threads: int) -> tuple[int, int, int]:
        """(ACC rows, INP rows, WGT blocks) of a thread's share."""
        cfg = self.cfg
        return self.c0 // threads, (cfg.inp_depth - self.i0) // threads, (cfg.wgt_depth - self.w0) // threads

    def tile_blocks(self, threads: int) -> int:
        """Query blocks a tile with ``threads`` virtual threads: the most whose rows fit a thread's share of ACC,
        whose ``Q`` rows fit its share of INP and whose exp planes and ``O^T`` tiles fit its share of WGT."""
        acc, inp, wgt = self.share(threads)
        lanes, ub, cb = self.lanes, self.ub, self.cb
        per_acc = 2 * lanes * ub + self.spec.d + len(BLOCK_ROWS)
        return min(acc // per_acc, inp // (lanes * cb), wgt // max(2 * ub, cb), -(-ub // threads))

    def fits(self, private: bool = False) -> bool:
        """Whether the setup (``K``/``V`` in ACC and INP, ``V``'s tiles in WGT; with ``private``, ``K``'s and ``V``'s
        rows and the identity rows in the threads' own INP shares) and one query block fit."""
        cfg, n = self.cfg, self.cb * self.up
        acc, _, wgt = self.share(2)
        setup = n <= acc and self.i0 + n <= cfg.inp_depth and self.cb * self.ub <= wgt
        staging = not private or self.tb_q_rows() + n + self.lanes <= self.share(2)[1]
        return setup and staging and self.tile_blocks(2) >= 1

    def tb_q_rows(self) -> int:
        """INP rows of a tile's ``Q`` (the most query blocks a tile has)."""
        return self.tile_blocks(2) * self.lanes * self.cb

    def check_fits(self) -> None:
        """Raise naming the limit where the setup or one query block does not fit."""
        if self.fits():
            return
        cfg, t, d = self.cfg, self.spec.tokens, self.spec.d
        most = max((n for n in range(1, att.MAX_TOKENS + 1) if _Probe(self, n).fits()), default=0)
        raise CompileError(
            f"attention: {t} tokens of a head of {d} do not fit {cfg.name}'s buffers (V^T {self.cb * self.up} INP "
            f"rows, K and V {2 * self.cb * self.ub} weight blocks of {cfg.wgt_depth}, a query block's rows): at most "
            f"{most} tokens"
        )

    # ------------------------------------------------------------------------------------------------------
    # tensors

    def tensor_bytes(self) -> dict[str, int]:
        cfg, t, e = self.cfg, self.spec.tokens, self.cfg.inp_elem_bytes
        return {
            "inp": t * self.ib * e,
            "out": t * self.ob * cfg.out_elem_bytes,
            "wgt": 2 * cfg.wgt_elem_bytes,
            **{name: rows * cfg.out_elem_bytes * self.count for name, rows in self.scratch_rows().items()},
            "lut": 2 * cfg.lut_depth * cfg.batch * cfg.block_out,
            "consts": (self.ub + len(CONSTS)) * cfg.acc_elem_bytes,
            "keep": self.up,
        }

    def scratch_rows(self) -> dict[str, int]:
        """OUT rows of one head's part of each scratch tensor: ``K``'s tiles then ``V``'s, ``V^T``, ``O^T``, the exp
        planes."""
        n = self.cb * self.up
        return {"kw": 2 * n, "vt": n, "ot": n, "ex": 2 * self.up * self.ub}

    def at(self, name: str) -> int:
        """The first OUT row of this head's part of scratch tensor ``name`` (a whole weight tile)."""
        return self.index * self.scratch_rows()[name]

    def constants(self) -> dict[str, np.ndarray]:
        """The ones and identity blocks, the two exp tables (entry ``i`` for the score whose byte is ``i``), the
        bias rows of a constant mask and the constant rows."""
        cfg, p, lanes, f = self.cfg, self.spec.head, self.lanes, att.FRAC
        eye = identity_weights(cfg)
        hi, lo = att.exp_planes(np.asarray(p.exp, np.int64))
        byte = np.arange(256).astype(np.uint8).view(np.int8).astype(np.int64) + 128  # the score of byte i
        keep = None if self.spec.runtime_mask else self.spec.keep
        bias = np.full(self.up, p.mask_bias, np.int64)
        bias[: self.spec.tokens] = att.key_bias(p, keep, self.spec.tokens)
        c1, c2 = (round(c * (1 << f)) for c in att.SEED)
        rows = [p.score_multiplier, c1, c2, 2 << f, p.out_multiplier, 1 << att.P_BITS, 256]
        consts = np.concatenate([bias.reshape(self.ub, lanes), np.repeat(np.array(rows)[:, None], lanes, axis=1)])
        return {
            "wgt": np.concatenate([np.ones_like(eye), eye]),
            "lut": np.concatenate([hi[byte], lo[byte]]),
            "consts": consts.astype(np.int32),
        }

    def keep_vector(self, keep: np.ndarray | None) -> np.ndarray:
        """The run-time keep vector as int8 0/1 over the padded keys (padding masked)."""
        t = self.spec.tokens
        k = np.ones(t, bool) if keep is None else np.asarray(keep).astype(bool).ravel()
        if k.shape != (t,):
            raise CompileError(f"attention: a key mask of {k.size} values for {t} keys")
        out = np.zeros(self.up, np.int8)
        out[:t] = k
        return out

    # ------------------------------------------------------------------------------------------------------
    # kernels

    def alu(self, op: AluOp, nest, dst: int, src: int = 0, **kw) -> Alu:
        return alu_nest(op, nest, dst, src, self.limits, **kw)

    def rows(self, tile: HeadTile, op: AluOp, dst: str, src: str | None = None, **kw) -> Alu:
        """``op`` over the tile's per-block rows ``dst`` (from ``src``'s rows, or a constant row's)."""
        if src in self.const:
            return self.alu(op, ((tile.tb, (1, 0)),), tile.row(dst), self.const[src], **kw)
        return self.alu(op, ((tile.tb, (1, 1)),), tile.row(dst), tile.row(src) if src else 0, **kw)

    def kv_copy(self, acc: int, inp: int) -> Gemm:
        """``K``'s or ``V``'s rows (token-major from INP ``inp``, ``T`` tokens) copied to ACC ``acc`` in (block,
        token) order, ``T`` rows a block (:meth:`kv_store` puts them in the weight layout)."""
        t = self.spec.tokens
        return identity_gemm(((self.cb, (t, 1)), (t, (1, self.cb))), acc, inp, EYE, self.limits, init=True)

    def kv_store(self, acc: int, at: int) -> Store:
        """The rows of :meth:`kv_copy` from ACC ``acc`` into ``kw`` from OUT row ``at``: token ``u``'s block ``c`` at
        row ``u % L`` of weight tile ``(c, u // L)``. A padded key's rows hold what the scratch tensor held:
        whatever int8 they are, its score is the mask's -128 and its exp 0. One row where no key is padded."""
        t, n = self.spec.tokens, self.cb * self.up
        return Store(acc, "kw", at, 1, n, n) if t == self.up else Store(acc, "kw", at, self.cb, t, self.up)

    def transpose(self, acc: int, inp: int, wgt: int, tiles: range) -> Gemm:
        """``V^T`` rows (block, key block, j) of ``V``'s weight tiles ``tiles`` to ACC ``acc``: the identity's rows
        ``e_j`` (INP ``inp``) against those tiles (WGT ``wgt``)."""
        lanes, at = self.lanes, tiles.start
        nest = ((len(tiles), (lanes, 0, 1)), (lanes, (1, 1, 0)))
        return gemm_nest(nest, (acc + at * lanes, inp, wgt + at), self.limits)

    def scores(self, tile: HeadTile) -> list[Gemm]:
        """The tile's scores (query block, key block, query) from its ``Q`` rows against ``K``'s tiles, each
        accumulator from its key block's bias row (the outer loop): one GEMM over the whole query blocks, one over
        a partial last block's real queries, their rows packed (:meth:`HeadTile.runs`)."""
        ub, cb, lanes = self.ub, self.cb, self.lanes
        return [
            gemm_nest(
                ((ub, (q, 0, 1)), (n, (ub * q, lanes * cb, 0)), (q, (1, cb, 0)), (cb, (0, 1, ub))),
                (tile.a + b * ub * lanes, tile.i + b * lanes * cb, self.kt),
                self.limits,
                pin_outer=True,
            )
            for b, n, q in tile.runs()
        ]

    def products(self, tile: HeadTile, w: int, init: bool) -> list[Gemm]:
        """``V^T``'s rows against a plane's tiles (WGT ``w``: query block, key block) into ``U^T``, and the ones row
        into ``z`` (each query's row sum in its lane)."""
        ub, cb, lanes, d = self.ub, self.cb, self.lanes, self.spec.d
        ut = ((tile.tb, (d, 0, ub)), (cb, (lanes, ub * lanes, 0)), (lanes, (1, 1, 0)), (ub, (0, lanes, 1)))
        sums = ((tile.tb, (1, 0, ub)), (ub, (0, 0, 1)))
        return [
            gemm_nest(ut, (tile.o, self.vt, w), self.limits, init),
            gemm_nest(sums, (tile.row("z"), ONES * lanes, w), self.limits, init),
        ]

    def untranspose(self, tile: HeadTile) -> list[Gemm]:
        """``O`` (query, channel block) from ``O^T``'s tiles (WGT ``tile.w``: query block, channel block) against the
        identity rows (query ``t``: row ``e_(t % L)``), the real queries' rows only (:meth:`HeadTile.runs`)."""
        cb, lanes = self.cb, self.lanes
        return [
            gemm_nest(
                ((n, (lanes * cb, 0, cb)), (q, (cb, 1, 0)), (cb, (1, 0, 1))),
                (tile.o + b * lanes * cb, EYE * lanes, tile.w + b * cb),
                self.limits,
            )
            for b, n, q in tile.runs()
        ]

    # ------------------------------------------------------------------------------------------------------
    # the program

    def exp_planes(self, tile: HeadTile, rank: int | None = None) -> list[Op]:
        """The scores requantized (MUL by the multiplier row, EPI ``req``), their high exp plane in the OUT mirror
        of the scores (the table by EPI ``lut``) and the low one in that of their copy. With two activation tables
        (``lut_tables``) both are loaded ahead of the program (:meth:`prologue`) and an EPI selects each. With one,
        the tiles take turns: ``rank`` is the tile's place among the program's tiles in compute order (None: the
        only one); an odd rank makes its low plane first, with the table the tile before it left in the LUT, which
        a rank above 0 does not load again. Over the real queries' rows (:attr:`HeadTile.scored`), the low plane from
        the tile's second plane row."""
        n = tile.scored
        first, second = (1, 0) if self.low_first(rank) else (0, 1)
        if self.cfg.lut_tables > 1:
            before_mul, before_copy = [_lut_epi(first)], [_lut_epi(second)]
        else:
            before_mul = [*([self.table_load(first)] if not rank else []), _lut_epi(0)]
            before_copy = [self.table_load(second)]
        return [
            Epi(False, False, 0, self.c0),
            *self.scores(tile),
            *before_mul,
            alu_held(AluOp.MUL, n, tile.a, self.const["sm"], self.limits, shift=self.spec.head.score_shift),
            *before_copy,
            self.alu(AluOp.ADD, ((n, (1, 1)),), tile.a + tile.planes, tile.a, reset=True),
        ]

    def table_load(self, first: int, tables: int = 1) -> Load:
        """LOAD LUT of ``tables`` exp tables from table ``first`` of the ``lut`` tensor (high, then low) into the
        LUT buffer's tables from ``first`` where the config holds them all, else into its one table."""
        n = self.cfg.lut_depth
        at = first * n if self.cfg.lut_tables > 1 else 0
        return Load(MemType.LUT, at, "lut", first * n, 1, tables * n, tables * n)

    def low_first(self, rank: int | None) -> bool:
        """Whether a tile of ``rank`` (:meth:`exp_planes`) computes its low plane first: an odd rank, where the tiles
        take turns with one activation table."""
        return self.cfg.lut_tables == 1 and rank is not None and rank % 2 == 1

    def plane_stores(self, tile: HeadTile, at: int) -> list[Store]:
        """The two exp planes' real rows into ``ex`` from OUT row ``at`` (the planes' weight tiles, query block, key
        block): the whole blocks' rows, a partial last block's packed rows into the first rows of its tiles; one
        store where every block is whole."""
        ub, lanes, n = self.ub, self.lanes, tile.planes
        if tile.r == tile.tb * lanes:
            return [Store(tile.a, "ex", at, 1, 2 * n, 2 * n)]
        stores = []
        for plane in (0, n):
            for b, blocks, q in tile.runs():
                row = plane + b * ub * lanes
                shape = (1, blocks * ub * lanes, blocks * ub * lanes) if q == lanes else (ub, q, lanes)
                stores.append(Store(tile.a + row, "ex", at + row, *shape))
        return stores

    def sums(self, tile: HeadTile, low_first: bool = False) -> list[Op]:
        """``U^T`` and ``Z`` from the two planes' tiles: ``256 (hi ...) + lo ...`` (the high plane's sums times 256 by
        a MUL holding the row of 256: 2 cycles a row on a half-width ALU against an SHR's 3); ``low_first``: the low
        plane's tiles first (:meth:`exp_planes`)."""
        n = tile.tb * (self.spec.d + 1)
        hi, lo = (tile.w, tile.w + tile.tb * self.ub)[:: -1 if low_first else 1]
        return [
            Epi(False, False, 0, None),
            *self.products(tile, hi, True),
            alu_held(AluOp.MUL, n, tile.o, self.const["c256"], self.limits),  # SHR by -8: a pipelined MUL by 256
            *self.products(tile, lo, False),
        ]

    def exponent(self, tile: HeadTile) -> list[Op]:
        """``k`` of ``Z = max(Z, 1)`` by the binary search (:func:`~vdla.graph.oracle.reciprocal_exponent`)."""
        rows = self.rows
        ops = [rows(tile, AluOp.MAX, "z", imm=1), rows(tile, AluOp.ADD, "w", "z", reset=True)]
        ops.append(rows(tile, AluOp.ADD, "k", imm=0, reset=True))
        for b in att.K_STEPS:
            ops += [
                rows(tile, AluOp.ADD, "t", "w", reset=True),
                rows(tile, AluOp.SHR, "t", imm=b),
                rows(tile, AluOp.MIN, "t", imm=1),
                rows(tile, AluOp.MUL, "t", imm=b),  # c
                rows(tile, AluOp.SHR, "w", "t"),  # by each lane's own c
                rows(tile, AluOp.ADD, "k", "t"),
            ]
        return ops

    def reciprocal(self, tile: HeadTile) -> list[Op]:
        """``m = SHR(Z, k - F)``, ``r`` from the seed by Newton (:func:`~vdla.graph.oracle.reciprocal_fixed`), then
        ``q = MUL(r, M_o) >> shift_o`` in ``r`` and ``2^(30 - k)`` in ``w``."""
        rows, f = self.rows, att.FRAC
        ops = [
            rows(tile, AluOp.ADD, "t", "k", reset=True),
            rows(tile, AluOp.ADD, "t", imm=-f),
            rows(tile, AluOp.ADD, "nm", "z", reset=True),
            rows(tile, AluOp.SHR, "nm", "t"),
            rows(tile, AluOp.ADD, "r", "nm", reset=True),
            rows(tile, AluOp.MUL, "r", "c2", shift=f),
            rows(tile, AluOp.MUL, "r", imm=-1),
            rows(tile, AluOp.ADD, "r", "c1"),
            rows(tile, AluOp.MUL, "nm", imm=-1),
        ]
        shift, iterations = self.division()
        for _ in range(iterations):
            ops += [
                rows(tile, AluOp.ADD, "t", "nm", reset=True),
                rows(tile, AluOp.MUL, "t", "r", shift=f),
                rows(tile, AluOp.ADD, "t", "two"),
                rows(tile, AluOp.MUL, "r", "t", shift=f),
            ]
        return ops + [
            rows(tile, AluOp.MUL, "r", "mo", shift=shift),
            rows(tile, AluOp.ADD, "w", "p", reset=True),
            rows(tile, AluOp.SHR, "w", "k"),
        ]

    def division(self) -> tuple[int, int]:
        """(the shift of ``q = MUL(r, M_o) >> shift``, Newton steps) of the per-row division."""
        return self.spec.head.out_shift, att.ITERATIONS

    def output(self, tile: HeadTile) -> list[Op]:
        """Over ``U^T``'s rows (each query block's ``d``, its row held): MUL by the block's ``q``, then by its
        ``2^(30 - k)`` with the OUT mirror requantizing (EPI ``req``): the int8 ``O^T``."""
        d, h = self.spec.d, self.spec.head.out_exponent
        per_block = ((tile.tb, (d, 1)), (d, (1, 0)))
        return [
            self.alu(AluOp.MUL, per_block, tile.o, tile.row("r"), shift=att.FRAC),
            Epi(True, False, 0, None),
            self.alu(AluOp.MUL, per_block, tile.o, tile.row("w"), shift=att.P_BITS - h),
        ]

    def setup(self) -> tuple[list[Block], list[Block]]:
        """The blocks ahead of each thread's tiles (module docstring): thread ``kth`` puts ``K`` in the weight
        layout, the other (the first to compute: the first head's loads the ones and identity blocks) ``V`` and then
        ``V^T`` (its transposes in two blocks, the store after the second), whose rows that thread's first tile
        loads where every tile reads them. Each store is followed by one wait block, each load by at least two
        blocks of work before the next wait (:func:`heads_stream`). A ``private`` setup uses its thread's share
        only; otherwise (thread 0 putting ``K``) ``K``'s rows go where ``V^T``'s will be and ``V``'s into thread
        0's share."""
        _, _, k_at, v_at, _, _ = self.spec.views
        t, blk, n, tiles, lanes = self.spec.tokens, self.cfg.block_in, self.cb * self.up, self.cb * self.ub, self.lanes
        acc, inp, wgt = self.share(2)
        kth, vth = self.kth, 1 - self.kth
        own = self.i0 + kth * inp + self.tb_q_rows(), self.i0 + vth * inp + self.tb_q_rows()  # after Q's rows
        staged = (*own, own[1] + n) if self.private else (self.vt, self.i0, self.i0 + inp)
        k_in, v_in, eye = staged  # INP rows of K, of V, of the identity
        k_rows, v_rows = (
            Load(MemType.INP, i, "inp", at // blk, t, self.cb, self.ib) for i, at in ((k_in, k_at), (v_in, v_at))
        )
        consts = (Load(MemType.WGT, 0, "wgt", 0, 1, 2, 2),) if self.index == 0 else ()
        eye_rows = Load(MemType.INP, eye, "wgt", EYE * lanes, 1, lanes, lanes)
        kw, vt = self.at("kw"), self.at("vt")
        v_w, k_acc, v_acc = self.w0 + vth * wgt, kth * acc, vth * acc
        v_tiles = Load(MemType.WGT, v_w, "kw", (kw + n) // lanes, 1, tiles, tiles)
        half = tiles // 2
        halves = (range(half), range(half, tiles))
        transposes = [self.transpose(v_acc, eye, v_w, r) for r in halves if r]
        k_blocks = [
            Block(kth, (k_rows,), (*WAIT, self.kv_copy(k_acc, k_in)), (self.kv_store(k_acc, kw),)),
            Block(kth, (), WAIT, ()),
        ]
        v_blocks = [
            Block(vth, (v_rows, *consts), (*WAIT, self.kv_copy(v_acc, v_in)), (self.kv_store(v_acc, kw + n),)),
            Block(vth, (), WAIT, ()),
            Block(vth, (v_tiles, eye_rows), (*WAIT, transposes[0]), ()),
            Block(vth, (), (*WAIT, *transposes[1:]), (Store(v_acc, "vt", vt, 1, n, n),)),
            Block(vth, (), WAIT, ()),
        ]
        return k_blocks, v_blocks

    def shared_rows(self) -> tuple[Load, ...]:
        """``V^T``'s rows as INP rows, which every tile reads, and the first head's ones and identity rows."""
        n, lanes = self.cb * self.up, self.lanes
        ones = (Load(MemType.INP, 0, "wgt", 0, 1, 2 * lanes, 2 * lanes),) if self.index == 0 else ()
        return *ones, Load(MemType.INP, self.vt, "vt", self.at("vt"), 1, n, n)

    def tile(self, k: int, thread: int) -> HeadTile:
        acc, inp, wgt = self.share(2)
        r = min(self.tb * self.lanes, self.spec.tokens - k * self.tb * self.lanes)
        tb = -(-r // self.lanes)
        return HeadTile(
            r, tb, thread * acc, self.i0 + thread * inp, self.w0 + thread * wgt, self.ub, self.spec.d, self.lanes
        )

    def blocks(self, k: int, thread: int, first: bool = False, rank: int | None = None) -> list[Block]:
        """Query tile ``k`` on ``thread``: the scores; their exp planes (stored to ``ex``); a wait; the planes loaded
        as weight tiles, ``U^T`` and ``Z``; the division and ``O^T`` (stored to ``ot``); a wait; ``O^T``'s tiles
        loaded and ``O`` stored into the output view. Two blocks of work between waits, so that another thread's
        work hides each round trip (:meth:`stream`). ``first``: the thread's first tile, which loads the rows (thread
        1) or ``K``'s tiles (thread 0) every tile reads; ``rank``: its exp planes' (:meth:`exp_planes`)."""
        _, q_at, _, _, _, out_at = self.spec.views
        blk, lanes, cb = self.cfg.block_in, self.lanes, self.cb
        t0, tile = k * self.tb * lanes, self.tile(k, thread)
        plane = self.at("ex") + 2 * t0 * self.ub  # offset in OUT rows (16 a weight tile)
        ot = self.at("ot") + t0 * cb
        loads = [Load(MemType.INP, tile.i, "inp", t0 * self.ib + q_at // blk, tile.r, cb, self.ib)]
        if first:
            kw = self.cb * self.ub
            k_tiles = Load(MemType.WGT, self.kt, "kw", self.at("kw") // lanes, 1, kw, kw)
            loads += [k_tiles] if thread == self.kth else [*self.shared_rows()]
        division = (*self.exponent(tile), *self.reciprocal(tile), *self.output(tile))
        pt, tt = 2 * tile.tb * self.ub, tile.tb * cb  # weight tiles of the planes, of O^T
        out = Store(tile.o, "out", t0 * self.ob + out_at // blk, tile.r, cb, self.ob)
        planes = self.exp_planes(tile, rank)
        scores = 1 + len(tile.runs())  # the EPI and the scores' GEMMs: a block of their own
        return [
            Block(thread, tuple(loads), tuple(planes[:scores]), ()),
            Block(thread, (), tuple(planes[scores:]), tuple(self.plane_stores(tile, plane))),
            Block(thread, (), WAIT, ()),
            Block(
                thread,
                (Load(MemType.WGT, tile.w, "ex", plane // lanes, 1, pt, pt),),
                tuple(self.sums(tile, self.low_first(rank))),
                (),
            ),
            Block(
                thread,
                (),
                (Epi(False, False, 0, None), *division),
                (Store(tile.o, "ot", ot, 1, tile.tb * self.spec.d, tile.tb * self.spec.d),),
            ),
            Block(thread, (), WAIT, ()),
            Block(
                thread,
                (Load(MemType.WGT, tile.w, "ot", ot // lanes, 1, tt, tt),),
                (*WAIT, *self.untranspose(tile)),
                (out,),
            ),
        ]

    @property
    def tiles(self) -> int:
        return -(-self.ub // self.tb)

    def prologue(self) -> list[Op]:
        """The constant rows; with two activation tables both exp tables (:meth:`exp_planes`); with a run-time mask
        the bias rows from the keep vector: ``(keep - 1) << mask_shift``."""
        width = self.ub + len(CONSTS)
        ops: list[Op] = [Load(MemType.ACC, self.c0, "consts", 0, 1, width, width)]
        ops += [self.table_load(0, 2)] if self.cfg.lut_tables > 1 else []
        if self.spec.runtime_mask:
            each = ((self.ub, (1, 1)),)
            ops += [
                Load(MemType.ACC_8BIT, self.c0, "keep", 0, 1, self.ub, self.ub),
                self.alu(AluOp.ADD, each, self.c0, imm=-1),
                self.alu(AluOp.SHR, each, self.c0, imm=-self.spec.head.mask_shift),
            ]
        return ops

    def head_blocks(self, ranks: dict[int, int]) -> _HeadBlocks:
        """This head's blocks on each thread (its setup, then its tiles in turn from thread ``kth``; the other
        thread's first tile, or a block of its own where it has no tile, loads ``V^T``'s rows; thread ``kth``'s first
        tile ``K``'s tiles) and where they load and read the rows every tile reads; ``ranks``: tile -> its rank
        (:meth:`exp_planes`), where known."""
        kth, vth = self.kth, 1 - self.kth
        setup = {kth: [], vth: []}
        setup[kth], setup[vth] = self.setup()
        ks = [[k for k in range(self.tiles) if (kth + k) % 2 == t] for t in range(2)]
        tiles = [[b for k in ks[t] for b in self.blocks(k, t, k == ks[t][0], ranks.get(k))] for t in range(2)]
        if self.private:  # each thread's first Q rows loaded in its setup's last block (a wait)
            for t in (t for t in range(2) if tiles[t]):
                first, wait = tiles[t][0], setup[t][-1]
                setup[t][-1] = replace(wait, loads=first.loads[:1])
                tiles[t][0] = replace(first, loads=first.loads[1:])
        if not tiles[vth]:
            setup[vth].append(Block(vth, self.shared_rows(), WAIT, ()))
        loads = {kth: (kth, len(setup[kth])), vth: (vth, len(setup[vth]) - (not tiles[vth]))}
        starts = [len(setup[t]) for t in range(2)]
        scores = tuple((t, i) for t in range(2) for i in range(starts[t], starts[t] + len(tiles[t]), TILE_BLOCKS))
        sums = tuple((t, i + SUMS_BLOCK) for t, i in scores)
        threads = (setup[0] + tiles[0], setup[1] + tiles[1])
        return _HeadBlocks(threads, (loads[kth], loads[vth]), (scores, sums), (*ks[0], *ks[1]))

    def stream(self) -> Stream:
        """The head alone (:func:`heads_stream`)."""
        return heads_stream([self])


TILE_BLOCKS, SUMS_BLOCK = 7, 3  # blocks of a tile (:meth:`AttentionLowering.blocks`), that of U^T and Z among them
LAG = 2  # blocks ahead of thread 0's first setup (:func:`heads_stream`)
Place = tuple[int, int]  # (thread, block)


@dataclass(frozen=True)
class _HeadBlocks:
    """One head's blocks on each thread, the blocks that load ``K``'s tiles and ``V^T``'s rows (``loads``) and
    those that read each (``reads``: the scores, ``U^T`` and ``Z``)."""

    threads: tuple[list[Block], list[Block]]
    loads: tuple[Place, Place]
    reads: tuple[tuple[Place, ...], tuple[Place, ...]]
    tiles: tuple[int, ...]  # the tile of each scores block (``reads[0]``)

    def moved(self, at: tuple[int, int]) -> _HeadBlocks:
        """The places with each thread's blocks from ``at[thread]``."""

        def move(p: Place) -> Place:
            return p[0], p[1] + at[p[0]]

        reads = tuple(tuple(move(p) for p in r) for r in self.reads)
        return _HeadBlocks(self.threads, (move(self.loads[0]), move(self.loads[1])), reads, self.tiles)


def _before(a: Place, b: Place) -> bool:
    """Whether block ``a``'s compute comes no later than ``b``'s in round-robin order (the compute stage in order)."""
    return (a[1], a[0]) <= (b[1], b[0])


def shared_in_order(prev: _HeadBlocks | None, cur: _HeadBlocks) -> bool:
    """Whether ``cur``'s loads of ``K``'s tiles and ``V^T``'s rows (the same buffer rows for every head) come
    before every block of ``cur`` reading them (each load's block pops its load's token: later blocks find the
    rows there) and after every block of ``prev`` reading the rows they overwrite (the load waits for the compute
    of its thread's previous block, and with it for every compute before that)."""
    for (t, i), readers, old in zip(cur.loads, cur.reads, prev.reads if prev else ((), ())):
        if not all(_before((t, i), r) for r in readers) or not all(_before(r, (t, i - 1)) for r in old):
            return False
    return True


def heads_stream(heads: Sequence[AttentionLowering]) -> Stream:
    """The heads' programs in turn on two virtual threads, each head's blocks after the previous head's on each
    thread: a head's setup (a thread's own share with ``private`` lowerings) beside the previous head's tiles.
    Every thread waits every third block (:meth:`AttentionLowering.setup`, :meth:`~AttentionLowering.blocks`),
    thread 0 from ``LAG`` blocks late: each of its waits lies under thread 1's work and the other way round. A head
    starts on a thread after the fewest empty blocks that put its shared loads in order
    (:func:`shared_in_order`). The tiles' exp planes take turns with the LUT's two tables in the order their
    blocks compute (:meth:`~AttentionLowering.exp_planes`, the compute stage in order), which the block counts
    fix: a first pass places the blocks."""
    placed = _placed(heads, [{} for _ in heads])[1]
    order = sorted((i, t, h, k) for h, part in enumerate(placed) for (t, i), k in zip(part.reads[0], part.tiles))
    ranks: list[dict[int, int]] = [{} for _ in heads]
    for rank, (_, _, h, k) in enumerate(order):
        ranks[h][k] = rank
    threads = _placed(heads, ranks)[0]
    return lower_vthreads(threads, prologue_block(heads[0].prologue(), threads, heads[0].cfg.uop_depth))


def _placed(heads: Sequence[AttentionLowering], ranks: list[dict[int, int]]) -> tuple[list[list[Block]], list]:
    """The two threads' blocks of :func:`heads_stream` and each head's :class:`_HeadBlocks` where they are
    placed."""
    threads: list[list[Block]] = [[Block(0, (), WAIT, ())] * LAG, []]
    placed: list[_HeadBlocks] = []
    for low, rank in zip(heads, ranks):
        part = low.head_blocks(rank)
        prev = placed[-1] if placed else None
        pads = next(
            (p0, total - p0)
            for total in range(4 * TILE_BLOCKS)
            for p0 in range(total + 1)
            if shared_in_order(prev, part.moved((len(threads[0]) + p0, len(threads[1]) + total - p0)))
        )
        for t in range(2):
            blocks = list(part.threads[t])
            if low.private and prev is not None:
                blocks[0] = _hoisted(threads[t], blocks[0])
            threads[t] += [Block(t, (), WAIT, ())] * pads[t] + blocks
        placed.append(part.moved((len(threads[0]) - len(part.threads[0]), len(threads[1]) - len(part.threads[1]))))
    return threads, placed


def _hoisted(before: list[Block], first: Block) -> Block:
    """``first`` (a private setup's first block) without its load of ``K``'s or ``V``'s rows, which goes to the
    first wait among the thread's last :data:`TILE_BLOCKS` blocks ``before`` (a block of ``WAIT`` alone after a
    store, waiting for it anyway while the rows come: a thread's own INP rows no block between reads, from the
    input no block writes), if there is one."""
    start = max(len(before) - TILE_BLOCKS, 1)
    for i in range(start, len(before)):
        if before[i].compute == WAIT and not before[i].loads and before[i - 1].stores:
            before[i] = replace(before[i], loads=first.loads[:1])
            return replace(first, loads=first.loads[1:])
    return first


class _Probe(AttentionLowering):
    """The buffer arithmetic of ``tokens`` tokens of another lowering's head and config (no checks)."""

    def __init__(self, low: AttentionLowering, tokens: int):
        self.spec, self.cfg, self.cb, self.lanes = AttentionSpec(tokens, low.spec.head), low.cfg, low.cb, low.lanes
        self.ub = -(-tokens // self.lanes)
        self.up = self.ub * self.lanes
        self.w0, self.vt = 2 + self.cb * self.ub, 2 * self.lanes
        self.i0 = self.vt + self.cb * self.up
        self.c0 = low.cfg.acc_depth - self.ub - len(CONSTS)


@dataclass
class CompiledAttention:
    """An attention head compiled for one config."""

    lowering: AttentionLowering | AttentionHeads
    stream: Stream

    @property
    def spec(self) -> AttentionSpec:
        return self.lowering.spec

    def run(self, dev: Device, x: np.ndarray, keep: np.ndarray | None = None, **run_options) -> LayerRun:
        """Run on ``dev``: ``x`` int8 (tokens, in_channels) holding ``Q``, ``K``, ``V``; ``keep`` the run-time key
        mask (nonzero: kept) of a spec with ``runtime_mask``. The output tensor (tokens, out_channels), the
        head's channels written."""
        sp, low = self.spec, self.lowering
        shape = (sp.tokens, sp.views[0])
        if x.dtype != np.int8 or x.shape != shape:
            raise CompileError(f"attention input must be int8 of shape {shape}, got {x.dtype} {x.shape}")
        if keep is not None and not sp.runtime_mask:
            raise CompileError("attention: a run-time key mask for a head compiled without one (runtime_mask)")
        arrays = dict(low.constants(), inp=np.ascontiguousarray(x), keep=low.keep_vector(keep), **scratch_arrays(low))
        out, result = run_bound(dev, low, self.stream, arrays, (sp.tokens, sp.views[4]), **run_options)
        return LayerRun(out, result)


class AttentionHeads:
    """Several heads of one shape (tokens, parameters and mask; each its own views) in one program
    (:func:`heads_stream`): each head's setup in a thread's own share beside the previous head's tiles, the heads'
    scratch tensors each head's part in turn. :meth:`fits` says whether the private setups fit the buffers."""

    SCRATCH = AttentionLowering.SCRATCH

    def __init__(self, specs: Sequence[AttentionSpec], cfg: HwConfig):
        first = specs[0]
        shape = (first.tokens, first.head, first.keep, first.runtime_mask)
        if any((s.tokens, s.head, s.keep, s.runtime_mask) != shape for s in specs):
            raise CompileError("attention: heads of one program need one token count, parameters and mask")
        self.cfg = cfg
        self.heads = self.lower(specs)

    def lower(self, specs: Sequence[AttentionSpec]) -> list[AttentionLowering]:
        """Each head's lowering: its setup in a thread's own share (``private``), its part of the scratch."""
        return [AttentionLowering(s, self.cfg, (h, len(specs)), private=True) for h, s in enumerate(specs)]

    @property
    def spec(self) -> AttentionSpec:
        """The first head's spec (the tensors' shapes and the mask are every head's)."""
        return self.heads[0].spec

    def fits(self) -> bool:
        return self.heads[0].fits(private=True)

    def tensor_bytes(self) -> dict[str, int]:
        return self.heads[0].tensor_bytes()

    def constants(self) -> dict[str, np.ndarray]:
        return self.heads[0].constants()

    def keep_vector(self, keep: np.ndarray | None) -> np.ndarray:
        return self.heads[0].keep_vector(keep)

    def stream(self) -> Stream:
        return heads_stream(self.heads)


def compile_attention_heads(specs: Sequence[AttentionSpec], config=DEFAULT_PRESET) -> CompiledAttention | None:
    """The heads in one program for ``config`` (:class:`AttentionHeads`), or None where their private setups do
    not fit its buffers (then each head's own program, :func:`compile_attention`, in turn)."""
    low = AttentionHeads(specs, load_config(config))
    return CompiledAttention(low, low.stream()) if low.fits() else None


def compile_attention(spec: AttentionSpec, config=DEFAULT_PRESET) -> CompiledAttention:
    """Compile an attention head for ``config`` (module docstring): its setups in the threads' own shares where
    they fit there (``private``, :meth:`AttentionLowering.fits`)."""
    cfg = load_config(config)
    low = AttentionLowering(spec, cfg)
    if low.fits(private=True):
        low = AttentionLowering(spec, cfg, private=True)
    return CompiledAttention(low, low.stream())
