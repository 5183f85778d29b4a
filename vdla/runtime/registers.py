"""The accelerator's AXI4-Lite register map: the single source for the RTL, the harness and the drivers.

The RTL package ``hw/rtl/vdla_pkg.sv`` and ``docs/registers.md`` are generated from the tables below (by
``vdla gen-rtl``, see :mod:`vdla.hw.rtlgen`; a test keeps them fresh). All registers are 32 bits wide at byte
offsets; each performance counter is 64 bits wide, as a LO word followed by a HI word (reading LO latches
HI, so a LO-then-HI read pair is consistent while the accelerator runs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vdla.runtime.counters import Counters

ID_MAGIC = 0x5644  # "VD", in ID[31:16]
ADDR_BITS = 9  # byte address bits decoded by the register file (the map below ends at 0x110)
SPAN = 0x1_0000  # the address window a board's block design gives the register file (hw/fpga, the pynq driver)


@dataclass(frozen=True)
class Reg:
    """One 32-bit register."""

    name: str
    offset: int
    access: str  # RW, RO, WO (write-only pulse) or W1C
    doc: str


@dataclass(frozen=True)
class Field:
    """A bit field of a register."""

    reg: str
    name: str
    lsb: int
    width: int
    doc: str


REGS = (
    Reg("CONTROL", 0x00, "RW", "write START=1 to run the program at INSN_ADDR; reads BUSY in bit 0"),
    Reg("STATUS", 0x04, "RO", "DONE, ERROR and the error cause; cleared by START"),
    Reg("IRQ", 0x08, "W1C", "interrupt-style done bit: set when the run ends (done or error), write 1 to clear"),
    Reg("IRQ_ENABLE", 0x0C, "RW", "bit 0 drives the irq output from IRQ.PENDING"),
    Reg("INSN_COUNT", 0x10, "RW", "number of 128-bit instructions to fetch"),
    Reg("INSN_ADDR_LO", 0x14, "RW", "physical byte address of the first instruction, bits 31:0 (16-byte aligned)"),
    Reg("INSN_ADDR_HI", 0x18, "RW", "physical byte address of the first instruction, bits 63:32"),
    Reg("ID", 0x1C, "RO", "identification: magic 0x5644 ('VD') in 31:16, ISA version in 15:0"),
    Reg("CONFIG_HASH", 0x20, "RO", "32-bit hash of the hardware configuration the bitstream was built for"),
    Reg("ERROR_INSN", 0x24, "RO", "index of the faulting instruction within its unit (fetch: in the program)"),
    Reg("TOKENS", 0x28, "RO", "tokens in the dependency queues: L2C 7:0, C2L 15:8, C2S 23:16, S2C 31:24"),
    Reg("CMD_QUEUES", 0x2C, "RO", "command-queue occupancy: load 7:0, compute 15:8, store 23:16"),
    Reg("FETCHED", 0x30, "RO", "instructions the fetch unit has routed to the command queues"),
    Reg("LOAD_INSNS", 0x34, "RO", "instructions the load stage has started"),
    Reg("COMPUTE_INSNS", 0x38, "RO", "instructions the compute stage has started"),
    Reg("STORE_INSNS", 0x3C, "RO", "instructions the store stage has started"),
    Reg("OPCODE_LOAD", 0x40, "RO", "LOAD instructions started (load and compute stages)"),
    Reg("OPCODE_STORE", 0x44, "RO", "STORE instructions started"),
    Reg("OPCODE_GEMM", 0x48, "RO", "GEMM instructions started"),
    Reg("OPCODE_ALU", 0x4C, "RO", "ALU instructions started"),
    Reg("OPCODE_FINISH", 0x50, "RO", "FINISH instructions started"),
    Reg("STAGE_STATE", 0x54, "RO", "per stage (load 0, compute 1, store 2): bit s busy, bit 4+s waiting on tokens"),
    Reg("OPCODE_EPI", 0x58, "RO", "EPI instructions started"),
)

FIELDS = (
    Field("CONTROL", "START", 0, 1, "write 1: start (ignored while busy); read: BUSY"),
    Field("STATUS", "DONE", 0, 1, "FINISH has completed"),
    Field("STATUS", "ERROR", 1, 1, "the run stopped on an error"),
    Field("STATUS", "ERROR_CODE", 4, 4, "cause of the error (ERR_* below)"),
    Field("STATUS", "ERROR_UNIT", 8, 2, "unit that saw it: 0 fetch, 1 load, 2 compute, 3 store"),
    Field("IRQ", "PENDING", 0, 1, "the run has ended; write 1 to clear"),
    Field("IRQ_ENABLE", "ENABLE", 0, 1, "assert the irq output while IRQ.PENDING"),
)

# The deadlock detector's window: the RTL ends a run with ERR_DEADLOCK once, for this many consecutive cycles,
# nothing executes, nothing is in flight and no stage can start (vdla_top, through vdla_pkg::DEADLOCK_WINDOW). The
# run's CYCLES count includes the window. (The simulator, which sees every stage's state, raises at once.)
DEADLOCK_WINDOW = 16

# STATUS.ERROR_CODE values
ERRORS = {
    "OPCODE": (1, "unknown opcode or memory type in the instruction stream"),
    "INSN": (2, "an instruction invalid on its stage (flags, padding, sizes, buffer bounds, micro-op range)"),
    "INDEX": (3, "a GEMM/ALU micro-op index outside its buffer"),
    "BUS": (4, "an AXI error response (a DMA outside the DRAM region)"),
    "DEADLOCK": (
        5,
        "every stage waits on a token or queue no other stage will provide (nothing executes, is in flight or can "
        f"start for {DEADLOCK_WINDOW} cycles)",
    ),
    "ALIGN": (6, "INSN_ADDR not 16-byte aligned"),
    "HAZARD": (7, "a pipelined MUL's or SQR's iteration reads the row the iteration just before it writes"),
}
ERROR_UNITS = ("fetch", "load", "compute", "store")

# 64-bit counters: (register name, Counters attribute path, description)
COUNTERS = (
    ("CYCLES", "cycles", "cycles from START to the end of the run"),
    ("LOAD_BUSY", "load.busy", "cycles the load stage executes an instruction"),
    ("LOAD_STALL", "load.stall", "cycles the load stage has an instruction but waits on tokens"),
    ("COMPUTE_BUSY", "compute.busy", "cycles the compute stage executes an instruction"),
    ("COMPUTE_STALL", "compute.stall", "cycles the compute stage has an instruction but waits on tokens"),
    ("STORE_BUSY", "store.busy", "cycles the store stage executes an instruction"),
    ("STORE_STALL", "store.stall", "cycles the store stage has an instruction but waits on tokens"),
    ("GEMM_ITERS", "gemm_iters", "multiply-accumulate GEMM uop-iterations"),
    ("GEMM_RESET_ITERS", "gemm_reset_iters", "GEMM reset uop-iterations"),
    ("ALU_ITERS", "alu_iters", "ALU uop-iterations"),
    ("BYTES_INP", "bytes_loaded.INP", "bytes loaded into the INP buffer"),
    ("BYTES_WGT", "bytes_loaded.WGT", "bytes loaded into the WGT buffer"),
    ("BYTES_UOP", "bytes_loaded.UOP", "bytes loaded into the UOP buffer"),
    ("BYTES_ACC", "bytes_loaded.ACC", "bytes loaded into the ACC buffer (32-bit)"),
    ("BYTES_ACC_8BIT", "bytes_loaded.ACC_8BIT", "bytes loaded into the ACC buffer (8-bit, sign-extended)"),
    ("BYTES_STORED", "bytes_stored", "bytes stored to DRAM"),
    ("BYTES_LUT", "bytes_loaded.LUT", "bytes loaded into the activation table"),
    ("BYTES_UOP_PRE", "bytes_loaded.UOP_PRE", "bytes loaded into the UOP buffer by the load stage (LOAD UOP_PRE)"),
)
COUNTER_BASE = 0x80
assert COUNTER_BASE + 8 * len(COUNTERS) <= 1 << ADDR_BITS, "the register map outgrew ADDR_BITS"

STAGE_INSN_REGS = {"load": "LOAD_INSNS", "compute": "COMPUTE_INSNS", "store": "STORE_INSNS"}
OPCODE_REGS = {
    "LOAD": "OPCODE_LOAD",
    "STORE": "OPCODE_STORE",
    "GEMM": "OPCODE_GEMM",
    "ALU": "OPCODE_ALU",
    "FINISH": "OPCODE_FINISH",
    "EPI": "OPCODE_EPI",
}


def offset(name: str) -> int:
    """Byte offset of a register, or of the LO word of a counter."""
    for r in REGS:
        if r.name == name:
            return r.offset
    for i, (cname, _, _) in enumerate(COUNTERS):
        if cname == name:
            return COUNTER_BASE + 8 * i
    raise KeyError(f"no register named {name!r}")


def field(reg: str, name: str) -> Field:
    return next(f for f in FIELDS if f.reg == reg and f.name == name)


def get_field(value: int, reg: str, name: str) -> int:
    """Extract a field from a register value."""
    f = field(reg, name)
    return (value >> f.lsb) & ((1 << f.width) - 1)


def error_name(code: int) -> str:
    return next((name for name, (c, _) in ERRORS.items() if c == code), f"code {code}")


def read_counters(read32: Callable[[int], int], insn_bytes: int = 0) -> Counters:
    """Build the runtime's :class:`Counters` from the registers through a 32-bit read function."""
    c = Counters(insn_bytes=insn_bytes)
    for name, path, _ in COUNTERS:
        lo = read32(offset(name))
        value = lo | read32(offset(name) + 4) << 32
        head, _, attr = path.partition(".")
        if not attr:
            setattr(c, head, value)
        elif isinstance(getattr(c, head), dict):
            getattr(c, head)[attr] = value
        else:
            setattr(getattr(c, head), attr, value)
    for stage, reg in STAGE_INSN_REGS.items():
        st = c.stage(stage)
        st.insns = read32(offset(reg))
        st.idle = c.cycles - st.busy - st.stall
    for op, reg in OPCODE_REGS.items():
        c.insn_counts[op] = read32(offset(reg))
    return c
