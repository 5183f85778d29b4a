"""The decoupled access-execute simulator: three stages running as concurrent agents.

Instructions are fetched in order into per-stage command queues; each stage starts its next
instruction when the tokens it pops are available and the queues it pushes have room. Among the
stages that can start, the one that can start earliest goes first, so DRAM bus time is handed out in
time order. A state where no stage can proceed is a deadlock and raises :class:`DeadlockError`.
Every failure raises the runtime's backend-neutral errors (:mod:`vdla.runtime.backend`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import vdla.runtime.sim.semantics as semantics
from vdla.config import HwConfig
from vdla.cycles import CycleModel
from vdla.isa import (
    AluInsn,
    EpiInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    IsaError,
    MemInsn,
    Queue,
    Stage,
    decode_program,
    elem_bytes,
    pops_of,
    pushes_of,
)
from vdla.isa.asm import disassemble_insn
from vdla.isa.validate import check_insn
from vdla.runtime.backend import CycleLimitError, DeadlockError, FaultError, RunResult, TokenError
from vdla.runtime.counters import STAGES, Counters, TimelineEntry
from vdla.runtime.dram import Dram, DramError


class Simulator:
    """The ``sim`` backend: runs an instruction stream held in DRAM against the on-chip buffers of one
    configuration (which persist from run to run; START resets only the epilogue state)."""

    name = "sim"

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.sram = semantics.Sram(cfg)
        self._checked: dict[tuple[bytes, tuple[int, int]], tuple[Insn, ...]] = {}  # see _fetch

    CHECKED_PROGRAMS = 8  # programs kept decoded and checked (a model's streams run once per inference)

    def _fetch(self, code: bytes, dram_range: tuple[int, int]) -> tuple[Insn, ...]:
        """The program ``code`` decoded and each instruction checked (FaultError naming the first bad one). The
        result depends only on the bytes, the DRAM window and the configuration, so :meth:`run` keeps the last
        few: a program run again (the next inference) is neither decoded nor checked again."""
        try:
            insns = decode_program(code)
        except IsaError as e:
            raise FaultError(f"cannot fetch the program: {e}") from e
        for i, insn in enumerate(insns):
            problems = check_insn(insn, self.cfg, dram_range)
            if isinstance(insn, FinishInsn) and i != len(insns) - 1:
                problems.append("FINISH before the end of the program")
            if problems:
                raise FaultError(f"instruction {i} ({disassemble_insn(insn)}): {'; '.join(problems)}")
        if not insns or not isinstance(insns[-1], FinishInsn):
            raise FaultError("the program does not end with FINISH")
        return tuple(insns)

    def make_dram(self) -> Dram:
        """The DRAM region of the configuration."""
        return Dram(self.cfg.dram_bytes, self.cfg.dram_base_addr)

    def run(
        self,
        dram: Dram,
        insn_addr: int,
        insn_count: int,
        max_cycles: int | None = None,
        timeline: bool = False,
        functional: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Execute ``insn_count`` instructions at physical address ``insn_addr``; return the counters.

        With ``functional=False`` only the cycle model runs (buffers and DRAM are left untouched; the
        counters are the same): how the schedule search times its candidates."""
        t0 = time.perf_counter()
        try:
            code = bytes(dram.view(insn_addr, insn_count * self.cfg.insn_bytes))
        except DramError as e:
            raise FaultError(f"cannot fetch the program: {e}") from e
        key = (code, dram.range)
        insns = self._checked.get(key)
        if insns is None:
            insns = self._checked[key] = self._fetch(code, dram.range)
            while len(self._checked) > self.CHECKED_PROGRAMS:
                del self._checked[next(iter(self._checked))]
        result = _Run(self, dram, list(insns), max_cycles, timeline, functional).execute()
        result.wall_s = time.perf_counter() - t0
        return result


