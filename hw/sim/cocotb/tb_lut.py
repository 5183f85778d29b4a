"""cocotb bench of vdla_lut (LANES=4, NB=8): beats of 8 entries written at random beat addresses, every lane
looking up random bytes (and all 256) combinationally, against a 256-entry numpy model. Driven and sampled on
the falling edge: a write lands at the rising edge, a lookup reads the table as it is."""

import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, Timer

LANES, NB = 4, 8


def lookups(dut, idx):
    dut.idx_i.value = sum(v << (8 * i) for i, v in enumerate(idx))


async def check(dut, table, idx):
    lookups(dut, idx)
    await Timer(1, unit="ns")
    word = int(dut.data_o.value)
    got = [(word >> (8 * i)) & 0xFF for i in range(LANES)]
    assert got == [int(table[v]) for v in idx], (idx, got)


@cocotb.test()
async def writes_and_lookups_match_the_model(dut):
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    rng = random.Random(5)
    table = np.zeros(256, np.uint8)
    dut.we_i.value = 0
    dut.rst_ni.value = 0
    await FallingEdge(dut.clk_i)
    dut.rst_ni.value = 1
    # fill the table beat by beat, one beat per cycle
    for beat in range(256 // NB):
        data = [rng.randrange(256) for _ in range(NB)]
        dut.we_i.value, dut.waddr_i.value = 1, beat
        dut.wdata_i.value = sum(v << (8 * j) for j, v in enumerate(data))
        table[beat * NB : (beat + 1) * NB] = data
        await FallingEdge(dut.clk_i)
    dut.we_i.value = 0
    for base in range(0, 256, LANES):
        await check(dut, table, list(range(base, base + LANES)))
    # random partial rewrites with lookups in the same cycles (a lookup sees the table before the write)
    for _ in range(200):
        idx = [rng.randrange(256) for _ in range(LANES)]
        await check(dut, table, idx)
        if rng.random() < 0.5:
            beat, data = rng.randrange(256 // NB), [rng.randrange(256) for _ in range(NB)]
            dut.we_i.value, dut.waddr_i.value = 1, beat
            dut.wdata_i.value = sum(v << (8 * j) for j, v in enumerate(data))
            table[beat * NB : (beat + 1) * NB] = data
        else:
            dut.we_i.value = 0
        await FallingEdge(dut.clk_i)
    dut.we_i.value = 0
    await FallingEdge(dut.clk_i)
    for base in range(0, 256, LANES):
        await check(dut, table, list(range(base, base + LANES)))
