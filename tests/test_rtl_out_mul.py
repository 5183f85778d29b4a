"""The OUT path's multiplier (EPI mul) on the RTL: the OUT mirror of each ACC write of a GEMM (not a reset) formed
from the value times its multiplier row ACC[mul_base + outer index], rounded right by mul_shift (ALU MUL's
arithmetic), before req and lut; ACC keeps the int32 sums. Random programs (multiplier rows over the whole int32
range, shifts 0 to 63, with and without req, relu and the activation table, init with bias, several outer
iterations and micro-ops, src_out, the depthwise mode with one and two micro-ops) agree with the simulator and a
numpy reference in OUT and ACC, and take the simulator's cycles instruction by instruction
(vdla.cycles.out_mul_cycles). ALU instructions under EPI mul are not multiplied, and ALU MULs before and after a
GEMM under mul share the multipliers with it. A configuration without the multiplier refuses EPI mul."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from acc_readback import read_acc
from full_units import FULL
from test_depthwise_mode import reference, window_weights

from vdla.config import LUT_ENTRIES
from vdla.cycles import out_mul_cycles
from vdla.isa import AluOp, EpiInsn, FinishInsn, GemmInsn, MemType, Stage, encode_program
from vdla.isa.validate import check_insn
from vdla.runtime import CommandError, Device, FaultError

C = 16  # pynq: block_in == block_out == 16, batch 1
EDGE = [-(1 << 31), (1 << 31) - 1, -1, 0, 1, 1 << 30, -(1 << 30), 0x7FFF, -0x8000, 0x10001]


@pytest.fixture(scope="module")
def devices(rtl_library) -> tuple[Device, Device]:
    return Device(FULL), Device(FULL, backend="rtl")


def mul_shift(v: np.ndarray, m: np.ndarray, s: int) -> np.ndarray:
    """ALU MUL's arithmetic: the exact product rounded right by s half up, its low 32 bits (on Python ints: the
    product plus the rounding half reaches 2^63)."""
    p = v.astype(object) * m.astype(object)
    if s:
        p = (p + (1 << (s - 1))) >> s
    return np.array([int(x) & 0xFFFFFFFF for x in p.reshape(-1)], np.uint32).view(np.int32).reshape(v.shape)


def epilogue(v: np.ndarray, req: bool, relu: bool, shift: int, table: np.ndarray | None) -> np.ndarray:
    """The OUT mirror of int32 ``v``: requantized (round half up, clamp) or truncated, then looked up."""
    if req:
        w = v.astype(np.int64)
        if shift:
            w = (w + (1 << (shift - 1))) >> shift
        out = np.clip(w, 0 if relu else -128, 127).astype(np.int8)
    else:
        out = v.astype(np.int8)
    return out if table is None else table[out.view(np.uint8)]


def multipliers(rng: np.random.Generator, n: int) -> np.ndarray:
    """n multiplier rows: the whole int32 range, edge values, large and small magnitudes."""
    m = rng.integers(-(1 << 31), 1 << 31, (n, C), dtype=np.int64)
    edge = rng.random((n, C)) < 0.25
    m[edge] = rng.choice(EDGE, int(edge.sum()))
    small = rng.random((n, C)) < 0.3
    m[small] = rng.integers(-5000, 5000, int(small.sum()))
    m[0, :4] = [-(1 << 31), (1 << 31) - 1, 0, 1]
    return m.astype(np.int32)


def setup(dev: Device, inp: np.ndarray, wgt: np.ndarray, acc: dict[int, np.ndarray]) -> None:
    """A run of its own that LOADs INP rows from 0, WGT elements from 0 and ACC rows (int32 (rows, C) at each base);
    the buffers keep them for the run that follows, whose cycles are then its compute and stores alone."""
    cmd = dev.commands()
    cmd.load(MemType.INP, 0, dev.array(inp[:, None]), 0, 1, len(inp), len(inp))
    cmd.load(MemType.WGT, 0, dev.array(wgt), 0, 1, len(wgt), len(wgt))
    for base, rows in acc.items():
        cmd.load(MemType.ACC, base, dev.array(rows[:, None].astype(np.int32)), 0, 1, len(rows), len(rows))
    cmd.synchronize()


def store_rows(dev: Device, cmd, row: int, n: int):
    """STORE OUT rows row .. row + n - 1; returns a reader of them as (n, C) int8."""
    buf = dev.alloc(n * C)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(row, buf, 0, 1, n, n)
    return lambda: buf.read(np.int8, (n, C))


def acc_rows(dev: Device, cmd, row: int, n: int):
    """EPI cleared, OUT rows rewritten from ACC (an ALU ADD of 0), and ACC rows row .. row + n - 1 read back
    (acc_readback); returns a reader of them as int32 (n, C)."""
    cmd.epi()
    cmd.alu(AluOp.ADD, [(row, 0)], iter_out=n, dst_factor=(1, 0), imm=0)
    read = read_acc(dev, cmd, row, n)
    return lambda: read().reshape(n, C)


def both(devices, program, total: bool = True):
    """``program(dev)`` -> ({name: array}, RunResult) on both backends: equal arrays, work counters, the duration of
    every compute instruction but the LOADs, and (``total``) the cycles. A longer program's first LOAD UOP shares the
    AXI reads with the instruction fetch, which the cycle model leaves out (the same program without EPI mul shows
    it): ``total=False`` for those."""
    (got_sim, r_sim), (got_rtl, r_rtl) = (program(d) for d in devices)
    assert got_sim.keys() == got_rtl.keys()
    for name in got_sim:
        np.testing.assert_array_equal(got_rtl[name], got_sim[name], err_msg=name)
    c_sim, c_rtl = r_sim.counters, r_rtl.counters
    assert c_sim.gemm_iters == c_rtl.gemm_iters and c_sim.insn_counts == c_rtl.insn_counts
    spans = [
        [(e.label, e.end - e.start) for e in r.timeline if e.stage == "compute" and not e.label.startswith("load")]
        for r in (r_sim, r_rtl)
    ]
    assert spans[0] == spans[1]
    assert not total or c_sim.cycles == c_rtl.cycles
    return got_sim


def dense_case(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n_out, n_in, n_uop = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    return {
        "n_out": n_out,
        "n_in": n_in,
        "n_uop": n_uop,
        "inp": rng.integers(-128, 128, (64, C), dtype=np.int8),
        "wgt": rng.integers(-128, 128, (16, C, C), dtype=np.int8),
        "bias": rng.integers(-(1 << 24), 1 << 24, (n_out, C)).astype(np.int32),
        "mult": multipliers(rng, n_out),
        "table": rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8),
        "uops": [(DST + j, int(rng.integers(0, 16)), int(rng.integers(0, 8))) for j in range(n_uop)],
    }


BIAS, MULT, DST = 100, 200, 300  # ACC rows: bias rows, multiplier rows, the GEMM's rows


def dense_program(dev: Device, p: dict, shift: int, req: bool, relu: bool, lut: bool, rshift: int):
    """EPI (req, relu, lut, bias, mul); one init GEMM: outer loop o writes rows DST + o * n_uop + j (micro-op j),
    accumulating over the inner loop (inputs and weights move with i); the OUT rows, then (EPI cleared) the ACC rows."""
    setup(dev, p["inp"], p["wgt"], {BIAS: p["bias"], MULT: p["mult"]})
    n_out, n_in, n_uop = p["n_out"], p["n_in"], p["n_uop"]
    cmd = dev.commands()
    if lut:
        cmd.load_table(dev.array(p["table"]))
    cmd.epi(req=req, relu=relu, shift=rshift, lut=lut, bias_base=BIAS, mul=(MULT, shift))
    loop = {"iter_out": n_out, "iter_in": n_in, "dst_factor": (n_uop, 0), "src_factor": (3, 5), "wgt_factor": (1, 2)}
    cmd.gemm(p["uops"], init=True, **loop)
    out = store_rows(dev, cmd, DST, n_out * n_uop)
    acc = acc_rows(dev, cmd, DST, n_out * n_uop)
    run = cmd.synchronize(timeline=True)
    return {"out": out(), "acc": acc()}, run


def dense_oracle(p: dict, shift: int, req: bool, relu: bool, lut: bool, rshift: int) -> dict:
    n_out, n_in, n_uop = p["n_out"], p["n_in"], p["n_uop"]
    acc = np.zeros((n_out * n_uop, C), np.int64)
    for o in range(n_out):
        for j, (_, src, wgt) in enumerate(p["uops"]):
            row = o * n_uop + j
            acc[row] = p["bias"][o]
            for i in range(n_in):
                x = p["inp"][src + 3 * o + 5 * i].astype(np.int64)
                acc[row] += p["wgt"][wgt + o + 2 * i].astype(np.int64) @ x
    acc = acc.astype(np.int32)
    mult = np.repeat(p["mult"], n_uop, axis=0)
    out = epilogue(mul_shift(acc, mult, shift), req, relu, rshift, p["table"] if lut else None)
    return {"out": out, "acc": acc}


@pytest.mark.parametrize("shift", [0, 1, 31, 37, 63])
@pytest.mark.parametrize("form", ["plain", "req", "relu_lut"])
def test_dense_gemms_under_mul(devices, shift, form):
    p = dense_case(shift * 3 + len(form))
    req, relu, lut = form != "plain", form == "relu_lut", form == "relu_lut"
    rshift = {0: 0, 1: 3, 31: 9, 37: 1, 63: 0}[shift] if req else 0
    got = both(devices, lambda dev: dense_program(dev, p, shift, req, relu, lut, rshift))
    want = dense_oracle(p, shift, req, relu, lut, rshift)
    np.testing.assert_array_equal(got["acc"], want["acc"])
    np.testing.assert_array_equal(got["out"], want["out"])


@pytest.mark.parametrize("seed", range(4))
def test_random_dense_programs(devices, seed):
    """Random loop shapes, shifts and epilogues, several GEMMs under one EPI mul (the held row reloaded by each)."""
    rng = np.random.default_rng(100 + seed)
    p = dense_case(200 + seed)
    shift = int(rng.choice([0, 1, 13, 31, 32, 37, 62, 63]))
    req, relu, lut = bool(rng.random() < 0.6), bool(rng.random() < 0.3), bool(rng.random() < 0.3)
    rshift = int(rng.integers(0, 12)) if req else 0
    got = both(devices, lambda dev: dense_program(dev, p, shift, req, relu, lut, rshift))
    want = dense_oracle(p, shift, req, relu, lut, rshift)
    np.testing.assert_array_equal(got["out"], want["out"])


def test_cycle_rule():
    t = FULL.timing
    g = GemmInsn(iter_out=5, iter_in=3)
    assert t.out_mul_lag == 2
    assert out_mul_cycles(t, EpiInsn(mul=True), g) == 5 + 2
    assert out_mul_cycles(t, EpiInsn(mul=True), replace(g, reset=True)) == 0
    assert out_mul_cycles(t, EpiInsn(), g) == 0


def src_out_program(dev: Device, x: np.ndarray, w: np.ndarray, mult: np.ndarray, shift: int):
    """GEMM 1 (no mul) writes x through an identity weight to ACC rows 0 .. n-1 (OUT: x); EPI src_out + mul:
    GEMM 2 reads OUT rows 0 .. n-1 (weights w) into rows A (one outer iteration a row, its multiplier row MULT + o),
    and GEMM 3 (the same state) at once reads OUT rows A, the last one GEMM 2 wrote first, into rows B."""
    n = len(x)
    a, b = 2 * n, 4 * n
    setup(dev, x, np.stack([np.eye(C, dtype=np.int8), w]), {MULT: mult})
    cmd = dev.commands()
    first = [(0, 0, 0)]
    gemm2 = [(a, 0, 1)]
    gemm3 = [(b + j, a + j, 1) for j in reversed(range(n))]
    for uops in (first, gemm2, gemm3):
        cmd.load_kernel(uops)
    rows = {"iter_out": n, "dst_factor": (1, 0), "src_factor": (1, 0), "init": True}
    cmd.gemm(first, **rows)
    cmd.epi(req=True, shift=4, src_out=True, mul=(MULT, shift))
    cmd.gemm(gemm2, **rows)
    cmd.gemm(gemm3, init=True)
    readers = {"first": store_rows(dev, cmd, 0, n), "a": store_rows(dev, cmd, a, n), "b": store_rows(dev, cmd, b, n)}
    run = cmd.synchronize(timeline=True)
    return {name: read() for name, read in readers.items()}, run


@pytest.mark.parametrize("shift", [0, 37])
def test_src_out_under_mul(devices, shift):
    rng = np.random.default_rng(7 + shift)
    n = 9
    x = rng.integers(-128, 128, (n, C), dtype=np.int8)
    w = rng.integers(-128, 128, (C, C), dtype=np.int8)
    mult = multipliers(rng, n)
    if shift == 0:
        mult = rng.integers(-3, 4, (n, C)).astype(np.int32)
    got = both(devices, lambda dev: src_out_program(dev, x, w, mult, shift))
    np.testing.assert_array_equal(got["first"], x)
    acc_a = (x.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
    want_a = epilogue(mul_shift(acc_a, mult, shift), True, False, 4, None)
    np.testing.assert_array_equal(got["a"], want_a)
    acc_b = (want_a.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
    np.testing.assert_array_equal(got["b"], epilogue(mul_shift(acc_b, mult[:1], shift), True, False, 4, None))


def dw_mul_program(dev: Device, x, w, bias, mult, stride: int, pad: int, shift: int, mshift: int, pairs: bool):
    """One depthwise channel block as test_depthwise_mode.dw_program, under EPI req + bias + dw + mul: output row o's
    pixels multiplied by multiplier row o. Returns ({"out": int8 (OH, OW, C)}, run)."""
    cfg = dev.cfg
    c, h, wd = x.shape
    k = w.shape[1]
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    pitch = wd + 2 * pad
    elements = 2 * cfg.dw_groups(k)
    bias_row, mult_row = oh * ow, oh * ow + oh
    cmd = dev.commands()
    x_d = dev.array(np.ascontiguousarray(x.transpose(1, 2, 0)))
    cmd.load(MemType.INP, 0, x_d, 0, h, wd, wd, pad=(pad, pad, pad, pad))
    cmd.load(MemType.WGT, 0, dev.array(window_weights(w, cfg.block_in)), 0, 1, elements, elements)
    cmd.load(MemType.ACC, bias_row, dev.array(np.repeat(bias[None], oh, axis=0)[:, None]), 0, 1, oh, oh)
    cmd.load(MemType.ACC, mult_row, dev.array(mult[:, None]), 0, 1, oh, oh)
    cmd.synchronize()
    cmd = dev.commands()
    cmd.epi(req=True, shift=shift, bias_base=bias_row, dw=(k, stride, pitch), mul=(mult_row, mshift))
    loop = {"iter_out": oh, "iter_in": ow, "dst_factor": (ow, 1), "src_factor": (stride * pitch, stride)}
    uops = [(0, 0, 0)]
    if pairs:
        loop.update(iter_in=ow // 2, dst_factor=(ow, 2), src_factor=(stride * pitch, 2 * stride))
        uops.append((1, stride, 0))
    cmd.gemm(uops, init=True, **loop)
    out = store_rows(dev, cmd, 0, oh * ow)
    run = cmd.synchronize(timeline=True)
    return {"out": out().reshape(oh, ow, c)}, run


DW_CASES = [  # (H, W, K, stride, pad, pairs)
    (7, 8, 3, 1, 1, False),
    (9, 9, 5, 2, 2, False),
    (6, 10, 3, 1, 1, True),
    (5, 6, 1, 1, 0, False),
]


@pytest.mark.parametrize("h,wd,k,stride,pad,pairs", DW_CASES, ids=str)
def test_depthwise_under_mul(devices, h, wd, k, stride, pad, pairs):
    rng = np.random.default_rng(h * wd + k)
    x = rng.integers(-128, 128, (C, h, wd), dtype=np.int8)
    w = rng.integers(-128, 128, (C, k, k), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, C).astype(np.int32)
    oh = (h + 2 * pad - k) // stride + 1
    mult = rng.integers(1 << 12, 1 << 16, (oh, C)).astype(np.int32) * rng.choice([-1, 1], (oh, C)).astype(np.int32)
    mshift, shift = 16, 10
    got = both(devices, lambda dev: dw_mul_program(dev, x, w, bias, mult, stride, pad, shift, mshift, pairs))
    conv = reference(x, w, bias, stride, pad).transpose(1, 2, 0).astype(np.int32)  # (OH, OW, C)
    want = epilogue(mul_shift(conv, np.repeat(mult[:, None], conv.shape[1], axis=1), mshift), True, False, shift, None)
    np.testing.assert_array_equal(got["out"], want)


def shared_program(dev: Device, p: dict, shift: int):
    """Under one EPI mul (req): an ALU MUL right before a GEMM under mul and one right after it (the shared
    multipliers), an ALU ADD and a GEMM reset (neither multiplied), another GEMM under mul; OUT and ACC rows of each."""
    setup(dev, p["inp"], p["wgt"], {BIAS: p["bias"], MULT: p["mult"], 400: p["alu"], 420: p["alu_src"]})
    n_out, n_uop = p["n_out"], p["n_uop"]
    rows = n_out * n_uop
    cmd = dev.commands()
    for uops in (p["uops"], [(400, 420)], [(408, 420)], [(416, 0)], [(500, 0, 0)], [(416, 420)]):
        cmd.load_kernel(uops)  # one LOAD UOP each, up front (see setup)
    cmd.epi(req=True, shift=5, bias_base=BIAS, mul=(MULT, shift))
    cmd.alu(AluOp.MUL, [(400, 420)], iter_out=8, dst_factor=(1, 0), src_factor=(1, 0), shift=17)  # before
    loop = {"iter_out": n_out, "iter_in": 2, "dst_factor": (n_uop, 0), "src_factor": (3, 5), "wgt_factor": (1, 2)}
    cmd.gemm(p["uops"], init=True, **loop)
    cmd.alu(AluOp.MUL, [(408, 420)], iter_out=8, dst_factor=(1, 0), src_factor=(1, 0), shift=3)  # right after
    cmd.alu(AluOp.ADD, [(416, 0)], iter_out=4, dst_factor=(1, 0), imm=-1234)  # an ALU write: not multiplied
    cmd.gemm([(500, 0, 0)], iter_out=3, dst_factor=(1, 0), reset=True)  # a reset: not multiplied, no extra cycles
    cmd.alu(AluOp.MUL, [(416, 420)], iter_out=2, dst_factor=(1, 0), src_factor=(1, 0), shift=1)
    cmd.gemm(p["uops"], **{**loop, "iter_in": 1}, init=False)  # accumulates on the first GEMM's rows
    readers = {"gemm": store_rows(dev, cmd, DST, rows), "alu": store_rows(dev, cmd, 400, 20)}
    readers["reset"] = store_rows(dev, cmd, 500, 3)
    acc = {"acc_gemm": acc_rows(dev, cmd, DST, rows), "acc_alu": acc_rows(dev, cmd, 400, 20)}
    run = cmd.synchronize(timeline=True)
    return {k: r() for k, r in {**readers, **acc}.items()}, run


@pytest.mark.parametrize("shift", [0, 31, 63])
def test_alu_muls_share_the_multipliers(devices, shift):
    rng = np.random.default_rng(50 + shift)
    p = dense_case(60 + shift)
    p["alu"] = rng.integers(-(1 << 31), 1 << 31, (20, C)).astype(np.int32)
    p["alu_src"] = rng.integers(-(1 << 31), 1 << 31, (8, C)).astype(np.int32)
    got = both(devices, lambda dev: shared_program(dev, p, shift), total=False)
    # the ALU writes' OUT rows are their ACC rows requantized, not multiplied
    np.testing.assert_array_equal(got["alu"], epilogue(got["acc_alu"], True, False, 5, None))
    n_out, n_uop = p["n_out"], p["n_uop"]
    mult = np.repeat(p["mult"], n_uop, axis=0)
    np.testing.assert_array_equal(got["gemm"], epilogue(mul_shift(got["acc_gemm"], mult, shift), True, False, 5, None))
    np.testing.assert_array_equal(got["reset"], np.zeros((3, C), np.int8))
    assert got["acc_gemm"].shape == (n_out * n_uop, C)


def test_a_gemm_writing_its_multiplier_rows_faults():
    cmd = Device(FULL).commands()
    cmd.epi(mul=(10, 0))
    cmd.gemm([(12, 0, 0)], iter_out=1)  # rows 10.. are its multiplier rows for outer index 0: 10 only
    cmd.synchronize()
    cmd = Device(FULL).commands()
    cmd.epi(mul=(10, 0))
    cmd.gemm([(10, 0, 0)], iter_out=3, dst_factor=(1, 0))
    with pytest.raises(FaultError, match="multiplier row"):
        cmd.synchronize()


def test_multiplier_rows_beyond_acc_fault_on_both(devices):
    """mul_base + o beyond ACC: an index fault (the RTL's range check of the multiplier row's slot)."""
    for dev in devices:
        cmd = dev.commands()
        cmd.epi(mul=(dev.cfg.acc_depth - 2, 0))
        cmd.gemm([(0, 0, 0)], iter_out=4, dst_factor=(1, 0))
        with pytest.raises(FaultError):
            cmd.synchronize()


def test_no_multiplier_refuses_epi_mul():
    cfg = FULL
    off = replace(cfg, out_multiplier=False)
    assert off.hash != cfg.hash
    assert check_insn(EpiInsn(mul=True, mul_base=4), cfg) == []
    assert any("no OUT-path multiplier" in p for p in check_insn(EpiInsn(mul=True, mul_base=4), off))
    with pytest.raises(CommandError, match="no OUT-path multiplier"):
        Device(off).commands().epi(mul=(4, 0))


@pytest.mark.slow
def test_rtl_without_the_multiplier_refuses_epi_mul():
    """The RTL built without the multiplier (OUT_MUL_SUPPORTED 0) stops at an EPI mul with ERR_INSN."""
    off = replace(FULL, name="pynq", out_multiplier=False)
    dev = Device(off, backend="rtl")
    buf = dev.alloc(64)
    buf.write(np.frombuffer(encode_program([EpiInsn(mul=True, mul_base=4), FinishInsn()]), np.uint8))
    with pytest.raises(FaultError, match="no OUT-path multiplier|EPI"):
        dev.backend.run(dev.dram, buf.addr, 2)
    buf.free()


def test_rows_rewritten_by_later_outer_iterations(devices):
    """A row written in several outer iterations (dst_factor_out 0): its OUT row is its last write's, multiplied
    by the last iteration's multiplier row; forwarding of the accumulation across the inserted slots."""
    p = dense_case(77)
    shift = 9

    def program(dev):
        setup(dev, p["inp"], p["wgt"], {BIAS: p["bias"], MULT: p["mult"]})
        cmd = dev.commands()
        cmd.epi(req=True, shift=4, bias_base=BIAS, mul=(MULT, shift))
        n = p["n_uop"]
        cmd.gemm(p["uops"], iter_out=p["n_out"], iter_in=2, src_factor=(3, 5), wgt_factor=(1, 2), init=True)
        out = store_rows(dev, cmd, DST, n)
        acc = acc_rows(dev, cmd, DST, n)
        run = cmd.synchronize(timeline=True)
        return {"out": out(), "acc": acc()}, run

    got = both(devices, program)
    last = np.repeat(p["mult"][-1:], p["n_uop"], axis=0)
    np.testing.assert_array_equal(got["out"], epilogue(mul_shift(got["acc"], last, shift), True, False, 4, None))
