"""The ``rtl`` backend: programs run on the Verilated RTL, cycle by cycle, against the device's DRAM.

The driver side of a run is what a board driver does: write INSN_ADDR/INSN_COUNT, START, wait for the
interrupt, read STATUS and the counters. Errors the hardware reports (and the harness's cycle limit) are
raised as the runtime's backend-neutral errors (:mod:`vdla.runtime.backend`), with the simulator's
messages naming the instruction and the stage.
"""

from __future__ import annotations

import time
from pathlib import Path

from vdla.config import HwConfig
from vdla.isa import FinishInsn, Insn, IsaError, Queue, Stage, decode, pops_of, pushes_of
from vdla.isa.asm import disassemble_insn
from vdla.isa.validate import check_insn
from vdla.runtime import registers as R
from vdla.runtime.backend import (
    BackendError,
    CycleLimitError,
    DeadlockError,
    FaultError,
    RunError,
    RunResult,
    TokenError,
)
from vdla.runtime.counters import STAGES, Counters, TimelineEntry
from vdla.runtime.dram import Dram, DramError
from vdla.runtime.rtl.build import BUILD_ROOT, build
from vdla.runtime.rtl.harness import Harness

DEFAULT_MAX_CYCLES = 2_000_000_000  # the harness never runs unbounded
CHUNK = 1 << 20  # cycles per harness call (Ctrl-C is seen between chunks)


