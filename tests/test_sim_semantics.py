"""ISA semantics on small hand-built programs, checked against plain Python/numpy integer math.

Every test runs on each backend (see conftest.py) and must be bit-exact on all of them.
"""

import numpy as np
import pytest
from acc_readback import read_acc

from vdla.isa import AluOp, MemType, Stage
from vdla.runtime.backend import FaultError
from vdla.runtime.commands import CommandError

RNG = np.random.default_rng(1234)
INT32 = (-(1 << 31), (1 << 31) - 1)


def rand_acc(n, lanes=16):
    vals = RNG.integers(-(1 << 31), 1 << 31, (n, 1, lanes), dtype=np.int64)
    vals[0, 0, :4] = [INT32[0], INT32[1], 0, -1]  # extremes
    return vals.astype(np.int32)


def wrap32(x):
    return ((int(x) + (1 << 31)) % (1 << 32)) - (1 << 31)


def test_padded_strided_acc_load_and_store(device):
    cfg = device.cfg
    src = rand_acc(6 * 5)  # 6 rows of 5 elements in DRAM
    buf = device.array(src)
    cmd = device.commands()
    # 3 rows of 2 elements from row 1, column 2, rows 5 apart; pad 1 row above, 2 below, 1 left, 0 right
    cmd.load(MemType.ACC, 10, buf, 1 * 5 + 2, 3, 2, 5, pad=(1, 2, 1, 0))
    got = read_acc(device, cmd, 10, 6 * 3)
    cmd.synchronize()
    expect = np.zeros((6, 3, 1, 16), np.int32)
    expect[1:4, 1:3] = src.reshape(6, 5, 1, 16)[1:4, 2:4]
    np.testing.assert_array_equal(got().reshape(6, 3, 1, 16), expect)
    assert cfg.acc_elem_bytes == 64


def test_acc_8bit_load_sign_extends(device):
    src = RNG.integers(-128, 128, (4, 1, 16), dtype=np.int8)
    buf = device.array(src)
    cmd = device.commands()
    cmd.load(MemType.ACC_8BIT, 0, buf, 0, 2, 2, 2, pad=(0, 0, 0, 1))
    got = read_acc(device, cmd, 0, 6)
    cmd.synchronize()
    expect = np.zeros((2, 3, 1, 16), np.int32)
    expect[:, :2] = src.reshape(2, 2, 1, 16)
    np.testing.assert_array_equal(got().reshape(2, 3, 1, 16), expect)


def test_store_truncates_to_low_8_bits_with_stride(device):
    vals = rand_acc(4)
    buf = device.array(vals)
    out = device.array(np.full((3, 3, 16), 0x55, np.uint8))
    cmd = device.commands()
    cmd.load(MemType.ACC, 0, buf, 0, 1, 4, 4)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(0, out, 1, 2, 2, 3)  # rows of 2 elements, 3 apart, starting at element 1
    cmd.synchronize()
    got = out.read(np.uint8, (3, 3, 16))
    expect = np.full((3, 3, 16), 0x55, np.uint8)
    low = (vals.astype(np.int64) & 0xFF).astype(np.uint8).reshape(4, 16)
    expect.reshape(9, 16)[[1, 2, 4, 5]] = low
    np.testing.assert_array_equal(got, expect)


