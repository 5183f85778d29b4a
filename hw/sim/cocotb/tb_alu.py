"""cocotb bench of vdla_alu (LANES=4): every opcode on random and edge-case operands, against the
simulator's golden semantics (vdla.runtime.sim.semantics). Driven and sampled on the falling edge.

Every operation gives its result the cycle after en_i. A MUL takes two cycles: mul_en_i with the operands on
ma_i and mb_i (the partial products are registered), then en_i with other operands on a and b (MUL's second
cycle reads only what it registered); an SQR likewise, its operand a on ma_i and mb_i both (as the
read-modify-write gives it); an LSUM likewise, its operand on b_i in the first cycle (the four partial sums
registered), its sum in every lane; the bench then changes the inputs without en_i and checks the result
holds. The OUT path's multiply (omul_en_i) gives its rounded product on ores_o while res_o takes ADDs. The
shift controls ctl_i, which the read-modify-write forms from b before the ALU's cycle, come from lane_ctl
(the documented semantics of vdla_pkg::alu_lane_ctl); the whole-accelerator tests check that function."""

import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from vdla.isa import AluOp
from vdla.runtime.sim.semantics import _alu_apply

LANES = 4
EDGES = [0, 1, -1, 31, 32, -31, -32, 40, -40, 127, -128, 0x7FFFFFFF, -0x80000000, 0x7F80, 0x1234ABCD]


def lane_ctl(op, b):
    """vdla_pkg::alu_lane_ctl_t of one lane, packed {rs[4:0], ls[4:0], left, relu}: SHR/RSHR's shift s = b
    clamped to [-31, 31] (right by max(s, 0), left by -s when s < 0), REQ's right shift b[4:0] and relu b[5]."""
    s = max(-31, min(31, b))
    rs = b & 31 if op == AluOp.REQ else max(s, 0)
    left = op != AluOp.REQ and s < 0
    return rs << 7 | (-s & 31) << 2 | left << 1 | (b >> 5 & 1)


def golden(op, a, b, shift):
    """The simulator's result of ``op`` on the lanes ``a`` and ``b``: one row of LANES lanes (LSUM sums them)."""
    row = (1, LANES)
    a, b = np.array(a, np.int64).reshape(row), np.array(b, np.int64).reshape(row)
    return _alu_apply(op, a, b, shift).ravel().tolist()


def pack_ctl(op, b):
    return sum(lane_ctl(op, v) << (12 * i) for i, v in enumerate(b))


def pack(values):
    return sum((v & 0xFFFFFFFF) << (32 * i) for i, v in enumerate(values))


def unpack(word):
    return [((word >> (32 * i)) & 0xFFFFFFFF) - ((word >> (32 * i + 31) & 1) << 32) for i in range(LANES)]


@cocotb.test()
async def every_opcode_matches_the_golden_model(dut):
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    rng = random.Random(11)
    dut.en_i.value = 0
    dut.mul_en_i.value = 0
    dut.omul_en_i.value = 0
    dut.zero_i.value = 0
    dut.mul_shift_i.value = 0
    dut.ctl_i.value = 0
    dut.clip_a_i.value = 0
    await FallingEdge(dut.clk_i)
    muls = 0
    two_cycle = (AluOp.MUL, AluOp.SQR, AluOp.LSUM)
    for op in AluOp:
        for _ in range(40):
            a = [
                rng.choice(EDGES) if rng.random() < 0.3 else rng.randint(-(1 << 31), (1 << 31) - 1)
                for _ in range(LANES)
            ]
            b = [
                rng.choice(EDGES) if rng.random() < 0.5 else rng.randint(-(1 << 31), (1 << 31) - 1)
                for _ in range(LANES)
            ]
            shift = rng.choice([0, 1, 31, 32, 62, 63, rng.randint(0, 63)])
            dut.op_i.value, dut.a_i.value, dut.b_i.value, dut.en_i.value = int(op), pack(a), pack(b), 1
            dut.ctl_i.value, dut.mul_shift_i.value = pack_ctl(op, b), shift
            if op in two_cycle:  # first cycle: the partial products (sums); second: the result from them alone
                dut.ma_i.value, dut.mb_i.value = pack(a), pack(a if op == AluOp.SQR else b)
                dut.en_i.value, dut.mul_en_i.value = 0, 1
                await FallingEdge(dut.clk_i)
                dut.en_i.value, dut.mul_en_i.value = 1, 0
                dut.a_i.value, dut.b_i.value = pack([11] * LANES), pack([13] * LANES)
                dut.ma_i.value, dut.mb_i.value = pack([5] * LANES), pack([6] * LANES)
            await FallingEdge(dut.clk_i)
            expect = golden(op, a, b, shift)
            assert unpack(int(dut.res_o.value)) == expect, (op.name, a, b, shift)
            if op in two_cycle:  # other inputs without en_i: the result holds
                dut.en_i.value = 0
                dut.a_i.value, dut.b_i.value, dut.mul_shift_i.value = pack([7] * LANES), pack([-3] * LANES), 5
                await FallingEdge(dut.clk_i)
                assert unpack(int(dut.res_o.value)) == expect, (a, b, shift)
                muls += 1
    assert muls == 40 * len(two_cycle)


