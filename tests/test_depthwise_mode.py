"""The GEMM core's depthwise mode (EPI dw): one channel block of a depthwise convolution per program, strides
1 and 2, 3x3 and 5x5 kernels, padding, bias by init, per-channel requantization by an ALU MUL pass, bit-exact
against a numpy integer reference on the simulator and the RTL, which agree on results, work counters and
cycles; the window process itself; the cycle model's count; the encoding and the refusals."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from full_units import FULL

from vdla.config import DW_MAX_K, load_config
from vdla.cycles import dw_slots
from vdla.isa import AluOp, EpiInsn, GemmInsn, MemType, Stage, assemble, decode, disassemble, encode
from vdla.isa.validate import check_insn
from vdla.runtime import Device
from vdla.runtime.commands import CommandError
from vdla.runtime.sim.semantics import dw_window_rows


def reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Depthwise convolution (C, H, W) x (C, K, K) + bias (C,) -> int64 (C, OH, OW), zero padding."""
    c, h, wd = x.shape
    k = w.shape[1]
    xp = np.zeros((c, h + 2 * pad, wd + 2 * pad), np.int64)
    xp[:, pad : pad + h, pad : pad + wd] = x
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    out = np.zeros((c, oh, ow), np.int64) + bias[:, None, None]
    for ky in range(k):
        for kx in range(k):
            tap = xp[:, ky : ky + stride * (oh - 1) + 1 : stride, kx : kx + stride * (ow - 1) + 1 : stride]
            out += tap * w[:, ky, kx, None, None].astype(np.int64)
    return out


