"""Analytical cost model for the schedule search, built on the simulator's own cycle model.

The cost of every operation of one representative (interior) tile comes from
:class:`vdla.runtime.sim.cycles.CycleModel`, the per-instruction timing the simulator and the RTL
implement. Each thread's blocks are reduced to (load, compute, store) durations, with loads skipped
exactly where the program skips them (:meth:`ConvLowering.residency`), and run after the prologue
through the real token structure (:func:`vdla.compiler.vthreads.thread_deps`) and round-robin
interleaving in a block-level event simulation. The DRAM read channel is modelled only where it
matters most: a compute-stage load (a residual tile) waits for the load-stage transfer in flight.
Instruction fetch is ignored; the search confirms its best candidates with the timing-only simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from vdla.compiler.ir import Alu, Gemm, Load, Op, Store
from vdla.compiler.schedule import ConvLowering, Schedule, ThreadBuilder, Tile
from vdla.compiler.vthreads import ENDS, interleave, thread_deps
from vdla.config import HwConfig
from vdla.isa import AluInsn, GemmInsn, Insn, MemInsn, MemType, elem_bytes
from vdla.runtime.sim.cycles import CycleModel

PAGE = 4096  # AXI bursts split at 4 KiB boundaries


def op_insn(op: Op) -> Insn:
    """The instruction an operation becomes (DRAM addresses relative to a page-aligned tensor)."""
    if isinstance(op, Load | Store):
        y0, y1, x0, x1 = op.pad if isinstance(op, Load) else (0, 0, 0, 0)
        return MemInsn(store=isinstance(op, Store), mem_type=op.mem if isinstance(op, Load) else MemType.OUT,
                       sram_base=op.sram, dram_base=op.offset, y_size=op.y, x_size=op.x, x_stride=op.stride,
                       y_pad_0=y0, y_pad_1=y1, x_pad_0=x0, x_pad_1=x1)
    k = op.kernel
    loop = {"uop_end": len(k.uops), "iter_out": k.iter_out, "iter_in": k.iter_in}
    if isinstance(op, Gemm):
        return GemmInsn(reset=op.reset, **loop)
    return AluInsn(alu_opcode=op.op, use_imm=op.imm is not None, imm=op.imm or 0, reset=op.reset, **loop)


def op_cycles(op: Op, cfg: HwConfig) -> int:
    """Cycles the operation occupies its stage, on an otherwise idle DRAM bus."""
    if isinstance(op, Load | Store):  # bursts depend on the address only modulo the 4 KiB page
        eb = elem_bytes(cfg, op.mem if isinstance(op, Load) else MemType.OUT)
        return _mem_cycles(replace(op, offset=op.offset % max(PAGE // eb, 1)), cfg)
    return CycleModel(cfg).duration(op_insn(op), 0)


@lru_cache(maxsize=65536)
def _mem_cycles(op: Load | Store, cfg: HwConfig) -> int:
    return CycleModel(cfg).duration(op_insn(op), 0)


@dataclass(frozen=True)
class StepCosts:
    """Stage cycles of the parts of one representative tile, per reduction step where they vary."""

    inp: tuple[int, ...]
    wgt: tuple[int, ...]
    gemm: tuple[int, ...]
    reset: int  # accumulator init: bias copy or reset
    tail: int  # residual load and epilogue passes
    store: int
    warmup: int  # prologue cycles making one thread's micro-kernels of such a tile resident
    size: tuple[int, int]  # the tile's output-channel blocks and pixels
    longest_load: int  # the longest load-stage instruction: what a compute-stage load may wait for


@dataclass(frozen=True)
class Estimate:
    """Estimated cycles, and the total busy cycles of the load, compute and store stages."""

    cycles: int
    load: int
    compute: int
    store: int


class CostModel:
    """Estimates the cycles of a layer's schedules (memoizing per tile geometry)."""

    def __init__(self, low: ConvLowering):
        self.low, self.cfg = low, low.cfg
        self._steps: dict[tuple, StepCosts] = {}

    def step_costs(self, s: Schedule) -> StepCosts:
        """Costs of the middle tile's blocks (they depend on the tile geometry only). Only the first, second
        and last reduction steps are built: the steps between repeat the second."""
        low = self.low
        key = (s.toc, s.toh, s.tow, s.tic, low.weights_resident(s))
        if key not in self._steps:
            oy = (-(-low.spec.oh // s.toh) // 2) * s.toh
            ox = (-(-low.spec.ow // s.tow) // 2) * s.tow
            tile = Tile(0, 0, min(s.toc, low.ob), oy, min(s.toh, low.spec.oh - oy), ox, min(s.tow, low.spec.ow - ox))
            steps = low.steps(s)
            n = len(steps)
            built = sorted({0, min(1, n - 1), n - 1})
            builder = ThreadBuilder(low, s, 0)
            cost = {k: [(op, op_cycles(op, self.cfg)) for op in sum(map(tuple, (b.loads, b.compute, b.stores)), ())]
                    for k in built for b in [builder.block(tile, k, steps[k], n)]}
            rep = [0 if k == 0 else n - 1 if k == n - 1 else 1 for k in range(n)]

            def total(k: int, pred) -> int:
                return sum(c for op, c in cost[k] if pred(op))

            def tensor(name: str):
                return lambda op: isinstance(op, Load) and op.tensor == name

            kernels = {op.kernel.uops.tobytes(): len(op.kernel.uops) for k in built for op, _ in cost[k]
                       if isinstance(op, Gemm | Alu)}
            unbuilt = n - len(built) if low.weights_resident(s) else 0  # each step has its own GEMM kernel
            gemm = [total(k, lambda op: isinstance(op, Gemm) and not op.reset) for k in rep]
            self._steps[key] = StepCosts(
                inp=tuple(total(k, tensor("inp")) for k in rep),
                wgt=tuple(total(k, tensor("wgt")) for k in rep),
                gemm=tuple(gemm),
                reset=total(0, lambda op: isinstance(op, Gemm | Alu) and op.reset),
                tail=total(n - 1, lambda op: isinstance(op, Alu) and not op.reset or tensor("res")(op)),
                store=total(n - 1, lambda op: isinstance(op, Store)),
                warmup=sum(self.warmup_cycles(u) for u in kernels.values()) + unbuilt * self.warmup_cycles(
                    max(kernels.values())),
                size=(tile.noc, tile.noh * tile.now),
                longest_load=max((c for k in built for op, c in cost[k] if isinstance(op, Load) and op.mem in
                                  (MemType.INP, MemType.WGT)), default=0))
        return self._steps[key]

    def warmup_cycles(self, uops: int) -> int:
        """Prologue cycles of one kernel: its UOP load."""
        return op_cycles(Load(MemType.UOP, 0, "uop", 0, 1, uops, uops), self.cfg)

    def prologue(self, s: Schedule) -> int:
        """Cycles of the prologue: the rows of all output channels, every thread's kernels (one more
        elementwise kernel per extra output-channel tile a thread visits, when the epilogue reads rows)."""
        low = self.low
        rows = sum(op_cycles(Load(MemType.ACC, 0, name, 0, 1, low.ob, low.ob), self.cfg) for name in low.rows)
        oc = low.tile_order(s)[0]
        extra = sum(len(np.unique(oc[t::s.vthreads])) - 1 for t in range(s.vthreads)) if low.rows else 0
        return rows + s.vthreads * self.step_costs(s).warmup + extra * self.warmup_cycles(1)

    def stage_work(self, s: Schedule) -> list[tuple[np.ndarray, ...]]:
        """Per thread: (load, compute, store cycles) of every block, the representative tile's costs scaled
        to each tile's size (ragged edge tiles do less)."""
        sc = self.step_costs(s)
        n = len(sc.gemm)
        oc, sp = self.low.tile_order(s)
        nocs, pixels = self.low.tile_sizes(s)
        inp, wgt = np.array(sc.inp), np.array(sc.wgt)
        comp = np.array(sc.gemm) + np.r_[sc.reset, np.zeros(n - 1)] + np.r_[np.zeros(n - 1), sc.tail]
        store = np.r_[np.zeros(n - 1), sc.store]
        out = []
        for t, fresh in enumerate(self.low.residency(s)):
            f_oc = (nocs[oc[t::s.vthreads]] / sc.size[0])[:, None]
            f_px = (pixels[sp[t::s.vthreads]] / sc.size[1])[:, None]
            fresh = fresh.reshape(-1, n, 2)
            work = (fresh[..., 0] * inp * f_px + fresh[..., 1] * wgt * f_oc, comp * f_oc * f_px, store * f_oc * f_px)
            out.append(tuple(np.rint(a).reshape(-1).astype(np.int64) for a in work))
        return out

    def bound(self, s: Schedule) -> int:
        """A lower bound of :meth:`estimate`: the prologue, then the busiest stage's total work, the compute
        stage's with the first block's loads before it and the last block's store after it."""
        work = self.stage_work(s)
        load, comp, store = (int(sum(w[i].sum() for w in work)) for i in range(3))
        longest = max(len(w[0]) for w in work)
        last = [w for w in work if len(w[0]) == longest][-1]  # round-robin ends with the last longest thread
        return self.prologue(s) + max(load, store, int(work[0][0][0]) + comp + int(last[2][-1]))

    def estimate(self, s: Schedule) -> Estimate:
        """Event simulation of the interleaved blocks on the three stages, each stage taking its blocks in
        stream order and starting each once its tokens are in, the earliest-ready stage first."""
        longest = self.step_costs(s).longest_load
        work = self.stage_work(s)
        order = interleave([len(w[0]) for w in work])
        pos = {key: p for p, key in enumerate(order)}
        dur = [[int(work[t][j][i]) for t, i in order] for j in range(3)]
        bus = [bool(self.low.epi.residual) and bool(dur[2][p]) for p in range(len(order))]  # residual LOADs
        waits: list[dict[int, list[tuple[int, int]]]] = [{}, {}, {}]  # stage -> position -> (stage, position)
        for t, w in enumerate(work):
            for d in thread_deps(w[0] > 0, w[2] > 0):
                src, dst = ENDS[d.queue]
                waits[dst].setdefault(pos[(t, d.dst)], []).append((src, pos[(t, d.src)]))
        lists = [[p for p in range(len(order)) if dur[0][p]], list(range(len(order))),
                 [p for p in range(len(order)) if dur[2][p]]]
        end: list[dict[int, int]] = [{}, {}, {}]
        start_at = self.prologue(s)  # the first loads wait for the prologue
        cursor, free = [0, 0, 0], [start_at, start_at, 0]
        loading = (0, 0)  # interval of the load-stage block last started
        while True:
            best = None
            for stage in (0, 1, 2):
                if cursor[stage] == len(lists[stage]):
                    continue
                p = lists[stage][cursor[stage]]
                ready = free[stage]
                for st, q in waits[stage].get(p, ()):
                    e = end[st].get(q)
                    if e is None:
                        break
                    ready = max(ready, e)
                else:
                    if best is None or ready < best[0]:
                        best = (ready, stage, p)
            if best is None:
                break
            start, stage, p = best
            if stage == 1 and bus[p] and loading[0] <= start < loading[1]:
                start += min(loading[1] - start, longest)  # its compute-stage LOADs wait for the read channel
            end[stage][p] = free[stage] = start + dur[stage][p]
            cursor[stage] += 1
            if stage == 0:
                loading = (start, free[0])
        return Estimate(max(free), sum(dur[0]), start_at + sum(dur[1]), sum(dur[2]))
