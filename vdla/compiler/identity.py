"""The identity weight block: int8 INP elements added into the accumulators by a GEMM.

A GEMM against the ``block_out x block_in`` identity block adds each INP element to its accumulator element
exactly: ``acc[n, o] += sum_i inp[n, i] * eye[o, i] = inp[n, o]`` (with ``init`` the accumulator starts from
zero, or its bias row, so the GEMM copies). It costs one compute cycle per element, and the data comes in on
the load stage, overlapped with the compute of other blocks: half the compute cycles of a LOAD ACC_8BIT and
a quarter of those of a LOAD ACC_8BIT plus an ALU ADD reading a second accumulator operand.

Users: pooling copies its input windows into the accumulators (:mod:`vdla.compiler.pool`); a conv2d adds its
int8 residual tile after the requantizing pass (:mod:`vdla.compiler.conv_emit`).

Invariant: the block is only exact when ``block_in == block_out`` (an INP element and an accumulator element
hold the same channels, :func:`identity_fits`); it is one WGT element, loaded by a load-stage LOAD WGT
(:func:`load_identity`) ahead of every GEMM reading it, and never overwritten.
"""

from __future__ import annotations

import numpy as np

from vdla.compiler.blocks import Gemm, Load
from vdla.compiler.microcode import Limits, lower_nest
from vdla.config import HwConfig
from vdla.isa import MemType

EYE = "eye"  # the tensor name of the identity block (a constant of the layer)


def identity_fits(cfg: HwConfig) -> bool:
    """Whether a GEMM against the identity block reproduces INP elements exactly (``block_in == block_out``)."""
    return cfg.block_in == cfg.block_out


def identity_weights(cfg: HwConfig) -> np.ndarray:
    """The packed identity block: one WGT element, shape (1, block_out, block_in), int8."""
    return np.eye(cfg.block_out, cfg.block_in, dtype=np.int8)[None]


def identity_bytes(cfg: HwConfig) -> int:
    """DRAM bytes of :func:`identity_weights`."""
    return cfg.wgt_elem_bytes


def load_identity(sram: int) -> Load:
    """The LOAD WGT that brings the identity block to WGT element ``sram`` (a load-stage instruction)."""
    return Load(MemType.WGT, sram, EYE, 0, 1, 1, 1)


def identity_gemm(
    nest: tuple[tuple[int, tuple[int, int]], ...], acc: int, inp: int, eye: int, limits: Limits, init: bool = False
) -> Gemm:
    """A GEMM adding (``init``: copying) INP elements into accumulators against the identity block at WGT ``eye``.

    ``nest`` is a loop nest of (extent, (accumulator stride, INP stride)) axes from ``acc`` and ``inp``; every
    iteration reads the same identity block.
    """
    full = tuple((e, (d, s, 0)) for e, (d, s) in nest)
    return Gemm(lower_nest(full, (acc, inp, eye), limits), init=init)
