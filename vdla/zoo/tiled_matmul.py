"""A hand-scheduled tiled int8 matrix multiply on the runtime API (the runtime's worked example).

C = clip((A @ B^T) >> shift, -128, 127) with A (M, K) and B (N, K) int8. Output tiles are processed
by ``vthreads`` virtual threads taking turns, each with a private share of the INP, WGT and ACC
buffers, synchronised by dependency tokens so that loads, compute and stores overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdla.isa import AluOp, MemType, Stage, clip_imm
from vdla.isa.arith import INT8_MAX, INT8_MIN
from vdla.runtime.backend import RunResult
from vdla.runtime.commands import CommandError
from vdla.runtime.device import Device


@dataclass
class MatmulResult:
    out: np.ndarray
    run: RunResult
    tiles: int


def matmul_oracle(a: np.ndarray, b: np.ndarray, shift: int) -> np.ndarray:
    """The same integer arithmetic in plain numpy."""
    acc = a.astype(np.int32) @ b.astype(np.int32).T
    return np.clip(acc >> shift, INT8_MIN, INT8_MAX).astype(np.int8)


def tiled_matmul(
    dev: Device,
    a: np.ndarray,
    b: np.ndarray,
    shift: int = 8,
    vthreads: int = 2,
    tile_rows: int | None = None,
    max_cycles: int | None = None,
    timeline: bool = False,
) -> MatmulResult:
    """Run C = clip((A @ B^T) >> shift) on the device; M must be a multiple of the batch, K and N of the block."""
    cfg = dev.cfg
    bs, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    (m, k), (n, k2) = a.shape, b.shape
    if k != k2 or m % bs or k % bi or n % bo:
        raise CommandError(
            f"matmul shapes {a.shape} x {b.shape}^T must agree in K and be multiples of "
            f"batch {bs} (M), block {bi} (K) and block {bo} (N)"
        )
    rows, kb, nb = m // bs, k // bi, n // bo
    wgt_share, inp_share, acc_share = cfg.wgt_depth // vthreads, cfg.inp_depth // vthreads, cfg.acc_depth // vthreads
    tn = min(nb, wgt_share // kb)
    if tn == 0:
        raise CommandError(f"K={k} needs {kb} weight blocks per output block; a thread's WGT share holds {wgt_share}")
    tm = min(rows, inp_share // kb, acc_share // tn, tile_rows or rows)
    if tm == 0:
        raise CommandError(f"K={k} needs {kb} input elements per row; a thread's INP share holds {inp_share}")

    a_dram = dev.array(a.reshape(rows, bs, kb, bi).transpose(0, 2, 1, 3))
    b_dram = dev.array(b.reshape(nb, bo, kb, bi).transpose(0, 2, 1, 3))
    c_dram = dev.alloc(m * n)
    cmd = dev.commands()
    tiles = [(r0, n0) for r0 in range(0, rows, tm) for n0 in range(0, nb, tn)]
    for j, (r0, n0) in enumerate(tiles):
        t = j % vthreads
        th, tw = min(tm, rows - r0), min(tn, nb - n0)
        inp0, wgt0, acc0 = t * inp_share, t * wgt_share, t * acc_share
        later = j + vthreads < len(tiles)  # a later tile reuses this thread's buffers
        if j >= vthreads:
            cmd.dep_pop(Stage.COMPUTE, Stage.LOAD)
        cmd.load(MemType.INP, inp0, a_dram, r0 * kb, th, kb, kb)
        cmd.load(MemType.WGT, wgt0, b_dram, n0 * kb, tw, kb, kb)
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        if j >= vthreads:
            cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
        row_uops = [(acc0 + r * tw, inp0 + r * kb, wgt0) for r in range(th)]
        cmd.gemm(row_uops, iter_out=tw, dst_factor=(1, 0), reset=True)
        cmd.gemm(row_uops, iter_out=tw, iter_in=kb, dst_factor=(1, 0), src_factor=(0, 1), wgt_factor=(kb, 1))
        acc_uop = [(acc0, 0)]
        cmd.alu(AluOp.SHR, acc_uop, iter_out=th * tw, dst_factor=(1, 0), imm=shift)
        cmd.alu(AluOp.CLIP, acc_uop, iter_out=th * tw, dst_factor=(1, 0), imm=clip_imm(INT8_MIN, INT8_MAX))
        if later:
            cmd.dep_push(Stage.COMPUTE, Stage.LOAD)
        cmd.dep_push(Stage.COMPUTE, Stage.STORE)
        cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
        cmd.store(acc0, c_dram, r0 * nb + n0, th, tw, nb)
        if later:
            cmd.dep_push(Stage.STORE, Stage.COMPUTE)
    run = cmd.synchronize(max_cycles=max_cycles, timeline=timeline)
    out = c_dram.read(np.int8, (rows, nb, bs, bo)).transpose(0, 2, 1, 3).reshape(m, n)
    for buf in (a_dram, b_dram, c_dram):
        buf.free()
    return MatmulResult(out, run, len(tiles))
