"""Programs that characterise the accelerator: the suite of GEMM-, load-, store- and ALU-bound programs and
a padded convolution (``SUITE``, each with 1 and 2 virtual threads), and the speed benchmark's long GEMM
(``gemm_bound``).

Each workload builds its program on a :class:`~vdla.runtime.Device`, runs it on the device's backend,
checks the result against numpy (raising :class:`WorkloadError` otherwise) and returns the run. The same
code runs on ``sim``, ``rtl`` and ``pynq``, so the cycle counts of the backends can be compared program by
program (``vdla cycle-agreement``); a program's data are seeded, so every run is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vdla.isa import AluOp, MemType, Stage, clip_imm
from vdla.isa.arith import INT8_MAX, INT8_MIN
from vdla.runtime.backend import RunError, RunResult
from vdla.runtime.device import Device
from vdla.zoo.tiled_matmul import matmul_oracle, tiled_matmul


class WorkloadError(RunError):
    """A workload computed a wrong result on a backend."""


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # gemm, load, store, alu, pad
    vthreads: int
    run: Callable[[Device], RunResult]


def matmul(
    dev: Device, m: int, k: int, n: int, vthreads: int, tile_rows: int | None = None, seed: int = 0
) -> RunResult:
    """A tiled int8 matrix multiply (vdla.zoo.tiled_matmul), checked against numpy."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    res = tiled_matmul(dev, a, b, shift=10, vthreads=vthreads, tile_rows=tile_rows)
    if not np.array_equal(res.out, matmul_oracle(a, b, 10)):
        raise WorkloadError(f"matmul {m}x{k}x{n} is wrong on the {dev.backend.name} backend")
    return res.run


