"""Differential test: random valid programs leave identical DRAM on the simulator and the RTL; so do random
depthwise layers compiled to the block-diagonal parts that run MobileNets' depthwise convolutions.

The programs draw random tiles (sizes, strides, offsets, padding), random micro-op kernels and loop
factors, every ALU opcode with immediates or overlapping second operands, ACC and ACC_8BIT loads, EPI
states (OUT requantization, bias rows in the thread's share, among its destinations or in a shared area)
with GEMMs that initialise their accumulators, the OUT-path multiplier (EPI mul, its rows in the shared
area), the depthwise mode (random kernels up to DW_MAX_K, strides and window pitches, with any micro-op
kernel and loop), GEMMs that read their input rows from OUT (src_out: one half of the thread's
accumulators, written by the GEMMs, ALUs and loads before, into the other), and one or two virtual threads
(double-buffered loads) whose token pattern orders every producer before its consumer (so the result does
not depend on timing). Every accumulator region is stored back, 8 bits at a time, at the end,
through truncating or requantizing OUT writes.
"""

from __future__ import annotations

import numpy as np
import pytest
from full_units import BOTH

from vdla.config import DW_MAX_K, HwConfig
from vdla.isa import AluOp, MemType, Stage
from vdla.runtime import Device

INP_SHARE, WGT_SHARE, ACC_SHARE = 96, 16, 48
BIAS_AREA, BIAS_ROWS = 2 * ACC_SHARE, 16  # ACC rows both threads may read bias rows from