@cocotb.test()
async def zero_and_hold(dut):
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    await FallingEdge(dut.clk_i)
    dut.op_i.value, dut.a_i.value, dut.b_i.value, dut.en_i.value = int(AluOp.ADD), pack([1, 2, 3, 4]), 0, 1
    dut.zero_i.value, dut.mul_shift_i.value, dut.ctl_i.value, dut.clip_a_i.value = 0, 0, 0, 0
    dut.mul_en_i.value, dut.omul_en_i.value = 0, 0
    await FallingEdge(dut.clk_i)
    assert unpack(int(dut.res_o.value)) == [1, 2, 3, 4]
    dut.en_i.value = 0  # disabled: the result holds
    dut.a_i.value = pack([9, 9, 9, 9])
    await FallingEdge(dut.clk_i)
    assert unpack(int(dut.res_o.value)) == [1, 2, 3, 4]
    dut.en_i.value, dut.zero_i.value = 1, 1
    await FallingEdge(dut.clk_i)
    assert unpack(int(dut.res_o.value)) == [0, 0, 0, 0]
    # a MUL: its reset comes with a zero operand (op(0, imm) reads a = 0) and writes zeros, its rounding half
    # included; zero_i and the shift are taken in the first cycle, not read in the second
    dut.op_i.value, dut.b_i.value, dut.mb_i.value = int(AluOp.MUL), pack([2, 2, 2, 2]), pack([2, 2, 2, 2])
    for zero, a, shift, expect in ((0, [5, 6, 7, 8], 1, [5, 6, 7, 8]), (1, [0] * 4, 5, [0] * 4)):
        dut.a_i.value, dut.ma_i.value, dut.mul_shift_i.value = pack(a), pack(a), shift
        dut.en_i.value, dut.mul_en_i.value, dut.zero_i.value = 0, 1, zero
        await FallingEdge(dut.clk_i)
        dut.en_i.value, dut.mul_en_i.value, dut.zero_i.value, dut.mul_shift_i.value = 1, 0, 1 - zero, 0
        await FallingEdge(dut.clk_i)
        assert unpack(int(dut.res_o.value)) == expect


@cocotb.test()
async def clip_of_zero_takes_its_bounds_from_a(dut):
    """clip_a_i: CLIP(0, a), the reset CLIP(0, ACC[src]) whose row comes as a."""
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    rng = random.Random(5)
    dut.en_i.value, dut.zero_i.value, dut.mul_shift_i.value = 1, 0, 0
    dut.op_i.value, dut.ctl_i.value, dut.clip_a_i.value = int(AluOp.CLIP), 0, 1
    for _ in range(40):
        a = [
            rng.choice([0, 1, 0x7F80, 0x0180, 0x80FF, 0xFF01])
            if rng.random() < 0.3
            else rng.randint(-(1 << 31), (1 << 31) - 1)
            for _ in range(LANES)
        ]
        dut.a_i.value, dut.b_i.value = pack(a), pack([rng.randint(0, 1 << 31) for _ in range(LANES)])
        await FallingEdge(dut.clk_i)
        expect = _alu_apply(AluOp.CLIP, np.zeros(LANES, np.int64), np.array(a, np.int64), 0).tolist()
        assert unpack(int(dut.res_o.value)) == expect, a


@cocotb.test()
async def out_path_multiply_beside_adds(dut):
    """omul_en_i: the partial products of ma_i and mb_i, then their rounded product on ores_o the next cycle, every
    cycle back to back, while res_o takes an ADD of a and b each cycle (a GEMM's accumulation); ores_o holds
    without omul_en_i."""
    cocotb.start_soon(Clock(dut.clk_i, 10, unit="ns").start())
    rng = random.Random(7)
    dut.mul_en_i.value, dut.zero_i.value, dut.clip_a_i.value, dut.ctl_i.value = 0, 0, 0, 0
    dut.op_i.value, dut.en_i.value = int(AluOp.ADD), 1
    await FallingEdge(dut.clk_i)
    pending = None
    for n in range(60):
        ma = [rng.choice(EDGES) if rng.random() < 0.3 else rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(LANES)]
        mb = [rng.choice(EDGES) if rng.random() < 0.3 else rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(LANES)]
        a, b = [rng.randint(-(1 << 20), 1 << 20) for _ in range(LANES)], [rng.randint(-9, 9) for _ in range(LANES)]
        shift = rng.choice([0, 1, 31, 37, 63, rng.randint(0, 63)])
        on = n < 50
        dut.ma_i.value, dut.mb_i.value, dut.mul_shift_i.value, dut.omul_en_i.value = pack(ma), pack(mb), shift, on
        dut.a_i.value, dut.b_i.value = pack(a), pack(b)
        await FallingEdge(dut.clk_i)
        assert unpack(int(dut.res_o.value)) == [x + y for x, y in zip(a, b, strict=True)]
        if pending is not None:
            assert unpack(int(dut.ores_o.value)) == pending, n
        if on:
            pending = _alu_apply(AluOp.MUL, np.array(ma, np.int64), np.array(mb, np.int64), shift).tolist()
