"""What went wrong in a run, read from the accelerator's registers: the one diagnosis of every backend
that drives the RTL through its register map (``rtl`` on Verilator, ``pynq`` on a board).

After a run ends on an error (STATUS.ERROR) or does not end in time, :class:`Diagnosis` reads STATUS,
ERROR_INSN, TOKENS, CMD_QUEUES, STAGE_STATE and the per-stage instruction counters through a 32-bit
read function and turns them into the runtime's backend-neutral errors, naming each stage, the
instruction it executes or waits to start (disassembled) and the queue it waits for, like the simulator.
"""

from __future__ import annotations

from collections.abc import Callable

import vdla.runtime.registers as R
from vdla.config import HwConfig
from vdla.isa import FinishInsn, Insn, IsaError, Queue, Stage, decode, pops_of, pushes_of
from vdla.isa.asm import disassemble_insn
from vdla.isa.validate import check_insn
from vdla.runtime.backend import DeadlockError, FaultError, RunError
from vdla.runtime.counters import STAGES, Counters
from vdla.runtime.dram import Dram, DramError

State = tuple[list[int], list[int], int, int]  # started per stage, command queues, TOKENS, STAGE_STATE


def token_counts(tokens: int) -> dict[Queue, int]:
    """Each queue's token count, from the TOKENS register."""
    return {q: (tokens >> 8 * q.token_byte) & 0xFF for q in Queue}


class Program:
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


class Diagnosis:
    """Reads the accelerator's state through ``read32(offset)`` and explains it.

    ``bad_access()`` (optional) returns the first DRAM address outside the region the accelerator touched,
    where the platform knows it (the simulation harness does, a board does not).
    """

    def __init__(self, cfg: HwConfig, read32: Callable[[int], int], bad_access: Callable[[], int | None] = None):
        self.cfg, self.read32 = cfg, read32
        self.bad_access = bad_access or (lambda: None)

    def error(self, status: int, program: Program, dram: Dram) -> RunError:
        """The error a run that ended with STATUS.ERROR raises."""
        code = R.error_name(R.get_field(status, "STATUS", "ERROR_CODE"))
        unit = R.ERROR_UNITS[R.get_field(status, "STATUS", "ERROR_UNIT")]
        index = self.read32(R.offset("ERROR_INSN"))
        if code == "DEADLOCK":
            if not program.insns or not isinstance(program.insns[-1], FinishInsn):
                return FaultError("the program does not end with FINISH")
            return DeadlockError("deadlock: no stage can proceed\n" + self.describe(program))
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
        stage = Stage[unit.upper()]
        if index >= len(program.by_stage[stage]) and len(program.insns) < len(program.words):
            # the stopping instruction lies past the first one the host cannot decode (a field the hardware checks)
            return FaultError(f"{program.decode_error(len(program.insns))} (rejected by the hardware: {code})")
        i = program.global_index(stage, index)
        insn = program.insns[i]
        where = f"instruction {i} ({disassemble_insn(insn)})"
        problems = check_insn(insn, self.cfg, dram.range)
        if code == "INDEX":
            return FaultError(f"{where}: a micro-op index lies outside its buffer (stopped by the hardware)")
        if code == "HAZARD":
            return FaultError(
                f"{where}: pipelined {insn.alu_opcode.name}: an iteration reads the ACC row the one before it writes "
                "(stopped by the hardware: drop pipe or reorder the rows)"
            )
        if code == "BUS" and not problems:
            problems = [
                f"DRAM access at {self.bad_access() or 0:#x} outside the region "
                f"[{dram.base:#x}, {dram.base + dram.size:#x})"
            ]
        return FaultError(f"{where}: {'; '.join(problems) or 'rejected by the hardware (' + code + ')'}")

    def stage_state(self) -> State:
        """Instructions each stage has started, command-queue occupancy, TOKENS and STAGE_STATE."""
        done = [self.read32(R.offset(R.STAGE_INSN_REGS[s])) for s in STAGES]
        queued = self.read32(R.offset("CMD_QUEUES"))
        return (
            done,
            [(queued >> 8 * s) & 0xFF for s in range(3)],
            self.read32(R.offset("TOKENS")),
            self.read32(R.offset("STAGE_STATE")),
        )

    def running(self, program: Program, counters: Counters | None, snapshot: State | None = None) -> str:
        """The earliest instruction (in program order) that a stage is executing or waiting to start
        (``counters``: the run's, for the cycle when every stage has finished, read now when None;
        ``snapshot``: a :meth:`stage_state` taken earlier, read now when None)."""
        started, _, _, state = snapshot or self.stage_state()
        candidates = []
        for s in Stage:
            k = started[s] - 1 if state >> s & 1 else started[s]
            if k < len(program.by_stage[s]):
                candidates.append((program.by_stage[s][k], s))
        if not candidates:
            cycles = counters.cycles if counters is not None else R.read_counters(self.read32).cycles
            return f"cycle {cycles}"
        i, s = min(candidates)
        return f"instruction {i} ({disassemble_insn(program.insns[i])}) on the {s.name.lower()} stage"

    def describe(self, program: Program, snapshot: State | None = None) -> str:
        """Each stage's state, like the simulator's deadlock report (from ``snapshot``, or read now)."""
        started, queued, tokens, state = snapshot or self.stage_state()
        count = token_counts(tokens)
        depth, token_depth = self.cfg.timing.cmd_queue_depth, self.cfg.timing.token_queue_depth
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
                blocking = [t.name.lower() for t in Stage if queued[t] >= depth]
                why = (
                    f"waiting for instruction fetch, which is blocked by the full {blocking[0]} command queue "
                    f"(depth {depth})"
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
                        if count[q] >= token_depth
                    ),
                    "ready",
                )
            lines.append(f"  {name} stage: stuck at instruction {i} ({disassemble_insn(insn)}), {why}")
        queued_tokens = ", ".join(f"{q.label}={count[q]}" for q in Queue)
        return "\n".join(lines) + f"\n  tokens in queues: {queued_tokens}"
