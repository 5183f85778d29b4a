"""Analytical cost model for the schedule search, built on the simulator's own cycle model.

The cost of every operation of one representative (interior) tile comes from
:class:`vdla.cycles.CycleModel`, the per-instruction timing the simulator and the RTL implement (it
depends only on the configuration and the ISA). Each thread's blocks are reduced to (load, compute,
store) durations, with loads skipped exactly where the program skips them
(:meth:`ConvLowering.residency`), and run after the prologue through the real token structure
(:func:`vdla.compiler.vthreads.thread_deps`) and the round-robin block order in a block-level event
simulation. The DRAM read channel is modelled only where it matters most: a compute-stage load (a
residual tile in the accumulators, issued after the tile's last GEMM: a split block's first part's) waits for
the load-stage instruction in flight at that moment, whose end the block's instructions in order give
(:attr:`StepCosts.loads`). A residual in INP
(``Schedule.res_inp``) is load-stage work of each tile's last step, its identity GEMM compute work; the
one-element LOAD of the identity block in the stream's first block is ignored. Instruction fetch is ignored; the search
confirms its best candidates with the timing-only simulator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from vdla.compiler.blocks import Alu, Epi, Gemm, Load, Op, Store
from vdla.compiler.conv_emit import ThreadBuilder, tail_parts
from vdla.compiler.conv_lowering import ConvLowering, Tile
from vdla.compiler.schedule import Schedule
from vdla.compiler.vthreads import round_robin, thread_deps
from vdla.config import HwConfig
from vdla.cycles import CycleModel
from vdla.isa import AluInsn, EpiInsn, GemmInsn, Insn, MemInsn, MemType, elem_bytes
from vdla.isa.pipe import can_pipe

PAGE = 4096  # AXI bursts split at 4 KiB boundaries
PARTS = ("inp", "wgt", "res")  # the load-stage tensors of a block, as StepCosts.loads numbers them


def op_insn(op: Op) -> Insn:
    """The instruction an operation becomes (DRAM addresses relative to a page-aligned tensor)."""
    if isinstance(op, Load | Store):
        y0, y1, x0, x1 = op.pad if isinstance(op, Load) else (0, 0, 0, 0)
        return MemInsn(
            store=isinstance(op, Store),
            mem_type=op.mem if isinstance(op, Load) else MemType.OUT,
            sram_base=op.sram,
            dram_base=op.offset,
            y_size=op.y,
            x_size=op.x,
            x_stride=op.stride,
            y_pad_0=y0,
            y_pad_1=y1,
            x_pad_0=x0,
            x_pad_1=x1,
        )
    if isinstance(op, Epi):
        k, stride, pitch = op.dw or (0, 0, 0)
        row, shift = op.mul or (0, 0)
        dws = {"dw": op.dw is not None, "dw_k": k, "dw_stride": stride, "dw_pitch": pitch}
        return EpiInsn(lut=op.lut, **dws, src_out=op.src_out, mul=op.mul is not None, mul_base=row, mul_shift=shift)
    k = op.kernel
    loop = {"uop_end": len(k.uops), "iter_out": k.iter_out, "iter_in": k.iter_in}
    loop |= {
        f"{name}_factor_{lvl}": f[i]
        for i, name in enumerate(("dst", "src"))
        for lvl, f in (("out", k.factor_out), ("in", k.factor_in))
    }
    if isinstance(op, Gemm):
        return GemmInsn(init=op.init, **loop)
    imm = op.shift if op.imm is None else op.imm
    insn = AluInsn(alu_opcode=op.op, use_imm=op.imm is not None, imm=imm, reset=op.reset, **loop)
    return replace(insn, pipe=can_pipe(insn, k.uops))  # as the command builder emits it


def timed_ops(ops: Iterable[Op], cfg: HwConfig) -> list[tuple[Op, int]]:
    """Each operation with its :func:`op_cycles`, the compute ones timed in order by one cycle model, so that a
    GEMM takes the cycles of the EPI state before it (its depthwise mode, its OUT-path multiplier)."""
    model = CycleModel(cfg)
    return [(op, op_cycles(op, cfg) if isinstance(op, Load | Store) else model.duration(op_insn(op), 0)) for op in ops]


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
    res: int  # load-stage LOADs of the residual into INP, on the last step (res_inp)
    gemm: tuple[int, ...]
    epi: int  # the EPI instruction(s) of the first step
    tail: int  # the residual's compute-stage load and the ALU passes (the residual GEMM counts in gemm)
    store: int
    split_store: int  # the last step's STOREs split by output-channel group (a thread's last block)
    kernel_uops: int  # micro-ops of the distinct micro-kernels of such a tile
    size: tuple[int, int]  # the tile's output-channel blocks and pixels
    parts: int  # the parts a thread's last block is split in (tail_parts)
    # per step, its load-stage instructions in order as (PARTS index, cycles): a compute-stage LOAD waits for the
    # one on the read channel when it issues
    loads: tuple[tuple[tuple[int, int], ...], ...]


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
        key = (s.toc, s.toh, s.tow, s.tic, low.weights_resident(s), s.res_inp, s.tn)
        if key not in self._steps:
            oy = (-(-low.spec.oh // s.toh) // 2) * s.toh
            ox = (-(-low.spec.ow // s.tow) // 2) * s.tow
            noh, now = min(s.toh, low.spec.oh - oy), min(s.tow, low.spec.ow - ox)
            tile = Tile(0, 0, min(s.toc, low.ob), oy, noh, ox, now, nn=min(s.tn, low.ng))
            steps = low.steps(s)
            n = len(steps)
            built = sorted({0, min(1, n - 1), n - 1})
            builder = ThreadBuilder(low, s, 0)
            cost = {
                k: timed_ops(sum(map(tuple, (b.loads, b.compute, b.stores)), ()), self.cfg)
                for k in built
                for b in [builder.block(tile, k, steps[k], n)]
            }
            rep = [0 if k == 0 else n - 1 if k == n - 1 else 1 for k in range(n)]

            def total(k: int, pred) -> int:
                return sum(c for op, c in cost[k] if pred(op))

            def tensor(name: str, load_stage: bool | None = None):  # load stage: LOAD INP/WGT
                return lambda op: (
                    isinstance(op, Load)
                    and op.tensor == name
                    and (load_stage is None or (op.mem in (MemType.INP, MemType.WGT)) == load_stage)
                )

            kernels = {
                op.kernel.uops.tobytes(): len(op.kernel.uops)
                for k in built
                for op, _ in cost[k]
                if isinstance(op, Gemm | Alu)
            }
            own = low.weights_resident(s) or low.weights_shared or low.inputs_resident(s) or low.inputs_shared(s)
            unbuilt = n - len(built) if own else 0  # each step has its own GEMM kernel
            gemm = [total(k, lambda op: isinstance(op, Gemm)) for k in rep]
            self._steps[key] = StepCosts(
                inp=tuple(total(k, tensor("inp")) for k in rep),
                wgt=tuple(total(k, tensor("wgt")) for k in rep),
                res=total(n - 1, tensor("res", load_stage=True)),
                gemm=tuple(gemm),
                epi=total(0, lambda op: isinstance(op, Epi)),
                tail=total(n - 1, lambda op: isinstance(op, Alu) or tensor("res", load_stage=False)(op)),
                store=total(n - 1, lambda op: isinstance(op, Store)),
                split_store=sum(
                    op_cycles(op, self.cfg) for op in builder.block(tile, n - 1, steps[-1], n, split=True).stores
                ),
                kernel_uops=sum(kernels.values()) + unbuilt * max(kernels.values()),
                size=(tile.noc, tile.pixels),
                parts=len(tail_parts(tile)),
                loads=tuple(
                    tuple(
                        (PARTS.index(op.tensor), c)
                        for op, c in cost[k]
                        if isinstance(op, Load) and op.mem in (MemType.INP, MemType.WGT) and op.tensor in PARTS
                    )
                    for k in rep
                ),
            )
        return self._steps[key]

    def prologue(self, s: Schedule) -> int:
        """Cycles of the prologue: the rows of all output channels, then one UOP load of the kernels of every
        thread (of every thread and output-channel tile with shared weights, whose GEMM kernels address the
        tile's weights; one more one-uop elementwise kernel per extra output-channel tile when a pass reads
        rows), as many as the UOP buffer holds."""
        low = self.low
        rows = sum(op_cycles(ld, self.cfg) for ld in low.rows_loads())
        oc = low.tile_order(s)[0]
        visits = sum(len(np.unique(oc[t :: s.vthreads])) for t in range(s.vthreads))
        sets = visits if low.weights_shared else s.vthreads
        extra = visits - s.vthreads if any(p.operand and not p.gemm for p in low.passes_of(s)) else 0
        uops = min(sets * self.step_costs(s).kernel_uops + extra, self.cfg.uop_depth)
        return rows + op_cycles(Load(MemType.UOP, 0, "uop", 0, 1, uops, uops), self.cfg)

    def stage_work(self, s: Schedule) -> list[tuple[np.ndarray, ...]]:
        """Per thread: (load, compute, store cycles) of every block, the representative tile's costs scaled
        to each tile's size (ragged edge tiles do less)."""
        sc = self.step_costs(s)
        n = len(sc.gemm)
        inp, wgt, res = np.array(sc.inp), np.array(sc.wgt), np.r_[np.zeros(n - 1), sc.res]
        comp = np.array(sc.gemm) + np.r_[sc.epi, np.zeros(n - 1)] + np.r_[np.zeros(n - 1), sc.tail]
        store = np.r_[np.zeros(n - 1), sc.store]
        out = []
        for fresh, f_oc, f_px in self.block_factors(s):
            load = fresh[..., 0] * inp * f_px + fresh[..., 1] * wgt * f_oc + res * f_oc * f_px
            work = (load, comp * f_oc * f_px, store * f_oc * f_px)
            out.append(tuple(np.rint(a).reshape(-1).astype(np.int64) for a in work))
        return out

    def block_factors(self, s: Schedule) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per thread: which loads each block makes (tiles x steps x (input, weights)), and each tile's size
        relative to the representative tile's, in output channels and in pixels (tiles x 1)."""
        n = len(self.step_costs(s).gemm)
        size = self.step_costs(s).size
        oc, sp = self.low.tile_order(s)
        nocs, pixels = self.low.tile_sizes(s)
        return [
            (
                fresh.reshape(-1, n, 2),
                (nocs[oc[t :: s.vthreads]] / size[0])[:, None],
                (pixels[sp[t :: s.vthreads]] / size[1])[:, None],
            )
            for t, fresh in enumerate(self.low.residency(s))
        ]

    def load_ends(self, s: Schedule) -> list[list[np.ndarray]]:
        """Per thread, per block: the ends of its load-stage instructions from the block's start (the input's and
        weights' where the block makes them, the residual's; scaled like :meth:`stage_work`)."""
        sc = self.step_costs(s)
        n = len(sc.gemm)
        out = []
        for fresh, f_oc, f_px in self.block_factors(s):
            blocks = []
            for j in range(fresh.shape[0] * n):
                tile, k = divmod(j, n)
                scale = (f_px[tile, 0], f_oc[tile, 0], f_oc[tile, 0] * f_px[tile, 0])
                made = (fresh[tile, k, 0], fresh[tile, k, 1], True)
                blocks.append(np.cumsum([c * scale[part] for part, c in sc.loads[k] if made[part]]))
            out.append(blocks)
        return out

    def bound(self, s: Schedule) -> int:
        """A lower bound of :meth:`estimate`: the prologue, then the busiest stage's total work, the compute
        stage's with the first block's loads before it and what the last block's store adds after it."""
        work = self.stage_work(s)
        load, comp, store = (int(sum(w[i].sum() for w in work)) for i in range(3))
        longest = max(len(w[0]) for w in work)
        last = [w for w in work if len(w[0]) == longest][-1]  # round-robin ends with the last longest thread
        # the last block's store starts after the first part of its compute
        tail = max(0, int(last[2][-1]) - int(last[1][-1]) + int(last[1][-1]) // self.tail_parts(s))
        return self.prologue(s) + max(load, store, int(work[0][0][0]) + comp + tail)

    def tail_parts(self, s: Schedule) -> int:
        """Parts a thread's last block is split in (see :meth:`ThreadBuilder.blocks`)."""
        return self.step_costs(s).parts

    def estimate(self, s: Schedule) -> Estimate:
        """Event simulation of the round-robin blocks on the three stages, each stage taking its blocks in
        stream order and starting each once its tokens are in, the earliest-ready stage first. A thread's last
        block hands its first part to the store stage after its share of the compute."""
        sc = self.step_costs(s)
        parts = self.tail_parts(s)
        work = self.stage_work(s)
        order = round_robin([len(w[0]) for w in work])
        split = {(t, len(w[0]) - 1) for t, w in enumerate(work)}
        pos = {key: p for p, key in enumerate(order)}
        dur = [[int(work[t][j][i]) for t, i in order] for j in range(3)]
        t_ = self.cfg.timing
        one_step = len(self.low.steps(s)) == 1  # then every part also has its own EPI
        for p in (p for p, key in enumerate(order) if key in split):  # each extra part: a GEMM more, maybe a STORE
            dur[1][p] += (parts - 1) * (t_.gemm_setup + t_.gemm_pipeline + one_step * t_.nop_cycles)
            dur[2][p] += sc.split_store - sc.store
        in_acc = bool(self.low.epi.residual) and not s.res_inp
        bus = [in_acc and bool(dur[2][p]) for p in range(len(order))]  # compute-stage residual LOADs
        ends = self.load_ends(s) if in_acc else None
        last = sc.gemm[-1] + sc.epi * (len(sc.gemm) == 1)  # a last step's compute ahead of its residual LOAD
        ahead = last / max(last + sc.tail, 1)
        # where a block's first compute-stage LOAD issues after its start (a split block's: its first part's)
        pre = [work[t][1][i] * ahead / (parts if (t, i) in split else 1) for t, i in order]
        waits: list[dict[int, list[tuple[int, int]]]] = [{}, {}, {}]  # stage -> position -> (stage, position)
        for t, w in enumerate(work):
            for d in thread_deps(w[0] > 0, w[2] > 0):
                src, dst = d.queue.src, d.queue.dst
                waits[dst].setdefault(pos[(t, d.dst)], []).append((src, pos[(t, d.src)]))
        lists = [
            [p for p in range(len(order)) if dur[0][p]],
            list(range(len(order))),
            [p for p in range(len(order)) if dur[2][p]],
        ]
        end: list[dict[int, int]] = [{}, {}, {}]
        handoff: dict[int, int] = {}  # compute of a split block: when its first part reaches the store stage
        start_at = self.prologue(s)  # the first loads share the read channel with the prologue
        cursor, free = [0, 0, 0], [start_at, start_at, 0]
        loading = (0, np.zeros(0))  # start of the load-stage block last started, its instructions' ends after it
        while True:
            best = None
            for stage in (0, 1, 2):
                if cursor[stage] == len(lists[stage]):
                    continue
                p = lists[stage][cursor[stage]]
                ready = free[stage]
                for st, q in waits[stage].get(p, ()):
                    e = handoff.get(q, end[st].get(q)) if (st, stage) == (1, 2) else end[st].get(q)
                    if e is None:
                        break
                    ready = max(ready, e)
                else:
                    if best is None or ready < best[0]:
                        best = (ready, stage, p)
            if best is None:
                break
            start, stage, p = best
            wait = 0
            if stage == 1 and bus[p]:  # its compute-stage LOAD waits for the load-stage instruction in flight
                issue = start + pre[p]
                later = loading[0] + loading[1][loading[0] + loading[1] > issue]
                wait = int(later[0] - issue) if len(later) else 0
            end[stage][p] = free[stage] = start + dur[stage][p] + wait
            if stage == 2 and p in handoff:  # the last part's store follows the end of the compute
                end[2][p] = free[2] = max(free[2], end[1][p] + -(-dur[2][p] // parts))
            if stage == 1 and order[p] in split:
                handoff[p] = start + wait + -(-dur[1][p] // parts)
            cursor[stage] += 1
            if stage == 0 and ends is not None:
                t, i = order[p]
                loading = (start, ends[t][i])
        return Estimate(max(free), sum(dur[0]), start_at + sum(dur[1]), sum(dur[2]))
