"""cocotb bench of vdla_load_engine: 2-D DMA reads (bursts split at MAX_BEATS=4 and at 4 KiB) and zero
padding. The engine's SRAM write offers are applied to a byte model of the buffer and compared with the
padded tile the ISA defines; every byte outside the tile must stay untouched."""

import random

import cocotb
from axi_mem import AxiMemory
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

BASE = 0x10000
SRAM_ELEMS = 4096


async def load(dut, mem, eb, sram_base, dram_base, y, x, stride, pads):
    """Run one LOAD; return (buffer bytes, write count, done count)."""
    log_eb = eb.bit_length() - 1
    dut.log_eb_i.value, dut.sram_base_i.value, dut.dram_base_i.value = log_eb, sram_base, dram_base
    dut.y_size_i.value, dut.x_size_i.value, dut.x_stride_i.value = y, x, stride
    dut.y_pad_0_i.value, dut.y_pad_1_i.value, dut.x_pad_0_i.value, dut.x_pad_1_i.value = pads
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
                data = int(dut.wr_data_o.value).to_bytes(8, "little")
                for b in range(8):
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
    dut.halt_i.value = dut.start_i.value = dut.arready_i.value = 0
    dut.rst_ni.value = 0
    await ClockCycles(dut.clk_i, 2)
    dut.rst_ni.value = 1
    dut.arready_i.value = 1
    await FallingEdge(dut.clk_i)
    rng = random.Random(3)
    mem = bytearray(rng.randbytes(1 << 16))
    names = {
        "arready": "arready_i",
        "arvalid": "arvalid_o",
        "araddr": "araddr_o",
        "arlen": "arlen_o",
        "rvalid": "rvalid_i",
        "rdata": "rdata_i",
        "rresp": "rresp_i",
    }
    axi = AxiMemory(dut, mem, BASE, latency=5, max_beats=4, write=False, names=names)
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
