"""cocotb bench of the whole accelerator (vdla_top, block8 preset): small programs built with the runtime
API run from an AXI memory model, driven through the AXI4-Lite registers; the memory afterwards must equal
the simulator's, and the counters must agree."""

import cocotb
import numpy as np
from axi_mem import AxiMemory
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from vdla.isa import AluOp, MemType, Stage, encode_program
from vdla.runtime import Device
from vdla.runtime import registers as R

WINDOW = 1 << 18  # bytes of DRAM the programs use


class Lite:
    """AXI4-Lite master on the s_axil_* port, driven on the falling edge."""

    def __init__(self, dut):
        self.dut = dut
        dut.s_axil_awvalid.value = dut.s_axil_wvalid.value = dut.s_axil_arvalid.value = 0
        dut.s_axil_bready.value = dut.s_axil_rready.value = 1
        dut.s_axil_wstrb.value = 0xF

    async def write(self, offset, value):
        d = self.dut
        d.s_axil_awaddr.value, d.s_axil_wdata.value = offset, value
        d.s_axil_awvalid.value = d.s_axil_wvalid.value = 1
        await ReadOnly()
        while not int(d.s_axil_awready.value):
            await FallingEdge(d.clk_i)
            await ReadOnly()
        await FallingEdge(d.clk_i)
        d.s_axil_awvalid.value = d.s_axil_wvalid.value = 0
        await FallingEdge(d.clk_i)

    async def read(self, offset):
        d = self.dut
        d.s_axil_araddr.value = offset
        d.s_axil_arvalid.value = 1
        await FallingEdge(d.clk_i)
        d.s_axil_arvalid.value = 0
        await ReadOnly()
        value = int(d.s_axil_rdata.value)
        await FallingEdge(d.clk_i)
        return value


def matmul_program(dev):
    """One tile of C = (A @ B^T) >> 6 with a padded input row, and the output buffer."""
    cfg = dev.cfg
    rng = np.random.default_rng(9)
    kb, nb, rows = 2, 2, 4
    a = dev.array(rng.integers(-128, 128, (rows, kb, cfg.block_in), dtype=np.int8))
    b = dev.array(rng.integers(-128, 128, (nb, kb, cfg.block_out, cfg.block_in), dtype=np.int8))
    c = dev.alloc(rows * nb * cfg.out_elem_bytes)
    cmd = dev.commands()
    cmd.load(MemType.INP, 0, a, 0, rows, kb, kb, pad=(1, 0, 0, 0))  # a zero row first
    cmd.load(MemType.WGT, 0, b, 0, nb, kb, kb)
    cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
    cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
    uops = [(r * nb, (r + 1) * kb, 0) for r in range(rows)]
    cmd.gemm(uops, iter_out=nb, dst_factor=(1, 0), reset=True)
    cmd.gemm(uops, iter_out=nb, iter_in=kb, dst_factor=(1, 0), src_factor=(0, 1), wgt_factor=(kb, 1))
    cmd.alu(AluOp.SHR, [(0, 0)], iter_out=rows * nb, dst_factor=(1, 0), imm=6)
    cmd.alu(AluOp.MAX, [(0, 1)], iter_out=rows * nb - 1, dst_factor=(1, 0), src_factor=(1, 0))
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(0, c, 0, rows, nb, nb)
    return cmd.finish(), c


@cocotb.test()
async def matmul_tile_matches_the_simulator(dut):
    dev = Device("block8")
    insns, out = matmul_program(dev)
    code = dev.array(np.frombuffer(encode_program(insns), np.uint8))
    assert code.addr + code.nbytes - dev.dram.base <= WINDOW
    mem = bytearray(dev.dram.mem[:WINDOW].tobytes())
    sim = dev.backend.run(dev.dram, code.addr, len(insns)).counters

    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    dut.rst_ni.value = 0
    lite = Lite(dut)
    await ClockCycles(dut.clk_i, 3)
    dut.rst_ni.value = 1
    cocotb.start_soon(AxiMemory(dut, mem, dev.dram.base, latency=8, prefix="m_axi_").run())
    await FallingEdge(dut.clk_i)
    assert await lite.read(R.offset("CONFIG_HASH")) == dev.cfg.hash
    await lite.write(R.offset("IRQ_ENABLE"), 1)
    await lite.write(R.offset("INSN_ADDR_LO"), code.addr)
    await lite.write(R.offset("INSN_COUNT"), len(insns))
    await lite.write(R.offset("CONTROL"), 1)
    for _ in range(20000):
        await FallingEdge(dut.clk_i)
        if int(dut.irq_o.value):
            break
    status = await lite.read(R.offset("STATUS"))
    assert R.get_field(status, "STATUS", "DONE") == 1 and R.get_field(status, "STATUS", "ERROR") == 0
    lo = out.addr - dev.dram.base
    assert mem[lo : lo + out.nbytes] == dev.dram.mem[lo : lo + out.nbytes].tobytes()
    assert mem == bytearray(dev.dram.mem[:WINDOW].tobytes())  # and nothing else changed
    for name, path, _ in R.COUNTERS:
        if not name.startswith(("BYTES", "GEMM", "ALU")):
            continue
        value = await lite.read(R.offset(name)) | await lite.read(R.offset(name) + 4) << 32
        head, _, attr = path.partition(".")
        expect = getattr(sim, head)[attr] if attr else getattr(sim, head)
        assert value == expect, name