def store_stream(dev: Device, vthreads: int, tiles: int = 24, rows: int = 16, cols: int = 4) -> RunResult:
    """Short ALU updates of accumulator tiles, each stored in full: bound by the store stage."""
    cfg = dev.cfg
    n = rows * cols
    rng = np.random.default_rng(1)
    init = rng.integers(-1000, 1000, (vthreads * n, cfg.batch, cfg.block_out), dtype=np.int32)
    src = dev.array(init)
    out = dev.alloc(tiles * n * cfg.out_elem_bytes)
    cmd = dev.commands()
    cmd.load(MemType.ACC, 0, src, 0, 1, vthreads * n, vthreads * n)
    for t in range(tiles):
        base = (t % vthreads) * n
        if t >= vthreads:
            cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        cmd.alu(AluOp.ADD, [(base, 0)], iter_out=n, dst_factor=(1, 0), imm=1)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(base, out, t * n, rows, cols, cols)
        if t + vthreads < tiles:
            cmd.dep_push(Stage.STORE, Stage.COMPUTE)
    run = cmd.synchronize()
    got = out.read(np.int8, (tiles, n, cfg.batch, cfg.block_out))
    for t in range(tiles):
        v = t % vthreads
        expect = (init[v * n : (v + 1) * n].astype(np.int64) + t // vthreads + 1).astype(np.int8)
        if not np.array_equal(got[t], expect):
            raise WorkloadError(f"store stream tile {t} is wrong on the {dev.backend.name} backend")
    return run


def alu_chain(dev: Device, vthreads: int, tiles: int = 8, n: int = 128) -> RunResult:
    """Two-operand and immediate ALU passes over accumulator tiles loaded from DRAM: bound by the ALU."""
    cfg = dev.cfg
    rng = np.random.default_rng(2)
    a = rng.integers(-5000, 5000, (tiles, 2 * n, cfg.batch, cfg.block_out), dtype=np.int32)
    src = dev.array(a)
    out = dev.alloc(tiles * n * cfg.out_elem_bytes)
    cmd = dev.commands()
    for t in range(tiles):
        base = (t % vthreads) * 2 * n
        if t >= vthreads:
            cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        cmd.load(MemType.ACC, base, src, t * 2 * n, 1, 2 * n, 2 * n)
        cmd.alu(AluOp.MUL, [(base, base + n)], iter_out=n, dst_factor=(1, 0), src_factor=(1, 0))
        cmd.alu(AluOp.MAX, [(base, base + n)], iter_out=n, dst_factor=(1, 0), src_factor=(1, 0))
        cmd.alu(AluOp.RSHR, [(base, 0)], iter_out=n, dst_factor=(1, 0), imm=6)
        cmd.alu(AluOp.CLIP, [(base, 0)], iter_out=n, dst_factor=(1, 0), imm=clip_imm(INT8_MIN, INT8_MAX))
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(base, out, t * n, 1, n, n)
        if t + vthreads < tiles:
            cmd.dep_push(Stage.STORE, Stage.COMPUTE)
    run = cmd.synchronize()
    x, y = a[:, :n].astype(np.int64), a[:, n:].astype(np.int64)
    v = np.maximum(((x * y + (1 << 31)) % (1 << 32)) - (1 << 31), y)
    expect = np.clip((v + 32) >> 6, INT8_MIN, INT8_MAX).astype(np.int8)
    if not np.array_equal(out.read(np.int8, expect.shape), expect):
        raise WorkloadError(f"ALU chain is wrong on the {dev.backend.name} backend")
    return run


def padded_conv(dev: Device, vthreads: int, tiles: int = 6, h: int = 8, w: int = 14, cin: int = 2) -> RunResult:
    """A 3x3 convolution over zero-padded input tiles (padding written by the load DMA)."""
    cfg = dev.cfg
    bi, bo = cfg.block_in, cfg.block_out
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (tiles, h, w, cin, cfg.batch, bi), dtype=np.int8)
    wt = rng.integers(-128, 128, (9, cin, bo, bi), dtype=np.int8)
    xb, wb = dev.array(x), dev.array(wt)
    out = dev.alloc(tiles * h * w * cfg.out_elem_bytes)
    ph, pw = h + 2, w + 2
    inp_elems = ph * pw * cin
    cmd = dev.commands()
    cmd.load(MemType.WGT, 0, wb, 0, 1, 9 * cin, 9 * cin)
    for t in range(tiles):
        v = t % vthreads
        inp0, acc0 = v * inp_elems, v * h * w
        if t >= vthreads:
            cmd.dep_pop(Stage.COMPUTE, Stage.LOAD)
        # rows of w*cin elements padded by one pixel (cin elements) on every side
        cmd.load(MemType.INP, inp0, xb, t * h * w * cin, h, w * cin, w * cin, pad=(1, 1, cin, cin))
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        if t >= vthreads:
            cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        cmd.gemm([(acc0, 0, 0)], iter_out=h, iter_in=w, dst_factor=(w, 1), reset=True)
        taps = [
            (acc0, inp0 + (dy * pw + dx) * cin + c, (dy * 3 + dx) * cin + c)
            for dy in range(3)
            for dx in range(3)
            for c in range(cin)
        ]
        cmd.gemm(taps, iter_out=h, iter_in=w, dst_factor=(w, 1), src_factor=(pw * cin, cin))
        cmd.alu(AluOp.SHR, [(acc0, 0)], iter_out=h * w, dst_factor=(1, 0), imm=12)
        if t + vthreads < tiles:
            cmd.dep_push(Stage.COMPUTE, Stage.LOAD)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(acc0, out, t * h * w, 1, h * w, h * w)
        if t + vthreads < tiles:
            cmd.dep_push(Stage.STORE, Stage.COMPUTE)
    run = cmd.synchronize()
    xp = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0), (0, 0), (0, 0)))
    acc = sum(
        np.einsum("thwcbi,coi->thwbo", xp[:, dy : dy + h, dx : dx + w], wt[dy * 3 + dx].astype(np.int64))
        for dy in range(3)
        for dx in range(3)
    )
    expect = ((acc >> 12).astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    if not np.array_equal(out.read(np.int8, expect.shape), expect):
        raise WorkloadError(f"padded convolution is wrong on the {dev.backend.name} backend")
    return run


SUITE = [
    Workload(f"{kind}_bound_vt{vt}" if kind != "pad" else f"padded_conv_vt{vt}", kind, vt, fn)
    for vt in (1, 2)
    for kind, fn in (
        ("gemm", lambda dev, vt=vt: matmul(dev, 512, 128, 256, vt)),
        ("load", lambda dev, vt=vt: matmul(dev, 64, 256, 256, vt, tile_rows=8)),
        ("store", lambda dev, vt=vt: store_stream(dev, vt)),
        ("alu", lambda dev, vt=vt: alu_chain(dev, vt)),
        ("pad", lambda dev, vt=vt: padded_conv(dev, vt)),
    )
]


def gemm_bound(dev: Device, reps: int = 8) -> RunResult:
    """The speed benchmark: a long GEMM-bound matmul (2 virtual threads)."""
    return matmul(dev, 512 * reps, 256, 256, 2)
