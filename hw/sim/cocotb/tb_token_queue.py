"""cocotb bench of vdla_token_queue (DEPTH=4): counts, saturation, simultaneous push and pop.

Inputs are driven and outputs sampled on the falling edge of the clock."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

DEPTH = 4


async def reset(dut):
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    dut.push_i.value = 0
    dut.pop_i.value = 0
    dut.clear_i.value = 0
    dut.rst_ni.value = 0
    await ClockCycles(dut.clk_i, 2)
    dut.rst_ni.value = 1
    await FallingEdge(dut.clk_i)


async def step(dut, push, pop):
    dut.push_i.value = push
    dut.pop_i.value = pop
    await FallingEdge(dut.clk_i)
    dut.push_i.value = 0
    dut.pop_i.value = 0


@cocotb.test()
async def fills_and_drains(dut):
    await reset(dut)
    assert dut.avail_o.value == 0 and dut.room_o.value == 1
    for n in range(1, DEPTH + 1):
        await step(dut, 1, 0)
        assert int(dut.count_o.value) == n
    assert dut.room_o.value == 0
    await step(dut, 1, 0)  # a push into a full queue is dropped
    assert int(dut.count_o.value) == DEPTH
    for n in range(DEPTH - 1, -1, -1):
        await step(dut, 0, 1)
        assert int(dut.count_o.value) == n
    await step(dut, 0, 1)  # a pop of an empty queue is ignored
    assert int(dut.count_o.value) == 0 and dut.avail_o.value == 0


@cocotb.test()
async def random_traffic_matches_a_counter(dut):
    await reset(dut)
    rng = random.Random(7)
    model = 0
    for _ in range(300):
        push, pop = rng.random() < 0.5, rng.random() < 0.5
        model += (push and model < DEPTH) - (pop and model > 0)
        await step(dut, int(push), int(pop))
        assert int(dut.count_o.value) == model
        assert int(dut.avail_o.value) == (model > 0) and int(dut.room_o.value) == (model < DEPTH)


@cocotb.test()
async def clear_empties_the_queue(dut):
    await reset(dut)
    for _ in range(3):
        await step(dut, 1, 0)
    assert int(dut.count_o.value) == 3
    dut.clear_i.value = 1
    dut.push_i.value = 1  # a push in the clearing cycle is lost with the rest
    await FallingEdge(dut.clk_i)
    dut.clear_i.value = 0
    dut.push_i.value = 0
    assert int(dut.count_o.value) == 0 and dut.avail_o.value == 0 and dut.room_o.value == 1