def _span(rng, size: int, iters: int) -> tuple[int, int]:
    """A loop factor and a base so that base + (iters - 1) * factor < size."""
    factor = int(rng.integers(0, 4)) if iters > 1 else 0
    factor = min(factor, (size - 1) // max(iters - 1, 1))
    return factor, (size - 1) - (iters - 1) * factor


def _loop(rng, sizes: dict[str, int]) -> tuple[int, int, dict[str, tuple[int, int]], list[tuple[int, ...]]]:
    """Random iteration counts, factors and micro-ops whose every index stays inside ``sizes``."""
    io, ii = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    factors, room = {}, {}
    for name, size in sizes.items():
        fo, left = _span(rng, size, io)
        fi, room[name] = _span(rng, left + 1, ii)
        factors[name] = (fo, fi)
    nuops = int(rng.integers(1, 5))
    uops = [tuple(int(rng.integers(0, room[n] + 1)) for n in sizes) for _ in range(nuops)]
    return io, ii, factors, uops


Dw = tuple[int, int, int] | None  # the depthwise mode of the EPI state: (kernel, stride, pitch)


HALF = ACC_SHARE // 2  # a GEMM reading OUT (src_out) reads one half of its thread's share and writes the other


def _dw(rng, cfg: HwConfig, src_out: bool = False) -> Dw:
    """A random depthwise mode (or none) for an EPI; with ``src_out`` its window fits in HALF rows."""
    if not cfg.dw_supported or rng.random() < 0.5:
        return None
    k = int(rng.integers(1, DW_MAX_K + 1))
    pitch = int(rng.integers(0, 9))
    if src_out and k > 1:
        pitch = min(pitch, (HALF - 1) // (k - 1) - 1)
    return k, int(rng.integers(1, min(k, 3) + 1)), pitch


def _gemm_sizes(cfg: HwConfig, dw: Dw, src_out: bool = False) -> dict[str, int]:
    """The index ranges of a GEMM's loop: in the depthwise mode its window's rows and WGT elements fit too; with
    ``src_out`` its destinations and its OUT rows are a half of the thread's share each."""
    dst, src = (HALF, HALF) if src_out else (ACC_SHARE, INP_SHARE)
    if dw is None:
        return {"dst": dst, "src": src, "wgt": WGT_SHARE}
    k, _, pitch = dw
    return {"dst": dst, "src": src - (k - 1) * (pitch + 1), "wgt": WGT_SHARE - 2 * cfg.dw_groups(k) + 1}


def _epi(cmd, rng, a0: int, dst: int, dw: Dw = None, src_out: bool = False) -> None:
    """A random EPI (depthwise mode ``dw``, ``src_out``); its bias rows (up to 3, one per iter_out) lie in the
    thread's share, start at one of its GEMM destinations ``dst``, or lie in the shared bias area."""
    where = rng.choice(["none", "share", "dst", "area"], p=[0.2, 0.2, 0.4, 0.2])
    base = {
        "none": None,
        "share": a0 + int(rng.integers(0, ACC_SHARE - 2)),
        "dst": min(dst, a0 + ACC_SHARE - 3),
        "area": BIAS_AREA + int(rng.integers(0, BIAS_ROWS - 2)),
    }[where]
    req, relu, shift = rng.random() < 0.5, rng.random() < 0.5, int(rng.integers(0, 32))
    # the OUT-path multiplier's rows (up to 3) in the shared area, which no GEMM writes
    mul = (BIAS_AREA + int(rng.integers(0, BIAS_ROWS - 2)), int(rng.integers(0, 64))) if rng.random() < 0.4 else None
    mul = mul if cmd.cfg.out_multiplier else None
    cmd.epi(req=req, relu=relu, shift=shift, bias_base=base, dw=dw, src_out=src_out, mul=mul)


def random_program(dev: Device, seed: int) -> None:
    """Build and run one random program on ``dev`` (deterministic in ``seed``)."""
    cfg = dev.cfg
    rng = np.random.default_rng(seed)
    vt = int(rng.integers(1, 3))
    tiles = int(rng.integers(2, 5))
    inp = dev.array(rng.integers(-128, 128, (512, cfg.batch, cfg.block_in), dtype=np.int8))
    wgt = dev.array(rng.integers(-128, 128, (64, cfg.block_out, cfg.block_in), dtype=np.int8))
    acc = dev.array(rng.integers(-(1 << 31), 1 << 31, (256, cfg.batch, cfg.block_out), dtype=np.int64).astype(np.int32))
    acc8 = dev.array(rng.integers(-128, 128, (256, cfg.batch, cfg.block_out), dtype=np.int8))
    out = dev.array(rng.integers(0, 256, (tiles * 4 * ACC_SHARE, cfg.out_elem_bytes), dtype=np.uint8))
    cmd = dev.commands()
    cmd.load(MemType.ACC, BIAS_AREA, acc, 200, 1, BIAS_ROWS, BIAS_ROWS)
    dw: Dw = None  # the EPI state's depthwise mode
    src_out = False  # and src_out
    for j in range(tiles):
        t = j % vt
        i0, w0, a0 = t * INP_SHARE, t * WGT_SHARE, t * ACC_SHARE
        if j >= vt:
            cmd.dep_pop(Stage.COMPUTE, Stage.LOAD)
        for _ in range(int(rng.integers(1, 3))):  # padded, strided INP tiles
            pads = tuple(int(p) for p in rng.integers(0, 3, 4))
            y, x = int(rng.integers(1, 5)), int(rng.integers(1, 7))
            while (pads[0] + y + pads[1]) * (pads[2] + x + pads[3]) > INP_SHARE:
                y, x = max(1, y - 1), max(1, x - 1)
            n = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
            stride = x + int(rng.integers(0, 4))
            cmd.load(
                MemType.INP,
                i0 + int(rng.integers(0, INP_SHARE - n + 1)),
                inp,
                int(rng.integers(0, 512 - (y - 1) * stride - x)),
                y,
                x,
                stride,
                pad=pads,
            )
        y, x = int(rng.integers(1, 3)), int(rng.integers(1, 8))
        cmd.load(
            MemType.WGT,
            w0 + int(rng.integers(0, WGT_SHARE - y * x + 1)),
            wgt,
            int(rng.integers(0, 64 - y * x)),
            y,
            x,
            x,
        )
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        if j:  # the stores of the previous tile are done (one store->compute queue: keep pushes and pops paired)
            cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        mem = MemType.ACC if rng.random() < 0.6 else MemType.ACC_8BIT
        pads = (int(rng.integers(0, 2)), 0, int(rng.integers(0, 2)), int(rng.integers(0, 2)))
        y, x = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        n = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
        cmd.load(
            mem,
            a0 + int(rng.integers(0, ACC_SHARE - n + 1)),
            acc if mem == MemType.ACC else acc8,
            int(rng.integers(0, 200)),
            y,
            x,
            x + int(rng.integers(0, 3)),
            pad=pads,
        )
        for _ in range(int(rng.integers(1, 4))):
            epi = rng.random() < 0.5
            if epi:
                src_out = cfg.src_out_refusal() is None and rng.random() < 0.3
                dw = _dw(rng, cfg, src_out)
            io, ii, f, uops = _loop(rng, _gemm_sizes(cfg, dw, src_out))
            if src_out:  # OUT rows of one half of the share, into the other
                d0, s0 = (a0, a0 + HALF) if rng.random() < 0.5 else (a0 + HALF, a0)
                uops = [(d0 + d, s0 + s, w0 + w) for d, s, w in uops]
            else:
                uops = [(a0 + d, i0 + s, w0 + w) for d, s, w in uops]
            if epi:
                _epi(cmd, rng, a0, uops[0][0], dw, src_out)
            reset = rng.random() < 0.15
            cmd.gemm(
                uops,
                iter_out=io,
                iter_in=ii,
                dst_factor=f["dst"],
                src_factor=f["src"],
                wgt_factor=f["wgt"],
                reset=reset,
                init=not reset and rng.random() < 0.6,
            )
        for _ in range(int(rng.integers(1, 5))):
            op = AluOp(int(rng.integers(0, len(AluOp))))
            io, ii, f, uops = _loop(rng, {"dst": ACC_SHARE, "src": ACC_SHARE})
            uops = [(a0 + d, a0 + s) for d, s in uops]
            shift = op in (AluOp.SHR, AluOp.RSHR)
            imm = int(rng.integers(-40, 40) if shift else rng.integers(-(1 << 15), 1 << 15))
            cmd.alu(
                op,
                uops,
                iter_out=io,
                iter_in=ii,
                dst_factor=f["dst"],
                src_factor=f["src"],
                imm=imm if rng.random() < 0.5 else None,
                reset=rng.random() < 0.05,
            )
        if j + vt < tiles:
            cmd.dep_push(Stage.COMPUTE, Stage.LOAD)
        for k in range(4):  # all 32 bits of the thread's accumulators, 8 at a time (truncated or requantized)
            if k:
                cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
                if rng.random() < 0.5:
                    _epi(cmd, rng, a0, a0)
                    dw, src_out = None, False
                cmd.alu(AluOp.SHR, [(a0, 0)], iter_out=ACC_SHARE, dst_factor=(1, 0), imm=8)
            cmd.dep_push(Stage.COMPUTE, Stage.STORE)
            cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
            rows = int(rng.choice([1, 2, 3, 4, 6]))
            cmd.store(a0, out, (j * 4 + k) * ACC_SHARE, rows, ACC_SHARE // rows, ACC_SHARE // rows)
            if k < 3 or j + 1 < tiles:
                cmd.dep_push(Stage.STORE, Stage.COMPUTE)
    cmd.synchronize()


@pytest.mark.parametrize("config", BOTH, ids=("pynq", "full"))
@pytest.mark.parametrize("seed", range(16))
def test_random_programs_agree(seed, config, rtl_library):
    sim, rtl = Device(config), Device(config, backend="rtl")
    random_program(sim, seed)
    random_program(rtl, seed)
    assert np.array_equal(sim.dram.mem, rtl.dram.mem)


# ---------------------------------------------------------------------------------------------------------
# Random depthwise layers: the compiler's block-diagonal programs (vdla.compiler.blockdiag), joined parts


# (kernel, stride, padding, residual add) of each seed: every form once, the rest of the layer random
DEPTHWISE_FORMS = [
    (3, 1, 1, True),
    (5, 2, 2, False),
    (3, 2, 0, False),
    (5, 1, 2, True),
    (3, 1, 0, False),
    (5, 2, 0, False),
]


def _depthwise_model(seed: int):
    """A random depthwise layer (channels not a multiple of the block, random map size and weights, an
    activation) of the form ``DEPTHWISE_FORMS[seed]`` as a float ONNX model, with calibration data."""
    from onnx import helper, numpy_helper
    from qdq_check import onnx_model

    rng = np.random.default_rng(1000 + seed)
    c, h, w = int(rng.choice([8, 16, 24, 40])), int(rng.integers(5, 13)), int(rng.integers(5, 13))
    k, stride, pad, residual = DEPTHWISE_FORMS[seed]
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.4, (c, 1, k, k)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.2, c).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["d"], pads=[pad] * 4, strides=[stride] * 2, group=c)]
    act = str(rng.choice(["relu6", "relu", "none"]))
    nodes += {
        "relu6": [helper.make_node("Clip", ["d", "lo", "hi"], ["a"])],
        "relu": [helper.make_node("Relu", ["d"], ["a"])],
        "none": [helper.make_node("Identity", ["d"], ["a"])],
    }[act]
    nodes += [helper.make_node("Add" if residual else "Identity", ["a", "x"] if residual else ["a"], ["y"])]
    model = onnx_model(nodes, inits, f"depthwise{seed}", (1, c, h, w), (1, c, oh, ow))
    calib = rng.normal(0, 1, (4, 1, c, h, w)).astype(np.float32)
    return model, calib, rng.normal(0, 1, (1, c, h, w)).astype(np.float32)


@pytest.mark.parametrize("seed", range(len(DEPTHWISE_FORMS)))
def test_random_depthwise_programs_agree(seed, rtl_library):
    """A random depthwise layer compiled to its block-diagonal parts leaves the same outputs on the simulator
    and the RTL, bit for bit, in cycle counts within the cycle model's 5%."""
    pytest.importorskip("onnx")
    from vdla.model import Module
    from vdla.model.pipeline import compile_model

    model, calib, x = _depthwise_model(seed)
    artifact, _ = compile_model(model, calib)
    assert any(s.kind == "accel" and s.layer["op"] == "depthwise_conv2d" for s in artifact.steps)
    runs = {}
    for backend in ("sim", "rtl"):
        mod = Module(artifact, backend)
        runs[backend] = (mod.run({"x": x}), mod.last_report.accel_cycles)
    (out_sim, cyc_sim), (out_rtl, cyc_rtl) = runs["sim"], runs["rtl"]
    np.testing.assert_array_equal(out_sim, out_rtl)
    assert abs(cyc_sim - cyc_rtl) <= 0.05 * cyc_rtl, (cyc_sim, cyc_rtl)
