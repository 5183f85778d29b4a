"""The ``rtl`` backend: programs run on the Verilated RTL, cycle by cycle, against the device's DRAM.

The driver side of a run is what a board driver does: write INSN_ADDR/INSN_COUNT, START, wait for the
interrupt, read STATUS and the counters. Errors the hardware reports (and the harness's cycle limit) are
raised as the runtime's backend-neutral errors (:mod:`vdla.runtime.backend`), with the simulator's
messages naming the instruction and the stage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import vdla.runtime.registers as R
from vdla.config import HwConfig
from vdla.hw.toolchain import BUILD_ROOT
from vdla.isa.asm import disassemble_insn
from vdla.runtime.backend import BackendError, CycleLimitError, RunResult, TokenError
from vdla.runtime.counters import STAGES, TimelineEntry
from vdla.runtime.diagnosis import Diagnosis, Program, token_counts
from vdla.runtime.dram import Dram
from vdla.runtime.rtl.harness import Harness
from vdla.runtime.rtl.verilate import build

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
        self.diagnosis = Diagnosis(cfg, self.harness.read, self.harness.bad_access)

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
        progress: Callable[[int], None] | None = None,
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
            if progress is not None:
                progress(h.cycle)
        program = Program(dram, insn_addr, insn_count, self.cfg)
        counters = R.read_counters(h.read, insn_bytes=insn_count * self.cfg.insn_bytes)
        status = h.read(R.offset("STATUS"))
        if R.get_field(status, "STATUS", "ERROR"):
            raise self.diagnosis.error(status, program, dram)
        if not ended or counters.cycles > limit:
            raise CycleLimitError(
                f"cycle limit {limit} reached at {self.diagnosis.running(program, counters)}"
                + "\n"
                + self.diagnosis.describe(program)
            )
        count = token_counts(h.read(R.offset("TOKENS")))
        leftover = {q.label: n for q, n in count.items() if n}
        if leftover:
            raise TokenError(f"the program ended with tokens left in queues: {leftover}")
        return RunResult(counters, self._timeline(program) if timeline else [], time.perf_counter() - t0)

    def _timeline(self, program: Program) -> list[TimelineEntry]:
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
