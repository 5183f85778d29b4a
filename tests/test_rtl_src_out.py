"""GEMM input from OUT (EPI src_out): a GEMM's requantized results feed the next GEMMs, dense and depthwise, through
OUT instead of DRAM and INP. Random chains are bit-exact against a numpy integer reference on the simulator and
the RTL (its read-only copy of OUT), which agree on results, work counters and cycles, including the GEMM that
reads the rows the GEMM right before it wrote and the GEMM right after an EPI that switches the source; START
clears the state; the encoding, and the refusals: a GEMM writing a row it reads from OUT, a configuration whose
OUT rows are not INP rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from full_units import FULL
from test_depthwise_mode import reference, window_weights

from vdla.isa import AluOp, EpiInsn, MemType, Stage, assemble, decode, disassemble, encode
from vdla.isa.validate import check_insn
from vdla.runtime import CommandError, Device, FaultError

C = 16  # pynq: block_in == block_out == 16, batch 1


@pytest.fixture(scope="module")
def devices(rtl_library) -> tuple[Device, Device]:
    return Device(FULL), Device(FULL, backend="rtl")


def both(devices, program):
    """``program(dev)`` -> (result, counters) on both backends: equal results, work and cycle counters."""
    (got_sim, c_sim), (got_rtl, c_rtl) = (program(d) for d in devices)
    assert got_sim.keys() == got_rtl.keys()
    for name in got_sim:
        np.testing.assert_array_equal(got_rtl[name], got_sim[name], err_msg=name)
    assert c_sim.gemm_iters == c_rtl.gemm_iters and c_sim.insn_counts == c_rtl.insn_counts
    assert c_sim.cycles == c_rtl.cycles
    return got_sim, c_sim


def requant(v: np.ndarray, shift: int, relu: bool = False) -> np.ndarray:
    """The OUT mirror's value of ACC ``v`` after an EPI with req: rounding right shift, clamp."""
    v = v.astype(np.int64)
    if shift:
        v = (v + (1 << (shift - 1))) >> shift
    return np.clip(v, 0 if relu else -128, 127).astype(np.int8)


