"""cocotb bench of vdla_regfile: the AXI4-Lite protocol and the register map of vdla/runtime/registers.py."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

from vdla.isa import ISA_VERSION
from vdla.runtime import registers as R


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    for sig in (
        "awvalid_i",
        "wvalid_i",
        "arvalid_i",
        "busy_i",
        "done_i",
        "error_i",
        "end_i",
        "error_code_i",
        "error_unit_i",
        "error_insn_i",
        "tokens_i",
        "cmd_queues_i",
        "fetched_i",
        "stage_insns_i",
        "opcode_insns_i",
        "stage_state_i",
        "counters_i",
    ):
        getattr(dut, sig).value = 0
    dut.bready_i.value = 1
    dut.rready_i.value = 1
    dut.wstrb_i.value = 0xF
    dut.rst_ni.value = 0
    await ClockCycles(dut.clk_i, 2)
    dut.rst_ni.value = 1
    await FallingEdge(dut.clk_i)


async def write(dut, name, value, strb=0xF):
    """One AXI-Lite write; returns whether START pulsed during it."""
    dut.awaddr_i.value, dut.wdata_i.value, dut.wstrb_i.value = R.offset(name), value, strb
    dut.awvalid_i.value = dut.wvalid_i.value = 1
    started = False
    for _ in range(10):
        accepted = int(dut.awready_o.value) and int(dut.wready_o.value)
        started |= bool(int(dut.start_o.value))
        await FallingEdge(dut.clk_i)
        if accepted:
            break
    dut.awvalid_i.value = dut.wvalid_i.value = 0
    assert int(dut.bvalid_o.value) == 1 and int(dut.bresp_o.value) == 0
    await FallingEdge(dut.clk_i)
    assert int(dut.bvalid_o.value) == 0
    return started


async def read(dut, offset):
    dut.araddr_i.value = offset
    dut.arvalid_i.value = 1
    while not int(dut.arready_o.value):
        await FallingEdge(dut.clk_i)
    await FallingEdge(dut.clk_i)
    dut.arvalid_i.value = 0
    assert int(dut.rvalid_o.value) == 1 and int(dut.rresp_o.value) == 0
    value = int(dut.rdata_o.value)
    await FallingEdge(dut.clk_i)
    return value


@cocotb.test()
async def identification_and_control(dut):
    await setup(dut)
    ident = await read(dut, R.offset("ID"))
    assert ident >> 16 == R.ID_MAGIC and ident & 0xFFFF == ISA_VERSION  # the package's default
    assert await read(dut, R.offset("CONFIG_HASH")) == 0x12345678
    await write(dut, "INSN_COUNT", 77)
    await write(dut, "INSN_ADDR_LO", 0x10002000)
    await write(dut, "INSN_ADDR_HI", 0xAB)
    await write(dut, "INSN_COUNT", 0x0100, strb=0x2)  # byte lane 1 only
    assert await read(dut, R.offset("INSN_COUNT")) == 0x14D
    addr_mask = (1 << len(dut.insn_addr_o)) - 1  # the preset's AXI_ADDR_W: 32 on xc7, 49 on ZU+
    assert int(dut.insn_addr_o.value) == 0xAB_10002000 & addr_mask and int(dut.insn_count_o.value) == 0x14D
    assert await write(dut, "CONTROL", 1)  # START pulses when idle
    dut.busy_i.value = 1
    assert not await write(dut, "CONTROL", 1)  # and is ignored while busy
    assert await read(dut, R.offset("CONTROL")) == 1


@cocotb.test()
async def status_and_interrupt(dut):
    await setup(dut)
    await write(dut, "IRQ_ENABLE", 1)
    dut.error_i.value, dut.error_code_i.value, dut.error_unit_i.value = 1, R.ERRORS["BUS"][0], 3
    dut.end_i.value = 1
    await FallingEdge(dut.clk_i)
    dut.end_i.value = 0
    assert int(dut.irq_o.value) == 1
    status = await read(dut, R.offset("STATUS"))
    assert R.get_field(status, "STATUS", "ERROR") == 1
    assert R.error_name(R.get_field(status, "STATUS", "ERROR_CODE")) == "BUS"
    assert R.ERROR_UNITS[R.get_field(status, "STATUS", "ERROR_UNIT")] == "store"
    await write(dut, "IRQ", 1)  # write 1 to clear
    assert int(dut.irq_o.value) == 0 and await read(dut, R.offset("IRQ")) == 0


@cocotb.test()
async def counters_read_as_consistent_pairs(dut):
    await setup(dut)
    n = len(R.COUNTERS)
    values = [(0x1111_0000 + i) << 32 | (0x2222_0000 + i) for i in range(n)]
    dut.counters_i.value = sum(v << (64 * i) for i, v in enumerate(values))
    dut.stage_insns_i.value = 5 << 32 | 3
    for i, (name, _, _) in enumerate(R.COUNTERS):
        lo = await read(dut, R.offset(name))
        dut.counters_i.value = 0  # the HI word read next must be the one latched with LO
        hi = await read(dut, R.offset(name) + 4)
        dut.counters_i.value = sum(v << (64 * k) for k, v in enumerate(values))
        assert hi << 32 | lo == values[i], name
    assert await read(dut, R.offset("COMPUTE_INSNS")) == 5
    assert await read(dut, R.offset("LOAD_INSNS")) == 3