def gemm_reference(inp, wgt, uops, iter_out, iter_in, factors, acc):
    acc = acc.astype(np.int64).copy()
    (dfo, dfi), (sfo, sfi), (wfo, wfi) = factors
    for o in range(iter_out):
        for i in range(iter_in):
            for d, s, w in uops:
                a = d + o * dfo + i * dfi
                acc[a] += inp[s + o * sfo + i * sfi].astype(np.int64) @ wgt[w + o * wfo + i * wfi].astype(np.int64).T
    return ((acc + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def test_padded_inp_load_and_gemm_with_both_loop_levels(device):
    cfg = device.cfg
    inp = RNG.integers(-128, 128, (4, 6, 1, 16), dtype=np.int8)  # 4 rows x 6 elements in DRAM
    wgt = RNG.integers(-128, 128, (6, 16, 16), dtype=np.int8)
    init = rand_acc(8, 16) // 4
    inp_buf, wgt_buf, acc_buf = device.array(inp), device.array(wgt), device.array(init)
    cmd = device.commands()
    # INP tile: rows 1..3, columns 1..4 (stride 6), padded by 1 on every side -> 5 x 6 = 30 elements
    cmd.load(MemType.INP, 2, inp_buf, 1 * 6 + 1, 3, 4, 6, pad=(1, 1, 1, 1))
    cmd.load(MemType.WGT, 1, wgt_buf, 0, 1, 6, 6)
    cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
    cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
    cmd.load(MemType.ACC, 0, acc_buf, 0, 1, 8, 8)
    uops = [(0, 2, 1), (1, 9, 2), (0, 14, 3)]
    factors = ((2, 1), (3, 1), (1, 1))
    cmd.gemm(uops, iter_out=3, iter_in=2, dst_factor=factors[0], src_factor=factors[1], wgt_factor=factors[2])
    cmd.gemm([(7, 0, 0)], reset=True)
    got = read_acc(device, cmd, 0, 8)
    cmd.synchronize()
    sram_inp = np.zeros((2 + 30, 1, 16), np.int8)
    tile = np.zeros((5, 6, 1, 16), np.int8)
    tile[1:4, 1:5] = inp[1:4, 1:5]
    sram_inp[2:] = tile.reshape(30, 1, 16)
    sram_wgt = np.zeros((7, 16, 16), np.int8)
    sram_wgt[1:] = wgt
    expect = gemm_reference(sram_inp, sram_wgt, uops, 3, 2, factors, init)
    expect[7] = 0
    np.testing.assert_array_equal(got(), expect)
    assert cfg.inp_depth >= 32


def alu_reference(op, a, b):
    a, b = int(a), int(b)
    if op == AluOp.MIN:
        return min(a, b)
    if op == AluOp.MAX:
        return max(a, b)
    if op == AluOp.ADD:
        return wrap32(a + b)
    if op == AluOp.MUL:
        return wrap32(a * b)
    if op == AluOp.SQR:
        return wrap32(a * a)
    if op in (AluOp.SHR, AluOp.RSHR):
        s = max(-31, min(31, b))
        if s < 0:
            return wrap32(a * 2**-s)
        if op == AluOp.RSHR and s > 0:
            a += 2 ** (s - 1)
        return wrap32(a // 2**s)
    if op == AluOp.CLIP:
        lo = ((b & 0xFF) ^ 0x80) - 0x80
        hi = (((b >> 8) & 0xFF) ^ 0x80) - 0x80
        return min(max(a, lo), hi)
    if op == AluOp.REQ:
        s = b & 31
        q = (a + (2 ** (s - 1) if s else 0)) // 2**s
        return min(max(q, 0 if b & 32 else -128), 127)
    raise AssertionError(op)


def row_reference(op, ra, rb):
    """One ACC row of ``op(a, b)``: lane by lane, but LSUM's every lane the sum of b's lanes (``rb`` a row, or an
    immediate every lane holds), wrapped to int32."""
    if op == AluOp.LSUM:
        return [wrap32(sum(int(y) for y in np.broadcast_to(rb, ra.shape)))] * len(ra)
    return [alu_reference(op, x, y) for x, y in zip(ra, np.broadcast_to(rb, ra.shape))]


@pytest.mark.parametrize("op", list(AluOp))
@pytest.mark.parametrize("use_imm", [True, False])
def test_alu_ops(device, op, use_imm):
    n = 6
    a = rand_acc(n)
    b = rand_acc(n)
    if op == AluOp.SQR and use_imm:  # it reads ACC[dst] alone
        with pytest.raises(CommandError, match="SQR reads ACC.dst. alone"):
            device.commands().alu(op, [(0, n)], imm=3)
        return
    if op in (AluOp.SHR, AluOp.RSHR):  # shift amounts around the interesting range, including clamping
        b = RNG.integers(-40, 40, b.shape).astype(np.int32)
    imm = {AluOp.SHR: 5, AluOp.RSHR: 3, AluOp.CLIP: (100 << 8) | (-20 & 0xFF), AluOp.REQ: 0x20 | 9}.get(op, -12345)
    buf = device.array(np.concatenate([a, b]))
    cmd = device.commands()
    cmd.load(MemType.ACC, 0, buf, 0, 1, 2 * n, 2 * n)
    # uop loop: dst walks rows 0..5 (outer 3 x inner 2), src walks rows 6..11
    cmd.alu(op, [(0, n)], iter_out=3, iter_in=2, dst_factor=(2, 1), src_factor=(2, 1), imm=imm if use_imm else None)
    got = read_acc(device, cmd, 0, n)
    cmd.synchronize()
    expect = np.array(
        [row_reference(op, ra, imm if use_imm else rb) for ra, rb in zip(a.reshape(n, 16), b.reshape(n, 16))],
        np.int64,
    )
    np.testing.assert_array_equal(got().reshape(n, 16), expect.astype(np.int32))


def test_lane_sum_at_its_edges(device):
    """LSUM wrapping past int32 both ways, of a mixed row and of zeros, in both forms (reading the destination row
    too, or with reset only the source row): the destination's values do not count."""
    big = np.full((1, 1, 16), (1 << 31) - 1, np.int32)  # 16 x (2^31 - 1): the sum wraps
    low = np.full((1, 1, 16), -(1 << 31), np.int32)
    mixed = rand_acc(1)
    rows = np.concatenate([big, low, mixed, np.zeros((1, 1, 16), np.int32), np.zeros((4, 1, 16), np.int32) + 7])
    buf = device.array(rows)
    cmd = device.commands()
    cmd.load(MemType.ACC, 0, buf, 0, 1, rows.shape[0], rows.shape[0])
    cmd.alu(AluOp.LSUM, [(4, 0)], iter_out=4, dst_factor=(1, 0), src_factor=(1, 0))  # each row's sum (not + 7)
    cmd.alu(AluOp.LSUM, [(0, 2)], reset=True)  # row 0 = the lane sum of row 2 (mixed) alone
    got = read_acc(device, cmd, 0, rows.shape[0])
    cmd.synchronize()
    out = got().reshape(-1, 16).astype(np.int64)
    sums = [wrap32(int(r.astype(np.int64).sum())) for r in (big, low, mixed)]
    assert sums[0] == wrap32(16 * (2**31 - 1)) == -16 and sums[1] == 0
    np.testing.assert_array_equal(out[4:8], np.array(sums + [0])[:, None].repeat(16, 1))
    np.testing.assert_array_equal(out[0], [sums[2]] * 16)


def test_square_rounds_and_chains(device):
    """SQR: ACC[dst]^2 as a 64-bit product rounded right by its shift (half up) and wrapped to int32, its
    micro-op's src field (row 2047, never loaded) not read; the same row squared twice in one instruction (the
    second sees the first), and pipelined over distinct rows."""
    vals = rand_acc(8)
    vals[1, 0, :6] = [46340, 46341, -46341, 65536, 3, -3]  # around 2^31 (46341^2 wraps) and 2^32 (wraps to 0)
    buf = device.array(vals)
    cmd = device.commands()
    cmd.load(MemType.ACC, 0, buf, 0, 1, 8, 8)
    far = (1 << 11) - 1  # the micro-op's widest src index, a row this program does not load
    cmd.alu(AluOp.SQR, [(0, far)], shift=33)
    cmd.alu(AluOp.SQR, [(1, far)])
    cmd.alu(AluOp.SQR, [(2, 0)], iter_in=2, shift=31)  # row 2 squared twice, in order
    cmd.alu(AluOp.SQR, [(3, 0)], iter_in=5, dst_factor=(0, 1), shift=1, pipe=True)  # rows 3..7 pipelined
    got = read_acc(device, cmd, 0, 8)
    cmd.synchronize()

    def sq(x, shift):  # mul_shift's arithmetic: exact product, round half up, wrap
        return wrap32((int(x) * int(x) + ((1 << shift) >> 1)) >> shift)

    v = vals.reshape(8, 16)
    expect = [[sq(x, 33) for x in v[0]], [sq(x, 0) for x in v[1]], [sq(sq(x, 31), 31) for x in v[2]]]
    expect += [[sq(x, 1) for x in row] for row in v[3:]]
    np.testing.assert_array_equal(got().reshape(8, 16), np.array(expect, np.int64).astype(np.int32))
    assert [sq(x, 0) for x in (46340, 46341, 65536)] == [2147395600, -2147479015, 0]


def test_pipelined_square_faults_on_its_hazard(device):
    """A pipelined SQR whose next inner iteration reads the row it writes (the same destination) is a fault on
    every backend; the builder, left to choose, does not pipeline it."""
    cmd = device.commands()
    cmd.alu(AluOp.SQR, [(0, 0)], iter_in=3)
    assert not cmd.insns[-1].pipe
    cmd.alu(AluOp.SQR, [(0, 0)], iter_in=3, pipe=True)
    with pytest.raises(FaultError, match="pipelined SQR: .*iteration"):
        cmd.synchronize()


def test_alu_sequential_semantics_with_overlapping_indices(device):
    """A reduction (dst repeated) and a chain that reads what it just wrote."""
    vals = rand_acc(8) // 8
    buf = device.array(vals)
    cmd = device.commands()
    cmd.load(MemType.ACC, 0, buf, 0, 1, 8, 8)
    cmd.alu(AluOp.MAX, [(0, 1)], iter_out=3, src_factor=(1, 0))  # ACC0 = max(ACC0..ACC3)
    cmd.alu(AluOp.ADD, [(5, 4)], iter_out=3, dst_factor=(1, 0), src_factor=(1, 0))  # prefix sums 4..7
    cmd.alu(AluOp.ADD, [(7, 7)])  # doubles ACC7
    got = read_acc(device, cmd, 0, 8)
    cmd.synchronize()
    v = vals.astype(np.int64).reshape(8, 16)
    expect = v.copy()
    expect[0] = v[:4].max(axis=0)
    for k in range(5, 8):
        expect[k] = expect[k] + expect[k - 1]
    expect[7] *= 2
    np.testing.assert_array_equal(got().reshape(8, 16), expect.astype(np.int32))


def test_alu_reset_reads_dst_as_zero_and_gemm_reset(device):
    vals = rand_acc(6)
    buf = device.array(vals)
    cmd = device.commands()
    cmd.load(MemType.ACC, 0, buf, 0, 1, 6, 6)
    cmd.alu(AluOp.ADD, [(1, 0)], reset=True)  # copy
    cmd.alu(AluOp.MAX, [(2, 0)], reset=True)  # ReLU copy
    cmd.alu(AluOp.ADD, [(4, 0)], reset=True, imm=0)  # clear
    cmd.alu(AluOp.SHR, [(5, 0)], reset=True, imm=3)  # 0 >> 3
    cmd.gemm([(3, 0, 0)], reset=True)
    got = read_acc(device, cmd, 0, 6)
    cmd.synchronize()
    expect = vals.copy()
    expect[1] = vals[0]
    expect[2] = np.maximum(vals[0], 0)
    expect[3] = expect[4] = expect[5] = 0
    np.testing.assert_array_equal(got(), expect)


# rows 0..5: o steps the bias row (EPI bias_base 20 + o) and the weight block; i accumulates two inputs into each row
BIAS_GEMM = ([(0, 0, 0), (1, 1, 0), (2, 2, 0)], 2, 2, (3, 0), (0, 3), (1, 0), False, True)


def _gemm_program(device, acc):
    """A program with 6 random INP rows, 4 random WGT elements and ``acc`` loaded (the inputs, as int64)."""
    inp = RNG.integers(-128, 128, (6, 1, 16), dtype=np.int8)
    wgt = RNG.integers(-128, 128, (4, 16, 16), dtype=np.int8)
    cmd = device.commands()
    cmd.load(MemType.INP, 0, device.array(inp), 0, 1, 6, 6)
    cmd.load(MemType.WGT, 0, device.array(wgt), 0, 1, 4, 4)
    cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
    cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
    cmd.load(MemType.ACC, 0, device.array(acc), 0, 1, len(acc), len(acc))
    return cmd, inp.astype(np.int64)[:, 0], wgt.astype(np.int64)


def _bias_gemm_rows(a, x, w):
    """Rows 0..5 after BIAS_GEMM, from the accumulators ``a`` (int64, one batch row) and its inputs."""
    return np.stack([a[20 + o] + x[r] @ w[o].T + x[r + 3] @ w[o].T for o in range(2) for r in range(3)])


def test_gemm_init_starts_from_bias_rows_or_zero(device):
    """GEMM init: the first update of each accumulator starts from ACC[bias_base + o] (EPI bias) or zero;
    later updates in the same instruction accumulate; a bias row that is also a destination is read as the
    sequential order leaves it."""
    acc = rand_acc(24) // 8
    cmd, x, w = _gemm_program(device, acc)
    cmd.epi(bias_base=20)
    cmd.gemm(*BIAS_GEMM)
    cmd.epi()
    cmd.gemm([(8, 0, 2), (8, 1, 3)], init=True)  # no bias: starts from zero, then accumulates
    cmd.epi(bias_base=10)
    cmd.gemm([(10, 2, 0), (11, 3, 1)], init=True)  # row 11 starts from row 10 as just updated
    got = read_acc(device, cmd, 0, 24)
    cmd.synchronize()
    a = acc.astype(np.int64)
    expect = a.copy()
    expect[:6, 0] = _bias_gemm_rows(a[:, 0], x, w)
    expect[8, 0] = x[0] @ w[2].T + x[1] @ w[3].T
    expect[10, 0] = a[10, 0] + x[2] @ w[0].T
    expect[11, 0] = expect[10, 0] + x[3] @ w[1].T
    np.testing.assert_array_equal(got(), ((expect + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32))


@pytest.mark.parametrize("relu", [False, True])
def test_epi_req_requantizes_the_out_mirror(device, relu):
    """With EPI req every ACC write stores its OUT row as clamp(rshr(v, shift)); STOREs read OUT, so the
    requantization costs no ALU pass. The ACC itself keeps the int32 values; a later EPI changes only
    later writes, and START resets the state."""
    vals = rand_acc(8)
    buf = device.array(vals)
    out = device.array(np.zeros((16, 16), np.int8))
    cmd = device.commands()
    cmd.epi(req=True, relu=relu, shift=9)
    cmd.load(MemType.ACC, 0, buf, 0, 1, 8, 8)
    cmd.epi(req=True, shift=0)
    cmd.alu(AluOp.ADD, [(7, 0)], imm=1)  # ACC[7] + 1, saturated to int8 without a shift
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(0, out, 0, 1, 8, 8)
    cmd.synchronize()
    v = vals[:, 0].astype(np.int64)
    shifted = (v + (1 << 8)) >> 9
    expect = np.clip(shifted, 0 if relu else -128, 127)
    expect[7] = np.clip(v[7] + 1, -128, 127)
    np.testing.assert_array_equal(out.read(np.int8, (16, 16))[:8], expect)
    cmd = device.commands()  # a new run: truncation again
    cmd.load(MemType.ACC, 0, buf, 0, 1, 8, 8)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(0, out, 8, 1, 8, 8)
    cmd.synchronize()
    np.testing.assert_array_equal(out.read(np.int8, (16, 16))[8:], vals[:, 0].astype(np.int8))


@pytest.mark.parametrize("mode", ["plain", "req", "relu"])
@pytest.mark.parametrize("mshift", [0, 1, 31, 37, 63])
def test_epi_mul_multiplies_the_out_mirror_of_gemm_writes(full_device, mode, mshift):
    """With EPI mul, the OUT row of each ACC write of a GEMM is formed from mul_shift(v, ACC[mul_base + o], s)
    (the ALU MUL's exact 64-bit product rounded right by s), o the outer index of the row's last write, then
    requantized (req) as before; ACC keeps the int32 sum. ALU writes and GEMM resets are not multiplied."""
    device = full_device  # the OUT-path multiplier: not in the pynq build
    acc, mult = rand_acc(24), rand_acc(3)
    mult[1, 0, :3] = [INT32[0], INT32[1], 1 << 30]
    cmd, x, w = _gemm_program(device, acc)
    cmd.load(MemType.ACC, 30, device.array(mult), 0, 1, 3, 3)
    out = device.array(np.zeros((24, 16), np.int8))
    req = {"plain": {}, "req": {"req": True, "shift": 3}, "relu": {"req": True, "relu": True}}[mode]
    cmd.epi(bias_base=20, mul=(31, mshift), **req)  # multiplier rows 31 + o
    cmd.gemm(*BIAS_GEMM)
    cmd.gemm([(8, 0, 2), (9, 1, 3)])  # one outer iteration: multiplier row 31
    cmd.gemm([(10, 0, 0)], reset=True)  # a reset: zeros, not multiplied
    cmd.alu(AluOp.ADD, [(11, 12)])  # an ALU write: not multiplied
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(0, out, 0, 1, 24, 24)
    cmd.synchronize()
    a, m = acc.astype(np.int64)[:, 0], mult.astype(np.int64)[:, 0]
    v = a.copy()
    v[:6] = _bias_gemm_rows(a, x, w)
    v[8], v[9], v[10], v[11] = a[8] + x[0] @ w[2].T, a[9] + x[1] @ w[3].T, 0, a[11] + a[12]
    v = (v + (1 << 31)) % (1 << 32) - (1 << 31)
    rows = {r: m[1 + r // 3] for r in range(6)} | {8: m[1], 9: m[1]}
    expect = v.copy()
    for r, mr in rows.items():
        p = v[r].astype(object) * mr.astype(object)
        rounded = [(int(q) >> mshift) + ((int(q) >> (mshift - 1)) & 1 if mshift else 0) for q in p]
        expect[r] = [(q + (1 << 31)) % (1 << 32) - (1 << 31) for q in rounded]
    if req:
        s = req.get("shift", 0)
        expect = np.clip((expect + ((1 << s) >> 1)) >> s, 0 if mode == "relu" else -128, 127)
    expect[6:8] = v[6:8].astype(np.int8)  # loaded before the EPI: truncated
    np.testing.assert_array_equal(out.read(np.int8, (24, 16))[:12], expect[:12].astype(np.int8))


@pytest.mark.parametrize("iter_out", [1, 3])
def test_epi_mul_costs_a_slot_per_outer_iteration_and_its_lag(full_device, iter_out):
    """A GEMM after EPI mul takes iter_out + out_mul_lag cycles more than after EPI without it
    (vdla.cycles.out_mul_cycles); a reset takes none more."""
    device = full_device  # the OUT-path multiplier: not in the pynq build
    from vdla.cycles import out_mul_cycles
    from vdla.isa import EpiInsn, GemmInsn

    def run(mul, reset=False):
        cmd = device.commands()
        cmd.epi(req=True, mul=(100, 9) if mul else None)
        cmd.gemm([(0, 0, 0), (1, 1, 1)], iter_out=iter_out, iter_in=4, dst_factor=(2, 0), reset=reset)
        return cmd.synchronize().counters.cycles

    t = device.cfg.timing
    extra = out_mul_cycles(t, EpiInsn(mul=True), GemmInsn(iter_out=iter_out))
    assert extra == iter_out + t.out_mul_lag
    assert run(True) - run(False) == extra
    assert run(True, reset=True) == run(False, reset=True)
