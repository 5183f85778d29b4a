"""cocotb bench of vdla_gemm_core (1x16x16): int8 dot products, two-cycle latency, one per cycle; the depthwise
mode (each multiplier pair with an input of its own)."""

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

BI = BO = 16


def pack_bytes(a):
    return int.from_bytes(np.ascontiguousarray(a, np.int8).tobytes(), "little")


def unpack_sums(word):
    raw = int(word).to_bytes(BO * 4, "little")
    return np.frombuffer(raw, np.int32)


@cocotb.test()
async def back_to_back_products(dut):
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    rng = np.random.default_rng(5)
    cases = [
        (np.full(BI, -128, np.int8), np.full((BO, BI), -128, np.int8)),  # the largest sum
        (np.full(BI, -128, np.int8), np.full((BO, BI), 127, np.int8)),
    ]
    cases += [
        (rng.integers(-128, 128, BI, dtype=np.int8), rng.integers(-128, 128, (BO, BI), dtype=np.int8))
        for _ in range(30)
    ]
    dut.valid_i.value, dut.dw_i.value = 0, 0
    await FallingEdge(dut.clk_i)
    expected = []
    for k in range(len(cases) + 1):
        if k < len(cases):
            inp, wgt = cases[k]
            dut.inp_i.value, dut.wgt_i.value, dut.valid_i.value = pack_bytes(inp), pack_bytes(wgt), 1
            expected.append(wgt.astype(np.int64) @ inp.astype(np.int64))
        else:
            dut.valid_i.value = 0
        await FallingEdge(dut.clk_i)
        if k >= 1:  # two register stages: case k-1 is visible after the second rising edge
            np.testing.assert_array_equal(unpack_sums(dut.sum_o.value), expected[k - 1])


@cocotb.test()
async def depthwise_inputs(dut):
    """The depthwise mode, back to back with and without it: pair (o, i) multiplies its own input dwa[o][i]
    (lanes o and o + 8) in place of the shared inp[i]; the weights are the GEMM's."""
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    rng = np.random.default_rng(9)
    dut.valid_i.value = 0
    await FallingEdge(dut.clk_i)
    expected = []
    for k in range(13):
        if k < 12:
            dw = k % 3 != 2
            inp = rng.integers(-128, 128, BI, dtype=np.int8)
            dwa = rng.integers(-128, 128, (BO // 2, BI), dtype=np.int8)
            wgt = rng.integers(-128, 128, (BO, BI), dtype=np.int8)
            if k == 0:
                dwa[:], wgt[:] = -128, -128  # the largest sums
            x = np.concatenate([dwa, dwa]) if dw else np.broadcast_to(inp, (BO, BI))
            expected.append((wgt.astype(np.int64) * x.astype(np.int64)).sum(axis=1))
            dut.inp_i.value, dut.wgt_i.value, dut.dwa_i.value = pack_bytes(inp), pack_bytes(wgt), pack_bytes(dwa)
            dut.dw_i.value, dut.valid_i.value = int(dw), 1
        else:
            dut.valid_i.value = 0
        await FallingEdge(dut.clk_i)
        if k >= 1:
            np.testing.assert_array_equal(unpack_sums(dut.sum_o.value), expected[k - 1])