def window_weights(w: np.ndarray, block: int) -> np.ndarray:
    """(block, K, K) per-channel taps -> the WGT elements of the window's passes: (2 * groups, block, block),
    element 2g + h row l (lane) column i holding channel l's tap at position p = g * block + i (p = ky * DW_MAX_K
    + DW_MAX_K - K + kx) for the lanes of half h, zero elsewhere."""
    k = w.shape[1]
    groups, half = -(-DW_MAX_K * k // block), block // 2
    pos = np.zeros((groups * block, block), np.int8)  # (position, channel)
    for ky in range(k):
        for kx in range(k):
            pos[ky * DW_MAX_K + DW_MAX_K - k + kx] = w[:, ky, kx]
    out = np.zeros((groups, 2, block, block), np.int8)
    for h in range(2):
        lanes = slice(h * half, (h + 1) * half)
        out[:, h, lanes, :] = pos.reshape(groups, block, block)[:, :, lanes].transpose(0, 2, 1)
    return out.reshape(2 * groups, block, block)


def requant(v: np.ndarray, shift: int) -> np.ndarray:
    v = v.astype(np.int64)
    if shift:
        v = (v + (1 << (shift - 1))) >> shift
    return np.clip(v, -128, 127).astype(np.int8)


def mul_shift(a: np.ndarray, m: np.ndarray, s: int) -> np.ndarray:
    p = a.astype(np.int64) * m.astype(np.int64)
    return ((p + (1 << (s - 1))) >> s if s else p).astype(np.int64)


def dw_program(dev: Device, x, w, bias, stride: int, pad: int, shift: int, mult=None, mshift: int = 0, pairs=False):
    """One channel block: LOAD the padded input tile, the window's weights, the bias rows (one per output row);
    EPI dw; one init GEMM over the output (rows x columns; with ``pairs``, two micro-ops, one per column of each
    pair of columns: the window moves by the stride between consecutive iterations all the same); optionally an
    ALU MUL by per-channel multipliers; STORE the requantized OUT rows. Returns (int8 (OH, OW, C), counters)."""
    cfg = dev.cfg
    c, h, wd = x.shape
    k = w.shape[1]
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    pitch = wd + 2 * pad
    x_d = dev.array(np.ascontiguousarray(x.transpose(1, 2, 0)))
    w_d = dev.array(window_weights(w, cfg.block_in))
    b_d = dev.array(np.repeat(bias.astype(np.int32)[None], oh, axis=0))
    out = dev.alloc(oh * ow * c)
    elements = 2 * cfg.dw_groups(k)
    acc0, bias_row = 0, oh * ow
    cmd = dev.commands()
    cmd.load(MemType.INP, 0, x_d, 0, h, wd, wd, pad=(pad, pad, pad, pad))
    cmd.load(MemType.WGT, 0, w_d, 0, 1, elements, elements)
    cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
    cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
    cmd.load(MemType.ACC, bias_row, b_d, 0, 1, oh, oh)
    if mult is not None:
        m_d = dev.array(mult.astype(np.int32))
        cmd.load(MemType.ACC, bias_row + oh, m_d, 0, 1, 1, 1)
    cmd.epi(req=mult is None, shift=shift, bias_base=bias_row, dw=(k, stride, pitch))
    loop = dict(iter_out=oh, iter_in=ow, dst_factor=(ow, 1), src_factor=(stride * pitch, stride))
    uops = [(acc0, 0, 0)]
    if pairs:
        loop.update(iter_in=ow // 2, dst_factor=(ow, 2), src_factor=(stride * pitch, 2 * stride))
        uops.append((acc0 + 1, stride, 0))
    cmd.gemm(uops, init=True, **loop)
    if mult is not None:
        cmd.epi(req=True, shift=shift)
        cmd.alu(AluOp.MUL, [(acc0, bias_row + oh)], oh, ow, (ow, 1), (0, 0), shift=mshift)
    cmd.dep_push(Stage.COMPUTE, Stage.STORE)
    cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
    cmd.store(acc0, out, 0, 1, oh * ow, oh * ow)
    counters = cmd.synchronize().counters
    return out.read(np.int8, (oh, ow, c)), counters


def case(seed: int, h: int, wd: int, k: int, c: int = 16):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (c, h, wd), dtype=np.int8)
    w = rng.integers(-128, 128, (c, k, k), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, c).astype(np.int32)
    return x, w, bias


CASES = [  # (H, W, K, stride, pad)
    (9, 11, 3, 1, 1),
    (12, 13, 3, 2, 1),
    (10, 9, 5, 1, 2),
    (13, 12, 5, 2, 2),
    (7, 7, 3, 1, 0),
    (6, 8, 1, 1, 0),
]


@pytest.fixture(scope="module")
def devices(rtl_library) -> tuple[Device, Device]:
    return Device(FULL), Device(FULL, backend="rtl")


def both(devices, program):
    """``program(dev)`` -> (result, counters) on both backends: equal results, work and cycle counters."""
    (got_sim, c_sim), (got_rtl, c_rtl) = (program(d) for d in devices)
    np.testing.assert_array_equal(got_rtl, got_sim)
    assert c_sim.gemm_iters == c_rtl.gemm_iters and c_sim.insn_counts == c_rtl.insn_counts
    assert c_sim.cycles == c_rtl.cycles
    return got_sim, c_sim


@pytest.mark.parametrize("h,wd,k,stride,pad", CASES, ids=str)
def test_depthwise_on_both_backends(devices, h, wd, k, stride, pad):
    x, w, bias = case(h * 100 + k * 10 + stride, h, wd, k)
    shift = 9
    got, counters = both(devices, lambda dev: dw_program(dev, x, w, bias, stride, pad, shift))
    want = requant(reference(x, w, bias, stride, pad), shift).transpose(1, 2, 0)
    np.testing.assert_array_equal(got, want)
    oh, ow = want.shape[:2]
    assert counters.gemm_iters == oh * ow


def test_two_micro_ops_on_both_backends(devices):
    """Consecutive pixels of different micro-ops (two a row's column pair): each pixel's passes follow its own
    reads and a free slot instead of overlapping the next pixel's. Equal on both backends, in the cycles of the
    cycle model, and the output of the one-micro-op program (whose windows are fresh once a row, not twice)."""
    h, wd, k, stride, pad = 10, 10, 3, 1, 1
    x, w, bias = case(7, h, wd, k)
    got, counters = both(devices, lambda dev: dw_program(dev, x, w, bias, stride, pad, 9, pairs=True))
    one, one_counters = dw_program(devices[0], x, w, bias, stride, pad, 9)
    np.testing.assert_array_equal(got, one)
    pixels = h * wd  # 3x3 stride 1, padded: the output is the input's size
    pairs = 2 * h * 9 + (pixels - 2 * h) * 3 + pixels * 3  # fresh windows twice a row, a free slot, 2 passes
    overlapped = 9 + (h - 1) * 9 + (pixels - h) * 3 + 3
    assert counters.cycles - one_counters.cycles == pairs - overlapped


def test_per_channel_requantization(devices):
    """A per-channel multiplier (ALU MUL by an ACC row, rounding shift) after the depthwise GEMM, then REQ."""
    x, w, bias = case(3, 10, 10, 3)
    mult = np.random.default_rng(4).integers(1 << 12, 1 << 15, 16).astype(np.int32)
    got, _ = both(devices, lambda dev: dw_program(dev, x, w, bias, 1, 1, 4, mult=mult, mshift=14))
    acc = reference(x, w, bias, 1, 1)
    want = requant(mul_shift(acc, mult[:, None, None], 14), 4).transpose(1, 2, 0)
    np.testing.assert_array_equal(got, want)


def test_window_rows_shift_in_columns():
    """Inner index 0 loads k columns, the others shift in ``stride``; kernel row ky sits ky * pitch further."""
    src = np.array([0, 2, 4, 50, 52]).reshape(1, 5, 1)
    win = dw_window_rows(3, 2, 10, src.reshape(1, 5, 1))
    # after the first iteration: columns 0..2 of rows 0, 10, 20 at positions 2..4 of each register
    assert list(win[0, 2:5]) == [0, 1, 2] and list(win[0, 7:10]) == [10, 11, 12]
    # the second shifts in two columns (3, 4): the register holds 0..4
    assert list(win[1, :5]) == [0, 1, 2, 3, 4]
    # a jump is not a fresh window inside the inner loop: the stride's columns of the new position only
    assert list(win[3, 3:5]) == [51, 52]
    assert (win[:, 3 * DW_MAX_K :] == -1).all()


def test_cycle_model_counts_reads_and_passes():
    cfg = FULL
    epi = EpiInsn(dw=True, dw_k=3, dw_stride=2, dw_pitch=20)
    g = GemmInsn(iter_out=4, iter_in=6)
    # 4 fresh windows of 9 rows and 20 shifts of 2 columns x 3 rows, each overlapping the 2 passes (one WGT
    # element) of the pixel before; the last pixel's passes after a free slot
    assert dw_slots(cfg, epi, g) == 4 * 9 + 20 * 6 + 1 + 2
    # reads fewer than the passes + 1: 1x1 (1 read, 2 passes), 5x5 stride 1 (5 reads, 4 passes: 2 WGT elements)
    assert dw_slots(cfg, replace(epi, dw_k=1, dw_stride=1), g) == 1 + 23 * 3 + 3
    assert dw_slots(cfg, replace(epi, dw_k=5, dw_stride=1), g) == 25 + 3 * 25 + 20 * 5 + 5
    # two micro-ops: every pixel's reads, a free slot and its own passes (8 fresh windows, 40 shifts)
    assert dw_slots(cfg, epi, replace(g, uop_end=2)) == 8 * 9 + 40 * 6 + 48 * 3
    assert cfg.dw_groups(3) == 1 and cfg.dw_groups(5) == 2


def test_encoding_and_assembly_round_trip():
    e = EpiInsn(req=True, shift=5, dw=True, dw_k=5, dw_stride=2, dw_pitch=1234)
    assert decode(encode(e)) == e
    text = disassemble([e])
    assert "dw=5,2,1234" in text and assemble(text) == [e]


def test_bad_depthwise_state_is_refused():
    cfg = FULL
    assert any("kernel 6" in p for p in check_insn(EpiInsn(dw=True, dw_k=6, dw_stride=1), cfg))
    assert any("stride 3" in p for p in check_insn(EpiInsn(dw=True, dw_k=2, dw_stride=3), cfg))
    assert any(
        "no depthwise mode" in p for p in check_insn(EpiInsn(dw=True, dw_k=3, dw_stride=1), load_config("batch2"))
    )
    off = replace(cfg, depthwise_mode=False)
    assert not off.dw_supported and off.hash != cfg.hash  # a bitstream without the mode is another config
    assert any("depthwise_mode is false" in p for p in check_insn(EpiInsn(dw=True, dw_k=3, dw_stride=1), off))


def test_window_beyond_inp_is_refused_by_the_builder():
    dev = Device(FULL)
    cmd = dev.commands()
    cmd.epi(dw=(3, 1, dev.cfg.inp_depth // 2))
    with pytest.raises(CommandError, match="src index"):
        cmd.gemm([(0, 0, 0)], iter_out=1, iter_in=2, dst_factor=(0, 1), src_factor=(0, 1))
