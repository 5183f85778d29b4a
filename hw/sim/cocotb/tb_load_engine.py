"""cocotb bench of vdla_load_engine: 2-D DMA reads (bursts split at MAX_BEATS=4 and at 4 KiB) and zero
padding. The engine's SRAM write offers are applied to a byte model of the buffer and compared with the
padded tile the ISA defines; every byte outside the tile must stay untouched. The engine's LOAD (a
vdla_pkg::mem_insn_t) and its AXI read channel (axi_rd_req_t, axi_rd_rsp_t) are packed structs, driven and
read as whole vectors."""

import random
from types import SimpleNamespace

import cocotb
from axi_mem import BUS, AxiMemory
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from vdla.config import load_config
from vdla.hw.rtlgen import axi_rd_structs, packed_layout
from vdla.isa import MemInsn, encode

BASE = 0x10000
SRAM_ELEMS = 4096


class Member:
    """One member of a packed-struct port, as a signal of its own. A write updates the whole vector from the
    port's copy (cocotb keeps only a signal's last write in a cycle, so the members set in one cycle all count)."""

    def __init__(self, port, lsb, bits):
        self.port, self.lsb, self.mask = port, lsb, (1 << bits) - 1

    @property
    def value(self):
        return (int(self.port.handle.value) >> self.lsb) & self.mask

    @value.setter
    def value(self, v):
        self.port.word = (self.port.word & ~(self.mask << self.lsb)) | ((int(v) & self.mask) << self.lsb)
        self.port.handle.value = self.port.word


class StructPort:
    """A packed-struct port of the DUT with its members (MSB first, as vdla.hw.rtlgen gives them) as attributes."""

    def __init__(self, handle, members):
        self.handle, self.word = handle, 0
        handle.value = 0
        for name, (lsb, bits) in packed_layout(members).items():
            setattr(self, name, Member(self, lsb, bits))


async def load(dut, mem, eb, sram_base, dram_base, y, x, stride, pads):
    """Run one LOAD; return (buffer bytes, write count, done count)."""
    dut.log_eb_i.value = eb.bit_length() - 1
    yp0, yp1, xp0, xp1 = pads
    tile = dict(sram_base=sram_base, dram_base=dram_base, y_size=y, x_size=x, x_stride=stride)
    dut.insn_i.value = encode(MemInsn(**tile, y_pad_0=yp0, y_pad_1=yp1, x_pad_0=xp0, x_pad_1=xp1))
    dut.start_i.value = 1
    await FallingEdge(dut.clk_i)
    dut.start_i.value = 0
    sram = bytearray(b"\xaa" * SRAM_ELEMS * eb)
    row_bytes = x * eb
    writes = dones = 0
    for _ in range(20000):
        await ReadOnly()  # after the memory model has driven this cycle's read data
        if int(dut.wr_valid_o.value):
            writes += 1
            idx = int(dut.wr_idx_o.value)
            if int(dut.wr_pad_o.value):
                sram[idx * eb : (idx + 1) * eb] = bytes(eb)
            else:
                off = dut.wr_off_o.value.to_signed()
                data = int(dut.wr_data_o.value).to_bytes(BUS, "little")
                for b in range(BUS):
                    if 0 <= off + b < row_bytes:  # bytes of the beat that belong to the row
                        sram[idx * eb + off % eb + b] = data[b]
            if int(dut.done_o.value):
                dones += 1
                await FallingEdge(dut.clk_i)
                break
        await FallingEdge(dut.clk_i)
    return sram, writes, dones


def expected(mem, eb, sram_base, dram_base, y, x, stride, pads):
    yp0, yp1, xp0, xp1 = pads
    rows, cols = yp0 + y + yp1, xp0 + x + xp1
    sram = bytearray(b"\xaa" * SRAM_ELEMS * eb)
    for r in range(rows):
        for c in range(cols):
            i = sram_base + r * cols + c
            if yp0 <= r < yp0 + y and xp0 <= c < xp0 + x:
                a = (dram_base + (r - yp0) * stride + (c - xp0)) * eb - BASE
                sram[i * eb : (i + 1) * eb] = mem[a : a + eb]
            else:
                sram[i * eb : (i + 1) * eb] = bytes(eb)
    return sram, rows * cols - x * y


@cocotb.test()
async def padded_strided_tiles(dut):
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    structs = axi_rd_structs(BUS * 8, load_config().axi_addr_bits)  # the checked-in package's preset
    req = StructPort(dut.axi_rd_req_o, structs["axi_rd_req_t"])
    rsp = StructPort(dut.axi_rd_rsp_i, structs["axi_rd_rsp_t"])
    dut.halt_i.value = dut.start_i.value = 0
    dut.rst_ni.value = 0
    await ClockCycles(dut.clk_i, 2)
    dut.rst_ni.value = 1
    rsp.ar_ready.value = 1
    await FallingEdge(dut.clk_i)
    rng = random.Random(3)
    mem = bytearray(rng.randbytes(1 << 16))
    # the memory's view of the channel: the structs' members under its signal names
    port = SimpleNamespace(
        clk_i=dut.clk_i,
        arvalid=req.ar_valid,
        araddr=req.ar_addr,
        arlen=req.ar_len,
        arready=rsp.ar_ready,
        rvalid=rsp.r_valid,
        rresp=rsp.r_resp,
        rdata=rsp.r_data,
    )
    axi = AxiMemory(port, mem, BASE, latency=5, max_beats=4, write=False)
    cocotb.start_soon(axi.run())
    cases = [
        (16, 0, BASE // 16, 1, 1, 1, (0, 0, 0, 0)),
        (16, 3, BASE // 16 + 5, 3, 4, 7, (1, 2, 1, 0)),  # 2 beats per element, padding all round
        (16, 0, BASE // 16 + 250, 2, 12, 12, (0, 0, 0, 0)),  # rows across a 4 KiB boundary
        (64, 7, BASE // 64 + 3, 2, 3, 5, (2, 0, 0, 3)),  # 8 beats per element: 2 bursts each
        (4, 9, BASE // 4 + 3, 3, 5, 9, (0, 0, 0, 0)),  # sub-beat elements at odd addresses
        (16, 0, BASE // 16, 2, 2, 2, (0, 0, 2, 1)),  # left padding only in data rows
        (16, 0, BASE // 16, 3, 1, 1, (4, 4, 0, 0)),
    ]  # padding rows only
    for eb, sram_base, dram_base, y, x, stride, pads in cases:
        axi.bursts.clear()
        got, writes, dones = await load(dut, mem, eb, sram_base, dram_base, y, x, stride, pads)
        want, npads = expected(mem, eb, sram_base, dram_base, y, x, stride, pads)
        assert dones == 1
        assert got == want, (eb, sram_base, dram_base, y, x, stride, pads)
        beats = sum(b for _, b in axi.bursts)
        assert writes == beats + npads  # one write per beat, one per padding element
        row = x * eb
        per_row = [
            (((dram_base + r * stride) * eb + row - 1) // 8 - (dram_base + r * stride) * eb // 8 + 1) for r in range(y)
        ]
        assert beats == sum(per_row)
