"""LayerNorm over the rows of an int8 (tokens, features) tensor in DRAM (issue 53, docs/transformers.md):
exactly :func:`vdla.graph.oracle.layer_norm_int` of the spec's :class:`~vdla.graph.layernorm.IntLayerNorm`.

Where every token's rows fit INP and ACC at once (:meth:`LayerNormLowering.resident_fits`) they stay resident,
in chunks of ``block_out`` tokens (:meth:`LayerNormLowering.resident_stream`: each chunk's load and statistics,
one per-row program over all packed rows, each chunk's output and store). Otherwise the tokens go in tiles of
``R`` rows (:meth:`LayerNormLowering.tile_rows`), each one block. Either way a chunk or tile is a LOAD INP of its
``R x C`` input elements (``C = features / block_in``, token-major), then on the accelerator alone

* ``-S1`` by a GEMM against the minus-ones block (each token's in every lane of its row); ``d = n x - S1`` by
  GEMMs of the tile against ``n`` times the identity (:func:`scale_parts` blocks, ``n`` may exceed int8) with
  ``init`` from the token's ``-S1`` row (EPI bias, the token on the outer loop); an identity GEMM copies the tile
  into ``q``;
* ``S2``, in a tile: ``q = SQR(q)`` (the ALU's square, pipelined over the tile's rows: a row a cycle, two on a
  half-width ALU), each token's ``C`` rows of squares added lane by lane into its first, whose ALU LSUM (the sum
  of a row's lanes, into every lane) is the token's ``S2``. In a resident chunk the GEMM core takes it: the
  identity GEMM copies the chunk into ``q`` in the order (channel block, token), one STORE puts that into the
  weight layout in DRAM (``xw``: token ``t``'s block ``b`` is row ``t`` of weight tile ``b``), and two blocks
  later (:meth:`LayerNormLowering.resident_stream`) the chunk's rows against those tiles give each token its row
  of the chunk's Gram matrix, whose lane ``t % L`` is ``S2`` (:meth:`LayerNormLowering.gram`);
* a MUL by the one-hot row ``E_l`` of its lane keeps ``S2`` (and ``-S1``) in lane ``t % L`` alone (``L =
  block_out``) and ADDs put the ``L`` tokens of a packed row together: the per-row program runs on ``L`` tokens a
  row;
* the per-row ALU program on the packed rows: ``V``, the binary search of ``k``, ``-m``, the seed, the Newton
  steps, then ``y`` scaled to ``RSHR(y, k - j)`` (:func:`~vdla.graph.oracle.rsqrt_scaled`: a MUL by ``2^(30 -
  max(k, j))`` with the shift ``30 - j``);
* that ``y`` back in every lane of each token's row: the packed row copied to each of its tokens' rows, a MUL by
  ``E_l`` keeps the token's lane, an LSUM puts it in every lane;
* over the tile's ``R x C`` rows: ``z = MUL(d, y) >> Z_SHIFT`` (a pipelined MUL holding the token's row), gamma by
  a MUL holding each channel block's multiplier row, beta by an ADD of its bias row with the OUT mirror
  requantizing (EPI ``req``); the OUT mirror stored.

No value goes through DRAM but the input, the output and a resident chunk's weight tiles. The multiplier and
bias rows and the constant rows (``3 2^F``, ``E``, the seed, the one-hot rows) are one LOAD ACC of the ``consts``
tensor ahead of the chunks or tiles. Tiles of more tokens than one packed row take two virtual threads, each half
of ACC and INP and its own weight blocks; a resident program is the fastest of a few orders on the timing-only
simulator (:meth:`LayerNormLowering.resident_orders`: the squares or the Gram GEMM, two or three threads).

Invariant: bit for bit :func:`~vdla.graph.oracle.layer_norm_int` on every backend (the ALU and GEMM semantics
are the oracle's steps); ``block_in == block_out`` (the identity block) and batch 1. It needs no optional unit
(depthwise mode, OUT-path multiplier, ``src_out``): the ALU MUL by a held row is gamma on every preset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdla.compiler.blocks import WAIT, Alu, Block, Epi, Gemm, Load, Op, Store, alu_held, alu_nest, gemm_nest
from vdla.compiler.cache import ScheduleCache
from vdla.compiler.identity import identity_fits, identity_weights
from vdla.compiler.microcode import Limits
from vdla.compiler.run import LayerRun, run_bound, scratch_arrays
from vdla.compiler.search import cached_fastest
from vdla.compiler.spec import CompileError
from vdla.compiler.vthreads import Stream, lower_vthreads, prologue_block
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.graph import layernorm as ln
from vdla.graph.layernorm import IntLayerNorm
from vdla.isa import AluOp, MemType
from vdla.runtime.device import Device

TOKEN_ROWS = ("s1", "s2", "y")  # a tile's rows a token: -S1, S2 (then their lane alone), RSHR(y, k - j)
ROWS = ("p1", "s2", "v", "k", "m", "y", "t", "w")  # rows a group of tokens (packed: token t in lane t % L)
CONSTS = ("c3", "e", "seed", "p30")  # constant rows after the multiplier and bias rows, then the one-hot rows
GRAM_THREADS = (2, 3)  # the thread counts of a resident program with the Gram GEMM (:meth:`resident_orders`)
POW = 30  # the row 2^(POW - max(k, j)) that y's MUL takes for the rounding shift by k - j (POW - j its shift)


def scale_parts(n: int) -> list[int]:
    """``n`` as int8 weights (identity blocks times each part) that sum to it: as few parts of at most 127."""
    parts = -(-n // 127)
    return [n // parts + (i < n % parts) for i in range(parts)]


@dataclass(frozen=True)
class ResidentOrder:
    """How a resident program takes its chunks (:meth:`LayerNormLowering.resident_stream`): ``S2`` by the Gram
    GEMM against each chunk's weight tiles (``gram``) or the ALU's squares as in a tile; on ``threads`` virtual
    threads."""

    threads: int
    gram: bool


SQUARES = ResidentOrder(2, False)


@dataclass(frozen=True)
class LayerNormSpec:
    """A LayerNorm over the last axis of an int8 (tokens, features) tensor with the integer parameters ``ln``
    (features = ``ln.n``). Frozen: the cache key of its program."""

    tokens: int
    ln: IntLayerNorm

    @property
    def shape(self) -> tuple[int, int]:
        return self.tokens, self.ln.n

    def key(self) -> str:
        """A stable text key of what the program's timing depends on (schedule cache): the shape and the
        prescale (the per-row program's instructions), not the multipliers and biases."""
        return f"layer_norm:{self.tokens}x{self.ln.n}:j{self.ln.prescale}"


class LayerNormLowering:
    """The program of one LayerNorm on one config (module docstring)."""

    SCRATCH: tuple[str, ...] = ()  # tiles: nothing goes through DRAM but the input and the output

    def __init__(self, spec: LayerNormSpec, cfg: HwConfig):
        if not identity_fits(cfg) or spec.ln.n % cfg.block_in or cfg.batch != 1:
            raise CompileError(
                f"layer_norm: {spec.ln.n} features need whole blocks of {cfg.block_in}, batch 1 and block_in == "
                f"block_out on {cfg.name} (batch {cfg.batch}, block_out {cfg.block_out})"
            )
        self.spec, self.cfg, self.limits = spec, cfg, Limits.of(cfg)
        self.c = spec.ln.n // cfg.block_in
        self.lanes = cfg.block_out  # tokens a packed row: token t in lane t % lanes of row t // lanes
        self.resident = self.resident_fits()
        if self.resident:
            self.init_resident()
            return
        # beyond one packed row of tokens two threads, one tile's load and store beside the other's compute (65 x 192
        # on pynq-z2: 18,253 cycles, 19,382 in one tile of one thread)
        self.threads = 1 if spec.tokens <= self.lanes else 2
        self.r = self.tile_rows(self.threads)
        self.gr = self.groups(self.r)
        rc = self.r * self.c
        self.span = self.acc_rows(self.r)  # a thread's accumulator rows
        self.x, self.q = 0, rc  # the tile (then d, z, the output), its squares
        self.tok = {name: 2 * rc + i * self.r for i, name in enumerate(TOKEN_ROWS)}
        self.row = {name: 2 * rc + len(TOKEN_ROWS) * self.r + i * self.gr for i, name in enumerate(ROWS)}
        self.g = self.threads * self.span  # gamma multiplier rows, then beta's, then the constants
        self.const = {name: self.g + 2 * self.c + i for i, name in enumerate(CONSTS)}
        self.onehot = self.g + 2 * self.c + len(CONSTS)  # row E_l: 1 in lane l, 0 elsewhere
        self.thread, self.inp0, self.w0 = 0, 0, 0  # thread 0's INP and WGT rows

    def resident_rows(self, threads: int) -> dict[str, int]:
        """The first ACC row of each region of a resident program on ``threads`` threads (:meth:`init_resident`):
        every token's input rows from row 0, a chunk's copy for each thread (``q``), the tokens' rows (``tok``), the
        packed rows (``row``), the multiplier, bias and constant rows (``g``), and the end of them all."""
        t, c = self.spec.tokens, self.c
        q = t * c
        tok = q + threads * self.lanes * c
        row = tok + len(TOKEN_ROWS) * t
        g = row + len(ROWS) * self.groups(t)
        return {"q": q, "tok": tok, "row": row, "g": g, "end": g + self.const_rows}

    def resident_layout(self, threads: int, gram: bool) -> tuple[int, int]:
        """(ACC rows, WGT blocks) of a resident program on ``threads`` threads (:meth:`resident_rows`): the weight
        blocks and, with ``gram``, every chunk's weight tiles."""
        return self.resident_rows(threads)["end"], self.wgt_blocks + gram * self.groups(self.spec.tokens) * self.c

    def resident_fits(self, order: ResidentOrder = SQUARES) -> bool:
        """Whether every token's rows fit INP and the resident program of ``order`` fits ACC and WGT
        (:meth:`resident_layout`)."""
        cfg, (acc, wgt) = self.cfg, self.resident_layout(order.threads, order.gram)
        return self.spec.tokens * self.c <= cfg.inp_depth and acc <= cfg.acc_depth and wgt <= cfg.wgt_depth

    def resident_orders(self) -> list[ResidentOrder]:
        """The resident programs :func:`compile_layer_norm` times: the squares on the ALU, and from two chunks on the
        Gram GEMM on two threads up to one a chunk, where they fit."""
        grams = [ResidentOrder(n, True) for n in GRAM_THREADS if n <= self.gr]
        return [SQUARES, *(o for o in grams if self.resident_fits(o))]

    def init_resident(self) -> None:
        """The whole program's rows (:meth:`resident_stream`, :meth:`resident_rows`): every token's input rows from
        INP row 0 and ACC row 0 (``x``), a chunk copy for each thread of the largest of :meth:`resident_orders`
        (``q``), the tokens' rows, the packed rows of all of them, the constants; each chunk's weight tiles after
        the weight blocks (in DRAM: the ``xw`` tensor) where a Gram order fits."""
        t, c = self.spec.tokens, self.c
        self.r, self.gr = t, self.groups(t)
        orders = self.resident_orders()
        self.threads = max(o.threads for o in orders)
        self.SCRATCH = ("xw",) * any(o.gram for o in orders)
        at = self.resident_rows(self.threads)
        self.x, self.q, self.g = 0, at["q"], at["g"]
        self.tok = {name: at["tok"] + i * t for i, name in enumerate(TOKEN_ROWS)}
        self.row = {name: at["row"] + i * self.gr for i, name in enumerate(ROWS)}
        self.const = {name: self.g + 2 * c + i for i, name in enumerate(CONSTS)}
        self.onehot = self.g + 2 * c + len(CONSTS)
        self.thread, self.inp0, self.w0, self.span = 0, 0, 0, 0

    def chunk(self, g: int, thread: int) -> LayerNormLowering:
        """The resident program's view of chunk ``g`` on ``thread``: tokens ``g lanes`` on (at most ``lanes``), their
        rows in place, their packed row ``g``, the thread's copy rows."""
        t0 = g * self.lanes
        tok = {name: row + t0 for name, row in self.tok.items()}
        q = self.q + thread * self.lanes * self.c
        return self.derived(r=min(self.lanes, self.spec.tokens - t0), gr=1, x=t0 * self.c, inp0=t0 * self.c, tok=tok,
                            row={name: row + g for name, row in self.row.items()}, q=q, thread=thread)  # fmt: skip

    def derived(self, **fields) -> LayerNormLowering:
        """A copy of this program's layout with ``fields`` replaced (:meth:`view`, :meth:`chunk`)."""
        v = _View.__new__(_View)
        v.__dict__.update(self.__dict__, **fields)
        return v

    def resident_stream(self, order: ResidentOrder) -> Stream:
        """Every token resident (:meth:`resident_fits`), in chunks of ``lanes`` tokens (one packed row each) dealt to
        ``order.threads`` threads (:func:`chunk_threads`), each thread's blocks in turn: each chunk's input loaded and
        its statistics; one per-row program on all the packed rows; each chunk's output and its store. The
        statistics with ``order.gram``: ``-S1``, ``d`` and the chunk's copy stored as weight tiles in a first block,
        the tiles loaded, ``S2`` by the Gram GEMM and both statistics packed in a second block of the chunk's thread,
        after every first block of the thread, and a wait block between where the thread has one chunk: the block
        after a chunk's first waits for the store of its tiles (store -> compute) and the second's load for that
        block (compute -> load), the other threads' work running meanwhile. A chunk's input load hides under the
        previous chunk's work, its output's store under the next one's; the first load and the last store are a
        chunk's, and the per-row program runs once, after every thread's statistics (the compute stage in order)."""
        owner = chunk_threads(self.gr, order.threads)
        chunks = [self.chunk(g, owner[g]) for g in range(self.gr)]
        threads: list[list[Block]] = [[] for _ in range(order.threads)]
        for g, low in enumerate(chunks):
            loads = (*(low.weights_load(),) * (g == 0), low.input_load(g * self.lanes))
            first = (low.deviations_copy(), (low.tiles_store(g),)) if order.gram else (low.squares(), ())
            threads[low.thread].append(Block(low.thread, loads, tuple(first[0]), first[1]))
        for t, blocks in enumerate(threads):
            mine = [g for g in range(self.gr) if owner[g] == t] if order.gram else []
            blocks += [Block(t, (), WAIT, ())] * (len(mine) == 1)
            blocks += [Block(t, (chunks[g].tiles_load(g),), tuple(chunks[g].squares_packed(g)), ()) for g in mine]
        depth = max(map(len, threads))
        rest = [((), (*self.variance(), *self.exponent(), *self.rsqrt()), ())]
        rest += [((), (*WAIT, *c.unpack(), *c.output()), (c.store(g * self.lanes),)) for g, c in enumerate(chunks)]
        for t, blocks in enumerate(threads):
            blocks += [Block(t, (), WAIT, ())] * (depth - len(blocks))
        for i, (loads, compute, stores) in enumerate(rest):
            t = i % order.threads
            threads[t].append(Block(t, loads, compute, stores))
        return lower_vthreads(threads, self.prologue(threads))

    def prologue(self, threads: list[list[Block]]) -> Block:
        """The constant rows' load and the kernels made resident, ahead of the threads."""
        width = self.const_rows
        load = Load(MemType.ACC, self.g, "consts", 0, 1, width, width)
        return prologue_block([load], threads, self.cfg.uop_depth)

    def groups(self, r: int) -> int:
        return -(-r // self.lanes)

    def acc_rows(self, r: int) -> int:
        return (2 * self.c + len(TOKEN_ROWS)) * r + len(ROWS) * self.groups(r)

    @property
    def const_rows(self) -> int:
        """The multiplier and bias rows, the constants and the one-hot rows."""
        return 2 * self.c + len(CONSTS) + self.lanes

    @property
    def wgt_blocks(self) -> int:
        """Weight blocks a thread: the minus ones, the identity and the identity times each of ``n``'s parts."""
        return 2 + len(scale_parts(self.spec.ln.n))

    def tile_rows(self, threads: int) -> int:
        """Tokens a tile with ``threads`` virtual threads: the most whose rows fit a thread's share of ACC beside
        the constants and whose input rows fit its share of INP; raises where not even one does."""
        cfg, c = self.cfg, self.c
        room = (cfg.acc_depth - self.const_rows) // threads
        r = min(cfg.inp_depth // threads // c, -(-self.spec.tokens // threads))
        while r >= 1 and self.acc_rows(r) > room:
            r -= 1
        if r < 1 or self.wgt_blocks * threads > cfg.wgt_depth:
            raise CompileError(f"layer_norm: a row of {self.spec.ln.n} features does not fit ACC on {cfg.name}")
        return r

    def view(self, thread: int, r: int) -> LayerNormLowering:
        """The program of ``r`` tokens on virtual thread ``thread``: its share of ACC, INP and WGT."""
        if (thread, r) == (0, self.r):
            return self
        base = thread * self.span
        return self.derived(
            r=r, gr=self.groups(r), thread=thread, x=base + self.x, q=base + self.q,
            tok={name: base + row for name, row in self.tok.items()},
            row={name: base + row for name, row in self.row.items()},
            inp0=thread * self.cfg.inp_depth // 2, w0=thread * self.wgt_blocks,
        )  # fmt: skip

    def tensor_bytes(self) -> dict[str, int]:
        cfg, sp = self.cfg, self.spec
        rows = sp.tokens * self.c
        tiles = {"xw": self.gr * self.c * cfg.wgt_elem_bytes} if self.SCRATCH else {}
        return {
            "inp": rows * cfg.inp_elem_bytes,
            "out": rows * cfg.out_elem_bytes,
            "wgt": self.wgt_blocks * cfg.wgt_elem_bytes,
            "consts": self.const_rows * cfg.acc_elem_bytes,
            **tiles,
        }

    def constants(self) -> dict[str, np.ndarray]:
        """The weight blocks (minus ones, identity, the identity times ``n``'s parts) and the constant rows,
        packed."""
        cfg, p, lanes = self.cfg, self.spec.ln, self.cfg.block_out
        eye = identity_weights(cfg)
        wgt = np.concatenate([-np.ones_like(eye), eye, *(eye * k for k in scale_parts(p.n))])
        g = np.asarray(p.multipliers, np.int64).reshape(self.c, lanes)
        b = np.asarray(p.biases, np.int64).reshape(self.c, lanes)
        seed = ln.SEED[0] << (ln.FRAC - ln.SEED[1])
        consts = np.repeat([[3 << ln.FRAC], [p.epsilon], [seed], [1 << POW]], lanes, axis=1)
        rows = np.concatenate([g, b, consts, np.eye(lanes, dtype=np.int64)])
        return {"wgt": wgt, "consts": rows.astype(np.int32)}

    # ------------------------------------------------------------------------------------------------------
    # kernels

    def alu(self, op: AluOp, nest, dst: int, src: int = 0, **kw) -> Alu:
        """An ALU instruction over ``nest`` ((extent, (dst stride, src stride)) axes) from rows dst, src."""
        return alu_nest(op, nest, dst, src, self.limits, **kw)

    def rows(self, op: AluOp, dst: str, src: str | None = None, **kw) -> Alu:
        """``op`` over the tile's packed rows ``dst`` (from ``src``'s rows, or a constant row's)."""
        s = self.const[src] if src in self.const else self.row.get(src, 0)
        step = 0 if src in self.const else 1
        return self.alu(op, ((self.gr, (1, step)),), self.row[dst], s, **kw)

    def gemm(self, nest, dst: int, src: int, wgt: int) -> Gemm:
        """A GEMM with ``init`` over (extent, (dst, src, wgt) strides) axes."""
        return gemm_nest(nest, (dst, src, wgt), self.limits)

    def sums(self) -> Gemm:
        """Each token's ``C`` input rows summed into its row ``s1`` against the minus ones: ``-S1`` in every lane."""
        return self.gemm(((self.r, (1, self.c, 0)), (self.c, (0, 1, 0))), self.tok["s1"], self.inp0, self.w0)

    def copy(self, dst: int) -> Gemm:
        rc = self.r * self.c
        return self.gemm(((rc, (1, 1, 0)),), dst, self.inp0, self.w0 + 1)

    def deviations(self) -> list[Op]:
        """``d = n x - S1`` into ``x``: the tile against ``n``'s parts of the identity, each accumulator starting
        from its token's ``-S1`` row (EPI bias; the token on the outer loop, the bias row's index)."""
        r, c, parts = self.r, self.c, len(scale_parts(self.spec.ln.n))
        nest = ((r, (c, c, 0)), (c, (1, 1, 0)), (parts, (0, 0, 1)))
        gemm = gemm_nest(nest, (self.x, self.inp0, self.w0 + 2), self.limits, pin_outer=True)
        return [Epi(False, False, 0, self.tok["s1"]), gemm, Epi(False, False, 0, None)]

    def by_lane(self, op: AluOp, inner, dst: int, src: int, step: tuple[int, int], **kw) -> list[Alu]:
        """ALU instructions over the tile's tokens in groups of ``lanes`` (token ``t``: group ``t // lanes``, lane
        ``t % lanes``): ``inner(n)`` the ((extent, (dst, src) strides)) axes within a group of ``n`` tokens, ``step``
        a group's (dst, src) strides; the last group an instruction of its own where it is short."""
        full, rest = divmod(self.r, self.lanes)
        out = [self.alu(op, ((full, step), *inner(self.lanes)), dst, src, **kw)] if full else []
        if rest:
            out.append(self.alu(op, inner(rest), dst + full * step[0], src + full * step[1], **kw))
        return out

    def lane_only(self, tok: str) -> list[Alu]:
        """Each token's row ``tok`` times the one-hot row ``E_l`` of its lane ``l = t % lanes``: its lane alone."""
        return self.by_lane(AluOp.MUL, lambda n: ((n, (1, 1)),), self.tok[tok], self.onehot, (self.lanes, 0))

    def pack(self, row: str, tok: str) -> list[Alu]:
        """The tokens' rows ``tok`` (each its own lane alone) added into packed row ``row`` (cleared before)."""
        return self.by_lane(AluOp.ADD, lambda n: ((n, (0, 1)),), self.row[row], self.tok[tok], (1, self.lanes))

    # ------------------------------------------------------------------------------------------------------
    # the program

    def squares(self) -> list[Op]:
        """A tile's statistics: ``-S1`` (every lane of ``s1``), ``d`` in ``x``, the squares in ``q``, each token's rows
        added into its first and their lane sum ``S2`` (``s2``); both packed (:meth:`packed`)."""
        r, c = self.r, self.c
        ops: list[Op] = [*WAIT, self.sums(), *self.deviations(), self.copy(self.q)]
        ops.append(alu_held(AluOp.SQR, r * c, self.q, self.q, self.limits))  # the rows on the inner loop: pipe
        if c > 1:
            ops.append(self.alu(AluOp.ADD, ((r, (c, c)), (c - 1, (0, 1))), self.q, self.q + 1))
        ops += [self.alu(AluOp.LSUM, ((r, (1, c)),), self.tok["s2"], self.q, reset=True)]
        return ops + self.packed()

    def packed(self) -> list[Op]:
        """``-S1`` and ``S2`` each in its token's lane alone, packed (``p1``, ``s2``): token ``t`` in lane
        ``t % lanes``."""
        ops = [*self.lane_only("s1"), *self.lane_only("s2")]
        ops += [self.rows(AluOp.ADD, row, imm=0, reset=True) for row in ("p1", "s2")]
        return ops + self.pack("p1", "s1") + self.pack("s2", "s2")

    def deviations_copy(self) -> list[Op]:
        """A resident chunk's first part: ``-S1``, ``d``, and its input rows copied into ``q`` in the weight layout's
        order (channel block, token) for :meth:`tiles_store`."""
        order = ((self.c, (self.lanes, 1, 0)), (self.r, (1, self.c, 0)))
        copy = self.gemm(order, self.q, self.inp0, self.w0 + 1)
        return [*WAIT, self.sums(), *self.deviations(), copy]

    def squares_packed(self, g: int) -> list[Op]:
        """A resident chunk's second part: ``S2`` by :meth:`gram` against its tiles, both statistics packed."""
        return [*WAIT, self.gram(self.tiles_at(g)), *self.packed()]

    def gram(self, w: int) -> Gemm:
        """Each token's input rows against the chunk's weight tiles from WGT ``w`` (tile ``b``: the chunk's tokens'
        block ``b``): token ``t``'s row ``s2`` is its row of the chunk's Gram matrix, ``S2`` in lane ``t % lanes``, its
        products with the chunk's other tokens (or with the stale rows of a short chunk's tiles) in the other lanes,
        which :meth:`lane_only` clears. Every lane's sum of ``n`` int8 products stays within int32 as ``S2`` does."""
        return self.gemm(((self.r, (1, self.c, 0)), (self.c, (0, 1, 1))), self.tok["s2"], self.inp0, w)

    def tiles_at(self, g: int) -> int:
        """The WGT row of resident chunk ``g``'s first weight tile."""
        return self.w0 + self.wgt_blocks + g * self.c

    def tiles_store(self, g: int) -> Store:
        """``q``'s mirror (chunk ``g``'s input rows in the order (block, token)) into ``xw`` as the chunk's ``c``
        weight tiles: row ``t`` of tile ``b`` is token ``t``'s block ``b`` (past a short chunk's tokens, stale rows)."""
        rows = self.lanes * self.c
        return Store(self.q, "xw", g * rows, 1, rows, rows)

    def tiles_load(self, g: int) -> Load:
        """Chunk ``g``'s weight tiles (:meth:`tiles_store`) from ``xw`` into WGT."""
        return Load(MemType.WGT, self.tiles_at(g), "xw", g * self.c, 1, self.c, self.c)

    def variance(self) -> list[Op]:
        """``V = max(SHR(n S2 - S1^2, -2j) + E, 1)`` in row ``v``."""
        rows, p = self.rows, self.spec.ln
        return [
            rows(AluOp.ADD, "v", "s2", reset=True),
            rows(AluOp.MUL, "v", imm=p.n),
            rows(AluOp.ADD, "t", "p1", reset=True),  # -S1
            rows(AluOp.MUL, "t", "p1"),
            rows(AluOp.MUL, "t", imm=-1),
            rows(AluOp.ADD, "v", "t"),
            *([rows(AluOp.SHR, "v", imm=-2 * p.prescale)] if p.prescale else []),
            rows(AluOp.ADD, "v", "e"),
            rows(AluOp.MAX, "v", imm=1),
        ]

    def exponent(self) -> list[Op]:
        """``k`` by the binary search (:func:`~vdla.graph.oracle.rsqrt_exponent`) in row ``k``, ``w`` a copy of
        ``V`` shifted down as it goes."""
        rows = self.rows
        ops = [rows(AluOp.ADD, "w", "v", reset=True), rows(AluOp.ADD, "k", imm=0, reset=True)]
        for b in ln.K_STEPS:
            ops += [
                rows(AluOp.ADD, "t", "w", reset=True),
                rows(AluOp.SHR, "t", imm=2 * b),
                rows(AluOp.MIN, "t", imm=1),
                rows(AluOp.MUL, "t", imm=2 * b),  # c2
                rows(AluOp.SHR, "w", "t"),  # by each lane's own c2
                rows(AluOp.SHR, "t", imm=1),
                rows(AluOp.ADD, "k", "t"),
            ]
        return ops

    def rsqrt(self) -> list[Op]:
        """``m = SHR(V, 2k - F)``, then ``y`` from the seed by Newton (:func:`~vdla.graph.oracle.rsqrt_fixed`), and
        ``y`` scaled to ``RSHR(y, k - j)`` by a MUL of ``2^(POW - max(k, j))`` (in ``w``) with the shift ``POW - j``
        (:func:`~vdla.graph.oracle.rsqrt_scaled`)."""
        rows, f, j = self.rows, ln.FRAC, self.spec.ln.prescale
        ops = [
            rows(AluOp.ADD, "t", "k", reset=True),
            rows(AluOp.MUL, "t", imm=2),
            rows(AluOp.ADD, "t", imm=-f),
            rows(AluOp.ADD, "m", "v", reset=True),
            rows(AluOp.SHR, "m", "t"),
            rows(AluOp.MUL, "m", imm=-1),
            rows(AluOp.ADD, "y", "seed", reset=True),
        ]
        for _ in range(ln.ITERATIONS):
            ops += [
                rows(AluOp.ADD, "t", "y", reset=True),
                rows(AluOp.MUL, "t", "y", shift=f),
                rows(AluOp.MUL, "t", "m", shift=f),
                rows(AluOp.ADD, "t", "c3"),
                rows(AluOp.MUL, "y", "t", shift=f + 1),
            ]
        ops += [rows(AluOp.MAX, "k", imm=j)] if j else []  # k >= 0 already
        ops += [rows(AluOp.ADD, "w", "p30", reset=True), rows(AluOp.SHR, "w", "k")]
        return ops + [rows(AluOp.MUL, "y", "w", shift=POW - j)]

    def unpack(self) -> list[Op]:
        """The scaled ``y`` from the packed rows into every lane of each token's row ``y``: the packed row copied to
        its tokens' rows, each token's lane kept (:meth:`lane_only`), its lane sum."""
        y = self.tok["y"]
        ops: list[Op] = self.by_lane(AluOp.ADD, lambda n: ((n, (1, 0)),), y, self.row["y"], (self.lanes, 1), reset=True)
        return [*ops, *self.lane_only("y"), self.alu(AluOp.LSUM, ((self.r, (1, 1)),), y, y, reset=True)]

    def output(self) -> list[Op]:
        """Over the tile's ``R x C`` rows (``d``): ``z``, gamma, then beta with the OUT mirror requantizing (EPI
        ``req``: the int8 output)."""
        r, c, p = self.r, self.c, self.spec.ln
        per_row = ((r, (c, 1)), (c, (1, 0)))  # each token's C rows against its per-row row
        per_block = ((c, (1, 1)), (r, (c, 0)))  # each channel block's rows against its constant row
        return [
            self.alu(AluOp.MUL, per_row, self.x, self.tok["y"], shift=ln.Z_SHIFT),
            self.alu(AluOp.MUL, per_block, self.x, self.g, shift=p.gamma_shift),
            Epi(True, False, ln.OUT_FRAC, None),  # the ADD's OUT mirror requantized: REQ at no cost
            self.alu(AluOp.ADD, per_block, self.x, self.g + c),
        ]

    def blocks(self, k: int, thread: int) -> list[Block]:
        """Tile ``k`` on virtual thread ``thread``: one block, its input loaded, the statistics, the per-row program
        on the packed rows, the scaled ``y`` back in the tokens' rows, the output stored."""
        t0 = k * self.r
        low = self.view(thread, min(self.r, self.spec.tokens - t0))
        loads = (low.input_load(t0), low.weights_load())
        compute = (*low.squares(), *low.variance(), *low.exponent(), *low.rsqrt(), *low.unpack(), *low.output())
        return [Block(thread, loads, compute, (low.store(t0),))]

    @property
    def tiles(self) -> int:
        return -(-self.spec.tokens // self.r)

    def input_load(self, t0: int) -> Load:
        """This view's ``r`` tokens' input rows from token ``t0`` into its INP rows."""
        rc = self.r * self.c
        return Load(MemType.INP, self.inp0, "inp", t0 * self.c, 1, rc, rc)

    def weights_load(self) -> Load:
        """The weight blocks (:meth:`constants`) into this view's WGT rows."""
        nw = self.wgt_blocks
        return Load(MemType.WGT, self.w0, "wgt", 0, 1, nw, nw)

    def store(self, t0: int) -> Store:
        return Store(self.x, "out", t0 * self.c, 1, self.r * self.c, self.r * self.c)

    def stream(self, order: ResidentOrder = SQUARES) -> Stream:
        """Every token resident where they fit (:meth:`resident_stream` of ``order``), else the tiles dealt out to the
        threads in turn (each thread's blocks in order)."""
        if self.resident:
            return self.resident_stream(order)
        threads = [[b for k in range(self.tiles) if k % self.threads == t for b in self.blocks(k, t)]
                   for t in range(self.threads)]  # fmt: skip
        return lower_vthreads(threads, self.prologue(threads))


def chunk_threads(chunks: int, threads: int) -> list[int]:
    """The thread of each chunk of a resident program (:meth:`LayerNormLowering.resident_stream`): chunk ``g`` on
    thread ``g % threads`` while every thread gets one more, the rest on the last threads in turn (five chunks on
    three threads: 0, 1, 2, 1, 2; the short last chunk of 65 tokens on a thread with a long one)."""
    whole = chunks - chunks % threads
    return [g % threads if g < whole else threads - chunks % threads + g - whole for g in range(chunks)]


class _View(LayerNormLowering):
    """A tile's program on a thread's share of the buffers, or with fewer tokens (:meth:`LayerNormLowering.view`)."""


@dataclass
class CompiledLayerNorm:
    """A LayerNorm compiled for one config."""

    lowering: LayerNormLowering
    stream: Stream
    order: ResidentOrder | None = None  # a resident program's (:meth:`LayerNormLowering.resident_orders`)

    @property
    def spec(self) -> LayerNormSpec:
        return self.lowering.spec

    def run(self, dev: Device, x: np.ndarray, **run_options) -> LayerRun:
        """Run on ``dev``: ``x`` int8 (tokens, features); the int8 output in the same shape."""
        if x.dtype != np.int8 or x.shape != self.spec.shape:
            raise CompileError(f"layer_norm input must be int8 of shape {self.spec.shape}, got {x.dtype} {x.shape}")
        low = self.lowering
        arrays = dict(low.constants(), inp=np.ascontiguousarray(x), **scratch_arrays(low))
        out, result = run_bound(dev, low, self.stream, arrays, x.shape, **run_options)
        return LayerRun(out, result)


def compile_layer_norm(
    spec: LayerNormSpec, config=DEFAULT_PRESET, cache: ScheduleCache | None = None
) -> CompiledLayerNorm:
    """Compile a LayerNorm for ``config`` (module docstring): a resident program the fastest of its orders on the
    timing-only simulator (:meth:`LayerNormLowering.resident_orders`), the choice kept in ``cache``."""
    low = LayerNormLowering(spec, load_config(config))
    if not low.resident:
        return CompiledLayerNorm(low, low.stream())
    choice = cached_fastest(low, low.resident_orders, ResidentOrder, spec.key(), cache)
    return CompiledLayerNorm(low, choice.stream, choice.schedule)