class _Run:
    """State of one execution: stage cursors, command and token queues, clocks."""

    def __init__(
        self, sim: Simulator, dram: Dram, insns: list[Insn], max_cycles: int | None, timeline: bool, functional: bool
    ):
        self.sim, self.cfg, self.dram, self.insns, self.functional = sim, sim.cfg, dram, insns, functional
        sim.sram.epi = EpiInsn()  # START resets the epilogue state; the buffers keep their contents
        self.max_cycles, self.want_timeline = max_cycles, timeline
        t = self.cfg.timing
        self.by_stage: list[list[int]] = [[], [], []]
        self.pos_in_stage = []
        for i, insn in enumerate(insns):
            self.pos_in_stage.append(len(self.by_stage[insn.stage]))
            self.by_stage[insn.stage].append(i)
        self.cursor = [0, 0, 0]  # next position in each stage's list
        self.started_at: list[list[int]] = [[], [], []]  # start cycle of each started instruction
        self.free_at = [0, 0, 0]
        self.fetched = 0
        self.fetch_time = t.insn_fetch_latency + t.dram_read_latency - t.insn_fetch_cycles  # first one's arrival
        self.arrival: list[int] = []
        self.tokens = {q: deque() for q in Queue}
        self.model = CycleModel(self.cfg)
        self.counters = Counters(insn_bytes=len(insns) * self.cfg.insn_bytes)
        self.timeline: list[TimelineEntry] = []

    def _fetch_until(self, index: int) -> bool:
        """Advance in-order fetch up to instruction ``index``; False if a full command queue blocks it."""
        t = self.cfg.timing
        while self.fetched <= index:
            insn = self.insns[self.fetched]
            s, k = insn.stage, self.pos_in_stage[self.fetched]
            slot_time = 0
            if k >= t.cmd_queue_depth:  # needs the instruction `depth` places ahead to have left the queue
                if k - t.cmd_queue_depth >= len(self.started_at[s]):
                    return False
                slot_time = self.started_at[s][k - t.cmd_queue_depth] + 1
            self.fetch_time = max(self.fetch_time + t.insn_fetch_cycles, slot_time)
            self.arrival.append(self.fetch_time)
            self.fetched += 1
        return True

    def _blocker(self, s: int) -> str | None:
        """Why stage ``s`` cannot start its next instruction now (None if it can)."""
        index = self.by_stage[s][self.cursor[s]]
        if not self._fetch_until(index):
            blocking = self.insns[self.fetched].stage
            return (
                f"waiting for instruction fetch, which is blocked by the full "
                f"{blocking.name.lower()} command queue (depth {self.cfg.timing.cmd_queue_depth})"
            )
        insn = self.insns[index]
        for q in pops_of(insn):
            if not self.tokens[q]:
                return f"waiting for a token on queue {q.label}"
        for q in pushes_of(insn):
            if len(self.tokens[q]) >= self.cfg.timing.token_queue_depth:
                return f"waiting for room in the full token queue {q.label}"
        return None

    def execute(self) -> RunResult:
        while True:
            best = None
            for s in (Stage.LOAD, Stage.COMPUTE, Stage.STORE):
                if self.cursor[s] == len(self.by_stage[s]) or self._blocker(s) is not None:
                    continue
                index = self.by_stage[s][self.cursor[s]]
                ready = max(
                    [self.free_at[s], self.arrival[index]] + [self.tokens[q][0] for q in pops_of(self.insns[index])]
                )
                rank = (ready, self._arbiter_rank(s, self.insns[index]))
                if best is None or rank < best[0]:
                    best = (rank, s, index)
            if best is None:
                break
            self._step(best[0][0], best[1], best[2])
        unfinished = [s for s in Stage if self.cursor[s] < len(self.by_stage[s])]
        if unfinished:
            raise DeadlockError("deadlock: no stage can proceed\n" + self._describe())
        leftover = {q.label: len(d) for q, d in self.tokens.items() if d}
        if leftover:
            raise TokenError(f"the program ended with tokens left in queues: {leftover}")
        c = self.counters
        c.cycles = max(self.free_at)
        for s, name in enumerate(STAGES):
            st = c.stage(name)
            st.idle += c.cycles - self.free_at[s]
        return RunResult(c, self.timeline)

    def _arbiter_rank(self, s: int, insn: Insn) -> int:
        """Order among stages that can start in the same cycle: the read channel's arbiter (``vdla_axi_rd_arb``)
        grants the requester it granted last if it requests again, else the lowest-numbered one (load, then
        compute), so a read transfer of the stage that read last goes first; otherwise the stage order."""
        reads = isinstance(insn, MemInsn) and not insn.store and not insn.is_nop
        return -1 if reads and s == self.model.last_reader else s

    def _describe(self) -> str:
        lines = []
        for s in Stage:
            name = s.name.lower()
            if self.cursor[s] == len(self.by_stage[s]):
                lines.append(f"  {name} stage: finished")
                continue
            index = self.by_stage[s][self.cursor[s]]
            lines.append(
                f"  {name} stage: stuck at instruction {index} "
                f"({disassemble_insn(self.insns[index])}), {self._blocker(s)}"
            )
        queued = ", ".join(f"{q.label}={len(d)}" for q, d in self.tokens.items())
        return "\n".join(lines) + f"\n  tokens in queues: {queued}"

    def _step(self, start: int, s: int, index: int) -> None:
        insn = self.insns[index]
        for q in pops_of(insn):
            self.tokens[q].popleft()
        try:
            self._exec(insn)
        except (FaultError, IsaError, DramError) as e:
            raise FaultError(f"instruction {index} ({disassemble_insn(insn)}): {e}") from e
        end = start + self.model.duration(insn, start)
        if self.max_cycles is not None and end > self.max_cycles:
            raise CycleLimitError(
                f"cycle limit {self.max_cycles} reached at instruction {index} "
                f"({disassemble_insn(insn)}) on the {Stage(s).name.lower()} stage"
            )
        for q in pushes_of(insn):
            self.tokens[q].append(end)
        st = self.counters.stage(STAGES[s])
        avail = max(self.free_at[s], self.arrival[index])
        st.idle += avail - self.free_at[s]
        st.stall += start - avail
        st.busy += end - start
        st.insns += 1
        self.counters.insn_counts[insn.opcode.name] += 1
        self.free_at[s] = end
        self.started_at[s].append(start)
        self.cursor[s] += 1
        if self.want_timeline:
            self.timeline.append(TimelineEntry(index, STAGES[s], start, end, disassemble_insn(insn)))

    def _exec(self, insn: Insn) -> None:
        """Count what the instruction does and, unless timing only, execute it."""
        c = self.counters
        if isinstance(insn, MemInsn):
            nbytes = 0 if insn.is_nop else insn.y_size * insn.x_size * elem_bytes(self.cfg, insn.mem_type)
            if insn.store:
                c.bytes_stored += nbytes
            else:
                c.bytes_loaded[insn.mem_type.name] += nbytes
        elif isinstance(insn, GemmInsn):
            if insn.reset:
                c.gemm_reset_iters += insn.iterations
            else:
                c.gemm_iters += insn.iterations
        elif isinstance(insn, AluInsn):
            c.alu_iters += insn.iterations
        if self.functional:
            semantics.execute(self.sim.sram, insn, self.dram)
