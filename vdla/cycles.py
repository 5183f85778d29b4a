"""The cycle model: how long each instruction occupies its stage, and the two DRAM bus channels.

It depends only on the configuration and the ISA: every parameter comes from
:class:`vdla.config.Timing`. The simulator (``vdla/runtime/sim``) runs it instruction by instruction,
the compiler's cost model (``vdla/compiler/costmodel.py``) uses it per operation, and the RTL
implements the same timing (``benchmarks/calibration.py`` measures the agreement).
"""

from __future__ import annotations

from vdla.config import HwConfig
from vdla.isa import AluInsn, EpiInsn, FinishInsn, GemmInsn, Insn, MemInsn, MemType, elem_bytes


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
        if isinstance(insn, AluInsn):  # one ACC read port: a second operand costs alu_ii cycles per iteration
            ii = 1 if insn.reset or insn.use_imm else t.alu_ii
            return t.alu_setup + insn.iterations * ii + t.alu_pipeline
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
