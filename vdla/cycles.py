"""The cycle model: how long each instruction occupies its stage, and the two DRAM bus channels.

It depends only on the configuration and the ISA: every parameter comes from
:class:`vdla.config.Timing`. The simulator (``vdla/runtime/sim``) runs it instruction by instruction,
the compiler's cost model (``vdla/compiler/costmodel.py``) uses it per operation, and the RTL
implements the same timing (``benchmarks/calibration.py`` measures the agreement).
"""

from __future__ import annotations

from vdla.config import HwConfig, Timing
from vdla.isa import AluInsn, AluOp, EpiInsn, FinishInsn, GemmInsn, Insn, MemInsn, MemType, elem_bytes


def alu_ii(t: Timing, op: AluOp, use_imm: bool, reset: bool = False) -> int:
    """Cycles per uop-iteration of an ALU instruction: ``alu_ii`` when it reads ``ACC[src]`` as well as
    ``ACC[dst]`` (one ACC read port) or is a MUL (two lanes share each multiplier), else 1.

    A reset reads one row (``op(0, v)``) and a MUL with reset is 0 whatever ``v`` is, so resets take 1. The RTL
    (``vdla_loop_seq``) issues by the same rule; the compiler's epilogue cost uses this function too.
    """
    if reset:
        return 1
    return t.alu_ii if not use_imm or op == AluOp.MUL else 1


def alu_cycles(t: Timing, op: AluOp, use_imm: bool, reset: bool, iterations: int) -> int:
    """Cycles of an ALU instruction: setup, ``alu_ii`` per iteration, the pipeline drain, and for a MUL that is
    not a reset ``alu_mul_latency`` more (its upper lanes are multiplied one stage later)."""
    mul = op == AluOp.MUL and not reset
    return t.alu_setup + iterations * alu_ii(t, op, use_imm, reset) + t.alu_pipeline + mul * t.alu_mul_latency


def burst_beats(addr: int, nbytes: int, bus_bytes: int, max_beats: int) -> tuple[int, int]:
    """(beats, bursts) of an AXI transfer of ``nbytes`` at ``addr``: split at 4 KiB and max_beats."""
    beats = bursts = 0
    end = addr + nbytes
    while addr < end:
        limit = min(end, (addr // 4096 + 1) * 4096, (addr // bus_bytes + max_beats) * bus_bytes)
        beats += (limit - 1) // bus_bytes - addr // bus_bytes + 1
        bursts += 1
        addr = limit
    return beats, bursts


def transfer_shape(insn: MemInsn, cfg: HwConfig) -> tuple[int, int]:
    """(beats, bursts) of all rows of a LOAD/STORE."""
    eb = elem_bytes(cfg, insn.mem_type)
    row_bytes = insn.x_size * eb
    beats = bursts = 0
    t = cfg.timing
    for r in range(insn.y_size):
        b, n = burst_beats((insn.dram_base + r * insn.x_stride) * eb, row_bytes, cfg.bus_bytes, t.max_burst_beats)
        beats, bursts = beats + b, bursts + n
    return beats, bursts


class CycleModel:
    """Stage occupancy of each instruction, with shared read and write channels."""

    def __init__(self, cfg: HwConfig):
        self.cfg, self.t = cfg, cfg.timing
        self.read_free = 0  # first cycle the AXI read data channel is free
        self.write_free = 0

    def duration(self, insn: Insn, start: int) -> int:
        """Cycles from ``start`` until the instruction completes (reserves bus time as a side effect)."""
        t = self.t
        if isinstance(insn, GemmInsn):
            return t.gemm_setup + insn.iterations + t.gemm_pipeline
        if isinstance(insn, AluInsn):
            return alu_cycles(t, insn.alu_opcode, insn.use_imm, insn.reset, insn.iterations)
        if isinstance(insn, FinishInsn | EpiInsn) or (isinstance(insn, MemInsn) and insn.is_nop):
            return t.nop_cycles
        beats, bursts = transfer_shape(insn, self.cfg)
        data = beats + bursts * t.dma_row_overhead
        if insn.store:
            begin = max(start + t.dma_setup, self.write_free)
            self.write_free = begin + data
            return begin + data + t.dram_write_latency - start
        begin = max(start + t.dma_setup + t.dram_read_latency, self.read_free)
        self.read_free = begin + data
        pads = insn.sram_elems - insn.x_size * insn.y_size if insn.mem_type != MemType.UOP else 0
        return begin + data + pads * t.dma_pad_cycles - start
