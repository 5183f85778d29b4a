"""LayerNorm over the rows of an int8 (tokens, features) tensor in DRAM, composed of existing instructions
(issue 53, docs/transformers.md): exactly :func:`vdla.graph.oracle.layer_norm_int` of the spec's
:class:`~vdla.graph.layernorm.IntLayerNorm`.

The tokens go in tiles of ``R`` rows (:meth:`LayerNormLowering.tile_rows`); for each tile:

* a LOAD INP of its ``R x C`` input elements (``C = features / block_in``, token-major);
* ``S1`` by a GEMM against the ones block (each token's sum in every lane of its row, for ``d``) and again
  against the lane selectors (token ``t``'s sum in lane ``t % L`` of packed row ``t // L``, ``L = block_out``:
  the per-row program then runs on ``L`` tokens a row); two identity GEMMs copy the tile into the accumulators (``x``,
  ``q``); ``q = MUL(q, q)`` leaves the squares' low bytes in the OUT mirror, a copy ``q2 = RSHR(q, 8)`` their
  high parts: both stored to the ``sq`` tensor;
* a compute-only block that pops the stores' store -> compute token, so that the next load (after its
  compute -> load token) reads the planes landed; the planes loaded as input rows and summed against the
  selectors into the packed ``S_lo`` and ``S_hi``;
* the per-row ALU program on the packed rows: ``V``, the binary search of ``k``, ``-m``, the seed and the
  Newton steps, ``k - j``; then ``y`` as four signed int8 digits (the OUT mirror's low bytes of ``y`` and of
  its RSHR by 8, 16, 24) and ``k - j`` stored to the ``dg`` tensor;
* another such wait; the digits loaded and broadcast back to every lane of their token's row by GEMMs against
  the lane broadcasts (the ALU works lane by lane: only the GEMM core moves a value across lanes), ``y`` put
  together again by SHR and ADD;
* over the tile's ``R x C`` rows: ``d = n x - S1``, ``z = RSHR(MUL(d, y) >> Z_SHIFT, k - j)``, gamma by a MUL
  holding each channel block's multiplier row, beta by an ADD of its bias row with the OUT mirror requantizing
  (EPI ``req``); the OUT mirror stored.

The multiplier and bias rows and the constant rows (``3 2^F``, ``E``, the seed) are one LOAD ACC of the
``consts`` tensor ahead of the tiles. A LayerNorm of more tokens than one tile's share takes two virtual
threads, each half of ACC and INP and its own weight blocks.

Invariant: bit for bit :func:`~vdla.graph.oracle.layer_norm_int` on every backend (the ALU and GEMM semantics
are the oracle's steps); ``block_in == block_out`` (the identity block) and batch 1. It needs no optional unit
(depthwise mode, OUT-path multiplier, ``src_out``): the ALU MUL by a held row is gamma on every preset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdla.compiler.blocks import Alu, Block, Epi, Gemm, Load, Op, Store, alu_nest, gemm_nest
from vdla.compiler.identity import identity_fits, identity_weights
from vdla.compiler.microcode import Limits
from vdla.compiler.run import LayerRun, run_bound, scratch_arrays
from vdla.compiler.spec import CompileError
from vdla.compiler.vthreads import Stream, lower_vthreads, prologue_block
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.graph import layernorm as ln
from vdla.graph.layernorm import IntLayerNorm
from vdla.isa import AluOp, MemType
from vdla.runtime.device import Device

ONES = "ones"  # the all-ones weight block: a GEMM against it sums an input row into every lane
TOKEN_ROWS = ("s1", "y3", "y2", "y1", "y0", "kb")  # a tile's rows a token: S1, y's four digits (then y), k - j
ROWS = ("p1", "slo", "shi", "v", "w", "k", "m", "y", "t", "d0", "d1", "d2", "d3", "d4")  # rows a group of tokens
DIGITS = ("d0", "d1", "d2", "d3", "d4")  # the packed rows stored as int8 planes for the broadcast
CONSTS = ("c3", "e", "seed")  # constant rows after the multiplier and bias rows


@dataclass(frozen=True)
class LayerNormSpec:
    """A LayerNorm over the last axis of an int8 (tokens, features) tensor with the integer parameters ``ln``
    (features = ``ln.n``). Frozen: the cache key of its program."""

    tokens: int
    ln: IntLayerNorm

    @property
    def shape(self) -> tuple[int, int]:
        return self.tokens, self.ln.n


class LayerNormLowering:
    """The program of one LayerNorm on one config (module docstring)."""

    SCRATCH = ("sq", "dg")  # the square and digit planes: DRAM round trips

    def __init__(self, spec: LayerNormSpec, cfg: HwConfig):
        if not identity_fits(cfg) or spec.ln.n % cfg.block_in or cfg.batch != 1:
            raise CompileError(
                f"layer_norm: {spec.ln.n} features need whole blocks of {cfg.block_in}, batch 1 and block_in == "
                f"block_out on {cfg.name} (batch {cfg.batch}, block_out {cfg.block_out})"
            )
        self.spec, self.cfg, self.limits = spec, cfg, Limits.of(cfg)
        self.c = spec.ln.n // cfg.block_in
        self.lanes = cfg.block_out  # tokens a packed row: token t in lane t % lanes of row t // lanes
        self.threads = 1 if spec.tokens <= self.tile_rows(1) else 2
        self.r = self.tile_rows(self.threads)
        self.gr = self.groups(self.r)
        rc = self.r * self.c
        self.span = self.acc_rows(self.r)  # a thread's accumulator rows
        self.x, self.q, self.q2 = 0, rc, 2 * rc  # the tile (then d, z, the output), its squares' two planes
        self.tok = {name: 3 * rc + i * self.r for i, name in enumerate(TOKEN_ROWS)}
        self.row = {name: 3 * rc + len(TOKEN_ROWS) * self.r + i * self.gr for i, name in enumerate(ROWS)}
        self.g = self.threads * self.span  # gamma multiplier rows, then beta's, then the constants
        self.const = {name: self.g + 2 * self.c + i for i, name in enumerate(CONSTS)}
        self.thread, self.inp0, self.w0 = 0, 0, 0  # thread 0's INP and WGT rows

    def groups(self, r: int) -> int:
        return -(-r // self.lanes)

    def acc_rows(self, r: int) -> int:
        return (3 * self.c + len(TOKEN_ROWS)) * r + len(ROWS) * self.groups(r)

    @property
    def wgt_blocks(self) -> int:
        """Weight blocks a thread: the ones, the identity, a lane's selector and its broadcast for each lane."""
        return 2 + 2 * self.lanes

    def tile_rows(self, threads: int) -> int:
        """Tokens a tile with ``threads`` virtual threads: the most whose rows fit a thread's share of ACC beside
        the constants and whose two square planes fit its share of INP; raises where not even one does."""
        cfg, c = self.cfg, self.c
        room = (cfg.acc_depth - 2 * c - len(CONSTS)) // threads
        r = min(cfg.inp_depth // threads // (2 * c), -(-self.spec.tokens // threads))
        while r >= 1 and self.acc_rows(r) > room:
            r -= 1
        if r < 1 or self.wgt_blocks * threads > cfg.wgt_depth:
            raise CompileError(f"layer_norm: a row of {self.spec.ln.n} features does not fit ACC on {cfg.name}")
        return r

    def view(self, thread: int, r: int) -> LayerNormLowering:
        """The program of ``r`` tokens on virtual thread ``thread``: its share of ACC, INP and WGT."""
        if (thread, r) == (0, self.r):
            return self
        v = _View.__new__(_View)
        v.__dict__.update(self.__dict__)
        base = thread * self.span
        v.r, v.gr, v.thread, v.x, v.q, v.q2 = r, self.groups(r), thread, base + self.x, base + self.q, base + self.q2
        v.tok = {name: base + row for name, row in self.tok.items()}
        v.row = {name: base + row for name, row in self.row.items()}
        v.inp0, v.w0 = thread * self.cfg.inp_depth // 2, thread * self.wgt_blocks
        return v

    def tensor_bytes(self) -> dict[str, int]:
        cfg, sp = self.cfg, self.spec
        rows = sp.tokens * self.c
        return {
            "inp": rows * cfg.inp_elem_bytes,
            "out": rows * cfg.out_elem_bytes,
            "sq": 2 * rows * cfg.inp_elem_bytes,
            "wgt": self.wgt_blocks * cfg.wgt_elem_bytes,
            "dg": len(DIGITS) * self.gr * self.tiles * cfg.inp_elem_bytes,
            "consts": (2 * self.c + len(CONSTS)) * cfg.acc_elem_bytes,
        }

    def constants(self) -> dict[str, np.ndarray]:
        """The weight blocks (ones, identity, the selectors, the broadcasts) and the constant rows, packed."""
        cfg, p, lanes = self.cfg, self.spec.ln, self.cfg.block_out
        eye = identity_weights(cfg)
        select = np.zeros((lanes, lanes, cfg.block_in), np.int8)
        select[np.arange(lanes), np.arange(lanes), :] = 1  # block l: output lane l sums every input lane
        broadcast = np.zeros((lanes, lanes, cfg.block_in), np.int8)
        broadcast[np.arange(lanes), :, np.arange(lanes)] = 1  # block l: every output lane takes input lane l
        wgt = np.concatenate([np.ones_like(eye), eye, select, broadcast])
        g = np.asarray(p.multipliers, np.int64).reshape(self.c, lanes)
        b = np.asarray(p.biases, np.int64).reshape(self.c, lanes)
        seed = ln.SEED[0] << (ln.FRAC - ln.SEED[1])
        rows = np.concatenate([g, b, np.repeat([[3 << ln.FRAC], [p.epsilon], [seed]], lanes, axis=1)])
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

    def sums(self, src: int) -> Gemm:
        """Each token's ``C`` input rows from ``src`` summed into its row ``s1`` against the ones (replicated)."""
        return self.gemm(((self.r, (1, self.c, 0)), (self.c, (0, 1, 0))), self.tok["s1"], src, self.w0)

    def copy(self, dst: int) -> Gemm:
        rc = self.r * self.c
        return self.gemm(((rc, (1, 1, 0)),), dst, self.inp0, self.w0 + 1)

    def by_group(self, inner, dst: int, src: int, wgt: int, step: tuple[int, int]) -> list[Gemm]:
        """GEMMs over the tile's tokens in groups of ``lanes`` (token ``t``: group ``t // lanes``, lane ``t %
        lanes``): ``inner`` the axes within a group, ``step`` the (dst, src) strides of a group; the last group
        a GEMM of its own where it is short."""
        full, rest = divmod(self.r, self.lanes)
        out = [self.gemm(((full, (*step, 0)), *inner(self.lanes)), dst, src, wgt)] if full else []
        if rest:
            out.append(self.gemm(inner(rest), dst + full * step[0], src + full * step[1], wgt))
        return out

    def packed_sums(self, dst: str, src: int) -> list[Gemm]:
        """Each token's ``C`` input rows from ``src`` summed into lane ``t % lanes`` of packed row ``dst``."""
        c = self.c
        return self.by_group(
            lambda n: ((n, (0, c, 1)), (c, (0, 1, 0))), self.row[dst], src, self.w0 + 2, (1, self.lanes * c)
        )

    def broadcast(self, dst: str, src: int) -> list[Gemm]:
        """Each token's lane of the packed int8 input row (from ``src``) into every lane of its row ``dst``."""
        return self.by_group(lambda n: ((n, (1, 0, 1)),), self.tok[dst], src, self.w0 + 2 + self.lanes, (self.lanes, 1))

    # ------------------------------------------------------------------------------------------------------
    # the program

    def squares(self) -> list[Op]:
        """``S1`` of the tile's rows, the tile copied to ``x``, its squares to ``q`` (the OUT mirror: their low
        bytes) and ``q2`` (their high parts, ``RSHR 8``), for the stores of the two planes."""
        each = ((self.r * self.c, (1, 1)),)
        return [
            Epi(False, False, 0, None),  # the OUT mirror truncates: the previous tile's requantized
            self.sums(self.inp0),
            *self.packed_sums("p1", self.inp0),
            self.copy(self.x),
            self.copy(self.q),
            self.alu(AluOp.MUL, each, self.q, self.q),
            self.alu(AluOp.ADD, each, self.q2, self.q, reset=True),
            self.alu(AluOp.RSHR, each, self.q2, imm=8),
        ]

    def variance(self) -> list[Op]:
        """``V = max(SHR(n S2 - S1^2, -2j) + E, 1)`` in row ``v``."""
        rows, p = self.rows, self.spec.ln
        return [
            rows(AluOp.ADD, "v", "shi", reset=True),
            rows(AluOp.SHR, "v", imm=-8),
            rows(AluOp.ADD, "v", "slo"),
            rows(AluOp.MUL, "v", imm=p.n),
            rows(AluOp.ADD, "t", "p1", reset=True),
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
        """``m = SHR(V, 2k - F)``, then ``y`` from the seed by Newton (:func:`~vdla.graph.oracle.rsqrt_fixed`)."""
        rows, f = self.rows, ln.FRAC
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
        j = self.spec.ln.prescale
        return ops + ([rows(AluOp.ADD, "k", imm=-j)] if j else [])

    def digits(self) -> list[Op]:
        """``y`` as four signed int8 digits (``d0``..``d3``: the OUT mirror's low bytes of ``y`` and of its RSHR by
        8, 16, 24) and ``k - j`` (``d4``), for the stores that take them to the tokens' rows."""
        rows = self.rows
        ops = [rows(AluOp.ADD, "d0", "y", reset=True), rows(AluOp.ADD, "d1", "y", reset=True)]
        for a, b in (("d1", "d2"), ("d2", "d3")):
            ops += [rows(AluOp.RSHR, a, imm=8), rows(AluOp.ADD, b, a, reset=True)]
        return ops + [rows(AluOp.RSHR, "d3", imm=8), rows(AluOp.ADD, "d4", "k", reset=True)]

    def unpack(self) -> list[Op]:
        """The digits loaded (INP from ``inp0``, one plane of ``groups`` rows each) broadcast to the tokens' rows
        and ``y`` put together again in ``y3``: ``((d3 256 + d2) 256 + d1) 256 + d0``."""
        ops: list[Op] = []
        for i, name in enumerate(("y0", "y1", "y2", "y3", "kb")):
            ops += self.broadcast(name, self.inp0 + i * self.gr)
        each = ((self.r, (1, 1)),)
        for low in ("y2", "y1", "y0"):
            ops += [
                self.alu(AluOp.SHR, each, self.tok["y3"], imm=-8),
                self.alu(AluOp.ADD, each, self.tok["y3"], self.tok[low]),
            ]
        return ops

    def output(self) -> list[Op]:
        """Over the tile's ``R x C`` rows: ``d``, ``z``, gamma, then beta with the OUT mirror requantizing (EPI
        ``req``: the int8 output)."""
        r, c, p = self.r, self.c, self.spec.ln
        per_row = ((r, (c, 1)), (c, (1, 0)))  # each token's C rows against its per-row row
        per_block = ((c, (1, 1)), (r, (c, 0)))  # each channel block's rows against its constant row
        return [
            self.alu(AluOp.MUL, ((r * c, (1, 1)),), self.x, imm=p.n),
            self.alu(AluOp.MUL, ((r, (1, 0)),), self.tok["s1"], imm=-1),
            self.alu(AluOp.ADD, per_row, self.x, self.tok["s1"]),
            self.alu(AluOp.MUL, per_row, self.x, self.tok["y3"], shift=ln.Z_SHIFT),
            self.alu(AluOp.RSHR, per_row, self.x, self.tok["kb"]),
            self.alu(AluOp.MUL, per_block, self.x, self.g, shift=p.gamma_shift),
            Epi(True, False, ln.OUT_FRAC, None),  # the ADD's OUT mirror requantized: REQ at no cost
            self.alu(AluOp.ADD, per_block, self.x, self.g + c),
        ]

    def blocks(self, k: int, thread: int) -> list[Block]:
        """Tile ``k`` on virtual thread ``thread``: its squares stored as two int8 planes (``sq``), a block that
        waits for those stores to land (store -> compute), the planes loaded and summed, the per-row program on
        the packed rows and ``y`` and ``k - j`` stored as digits (``dg``), another wait, the digits loaded and
        broadcast to the tokens' rows, the output."""
        t0 = k * self.r
        low = self.view(thread, min(self.r, self.spec.tokens - t0))
        rc, plane, i0, n = low.r * self.c, 2 * t0 * self.c, low.inp0, low.gr
        nw, dg = self.wgt_blocks, len(DIGITS) * self.gr * k
        loads = (Load(MemType.INP, i0, "inp", t0 * self.c, 1, rc, rc), Load(MemType.WGT, low.w0, "wgt", 0, 1, nw, nw))
        planes = (Store(low.q, "sq", plane, 1, rc, rc), Store(low.q2, "sq", plane + rc, 1, rc, rc))
        sums = (*low.packed_sums("slo", i0), *low.packed_sums("shi", i0 + rc))
        stats = (*sums, *low.variance(), *low.exponent(), *low.rsqrt(), *low.digits())
        digits = tuple(Store(low.row[d], "dg", dg + i * n, 1, n, n) for i, d in enumerate(DIGITS))
        wait = (Epi(False, False, 0, None),)
        return [
            Block(thread, loads, tuple(low.squares()), planes),
            Block(thread, (), wait, ()),
            Block(thread, (Load(MemType.INP, i0, "sq", plane, 1, 2 * rc, 2 * rc),), stats, digits),
            Block(thread, (), wait, ()),
            Block(
                thread,
                (Load(MemType.INP, i0, "dg", dg, 1, 5 * n, 5 * n),),
                (*low.unpack(), *low.output()),
                (low.store(t0),),
            ),
        ]

    @property
    def tiles(self) -> int:
        return -(-self.spec.tokens // self.r)

    def store(self, t0: int) -> Store:
        return Store(self.x, "out", t0 * self.c, 1, self.r * self.c, self.r * self.c)

    def stream(self) -> Stream:
        """The tiles dealt out to the threads in turn (each thread's three blocks in order)."""
        threads = [[b for k in range(self.tiles) if k % self.threads == t for b in self.blocks(k, t)]
                   for t in range(self.threads)]  # fmt: skip
        width = 2 * self.c + len(CONSTS)
        load = Load(MemType.ACC, self.g, "consts", 0, 1, width, width)
        return lower_vthreads(threads, prologue_block([load], threads, self.cfg.uop_depth))


class _View(LayerNormLowering):
    """A tile's program on a thread's share of the buffers, or with fewer tokens (:meth:`LayerNormLowering.view`)."""


@dataclass
class CompiledLayerNorm:
    """A LayerNorm compiled for one config."""

    lowering: LayerNormLowering
    stream: Stream

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


def compile_layer_norm(spec: LayerNormSpec, config=DEFAULT_PRESET) -> CompiledLayerNorm:
    """Compile a LayerNorm for ``config`` (module docstring)."""
    low = LayerNormLowering(spec, load_config(config))
    return CompiledLayerNorm(low, low.stream())