def dense(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(rows, C) int8 x (C out, C in) int8 -> int64 (rows, C)."""
    return x.astype(np.int64) @ w.astype(np.int64).T


def store_rows(dev: Device, cmd, row: int, n: int):
    """STORE OUT rows row .. row + n - 1; returns a reader of them as (n, C) int8."""
    buf = dev.alloc(n * C)
    cmd.store(row, buf, 0, 1, n, n)
    return lambda: buf.read(np.int8, (n, C))


def load_inputs(dev: Device, inp: dict[int, np.ndarray], wgt: np.ndarray) -> None:
    """A run of its own that LOADs INP rows (``inp``: (rows, C) int8 at each base row) and the WGT elements from 0
    (the buffers keep them for the next run). The compute run that follows then has no LOAD on the load stage and
    loads its micro-ops up front: in a longer program the instruction fetch shares the AXI reads with the DMA of
    LOADs that run while it fetches, which the cycle model leaves out (the same program without src_out shows it),
    and which is not what these tests are about."""
    cmd = dev.commands()
    for base, rows in inp.items():
        cmd.load(MemType.INP, base, dev.array(rows[:, None]), 0, 1, len(rows), len(rows))
    cmd.load(MemType.WGT, 0, dev.array(wgt), 0, 1, len(wgt), len(wgt))
    cmd.synchronize()


def chain_case(seed: int) -> dict:
    """A random chain: an h x wd image of C channels (one INP row a pixel), its weights and EPI states, and five
    disjoint ACC regions."""
    rng = np.random.default_rng(seed)
    h, wd = int(rng.integers(3, 8)), int(rng.integers(3, 9))
    k = int(rng.integers(1, min(h, wd, 5) + 1))
    stride = int(rng.integers(1, min(k, 2) + 1))
    kk = int(rng.integers(1, 4))  # GEMM 2 reduces over kk consecutive OUT rows
    n = h * wd
    slots = rng.choice(2048 // 64, 5, replace=False) * 64 + rng.integers(0, 64 - n, 5)
    return {
        "h": h,
        "wd": wd,
        "k": k,
        "stride": stride,
        "kk": kk,
        "rows": dict(zip("ABCDE", (int(s) for s in slots), strict=True)),
        "inp_base": int(rng.integers(0, 2048 - n)),
        "x": rng.integers(-128, 128, (n, C), dtype=np.int8),
        "w1": rng.integers(-128, 128, (C, C), dtype=np.int8),
        "w2": rng.integers(-128, 128, (kk, C, C), dtype=np.int8),
        "w3": rng.integers(-128, 128, (C, C), dtype=np.int8),
        "wdw": rng.integers(-128, 128, (C, k, k), dtype=np.int8),
        "shifts": [int(s) for s in rng.integers(7, 11, 3)],
        "relus": [bool(r) for r in rng.random(2) < 0.5],
    }


def chain_program(dev: Device, p: dict):
    """GEMM 1 (INP, as every GEMM here an init GEMM without bias) writes the image to ACC rows A, OUT requantized;
    EPI src_out: GEMM 2 reduces kk OUT rows A a row into rows B, GEMM 3 (right after it, the same state) reads
    OUT rows B into rows C; EPI src_out with the depthwise mode: GEMM 4 convolves the OUT image (rows A, pitch
    wd) into rows D; EPI without src_out: GEMM 5 reads INP again, rows E. Returns ({region: OUT rows}, counters)."""
    h, wd, k, stride, kk, r = p["h"], p["wd"], p["k"], p["stride"], p["kk"], p["rows"]
    n, m = h * wd, h * wd // kk
    oh, ow = (h - k) // stride + 1, (wd - k) // stride + 1
    s1, s2, s3 = p["shifts"]
    relu1, relu2 = p["relus"]
    w_dw = window_weights(p["wdw"], C)
    wgt = np.concatenate([p["w1"][None], p["w2"], p["w3"][None], w_dw])
    e2, e3, e_dw = 1, 1 + kk, 2 + kk  # WGT elements of GEMMs 2, 3 and the depthwise window
    i0 = p["inp_base"]
    load_inputs(dev, {i0: p["x"]}, wgt)
    cmd = dev.commands()
    kernels = [(r["A"], i0, 0), (r["B"], r["A"], e2), (r["C"], r["B"], e3), (r["D"], r["A"], e_dw), (r["E"], i0, 0)]
    for uop in kernels:
        cmd.load_kernel([uop])  # one LOAD UOP, before the GEMMs (see load_inputs)
    rows = {"dst_factor": (1, 0), "src_factor": (1, 0), "init": True}
    cmd.epi(req=True, shift=s1, relu=relu1)
    cmd.gemm([(r["A"], i0, 0)], iter_out=n, **rows)
    cmd.epi(req=True, shift=s2, relu=relu2, src_out=True)
    reduce = {"iter_out": m, "iter_in": kk, "dst_factor": (1, 0), "src_factor": (kk, 1), "wgt_factor": (0, 1)}
    cmd.gemm([(r["B"], r["A"], e2)], **reduce, init=True)
    cmd.gemm([(r["C"], r["B"], e3)], iter_out=m, **rows)
    cmd.epi(req=True, shift=s3, dw=(k, stride, wd), src_out=True)
    window = {"iter_out": oh, "iter_in": ow, "dst_factor": (ow, 1), "src_factor": (stride * wd, stride)}
    cmd.gemm([(r["D"], r["A"], e_dw)], **window, init=True)
    cmd.epi(req=True, shift=s1, relu=relu1)
    cmd.gemm([(r["E"], i0, 0)], iter_out=n, **rows)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    sizes = {"A": n, "B": m, "C": m, "D": oh * ow, "E": n}
    readers = {name: store_rows(dev, cmd, r[name], size) for name, size in sizes.items()}
    counters = cmd.synchronize().counters
    return {name: read() for name, read in readers.items()}, counters


def chain_reference(p: dict) -> dict[str, np.ndarray]:
    h, wd, stride, kk = p["h"], p["wd"], p["stride"], p["kk"]
    s1, s2, s3 = p["shifts"]
    relu1, relu2 = p["relus"]
    m = h * wd // kk
    img = requant(dense(p["x"], p["w1"]), s1, relu1)
    b = requant(np.einsum("rjc,joc->ro", img[: m * kk].reshape(m, kk, C).astype(np.int64), p["w2"]), s2, relu2)
    c = requant(dense(b, p["w3"]), s2, relu2)
    conv = reference(img.reshape(h, wd, C).transpose(2, 0, 1), p["wdw"], np.zeros(C, np.int32), stride, 0)
    d = requant(conv, s3).transpose(1, 2, 0).reshape(-1, C)
    return {"A": img, "B": b, "C": c, "D": d, "E": img}


@pytest.mark.parametrize("seed", range(6))
def test_random_chains_through_out_on_both_backends(devices, seed):
    p = chain_case(seed)
    got, counters = both(devices, lambda dev: chain_program(dev, p))
    want = chain_reference(p)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    n, m = p["h"] * p["wd"], p["h"] * p["wd"] // p["kk"]
    pixels = len(want["D"])
    assert counters.gemm_iters == 2 * n + m * p["kk"] + m + pixels
    assert counters.insn_counts["EPI"] == 4 and counters.insn_counts["GEMM"] == 5


def switch_program(dev: Device, x: np.ndarray, y: np.ndarray, w: np.ndarray, n: int):
    """INP rows 0 .. n-1 hold ``x``; GEMM 1 writes ``y``'s rows (truncated: an identity weight) to ACC rows
    0 .. n-1, so OUT rows 0 .. n-1 hold ``y``. The same micro-op then reads rows 0 .. n-1 four times, each GEMM
    right after an EPI that switches the source: from OUT (rows 2n..), INP (3n..), OUT (4n..), INP (5n..).
    Returns ({GEMM: OUT rows}, counters)."""
    load_inputs(dev, {0: x, n: y}, np.stack([np.eye(C, dtype=np.int8), w]))
    cmd = dev.commands()
    kernels = [[(0, n, 0)]] + [[((2 + j) * n, 0, 1)] for j in range(4)]
    for uops in kernels:
        cmd.load_kernel(uops)
    rows = {"iter_out": n, "dst_factor": (1, 0), "src_factor": (1, 0), "init": True}
    cmd.gemm(kernels[0], **rows)
    for j, from_out in enumerate((True, False, True, False)):
        cmd.epi(req=True, shift=8, src_out=from_out)
        cmd.gemm(kernels[1 + j], **rows)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    readers = [store_rows(dev, cmd, (2 + j) * n, n) for j in range(4)]
    counters = cmd.synchronize().counters
    return {f"gemm{j}": read() for j, read in enumerate(readers)}, counters


def test_an_epi_without_src_out_reads_inp_again(devices):
    rng = np.random.default_rng(11)
    n = 12
    x, y = (rng.integers(-128, 128, (n, C), dtype=np.int8) for _ in range(2))
    w = rng.integers(-128, 128, (C, C), dtype=np.int8)
    got, _ = both(devices, lambda dev: switch_program(dev, x, y, w, n))
    from_out, from_inp = requant(dense(y, w), 8), requant(dense(x, w), 8)
    assert not np.array_equal(from_out, from_inp)
    for j, want in enumerate((from_out, from_inp, from_out, from_inp)):
        np.testing.assert_array_equal(got[f"gemm{j}"], want, err_msg=f"gemm{j}")


def tight_program(dev: Device, x: np.ndarray, w: np.ndarray, acc: np.ndarray):
    """Under src_out from the start (no req: OUT rows are ACC's low bytes), each writer of ACC rows Q, a GEMM
    (reading OUT rows 0 .. n-1, which hold ``x``, through an identity weight), an ALU ADD, an ALU MUL and a LOAD ACC
    (of ``acc``, rows R), is followed at once by a GEMM whose first read is the row its writer wrote last (its
    micro-ops walk the rows backwards): the OUT copy's write, two cycles after ACC's, lands before that read.
    Returns ({reader: OUT rows}, counters)."""
    n = len(x)
    q, r = 2 * n, 3 * n
    load_inputs(dev, {0: x}, np.stack([np.eye(C, dtype=np.int8), w]))
    acc_d = dev.array(acc[:, None])
    cmd = dev.commands()
    # the readers' micro-ops: reader k writes rows 4n + kn.. from rows q.. (r.. for the LOAD's), the last first
    readers = [[(4 * n + k * n + j, (r if k == 3 else q) + j, 1) for j in reversed(range(n))] for k in range(4)]
    kernels = [[(0, 0, 0)], [(q, 0, 0)], [(q, 0)], *readers]
    for uops in kernels:
        cmd.load_kernel(uops)
    rows = {"iter_out": n, "dst_factor": (1, 0), "src_factor": (1, 0)}
    cmd.gemm(kernels[0], **rows, init=True)  # OUT rows 0 .. n-1: x, from INP
    cmd.epi(src_out=True)
    cmd.gemm(kernels[1], **rows, init=True)  # ACC rows q..: x again, from OUT
    cmd.gemm(kernels[3], init=True)
    cmd.alu(AluOp.ADD, kernels[2], iter_out=n, dst_factor=(1, 0), imm=3)
    cmd.gemm(kernels[4], init=True)
    cmd.alu(AluOp.MUL, kernels[2], iter_out=n, dst_factor=(1, 0), imm=-2)
    cmd.gemm(kernels[5], init=True)
    cmd.load(MemType.ACC, r, acc_d, 0, 1, n, n)
    cmd.gemm(kernels[6], init=True)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    stored = [store_rows(dev, cmd, 4 * n + k * n, n) for k in range(4)]
    counters = cmd.synchronize().counters
    return {name: read() for name, read in zip(("gemm", "add", "mul", "load"), stored, strict=True)}, counters


def test_a_gemm_reads_the_row_written_right_before(devices):
    rng = np.random.default_rng(13)
    n = 10
    x = rng.integers(-128, 128, (n, C), dtype=np.int8)
    w = rng.integers(-128, 128, (C, C), dtype=np.int8)
    acc = rng.integers(-(1 << 20), 1 << 20, (n, C)).astype(np.int32)
    got, _ = both(devices, lambda dev: tight_program(dev, x, w, acc))
    added = (x.astype(np.int64) + 3).astype(np.int8)
    doubled = (added.astype(np.int64) * -2).astype(np.int8)
    inputs = {"gemm": x, "add": added, "mul": doubled, "load": acc.astype(np.int8)}
    for name, v in inputs.items():
        np.testing.assert_array_equal(got[name], dense(v, w).astype(np.int8), err_msg=name)


def test_start_clears_src_out(devices):
    """A run that ends with src_out set; the next run's GEMM (no EPI) reads INP, not the OUT rows left behind."""
    rng = np.random.default_rng(12)
    n = 8
    x, y = (rng.integers(-128, 128, (n, C), dtype=np.int8) for _ in range(2))
    w = rng.integers(-128, 128, (C, C), dtype=np.int8)

    def program(dev: Device):
        switch_program(dev, x, y, w, n)  # OUT rows 0 .. n-1 hold y
        cmd = dev.commands()
        cmd.epi(src_out=True)  # left set at the end of the run
        cmd.synchronize()
        w_d = dev.array(w[None])
        cmd = dev.commands()
        cmd.load(MemType.WGT, 1, w_d, 0, 1, 1, 1)
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        cmd.gemm([(6 * n, 0, 1)], iter_out=n, dst_factor=(1, 0), src_factor=(1, 0), init=True)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        read = store_rows(dev, cmd, 6 * n, n)
        counters = cmd.synchronize().counters
        return {"out": read()}, counters

    got, _ = both(devices, program)
    np.testing.assert_array_equal(got["out"], dense(x, w).astype(np.int8))  # truncated: no EPI in this run


def test_encoding_and_assembly_round_trip():
    e = EpiInsn(req=True, shift=5, src_out=True, dw=True, dw_k=3, dw_stride=1, dw_pitch=7)
    assert decode(encode(e)) == e
    assert encode(e) != encode(replace(e, src_out=False))
    text = disassemble([e])
    assert "src_out" in text and assemble(text) == [e]


def test_gemm_writing_a_row_it_reads_from_out_faults():
    dev = Device(FULL)
    cmd = dev.commands()
    cmd.epi(src_out=True)
    # rows 0 .. 11 read, 10 .. 21 written: 10 and 11 both
    cmd.gemm([(10, 0, 0)], iter_out=12, dst_factor=(1, 0), src_factor=(1, 0))
    with pytest.raises(FaultError, match="GEMM reading OUT \\(EPI src_out\\) writes row 10, which it also reads"):
        cmd.synchronize()
    # the same rows from INP are fine
    cmd = dev.commands()
    cmd.gemm([(10, 0, 0)], iter_out=12, dst_factor=(1, 0), src_factor=(1, 0))
    cmd.synchronize()


def test_depthwise_window_over_its_own_rows_faults():
    """A depthwise GEMM's window rows count as read: one of them written by the GEMM faults."""
    dev = Device(FULL)
    cmd = dev.commands()
    cmd.epi(dw=(3, 1, 10), src_out=True)  # window rows src + ky * 10 + kx: 0..2, 10..12, 20..22
    cmd.gemm([(21, 0, 0)], init=True)
    with pytest.raises(FaultError, match="writes row 21"):
        cmd.synchronize()
    cmd = dev.commands()
    cmd.epi(dw=(3, 1, 10), src_out=True)
    cmd.gemm([(23, 0, 0)], init=True)
    cmd.synchronize()


def test_src_out_needs_out_rows_to_be_inp_rows():
    cfg = FULL
    odd = replace(cfg, name="odd", block_in=32, inp_buff_bytes=65536, part="xczu7ev")
    assert check_insn(EpiInsn(src_out=True), cfg) == []
    [problem] = check_insn(EpiInsn(src_out=True), odd)
    assert "block_in == block_out" in problem and "'odd' has 32 and 16" in problem
    cmd = Device(odd).commands()
    with pytest.raises(CommandError, match="EPI src_out: .* needs block_in == block_out"):
        cmd.epi(src_out=True)
        cmd.synchronize()