class RtlBackend:
    """Runs programs on the accelerator's RTL in Verilator (see hw/sim/harness.cpp)."""

    name = "rtl"

    def __init__(
        self,
        cfg: HwConfig,
        wave: str | Path | None = None,
        jobs: int = 2,
        build_root: Path = BUILD_ROOT,
        assertions: bool = True,
    ):
        """``wave``: write an FST waveform of every run to this path; ``build_root``: where builds are cached;
        ``assertions=False``: the model without the RTL's assertions (faster; same behaviour)."""
        self.cfg = cfg
        self.library = build(cfg, trace=wave is not None, jobs=jobs, root=build_root, assertions=assertions).library
        self.harness = Harness(self.library, cfg, wave)
        ident = self.harness.read(R.offset("ID"))
        if ident >> 16 != R.ID_MAGIC or self.harness.read(R.offset("CONFIG_HASH")) != cfg.hash:
            raise BackendError(f"the RTL model does not identify as the {cfg.name!r} configuration")

    def make_dram(self) -> Dram:
        return Dram(self.cfg.dram_bytes, self.cfg.dram_base_addr)

    def close(self) -> None:
        """Free the model (and finish its waveform file, if one is written)."""
        self.harness.close()

    def run(
        self,
        dram: Dram,
        insn_addr: int,
        insn_count: int,
        max_cycles: int | None = None,
        timeline: bool = False,
        functional: bool = True,
    ) -> RunResult:
        """Execute ``insn_count`` instructions at ``insn_addr`` on the RTL; raise like the simulator. The RTL
        always executes the data path, so ``functional`` changes nothing."""
        t0 = time.perf_counter()
        h = self.harness
        h.set_memory(dram.mem, dram.base)
        h.reset()
        h.trace(timeline)
        h.write(R.offset("IRQ_ENABLE"), 1)
        h.write(R.offset("INSN_ADDR_LO"), insn_addr)
        h.write(R.offset("INSN_ADDR_HI"), insn_addr >> 32)
        h.write(R.offset("INSN_COUNT"), insn_count)
        h.write(R.offset("CONTROL"), 1)
        limit = DEFAULT_MAX_CYCLES if max_cycles is None else max_cycles
        ended = False
        while not ended and h.cycle <= limit + 1:  # the end is seen one cycle after the last one
            ended = h.run(min(CHUNK, limit + 2 - h.cycle))
        program = _Program(dram, insn_addr, insn_count, self.cfg)
        counters = R.read_counters(h.read, insn_bytes=insn_count * self.cfg.insn_bytes)
        status = h.read(R.offset("STATUS"))
        if R.get_field(status, "STATUS", "ERROR"):
            raise self._error(status, program, dram)
        if not ended or counters.cycles > limit:
            raise CycleLimitError(
                f"cycle limit {limit} reached at {self._running(program, counters)}" + "\n" + self._describe(program)
            )
        count = _token_counts(h.read(R.offset("TOKENS")))
        leftover = {q.label: n for q, n in count.items() if n}
        if leftover:
            raise TokenError(f"the program ended with tokens left in queues: {leftover}")
        return RunResult(counters, self._timeline(program) if timeline else [], time.perf_counter() - t0)

    # ---- reporting ------------------------------------------------------------------------------
    def _error(self, status: int, program: _Program, dram: Dram) -> RunError:
        code = R.error_name(R.get_field(status, "STATUS", "ERROR_CODE"))
        unit = R.ERROR_UNITS[R.get_field(status, "STATUS", "ERROR_UNIT")]
        index = self.harness.read(R.offset("ERROR_INSN"))
        if code == "DEADLOCK":
            if not program.insns or not isinstance(program.insns[-1], FinishInsn):
                return FaultError("the program does not end with FINISH")
            return DeadlockError("deadlock: no stage can proceed\n" + self._describe(program))
        if code == "ALIGN":
            return FaultError(f"cannot fetch the program: address {program.addr:#x} is not 16-byte aligned")
        if unit == "fetch":
            if code == "OPCODE":
                return FaultError(f"cannot fetch the program: {program.decode_error(index)}")
            if code == "BUS":
                return FaultError(
                    f"cannot fetch the program: its {program.count * 16} bytes at {program.addr:#x} lie "
                    f"outside the DRAM region [{dram.base:#x}, {dram.base + dram.size:#x})"
                )
            return FaultError(f"instruction {index}: FINISH before the end of the program")
        i = program.global_index(Stage[unit.upper()], index)
        insn = program.insns[i]
        where = f"instruction {i} ({disassemble_insn(insn)})"
        problems = check_insn(insn, self.cfg, dram.range)
        if code == "INDEX":
            return FaultError(f"{where}: a micro-op index lies outside its buffer (stopped by the hardware)")
        if code == "BUS" and not problems:
            problems = [
                f"DRAM access at {self.harness.bad_access() or 0:#x} outside the region "
                f"[{dram.base:#x}, {dram.base + dram.size:#x})"
            ]
        return FaultError(f"{where}: {'; '.join(problems) or 'rejected by the hardware (' + code + ')'}")

    def _stage_state(self) -> tuple[list[int], list[int], int, int]:
        h = self.harness
        done = [h.read(R.offset(R.STAGE_INSN_REGS[s])) for s in STAGES]
        queued = h.read(R.offset("CMD_QUEUES"))
        return (
            done,
            [(queued >> 8 * s) & 0xFF for s in range(3)],
            h.read(R.offset("TOKENS")),
            h.read(R.offset("STAGE_STATE")),
        )

    def _running(self, program: _Program, counters: Counters) -> str:
        """The earliest instruction (in program order) that a stage is executing or waiting to start."""
        started, _, _, state = self._stage_state()
        candidates = []
        for s in Stage:
            k = started[s] - 1 if state >> s & 1 else started[s]
            if k < len(program.by_stage[s]):
                candidates.append((program.by_stage[s][k], s))
        if not candidates:
            return f"cycle {counters.cycles}"
        i, s = min(candidates)
        return f"instruction {i} ({disassemble_insn(program.insns[i])}) on the {s.name.lower()} stage"

    def _describe(self, program: _Program) -> str:
        """Each stage's state, like the simulator's deadlock report."""
        started, queued, tokens, state = self._stage_state()
        count = _token_counts(tokens)
        lines = []
        for s in Stage:
            name, todo = s.name.lower(), program.by_stage[s]
            if state >> s & 1:
                i = todo[started[s] - 1]
                lines.append(f"  {name} stage: executing instruction {i} ({disassemble_insn(program.insns[i])})")
                continue
            if started[s] >= len(todo):
                lines.append(f"  {name} stage: finished")
                continue
            i = todo[started[s]]
            insn = program.insns[i]
            if not queued[s]:
                blocking = [t.name.lower() for t in Stage if queued[t] >= self.cfg.timing.cmd_queue_depth]
                why = (
                    f"waiting for instruction fetch, which is blocked by the full {blocking[0]} command queue "
                    f"(depth {self.cfg.timing.cmd_queue_depth})"
                    if blocking
                    else "waiting for instruction fetch"
                )
            else:
                why = next(
                    (f"waiting for a token on queue {q.label}" for q in pops_of(insn) if not count[q]), None
                ) or next(
                    (
                        f"waiting for room in the full token queue {q.label}"
                        for q in pushes_of(insn)
                        if count[q] >= self.cfg.timing.token_queue_depth
                    ),
                    "ready",
                )
            lines.append(f"  {name} stage: stuck at instruction {i} ({disassemble_insn(insn)}), {why}")
        queued_tokens = ", ".join(f"{q.label}={count[q]}" for q in Queue)
        return "\n".join(lines) + f"\n  tokens in queues: {queued_tokens}"

    def _timeline(self, program: _Program) -> list[TimelineEntry]:
        starts: list[list[int]] = [[], [], []]
        ends: list[list[int]] = [[], [], []]
        for ev in self.harness.trace_events():
            cycle, bits = int(ev) >> 8, int(ev) & 0xFF
            for s in range(3):
                if bits >> s & 1:
                    starts[s].append(cycle)
                if bits >> (3 + s) & 1:
                    ends[s].append(cycle + 1)
        out = [
            TimelineEntry(
                program.by_stage[s][k], STAGES[s], start, end, disassemble_insn(program.insns[program.by_stage[s][k]])
            )
            for s in range(3)
            for k, (start, end) in enumerate(zip(starts[s], ends[s]))
        ]
        return sorted(out, key=lambda e: (e.start, e.index))


def _token_counts(tokens: int) -> dict[Queue, int]:
    """Each queue's token count, from the TOKENS register."""
    return {q: (tokens >> 8 * q.token_byte) & 0xFF for q in Queue}


class _Program:
    """The instruction stream of a run, decoded as far as it decodes, and its routing to the stages."""

    def __init__(self, dram: Dram, addr: int, count: int, cfg: HwConfig):
        self.addr, self.count = addr, count
        self.words: list[int] = []
        self.insns: list[Insn] = []
        self.by_stage: list[list[int]] = [[], [], []]
        try:
            raw = bytes(dram.view(addr, count * cfg.insn_bytes))
        except DramError:
            return
        for i in range(count):
            word = int.from_bytes(raw[16 * i : 16 * i + 16], "little")
            self.words.append(word)
            try:
                insn = decode(word)
            except IsaError:
                break
            self.insns.append(insn)
            self.by_stage[insn.stage].append(i)

    def global_index(self, stage: Stage, k: int) -> int:
        return self.by_stage[stage][k]

    def decode_error(self, index: int) -> str:
        try:
            decode(self.words[index])
        except IsaError as e:
            return f"instruction {index}: {e}"
        return f"instruction {index}: rejected by the fetch unit"
